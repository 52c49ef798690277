package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/storage"
)

func (r *runner) cloneFS() *vfs.MemFS {
	pct := []int{0, 0, 50, 100}[r.rng.IntN(4)]
	cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: pct}
	if pct > 0 {
		cfg.RNG = rand.New(rand.NewPCG(r.rng.Uint64(), r.rng.Uint64()))
	}
	return r.fs.CrashClone(cfg)
}

func (r *runner) beforeCommit(epoch executors.Epoch) {
	r.inj.activate()
	if r.crashAt == "before_commit" && r.crashImg == nil {
		r.crashImg, r.crashEpoch = r.cloneFS(), epoch
	}
}

func (r *runner) afterCommit(epoch executors.Epoch) {
	r.inj.deactivate()
	if r.crashAt == "after_commit" && r.crashImg == nil {
		r.crashImg, r.crashEpoch = r.cloneFS(), epoch
	}
}

func (r *runner) crashStep() error {
	kinds := []string{"mid_epoch", "before_commit", "after_commit", "during_rescale"}
	kind := kinds[r.rng.IntN(len(kinds))]
	want := r.committed // the epoch the reopened engine must hold
	var land *state     // the model at the epoch that lands, when it is a new one
	switch kind {
	case "mid_epoch":
		if r.pending > 0 {
			r.rep.Sometimes["crash_mid_epoch_with_writes"]++
		}
		r.crashImg = r.cloneFS()
	case "before_commit", "after_commit":
		r.crashAt = kind
		// Barriers until one is a checkpoint (CheckpointEvery is at most 5), or, when
		// a backfill spaces them (Options.BackfillCheckpointInterval), one that
		// must be.
		for i := 0; i < 9 && r.crashImg == nil; i++ {
			barrier := func(ctx context.Context) error { _, _, err := r.e.Barrier(ctx); return err }
			if i == 8 {
				barrier = func(ctx context.Context) error { _, err := r.e.WaitCheckpoint(ctx); return err }
			}
			if err := r.call("barrier", barrier); err != nil {
				return err
			}
			r.rep.Barriers++
		}
	case "during_rescale":
		if len(r.views) == 0 {
			return r.barrierStep()
		}
		v := r.views[r.rng.IntN(len(r.views))]
		p := 1 + r.rng.IntN(4)
		r.crashAt = []string{"before_commit", "after_commit"}[r.rng.IntN(2)]
		if err := r.call("rescale", func(ctx context.Context) error { return r.e.RescheduleMV(ctx, v.sh.name, p) }); err != nil {
			return err
		}
		r.rep.Faults["rescale"]++
		// With a commit log the rescale is committed in the log either way.
		if r.crashAt == "after_commit" || r.clog != nil {
			v.par, v.rescaled = p, true
		}
	}
	if r.crashImg == nil {
		r.fail("sim", "crash %s: no crash image was taken", kind)
		return errStop
	}
	if r.crashAt == "after_commit" {
		want = r.crashEpoch
		if r.clog != nil {
			// The log may hold a commit after the image's, made within the same
			// call (a round the barrier's own ended with, such as a backfill's
			// finishing): the reopen catches up to it.
			if got := r.e.CommittedEpoch(); got > want {
				want = got
				r.rep.Sometimes["crash_image_behind_the_log"]++
			}
		}
		s := r.cur.clone()
		land = &s
	}
	if r.clog != nil && r.crashAt == "before_commit" {
		// The image is older than the commit, which the log holds: the reopen
		// catches up to it, and to a commit after it made within the same call,
		// as after_commit's does.
		want = r.crashEpoch
		if got := r.e.CommittedEpoch(); got > want {
			want = got
			r.rep.Sometimes["crash_image_behind_the_log"]++
		}
		s := r.cur.clone()
		land = &s
		r.rep.Sometimes["crash_commit_kept_by_the_log"]++
	}
	img := r.crashImg
	r.crashAt, r.crashImg = "", nil
	r.rep.Faults["crash_"+kind]++
	r.tracef("crash %s (epoch %d must survive)", kind, want)
	if err := r.e.Crash(); err != nil {
		r.fail("engine error", "crash: %v", err)
		return errStop
	}
	r.e, r.fs = nil, img
	if err := r.restartLeader(); err != nil {
		return err
	}
	return r.reopen(want, land, nil)
}

