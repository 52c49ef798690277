package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

type view struct {
	sh    *shape
	cols  []string
	limit *int64
	last  []engine.VnodeProgress
	// frozen: the view's backfill is paused (engine paused or rate limit 0) and its
	// committed snapshot rows must stay frozenRows (I5).
	frozen     bool
	frozenRows int64
	rescaled   bool
	par        int
	// onRole: created to backfill on the "backfill" node; moved once seen off it.
	onRole, moved bool
}

func (v *view) throttledToZero() bool { return v.limit != nil && *v.limit == 0 }

func (r *runner) barrierStep() error {
	n := 1 + r.rng.IntN(3)
	for i := 0; i < n; i++ {
		if err := r.barrier(); err != nil {
			return err
		}
	}
	r.tracef("%d barriers", n)
	return nil
}

func (r *runner) view(name string) *view {
	for _, v := range r.views {
		if v.sh.name == name {
			return v
		}
	}
	return nil
}

func (r *runner) createStep() error {
	var cands []*shape
	for i := range shapes {
		sh := &shapes[i]
		if r.view(sh.name) != nil {
			continue
		}
		if sh.name == "mvmv" && r.view("pass") == nil {
			continue
		}
		cands = append(cands, sh)
	}
	if len(cands) == 0 {
		return r.barrierStep()
	}
	sh := cands[r.rng.IntN(len(cands))]
	v := &view{sh: sh, par: 1 + r.rng.IntN(4)}
	mo := engine.MVOptions{Parallelism: v.par, Background: true}
	// Most backfills are rate limited, so that they span many barriers and the
	// checks see InProgress vnodes; some start paused (0), some are unlimited.
	switch x := r.rng.IntN(6); {
	case x == 0:
		l := int64(0)
		v.limit = &l
	case x < 4:
		l := int64(1 + r.rng.IntN(1000))
		v.limit = &l
	}
	mo.RateLimit = v.limit
	if len(r.eo.NodeRoles) > 0 && v.par%2 == 1 {
		// Odd parallelisms of the seeds with a backfill node (not drawn: the
		// schedule stays the seed's).
		mo.BackfillOn, v.onRole = "backfill", true
		r.rep.Sometimes["view_backfilled_on_role_nodes"]++
	}
	if sh.name == "mvmv" {
		if up := r.view("pass"); up != nil && !r.done(up) {
			r.rep.Sometimes["view_over_backfilling_view"]++
		}
	}
	if err := r.call("create view "+sh.name, func(ctx context.Context) error {
		return r.e.CreateMV(ctx, sh.name, sh.plan(), mo)
	}); err != nil {
		return err
	}
	t, err := r.e.Table(sh.name)
	if err != nil {
		r.fail("engine error", "table of view %s: %v", sh.name, err)
		return errStop
	}
	for _, c := range t.Columns {
		v.cols = append(v.cols, c.Name)
	}
	r.views = append(r.views, v)
	r.rep.Views[sh.name]++
	r.tracef("create view %s parallelism %d limit %v", sh.name, v.par, fmtLimit(v.limit))
	if err := r.afterCall(); err != nil {
		return err
	}
	return r.freezeIfPaused(v)
}

func fmtLimit(l *int64) string {
	if l == nil {
		return "none"
	}
	return fmt.Sprint(*l)
}

// done reports whether v's backfill was complete at the last check.
func (r *runner) done(v *view) bool {
	if len(v.last) == 0 {
		return false
	}
	for _, p := range v.last {
		if p.State != vec.Completed {
			return false
		}
	}
	return true
}

// freezeIfPaused commits what a view read before it was paused, then records the
// committed snapshot rows that must not change while it stays paused (I5).
func (r *runner) freezeIfPaused(v *view) error {
	if !(r.paused || v.throttledToZero()) {
		v.frozen = false
		return nil
	}
	if err := r.checkpoint(); err != nil {
		return err
	}
	prog, err := r.e.VnodeProgress(v.sh.name)
	if err != nil {
		r.fail("engine error", "progress of %s: %v", v.sh.name, err)
		return errStop
	}
	v.frozen, v.frozenRows = true, sumRows(prog)
	return nil
}

func sumRows(ps []engine.VnodeProgress) int64 {
	var n int64
	for _, p := range ps {
		n += p.Rows
	}
	return n
}

func (r *runner) rescaleStep() error {
	if len(r.views) == 0 {
		return r.barrierStep()
	}
	v := r.views[r.rng.IntN(len(r.views))]
	p := 1 + r.rng.IntN(4)
	prog, err := r.e.VnodeProgress(v.sh.name)
	if err != nil {
		r.fail("engine error", "progress of %s: %v", v.sh.name, err)
		return errStop
	}
	if err := r.call(fmt.Sprintf("rescale %s to %d", v.sh.name, p), func(ctx context.Context) error {
		return r.e.RescheduleMV(ctx, v.sh.name, p)
	}); err != nil {
		return err
	}
	r.rep.Faults["rescale"]++
	if p != v.par && slices.ContainsFunc(prog, func(x engine.VnodeProgress) bool { return x.State == vec.InProgress }) {
		r.rep.Sometimes["inprogress_vnode_moved_by_rescale"]++
	}
	v.par, v.rescaled = p, true
	r.tracef("rescale %s to %d", v.sh.name, p)
	return r.afterCall()
}

