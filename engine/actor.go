package engine

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/seed04fbb902/weir/executors"
)

// An actor is one goroutine of its node's (node.go): it pulls its executor chain and
// hands what comes out to its dispatchers, and tells the coordinator of every barrier
// it passes on and of its failure. The coordinator places actors (graph.go), their
// nodes build them (nodebuild.go); this file runs them.

func (n *nodeSide) run(a *nodeActor) {
	defer n.wg.Done()
	env := &n.env
	withActorLabels(env.ctx, a, func(context.Context) {
		err := a.loop(n)
		if err == nil {
			return // stopped: loop closed it before reporting the barrier
		}
		// A failed actor leaves its outputs open: closing them would tell its
		// downstreams that its stream ended, where it broke (over an exchange edge,
		// a clean end). The report below tears the graph down, which ends them.
		a.status.enter(stepClosing)
		a.exec.Close()
		if env.ctx.Err() == nil {
			a.status.enter(stepReport)
			_ = env.report(a, report{actor: a.id, err: err})
		}
	})
}

// loop drives a's chain: chunks and watermarks go to every dispatcher, barriers too
// after the dispatchers an Add gives a are connected; after passing a barrier on, a
// reports it, and stops if the barrier stops it. A stopped actor closes its executor
// and outputs before it reports the barrier that stopped it, so that the coordinator,
// once it has the report, may forget the actor and its edges.
func (a *nodeActor) loop(n *nodeSide) error {
	env := &n.env
	ctx := env.ctx
	for {
		a.status.enter(stepExecutor)
		m, err := a.exec.Next(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("actor %d of %s: input ended", a.id, a.obj)
			}
			return fmt.Errorf("actor %d of %s: %w", a.id, a.obj, err)
		}
		if m.Barrier == nil {
			if len(a.disp) == 0 {
				m.Release()
				continue
			}
			a.status.enter(stepDispatch)
			for i, d := range a.disp {
				if i < len(a.disp)-1 && m.Chunk != nil {
					m.Chunk.Retain()
				}
				if err := d.Dispatch(ctx, m, nil); err != nil {
					// d took its reference (also on error); the one reference held
					// for the dispatchers after it is released here.
					if i < len(a.disp)-1 && m.Chunk != nil {
						m.Chunk.Release()
					}
					return fmt.Errorf("actor %d of %s: %w", a.id, a.obj, err)
				}
			}
			continue
		}
		b := m.Barrier
		if add, ok := b.Mutation.(executors.Add); ok {
			for _, spec := range add.Dispatchers {
				if spec.Actor != a.id {
					continue
				}
				d, err := NewDispatcher(a.id, spec, a.k, n.outputFrom(a.id), env.mem)
				if err != nil {
					return fmt.Errorf("actor %d of %s: barrier %d: %w", a.id, a.obj, b.Curr, err)
				}
				a.disp = append(a.disp, d)
			}
		}
		a.status.enter(stepDispatch)
		for _, d := range a.disp {
			if err := d.Dispatch(ctx, m, n.outputFrom(a.id)); err != nil {
				return fmt.Errorf("actor %d of %s: %w", a.id, a.obj, err)
			}
		}
		a.status.passed.Store(uint64(b.Curr))
		kept := a.disp[:0]
		for _, d := range a.disp {
			if len(d.Outputs()) > 0 {
				kept = append(kept, d)
			} else {
				d.Close()
			}
		}
		a.disp = kept
		switch b.Mutation.(type) {
		case executors.Update, executors.Stop:
			n.forgetRemovedOutputs(a)
		}
		r := report{actor: a.id, epoch: b.Curr}
		if env.store != nil { // its node's uncommitted bytes go with every report
			r.pending = env.store.PendingBytes()
		}
		if a.backfill != nil {
			st := a.backfill.Stats()
			r.backfill = &st
		}
		stops := executors.Stops(b.Mutation, a.id)
		if stops {
			a.status.enter(stepClosing)
			a.exec.Close()
			for _, d := range a.disp {
				d.Close()
			}
			n.forget(a.id) // gone from its node once the report is in
		}
		a.status.enter(stepReport)
		if stops {
			// Closed already: a report that fails is a lost stream or a graph torn
			// down, which ends the round without this actor's word.
			_ = env.report(a, r)
			return nil
		}
		if err := env.report(a, r); err != nil {
			return err
		}
	}
}