// restartLeader (commit-log seeds) replaces the leader that crashed or failed with a
// new one: a quarter of the time on an empty directory, as a successor elsewhere
// would be, which rebuilds its copy from the log.
func (r *runner) restartLeader() error {
	if r.clog == nil {
		return nil
	}
	if r.rng.IntN(4) == 0 {
		r.fs = vfs.NewCrashableMem()
		r.rep.Sometimes["rebuilt_from_an_empty_directory"]++
		r.tracef("the next leader starts on an empty directory")
	}
	return r.newLeader()
}

// reopen opens the engine on r.fs after a crash or a fault. The committed epoch must
// be want, whose model is land when it is a new epoch; or, when newer is set (after a
// failed WAL sync), any epoch after want, whose model is newer. The model goes back
// to the committed state.
func (r *runner) reopen(want executors.Epoch, land, newer *state) error {
	bootPaused := r.rng.IntN(4) == 0
	if bootPaused && !r.paused {
		r.rep.Faults["pause_on_bootstrap"]++
	}
	if err := r.open(bootPaused || r.paused); err != nil {
		return err
	}
	got := r.e.CommittedEpoch()
	switch {
	case got == want && land != nil:
		r.refs[got] = *land
	case got > want && newer != nil:
		r.refs[got] = *newer
		r.rep.Sometimes["failed_sync_epoch_landed"]++
	case got != want:
		r.fail("I6 durability", "reopened at epoch %d, want %d", got, want)
		return errStop
	}
	if _, ok := r.refs[got]; !ok {
		r.fail("I6 durability", "reopened at epoch %d, which the simulation never committed", got)
		return errStop
	}
	for ep := range r.refs {
		if ep > got {
			delete(r.refs, ep)
		}
	}
	r.committed = got
	r.cur = r.refs[got].clone()
	r.pending = 0
	if err := r.check("after reopening"); err != nil {
		return err
	}
	return r.refreeze()
}

// breakStep (cluster-shaped seeds) injects a network fault into one node, then
// checkpoints: a third of the time it cuts every Flight stream into the node, a third
// it ends the node's control stream, a third it sends a late reply on it
// (lateReplyStep). After a cut or an end, the checkpoint must fail with an error naming
// the fault, and the engine recover by itself to the committed epoch (its
// uncommitted writes are lost, as after a crash): the model goes back to it. A node
// no edge goes into commits the checkpoint of an edge break as usual.
func (r *runner) breakStep() error {
	node := r.rng.IntN(r.eo.Nodes)
	switch r.rng.IntN(3) {
	case 2:
		return r.lateReplyStep(node)
	case 1:
		return r.networkFault("control_stream_lost", fmt.Sprintf("node %d lost its control stream", node), fmt.Sprintf("node-%d", node), false,
			func() error { return r.ctl.Lose(node) })
	}
	return r.networkFault("edge_break", fmt.Sprintf("broke the edges into node %d", node), "exchange: edge", true,
		func() error { return r.mesh.Break(node) })
}