// rebalance chooses the vnode mapping of a rescale: half the time the engine's balanced
// minimal move, else a degenerate split: every vnode on one actor (the others own
// none), or each vnode on a random actor.
func (r *runner) rebalance(m vnode.Mapping, from, to int) vnode.Mapping {
	out, _, err := vnode.Rebalance(m, from, to)
	if err != nil {
		// The engine reports the same error before calling the hook.
		return m
	}
	switch r.rng.IntN(4) {
	case 0:
		a := uint16(r.rng.IntN(to))
		for i := range out {
			out[i] = a
		}
		r.rep.Sometimes["actor_with_all_vnodes"]++
	case 1:
		for i := range out {
			out[i] = uint16(r.rng.IntN(to))
		}
	}
	owned := make([]bool, to)
	for _, a := range out {
		owned[a] = true
	}
	if slices.Contains(owned, false) {
		r.rep.Sometimes["actor_without_vnodes"]++
	}
	return out
}

func (r *runner) pauseStep() error {
	if r.paused {
		r.rep.Faults["resume"]++
		r.tracef("resume")
		return r.resume()
	}
	r.rep.Faults["pause"]++
	r.tracef("pause")
	return r.pause()
}

func (r *runner) throttleStep() error {
	if len(r.views) == 0 {
		return r.barrierStep()
	}
	v := r.views[r.rng.IntN(len(r.views))]
	var l *int64
	switch r.rng.IntN(4) {
	case 0:
		x := int64(0)
		l = &x
	case 1:
		x := int64(1)
		l = &x
	case 2:
		x := int64(10 + r.rng.IntN(500))
		l = &x
	}
	if err := r.call("throttle "+v.sh.name, func(ctx context.Context) error { return r.e.SetRateLimit(ctx, v.sh.name, l) }); err != nil {
		return err
	}
	r.rep.Faults["throttle"]++
	v.limit = l
	v.frozen = false
	r.tracef("throttle %s to %s", v.sh.name, fmtLimit(l))
	if err := r.afterCall(); err != nil {
		return err
	}
	return r.freezeIfPaused(v)
}

// finish ends a seed: every pause and limit lifted, barriers until every backfill is
// done (I5: within a bound), the final check (I1), then a clean close and reopen that
// must show the same state, and no Arrow memory left allocated.
func (r *runner) finish() error {
	if r.paused {
		if err := r.call("resume", r.e.Resume); err != nil {
			return err
		}
		r.paused = false
	}
	for _, v := range r.views {
		if v.limit != nil {
			if err := r.call("lift limit", func(ctx context.Context) error { return r.e.SetRateLimit(ctx, v.sh.name, nil) }); err != nil {
				return err
			}
			v.limit = nil
		}
		v.frozen = false
	}
	if err := r.afterCall(); err != nil {
		return err
	}
	const bound = 3000
	for i := 0; ; i++ {
		all := true
		for _, p := range r.e.Progress() {
			all = all && p.Done
		}
		if all {
			break
		}
		if i == bound {
			r.fail("I5 liveness", "backfills not done %d barriers after the last fault", bound)
			return errStop
		}
		time.Sleep(time.Millisecond)
		if err := r.barrier(); err != nil {
			return err
		}
	}
	if err := r.checkpoint(); err != nil {
		return err
	}
	for _, v := range r.views {
		if !r.done(v) {
			r.fail("I1 result", "view %s: Progress says done but not every vnode is Completed", v.sh.name)
		}
	}
	if err := r.e.Close(); err != nil {
		r.fail("engine error", "close: %v", err)
		r.e = nil
		return errStop
	}
	r.e = nil
	if r.clog != nil {
		// A new leader on an empty directory: the log alone must give the same
		// state (the object-storage path against the engine's own checkpoints).
		r.fs = vfs.NewCrashableMem()
		r.rep.Sometimes["rebuilt_from_an_empty_directory"]++
		if err := r.newLeader(); err != nil {
			return err
		}
	}
	// The close's own checkpoint committed the same state under a newer epoch.
	if err := r.open(false); err != nil {
		return err
	}
	r.committed = r.e.CommittedEpoch()
	r.refs[r.committed] = r.cur.clone()
	if err := r.check("reopened after close"); err != nil {
		return err
	}
	err := r.e.Close()
	r.e = nil
	if err != nil {
		r.fail("engine error", "close: %v", err)
		return errStop
	}
	if n := r.mem.Allocated(); n != 0 {
		r.fail("memory", "%d bytes of Arrow memory left allocated after close", n)
	}
	if r.clog != nil {
		return r.checkBucket()
	}
	return nil
}

// pause pauses the engine and freezes every view (I5).
func (r *runner) pause() error {
	if err := r.call("pause", r.e.Pause); err != nil {
		return err
	}
	r.paused = true
	if err := r.afterCall(); err != nil {
		return err
	}
	return r.refreeze()
}

// resume resumes the engine; the views throttled to 0 stay frozen (I5).
func (r *runner) resume() error {
	if err := r.call("resume", r.e.Resume); err != nil {
		return err
	}
	r.paused = false
	r.unfreeze()
	if err := r.afterCall(); err != nil {
		return err
	}
	return r.refreeze()
}

func (r *runner) unfreeze() {
	for _, v := range r.views {
		v.frozen = false
	}
}

// refreeze records anew which views are paused, and their committed rows (I5).
func (r *runner) refreeze() error {
	r.unfreeze()
	for _, v := range r.views {
		if err := r.freezeIfPaused(v); err != nil {
			return err
		}
	}
	return nil
}
