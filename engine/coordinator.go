package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
)

// The barrier coordinator. One round at a time (under Engine.mu): build the barrier,
// inject it into every DML actor, collect it from every actor, then commit a checkpoint
// when the barrier is one. DDL, rescale, pause, resume and throttle are rounds whose
// barrier carries their mutation. An actor failure during a round tears the graph down
// and rebuilds it from the committed catalog (recovery); the round then fails with
// the actor's error.

// roundSpec describes one barrier round.
// BarrierStats describe one barrier round, for Options.OnBarrier.
type BarrierStats struct {
	Epoch      executors.Epoch // the barrier's Curr
	Checkpoint bool
	// Ingested is the number of sstables the checkpoint was committed as
	// (storage.CheckpointStats.Ingested; 0 for a batch or no commit).
	Ingested int
	// Latency is from injecting the barrier until every actor passed it on;
	// CheckpointDuration the commit of its checkpoint (0 for other barriers).
	Latency, CheckpointDuration time.Duration
}

type roundSpec struct {
	mutation   executors.Mutation
	checkpoint bool
	// stage runs after the barrier is collected and before the checkpoint commits
	// (only for checkpoint barriers): it stages catalog changes.
	stage func() error
}

// round runs one barrier round; e.mu is held. It returns the barrier.
func (e *Engine) round(ctx context.Context, spec roundSpec) (*executors.Barrier, error) {
	if e.failed != nil {
		return nil, e.failed
	}
	defer e.roundEnded()
	g := e.g
	started := time.Now()
	b := &executors.Barrier{Prev: e.prev, Curr: executors.NextEpoch(e.prev, started), Mutation: spec.mutation}
	if e.checkpointDue(spec, started) {
		b.Kind = executors.Checkpoint
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	expected := len(g.actors)

	// Inject at every DML actor. Actors may pass the barrier on while we inject.
	got := 0
	reported := map[executors.ActorID]bool{}
	// take counts an actor's report of b, or returns the error to fail the round with
	// (after recovering).
	take := func(r report) error {
		if r.err != nil {
			return e.recoverFrom(ctx, r.err)
		}
		if r.epoch != b.Curr {
			return e.recoverFrom(ctx, fmt.Errorf("barrier %d: actor %d reported epoch %d", b.Curr, r.actor, r.epoch))
		}
		got++
		reported[r.actor] = true
		// A report from before the backfill loaded its progress (its first
		// barrier) does not replace the committed progress seedProgress gave it.
		a := g.actors[r.actor]
		if a != nil && r.backfill != nil && (r.backfill.Started || !a.progress.Started) {
			a.progress = *r.backfill
		}
		if a != nil {
			g.pending[a.node] = r.pending
		}
		return nil
	}
	if err := e.inject(ctx, g, b, take); err != nil {
		return nil, err
	}

	// Collect from every actor.
	slow := time.NewTicker(10 * time.Second)
	defer slow.Stop()
	dumped := false
	for got < expected {
		select {
		case r := <-g.reports:
			if err := take(r); err != nil {
				return nil, err
			}
		case <-slow.C:
			var missing []string
			var ids, waiting []executors.ActorID // waiting: blocked downstream
			now := time.Now()
			for id, a := range g.actors {
				if !reported[id] {
					// In one process the coordinator asks the node's side what
					// its actor is doing.
					what := "not running on its node"
					var st *actorStatus
					if n := g.nodes[a.node]; n != nil {
						st = n.status(id)
					} else {
						what = "on a node in another process, which reports no status"
					}
					if st != nil {
						what = st.describe(now)
					}
					missing = append(missing, fmt.Sprintf("%d (%s fragment %d on node %d: %s)", id, a.frag.obj.Name, a.frag.id, a.node, what))
					if st != nil && st.current() == stepDispatch {
						waiting = append(waiting, id)
					} else {
						ids = append(ids, id)
					}
				}
			}
			if len(ids) == 0 {
				ids = waiting // every one is blocked downstream: show them all
			}
			slices.Sort(missing)
			e.log.Warn("barrier not collected yet", "epoch", b.Curr, "waited", time.Since(started).Round(time.Second), "missing", missing)
			if !dumped {
				// Once per barrier: the stacks of the actors it waits for, to show
				// where each one is held (those blocked passing messages downstream
				// only if no other is missing: they wait for the others).
				dumped = true
				e.log.Warn("stacks of the actors a barrier waits for", "epoch", b.Curr, "stacks", actorStacks(ids))
			}
		case <-ctx.Done():
			return nil, e.abandon(ctx, fmt.Errorf("barrier %d: collect: %w", b.Curr, ctx.Err()))
		}
	}

	// Commit.
	collected := time.Now()
	var ckpt time.Duration
	ingested := 0 // sstables the checkpoint was ingested as
	if b.IsCheckpoint() {
		if spec.stage != nil {
			if err := spec.stage(); err != nil {
				e.store.DiscardStaged()
				return nil, e.recoverFrom(ctx, err)
			}
		}
		if uint64(b.Prev) > e.store.CommittedEpoch() {
			if h := e.opts.Hooks.BeforeCommit; h != nil {
				h(b.Prev)
			}
			cs, err := e.commit(uint64(b.Prev))
			if err != nil {
				e.store.DiscardStaged()
				if errors.Is(err, ErrNotCommitted) {
					// Nothing committed (a node lost before the commit point): as
					// after an actor's failure, the graph is rebuilt from the last
					// checkpoint.
					return nil, e.recoverFrom(ctx, fmt.Errorf("checkpoint of epoch %d: %w", b.Prev, err))
				}
				if errors.Is(err, ErrNodesBehind) && e.store.CommittedEpoch() == uint64(b.Prev) && !e.recovering {
					// Committed, and applied to the engine's store: the round
					// stands. A node lost before it applied it catches up at the
					// recovery, which rebuilds the graph from this checkpoint.
					g.committedAt(b.Curr)
					e.log.Warn("checkpoint committed with nodes behind it; recovering so that they catch up", "epoch", b.Prev, "error", err)
					if rerr := e.recover(ctx); rerr != nil {
						return nil, fmt.Errorf("checkpoint of epoch %d is committed: %w (recovery failed: %v)", b.Prev, err, rerr)
					}
					if h := e.opts.Hooks.AfterCommit; h != nil {
						h(b.Prev)
					}
					return b, nil
				}
				e.fail(fmt.Errorf("checkpoint of epoch %d: %w", b.Prev, err))
				return nil, e.failed
			}
			ingested = cs.Ingested
			g.committedAt(b.Curr)
			if h := e.opts.Hooks.AfterCommit; h != nil {
				h(b.Prev)
			}
		}
		ckpt = time.Since(collected)
		e.sinceCkpt, e.lastCkpt = 0, time.Now()
		clear(g.pending) // committed: the next round's reports say what is left
	} else {
		e.sinceCkpt++
	}
	e.prev = b.Curr
	e.afterRound(b)
	if e.opts.OnBarrier != nil {
		e.opts.OnBarrier(BarrierStats{Epoch: b.Curr, Checkpoint: b.IsCheckpoint(), Ingested: ingested, Latency: collected.Sub(started), CheckpointDuration: ckpt})
	}
	return b, nil
}

// checkpointDue reports whether the barrier of a round started at now is a
// checkpoint: when spec or its mutation asks for one, or a backfill asked since the
// last round (backfillFinishing); else every CheckpointEvery-th barrier, spaced while
// a backfill runs by Options.BackfillCheckpointInterval (at most half the time the
// backfill has run) and BackfillCheckpointBytes.
func (e *Engine) checkpointDue(spec roundSpec, now time.Time) bool {
	asked := e.ckptAsked.Swap(false)
	if spec.checkpoint || executors.ForcesCheckpoint(spec.mutation) || asked {
		return true
	}
	if e.sinceCkpt+1 < e.opts.CheckpointEvery {
		return false
	}
	iv := e.opts.BackfillCheckpointInterval
	since, ok := e.backfillingSince()
	if iv < 0 || !ok {
		return true
	}
	// A short build is bound by its last commit, which spacing would make larger: no
	// more than half the time the backfills have run goes between checkpoints.
	if now.Sub(e.lastCkpt) >= min(iv, now.Sub(since)/2) {
		return true
	}
	for _, n := range e.g.pending {
		if n >= e.opts.BackfillCheckpointBytes {
			return true
		}
	}
	return false
}

// backfillingSince reports whether a backfill of some view is not done yet, and when
// the earliest of those started (in this graph).
func (e *Engine) backfillingSince() (time.Time, bool) {
	var since time.Time
	ok := false
	for _, j := range e.g.jobs {
		if !jobDone(j) && (!ok || j.built.Before(since)) {
			since, ok = j.built, true
		}
	}
	return since, ok
}

// backfillFinishing is every backfill's BackfillConfig.OnFinishing: the backfill is
// done at the next barrier, so that barrier comes at once and is a checkpoint (the
// view is then committed as built without waiting for the next interval).
func (e *Engine) backfillFinishing() {
	e.ckptAsked.Store(true)
	e.kickBarrier()
}

// afterRound forgets the actors b stopped.
func (e *Engine) afterRound(b *executors.Barrier) {
	var stopped []executors.ActorID
	switch m := b.Mutation.(type) {
	case executors.Stop:
		stopped = m.Actors
	case executors.Update:
		stopped = m.Stop
	}
	// A stopped actor closed its executor and outputs before it reported the
	// barrier: it and its edges can go.
	g := e.g
	for _, id := range stopped {
		delete(g.actors, id)
	}
}

// start has the nodes of actors (placed, and built by their nodes) start them. When a
// node cannot be reached the change fails, and the graph is rebuilt from the last
// checkpoint (the actors that did start wait for a barrier that never comes).
func (e *Engine) start(ctx context.Context, actors []*actor) error {
	if err := e.g.startActors(actors); err != nil {
		return e.recoverFrom(ctx, fmt.Errorf("start actors: %w", err))
	}
	return nil
}

// abandon handles a round given up by its caller: the barrier may be anywhere in the
// graph, so the graph is rebuilt from the last checkpoint.
func (e *Engine) abandon(ctx context.Context, cause error) error {
	if e.recovering {
		return cause
	}
	if err := e.recover(context.Background()); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// recoverFrom recovers after an actor failed with cause, and returns the error the
// failed round reports.
func (e *Engine) recoverFrom(ctx context.Context, cause error) error {
	if e.recovering {
		return cause
	}
	e.log.Warn("actor failed; recovering from the last checkpoint", "error", cause, "committed_epoch", e.store.CommittedEpoch())
	if err := e.recover(ctx); err != nil {
		return fmt.Errorf("%w (recovery failed: %v)", cause, err)
	}
	return fmt.Errorf("%w (recovered to committed epoch %d)", cause, e.store.CommittedEpoch())
}

// recover tears the graph down, drops uncommitted data, rebuilds every actor from the
// committed catalog and sends the first barrier (Prev = committed epoch), which adds
// every actor, paused when the engine is paused (PauseOnBootstrap, or Pause before
// the failure).
func (e *Engine) recover(ctx context.Context) error {
	e.recovering = true
	defer func() { e.recovering = false }()
	for attempt := 1; ; attempt++ {
		err := e.recoverOnce(ctx)
		switch {
		case err == nil:
			return nil
		case e.failed != nil:
			return e.failed // a failed commit of the first barrier's round
		case e.opened && attempt < maxRecoveryAttempts && ctx.Err() == nil && e.retriable(err):
			e.log.Warn("the recovery failed; recovering again", "attempt", attempt, "error", err)
			continue
		}
		e.fail(fmt.Errorf("recovery: %w", err))
		return e.failed
	}
}

// maxRecoveryAttempts bounds the recoveries in a row that a lost node may restart.
const maxRecoveryAttempts = 5

// retriable reports whether a recovery (after Open's) that failed for err starts
// over: when a node was lost during it, when it could not send the writes since the
// last checkpoint again (an actor failed over them: the next attempt sends them,
// until they were sent maxSends times), and, with remote nodes, when its first
// barrier failed (an edge to a compute process that died breaks before its
// stream's loss is seen). The next attempt finds the node back, or leaves it down
// (ControlDown).
func (e *Engine) retriable(err error) bool {
	var first *firstBarrierError
	var resend *resendError
	return errors.Is(err, ErrNodeLost) || errors.As(err, &resend) || len(e.opts.RemoteNodes) > 0 && errors.As(err, &first)
}

// firstBarrierError is the failure of a recovery's first barrier.
type firstBarrierError struct{ err error }

func (f *firstBarrierError) Error() string { return "first barrier: " + f.err.Error() }
func (f *firstBarrierError) Unwrap() error { return f.err }

// recoverOnce is one attempt of recover: it returns the error that stopped it.
func (e *Engine) recoverOnce(ctx context.Context) error {
	if e.g != nil {
		e.g.teardown()
		e.takeLogs(e.g) // the writes not yet committed, to send again
	}
	e.dropUncommitted()
	e.recoveries++
	if err := e.catchUp(ctx); err != nil {
		return err
	}
	cat, err := loadCatalog(e.store)
	if err != nil {
		return err
	}
	e.cat = cat
	g := newGraph(e)
	e.gmu.Lock()
	e.g = g
	e.gmu.Unlock()
	if err := g.openControl(); err != nil {
		return err
	}
	if err := e.recoverNodes(ctx, g); err != nil {
		return err
	}
	for _, o := range cat.sorted() {
		var err error
		if o.Kind == kindTable {
			_, err = g.addTable(o)
		} else {
			var low *lowered
			low, err = lower(o.Name, o.plan, e.lookup, BackfillKind(o.Backfill), e.mem)
			if err == nil {
				err = o.checkLowered(low)
			}
			if err == nil {
				// A corrupt progress row stops the job before it starts (its
				// backfill would find it only after passing its first barrier on).
				err = e.checkProgress(o, low)
			}
			if err == nil {
				_, _, err = g.addView(o, low, true)
			}
			if err == nil {
				err = e.seedProgress(o, g.jobs[o.Name])
			}
		}
		if err != nil {
			return err
		}
	}
	var all []executors.ActorID
	var actors []*actor
	for id, a := range g.actors {
		all = append(all, id)
		actors = append(actors, a)
	}
	if err := g.startActors(actors); err != nil {
		return err
	}
	e.prev = executors.Epoch(e.store.CommittedEpoch())
	e.sinceCkpt, e.lastCkpt = 0, time.Now()
	_, err = e.round(ctx, roundSpec{mutation: executors.Add{Actors: all, PauseOnBootstrap: e.paused}})
	if err != nil {
		return &firstBarrierError{err}
	}
	if err := e.resend(ctx, g); err != nil {
		return err
	}
	e.gmu.RLock()
	for _, in := range g.dml {
		in.ready.Store(true)
	}
	e.gmu.RUnlock()
	return nil
}

// checkProgress loads view o's committed backfill progress, to refuse a corrupt one.
func (e *Engine) checkProgress(o *object, low *lowered) error {
	view, err := e.store.View()
	if err != nil {
		return err
	}
	defer view.Release()
	return e.loadProgress(view, o, low, func(int, *pnode, *vec.Positions, []int64) {})
}

// fail marks the engine failed: every later call returns err.
func (e *Engine) fail(err error) {
	if e.failed == nil {
		e.failed = fmt.Errorf("engine failed, close and reopen it: %w", err)
		failed := e.failed
		e.broken.Store(&failed)
		e.log.Error("engine failed", "error", err)
	}
}

// roundEnded wakes the callers waiting for the end of a round (e.mu is held).
func (e *Engine) roundEnded() {
	close(e.rounds)
	e.rounds = make(chan struct{})
}

// kickBarrier asks the ticker for a barrier now, without waiting for it; asks that
// come while one is pending are one ask. Without a ticker (a negative
// Options.BarrierInterval: barriers on demand) nobody takes the ask.
func (e *Engine) kickBarrier() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// inject puts b at every DML actor of g: over the control stream of each node that
// holds one when g has a control (the node injects it; a send returns once the frame
// left, and the reports wait in g.reports for the collection), else into their
// channels, taking the reports that arrive meanwhile. An error has ended the round
// (recovered or abandoned, as take's).
func (e *Engine) inject(ctx context.Context, g *graph, b *executors.Barrier, take func(report) error) error {
	if g.ctl != nil {
		for _, node := range g.sourceNodes() {
			if err := g.ctl.Inject(ctx, node, b); err != nil {
				if ctx.Err() != nil {
					return e.abandon(ctx, fmt.Errorf("barrier %d: inject: %w", b.Curr, ctx.Err()))
				}
				return e.recoverFrom(ctx, fmt.Errorf("barrier %d: inject at node %d: %w", b.Curr, node, err))
			}
		}
		return nil
	}
	for _, in := range g.inputs() {
		err := in.lock(ctx, g.dead, g.reports, take)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return e.abandon(ctx, fmt.Errorf("barrier %d: inject: %w", b.Curr, ctx.Err()))
		case errors.Is(err, errTornDown):
			return fmt.Errorf("barrier %d: inject: the graph of generation %d is torn down", b.Curr, g.generation)
		default:
			return err // take's: the round ended
		}
	send:
		for {
			select {
			case in.c <- executors.BarrierMessage(b):
				in.markBarrier(b)
				break send
			case r := <-g.reports:
				if err := take(r); err != nil {
					in.unlock()
					return err
				}
			case <-ctx.Done():
				in.unlock()
				return e.abandon(ctx, fmt.Errorf("barrier %d: inject: %w", b.Curr, ctx.Err()))
			}
		}
		in.unlock()
	}
	return nil
}

// ticker injects barriers on the configured interval, and one at once when kicked
// (kickBarrier), after which the interval starts again.
func (e *Engine) ticker(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(e.opts.BarrierInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		case <-e.kick:
			t.Reset(e.opts.BarrierInterval)
		}
		e.mu.Lock()
		if e.closed || e.failed != nil {
			e.mu.Unlock()
			return
		}
		if _, err := e.round(context.Background(), roundSpec{}); err != nil {
			e.log.Warn("periodic barrier failed", "error", err)
		} else {
			e.moveBackfilled(context.Background())
		}
		e.mu.Unlock()
	}
}