// lateReplyStep (cluster-shaped seeds) sends on one node's control stream a Failed
// report of a torn-down graph or of a replaced incarnation, as a reply delayed past
// a recovery arrives; then checkpoints. The coordinator must refuse it (counted
// once), and the checkpoint commit as if it had never been sent: no recovery.
func (r *runner) lateReplyStep(node int) error {
	recoveries, refusals := r.e.Recoveries(), r.ctl.Refusals()
	what, err := r.ctl.SendLate(node, []string{"generation", "incarnation"}[r.rng.IntN(2)])
	if err != nil {
		r.fail("engine error", "late reply: %v", err)
		return errStop
	}
	r.tracef("late reply: sent %s; refused", what)
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.CallTimeout)
	_, err = r.e.WaitCheckpoint(ctx)
	cancel()
	r.rep.Barriers++
	if r.ctx.Err() != nil {
		return r.ctx.Err()
	}
	if err != nil {
		r.fail("engine error", "checkpoint after %s: %v (the refused reply should change nothing)", what, err)
		return errStop
	}
	if got := r.e.Recoveries(); got != recoveries {
		r.fail("engine error", "%d recoveries after %s, want %d", got, what, recoveries)
		return errStop
	}
	if got := r.ctl.Refusals(); got != refusals+1 {
		r.fail("engine error", "%d messages refused after %s, want %d", got, what, refusals+1)
		return errStop
	}
	r.rep.Faults["late_reply"]++
	r.pending = 0
	return r.afterCall()
}

// networkFault injects a fault (what, counted as kind), then checkpoints. The
// checkpoint must fail with an error holding named, unless mayPass (no stream was
// hit) and it committed; after a failure the engine must have recovered once, to the
// committed epoch.
func (r *runner) networkFault(kind, what, named string, mayPass bool, inject func() error) error {
	recoveries := r.e.Recoveries()
	if err := inject(); err != nil {
		r.fail("sim", "%s: %v", what, err)
		return errStop
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.CallTimeout)
	_, err := r.e.WaitCheckpoint(ctx)
	cancel()
	r.rep.Barriers++
	if r.ctx.Err() != nil {
		return r.ctx.Err()
	}
	if err == nil && mayPass {
		r.tracef("%s: none was open", what)
		r.rep.Sometimes[kind+"_without_streams"]++
		r.pending = 0
		return r.afterCall()
	}
	if err == nil || !strings.Contains(err.Error(), named) {
		r.fail("engine error", "checkpoint after %s: %v (want an error naming %s)", what, err, named)
		return errStop
	}
	r.rep.Faults[kind]++
	r.tracef("%s: the checkpoint failed, naming %s", what, named)
	if got := r.e.Recoveries(); got != recoveries+1 {
		r.fail("engine error", "%d recoveries after: %s, want %d", got, what, recoveries+1)
		return errStop
	}
	if got := r.e.CommittedEpoch(); got != r.committed {
		r.fail("I6 durability", "the committed epoch moved from %d to %d: %s", r.committed, got, what)
		return errStop
	}
	return r.afterRecovery("after: " + what)
}

// afterRecovery checks the committed state after the engine recovered by itself.
// The recovery sent the writes since the last checkpoint again into the new graph,
// so the model keeps them, unless the engine says it dropped them (LostWrites: after
// recoveries in a row without a commit), when it goes back to the committed state.
func (r *runner) afterRecovery(when string) error {
	if lost := r.e.LostWrites(); lost != r.lostWrites {
		r.lostWrites = lost
		r.cur = r.refs[r.committed].clone()
		r.pending = 0
		r.rep.Sometimes["writes_dropped_by_recoveries"]++
	} else if r.pending > 0 {
		r.rep.Sometimes["writes_resent_by_a_recovery"]++
	}
	if err := r.check(when); err != nil {
		return err
	}
	return r.refreeze()
}

// ioErrorStep injects disk full into the WAL write, or EIO into the WAL sync, of a
// checkpoint's commit. The checkpoint must fail and not be committed; the engine then
// refuses work; after the fault clears, a reopen holds the last committed epoch (or,
// after a failed sync, possibly the failed one, never a mix).
//
// Pebble ends the process when a commit that switches WAL files fails (storage's
// TestFatalFaultsEndProcess), and it switches files when the commit does not fit the
// memtable. So the faulted commit must be small: the step pauses the backfills (unless
// they are), commits what they read, flushes (a fresh memtable), writes a few rows and
// faults that checkpoint; after the reopen it resumes them again.
func (r *runner) ioErrorStep() error {
	kind := []string{"enospc", "eio"}[r.rng.IntN(2)]
	wasPaused := r.paused
	if !wasPaused {
		if err := r.pause(); err != nil {
			return err
		}
	}
	if err := r.checkpoint(); err != nil {
		return err
	}
	if err := r.e.Flush(); err != nil {
		r.fail("engine error", "flush: %v", err)
		return errStop
	}
	if err := r.writeStep("insert"); err != nil {
		return err
	}
	r.inj.arm(kind)
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.CallTimeout)
	_, err := r.e.WaitCheckpoint(ctx)
	cancel()
	hit := r.inj.disarm()
	r.rep.Barriers++
	switch {
	case err == nil && hit:
		r.fail("I6 durability", "checkpoint succeeded although its WAL %s failed", kind)
		return errStop
	case err == nil:
		r.fail("sim", "checkpoint wrote no WAL record to fault")
		return errStop
	case !hit:
		r.fail("engine error", "checkpoint failed without an injected fault: %v", err)
		return errStop
	}
	r.rep.Faults["io_error_"+kind]++
	r.tracef("checkpoint failed with injected %s: %v", kind, err)
	if got := r.e.CommittedEpoch(); got != r.committed {
		r.fail("I6 durability", "checkpoint failed (%v) but the committed epoch moved from %d to %d", err, r.committed, got)
	}
	if _, _, err := r.e.Barrier(r.ctx); err == nil {
		r.fail("I6 durability", "the engine accepted a barrier after a failed checkpoint")
	}
	// Closing a store whose WAL failed reports that failure again; that is expected.
	_ = r.e.Crash()
	r.e = nil
	// The failed epoch's number is not returned; after a failed sync any newer epoch
	// that lands must be it, holding the current model.
	// With a commit log, a failure after the log's commit (applying it to the
	// store) lands the epoch too.
	var newer *state
	if kind == "eio" || r.clog != nil {
		s := r.cur.clone()
		newer = &s
	}
	if err := r.restartLeader(); err != nil {
		return err
	}
	if err := r.reopen(r.committed, nil, newer); err != nil {
		return err
	}
	if wasPaused {
		return nil
	}
	return r.resume()
}

// injector fails WAL operations of one checkpoint's commit: armed by a step, active
// from the BeforeCommit hook to the AfterCommit hook. Pebble calls it from its own
// goroutines.
type injector struct {
	mu     sync.Mutex
	kind   string
	armed  bool
	active bool
	hit    bool
}

func (j *injector) arm(kind string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.kind, j.armed, j.hit = kind, true, false
}

func (j *injector) activate() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.active = j.armed
}

func (j *injector) deactivate() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.active = false
}

// disarm ends the fault and reports whether it was injected.
func (j *injector) disarm() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	hit := j.hit
	j.armed, j.active, j.hit = false, false, false
	return hit
}

// MaybeError implements errorfs.Injector: it fails the WAL's writes or syncs, and
// those of the sstables a checkpoint writes to ingest (a seed that ingests commits its
// faulted checkpoint either way; a failed sstable is an ordinary error, which fails
// the engine as a failed WAL write does).
func (j *injector) MaybeError(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, ".log") && !strings.Contains(op.Path, storage.IngestDirName) {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.active {
		return nil
	}
	switch {
	case j.kind == "enospc" && op.Kind == errorfs.OpFileWrite:
		j.hit = true
		return syscall.ENOSPC
	case j.kind == "eio" && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData):
		j.hit = true
		return syscall.EIO
	}
	return nil
}

// String implements errorfs.Injector.
func (j *injector) String() string { return "sim WAL fault injector" }
