package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vnode"
)

// CreateMV creates materialized view name over plan, and returns once it is
// committed. Planning errors (a missing table or column, an expression that does not
// type, an impossible no-shuffle placement) change nothing.
//
// The view's rows over the upstream's existing rows come from its backfill (see
// MVOptions.Backfill), while it follows the upstream's changes; Progress reports it.
// Unless opts.Background is set or the backfill starts paused (MVOptions.Paused, a
// rate limit of 0, the engine's Pause), CreateMV then waits for the backfill to
// finish. When ctx ends first, the view is dropped again and the error says so, as a
// cancelled CREATE MATERIALIZED VIEW is rolled back; when the wait fails otherwise
// (a recovery), the view stays and its backfill goes on.
func (e *Engine) CreateMV(ctx context.Context, name string, plan Plan, opts MVOptions) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if _, ok := e.cat.objects[name]; ok {
		return fmt.Errorf("create materialized view %s: a table or materialized view of that name exists", name)
	}
	if name == "" {
		return errors.New("create materialized view: empty name")
	}
	if err := checkPlanTree(plan); err != nil {
		return fmt.Errorf("create materialized view %s: %w", name, err)
	}
	if err := opts.validate(); err != nil {
		return fmt.Errorf("create materialized view %s: %w", name, err)
	}
	opts.RateLimit = copyLimit(opts.RateLimit) // the catalog's own
	low, err := lower(name, plan, e.lookup, opts.Backfill, e.mem)
	if err != nil {
		return fmt.Errorf("create %w", err)
	}
	if err := e.checkBackfillOn(opts.BackfillOn, low.kind); err != nil {
		return fmt.Errorf("create materialized view %s: %w", name, err)
	}
	if low.kind == NoShuffleBackfill {
		for _, n := range low.scans() {
			if up := n.scan.upstream; up.Role != "" && len(e.nodesOf(up.Role)) > 0 {
				return fmt.Errorf("create materialized view %s: a no-shuffle backfill runs beside the actors of %s, which run on the nodes of role %q until its backfill is done", name, up.Name, up.Role)
			}
		}
	}
	scans := low.scans()
	p := opts.Parallelism
	if low.kind == NoShuffleBackfill {
		for _, n := range scans {
			up := n.scan.upstream
			if p == 0 {
				p = up.Parallelism
			}
			if p != up.Parallelism {
				return fmt.Errorf("create materialized view %s: a no-shuffle backfill co-locates one view actor with each of the %d actors of %s; parallelism %d cannot be placed", name, up.Parallelism, up.Name, p)
			}
		}
	}
	if p == 0 {
		p = min(len(e.nodes), low.out.VnodeCount)
	}
	var mappings [][]uint16
	for _, n := range low.nodes {
		if n.kind == scanNode && low.kind == NoShuffleBackfill {
			mappings = append(mappings, slices.Clone(n.scan.upstream.Mapping))
			continue
		}
		if err := checkParallelism(p, n.vnodeCount); err != nil {
			return fmt.Errorf("create materialized view %s: %w (the vnode count of its %s node)", name, err, n.kind)
		}
		m, err := vnode.EvenSplit(n.vnodeCount, p)
		if err != nil {
			return fmt.Errorf("create materialized view %s: parallelism %d: %w", name, p, err)
		}
		mappings = append(mappings, m)
	}
	planJSON, err := marshalPlan(plan)
	if err != nil {
		return fmt.Errorf("create materialized view %s: %w", name, err)
	}
	o := &object{
		ID: e.cat.nextID, Name: name, Kind: kindMV, Def: tableToJSON(low.out), Parallelism: p,
		Mapping: mappings[len(mappings)-1], Mappings: mappings,
		Plan: planJSON, Backfill: string(low.kind), RateLimit: opts.RateLimit, Paused: opts.Paused, Role: opts.BackfillOn,
		t: low.out, plan: plan,
	}
	for i := range low.stateIDs() {
		o.StateIDs = append(o.StateIDs, e.cat.nextID+1+uint32(i))
	}
	o.ProgressID = o.StateIDs[0]
	for _, n := range scans {
		o.Upstreams = append(o.Upstreams, n.scan.upstream.Name)
	}
	j, specs, err := e.g.addView(o, low, false)
	if err != nil {
		return fmt.Errorf("create materialized view %s: %w", name, err)
	}
	var ids []executors.ActorID
	actors := j.actors()
	for _, a := range actors {
		ids = append(ids, a.id)
	}
	if err := e.start(ctx, actors); err != nil {
		return fmt.Errorf("create materialized view %s: %w", name, err)
	}
	_, err = e.round(ctx, roundSpec{
		mutation: executors.Add{Actors: ids, Dispatchers: specs},
		stage: func() error {
			e.cat.nextID += 1 + uint32(len(o.StateIDs))
			e.cat.objects[o.Name] = o
			return e.cat.stage(e.store, o, false)
		},
	})
	if err != nil {
		return fmt.Errorf("create materialized view %s: %w", name, err)
	}
	if opts.Background || opts.Paused || e.paused || (opts.RateLimit != nil && *opts.RateLimit == 0) {
		return nil
	}
	e.mu.Unlock()
	err = e.WaitBackfill(ctx, name)
	e.mu.Lock()
	if err != nil {
		return e.undoCreate(ctx, o, err)
	}
	return nil
}

// undoCreate drops view o again after its foreground CreateMV was cancelled waiting
// for the backfill (ctx ended), as a cancelled CREATE MATERIALIZED VIEW is rolled
// back: the returned error is cause's, and says whether the view is gone. A view
// whose backfill finished meanwhile is kept (and CreateMV returns nil), and so is one
// whose wait failed for another reason (a recovery: its backfill goes on). e.mu is
// held.
func (e *Engine) undoCreate(ctx context.Context, o *object, cause error) error {
	name := o.Name
	if err := e.usable(); err != nil {
		return fmt.Errorf("create materialized view %s: %w (the view stays, and its backfill goes on when the directory is opened again)", name, cause)
	}
	if cur, ok := e.cat.objects[name]; !ok || cur.ID != o.ID {
		// Dropped (or dropped and created again) by another call meanwhile. (A
		// recovery reloads the catalog: the object is another one, of the same id.)
		return fmt.Errorf("create materialized view %s: %w", name, cause)
	}
	if j, ok := e.g.jobs[name]; ok && jobDone(j) {
		return nil
	}
	if ctx.Err() == nil {
		return fmt.Errorf("create materialized view %s: %w (the view stays, and its backfill goes on)", name, cause)
	}
	if err := e.dropLocked(context.WithoutCancel(ctx), name); err != nil {
		return fmt.Errorf("create materialized view %s: %w (dropping the view again failed: %v)", name, cause, err)
	}
	return fmt.Errorf("create materialized view %s: %w (the view was dropped again)", name, cause)
}

// WaitBackfill blocks until the backfill of view name is done (or ctx ends). With
// barriers on demand only (a negative BarrierInterval), it injects them itself.
func (e *Engine) WaitBackfill(ctx context.Context, name string) error {
	for {
		e.mu.Lock()
		if err := e.usable(); err != nil {
			e.mu.Unlock()
			return err
		}
		j, ok := e.g.jobs[name]
		if !ok {
			e.mu.Unlock()
			return fmt.Errorf("wait for the backfill of %s: no such materialized view", name)
		}
		if jobDone(j) {
			// Done at the last round: commit it unless that round did (a backfill
			// that finished its snapshot asks for a checkpoint, but one that
			// finished as the round began is done in it all the same).
			var err error
			if e.sinceCkpt > 0 {
				_, err = e.round(ctx, roundSpec{checkpoint: true})
			}
			if err == nil {
				e.moveBackfilled(ctx)
			}
			e.mu.Unlock()
			if err != nil {
				return fmt.Errorf("wait for the backfill of %s: commit: %w", name, err)
			}
			return nil
		}
		if e.opts.BarrierInterval < 0 {
			_, err := e.round(ctx, roundSpec{})
			e.mu.Unlock()
			if err != nil {
				return fmt.Errorf("wait for the backfill of %s: %w", name, err)
			}
			continue
		}
		// A backfill becomes done only at a barrier: wait for the end of a round.
		ended := e.rounds
		e.mu.Unlock()
		select {
		case <-ended:
		case <-ctx.Done():
			return fmt.Errorf("wait for the backfill of %s: %w", name, ctx.Err())
		}
	}
}

// jobDone reports whether every backfill actor of j reported itself done (every
// actor of a scan fragment is one).
func jobDone(j *job) bool {
	for _, f := range j.scans() {
		for _, a := range f.actors {
			if !a.progress.Done {
				return false
			}
		}
	}
	return true
}

// DropMV drops a materialized view: its actors stop at a Stop barrier, and its rows
// and catalog entry are deleted in that barrier's checkpoint. A view that other views
// read cannot be dropped.
func (e *Engine) DropMV(ctx context.Context, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	return e.dropLocked(ctx, name)
}

func (e *Engine) dropLocked(ctx context.Context, name string) error {
	o, ok := e.cat.objects[name]
	if !ok || o.Kind != kindMV {
		return fmt.Errorf("drop materialized view %s: no such materialized view", name)
	}
	if deps := e.cat.dependents(name); len(deps) > 0 {
		return fmt.Errorf("drop materialized view %s: read by %v; drop those first", name, deps)
	}
	j := e.g.jobs[name]
	var ids []executors.ActorID
	for _, a := range j.actors() {
		ids = append(ids, a.id)
	}
	_, err := e.round(ctx, roundSpec{mutation: executors.Stop{Actors: ids}, stage: func() error {
		delete(e.cat.objects, name)
		if err := e.cat.stage(e.store, o, true); err != nil {
			return err
		}
		for _, id := range append([]uint32{o.ID}, o.StateIDs...) {
			if err := e.store.StageDropTable(id); err != nil {
				return err
			}
		}
		return nil
	}})
	if err != nil {
		return fmt.Errorf("drop materialized view %s: %w", name, err)
	}
	delete(e.g.frags, name)
	delete(e.g.jobs, name)
	delete(e.samples, name)
	for _, f := range j.scans() {
		f.up.downstream = slices.DeleteFunc(f.up.downstream, func(d *fragment) bool { return d == f })
	}
	return nil
}

// RescheduleMV changes the parallelism of a materialized view online: one checkpoint
// Update barrier replaces every actor of its fragment. The upstream's dispatchers
// connect the new actors before the barrier and drop the old ones after it; the new
// actors start from the persisted state of their new vnodes.
func (e *Engine) RescheduleMV(ctx context.Context, name string, parallelism int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	o, ok := e.cat.objects[name]
	if !ok || o.Kind != kindMV {
		return fmt.Errorf("reschedule materialized view %s: no such materialized view", name)
	}
	return e.reschedule(ctx, o, parallelism, false)
}

// reschedule is RescheduleMV of view o; e.mu is held. With move, the job keeps its
// parallelism and mappings and its new actors go from the nodes of its role onto the
// regular nodes (moveBackfilled); the catalog records the move.
func (e *Engine) reschedule(ctx context.Context, o *object, parallelism int, move bool) error {
	name := o.Name
	g := e.g
	j := g.jobs[name]
	root := j.root()
	if j.low.kind == NoShuffleBackfill {
		return fmt.Errorf("reschedule materialized view %s: it is co-located with %s (no-shuffle backfill), so its parallelism is that of %s", name, strings.Join(o.Upstreams, ", "), strings.Join(o.Upstreams, ", "))
	}
	for _, d := range root.downstream {
		if d.pn.scan.kind.coLocated() {
			return fmt.Errorf("reschedule materialized view %s: %s is co-located with it (no-shuffle backfill)", name, d.obj.Name)
		}
	}
	var mappings []vnode.Mapping
	for _, f := range j.frags {
		if err := checkParallelism(parallelism, f.pn.vnodeCount); err != nil {
			return fmt.Errorf("reschedule materialized view %s: %w (the vnode count of its %s node)", name, err, f.pn.kind)
		}
		if move {
			mappings = append(mappings, slices.Clone(f.mapping))
			continue
		}
		m, _, err := vnode.Rebalance(f.mapping, o.Parallelism, parallelism)
		if err != nil {
			return fmt.Errorf("reschedule materialized view %s: %w", name, err)
		}
		if h := e.opts.Hooks.Rebalance; h != nil {
			m = h(slices.Clone(f.mapping), o.Parallelism, parallelism)
			if err := m.Validate(f.pn.vnodeCount, parallelism); err != nil {
				return fmt.Errorf("reschedule materialized view %s: Hooks.Rebalance: %w", name, err)
			}
		}
		mappings = append(mappings, m)
	}
	base := int(g.nextActor)
	role := o.Role
	if move {
		role = ""
	}
	sets, err := g.jobActors(j, mappings, parallelism, func(f *fragment, i int, vnodes *vnode.Bitmap) int {
		return e.viewNode(role, f, i, base, func() (int, bool) { return upstreamNode(f, vnodes) })
	}, func(a *actor) []executors.NewDispatcher {
		// The new root actors feed the downstream views as the old ones did.
		var specs []executors.NewDispatcher
		for _, d := range root.downstream {
			specs = append(specs, feedSpecs(d, &fragment{actors: []*actor{a}}, d.actors, d.mapping)[0])
		}
		return specs
	})
	if err != nil {
		return fmt.Errorf("reschedule materialized view %s: %w", name, err)
	}
	newRoot := sets[len(sets)-1]
	var all []*actor
	for _, set := range sets {
		all = append(all, set...)
	}
	var oldIDs []executors.ActorID
	for _, a := range j.actors() {
		oldIDs = append(oldIDs, a.id)
	}
	upd := executors.Update{Vnodes: map[executors.ActorID]*vnode.Bitmap{}, Stop: oldIDs}
	for _, a := range all {
		upd.Vnodes[a.id] = a.vnodes
	}
	for fi, f := range j.frags {
		if f.up == nil {
			continue
		}
		var outs []executors.Output
		var old []executors.ActorID
		for _, a := range sets[fi] {
			outs = append(outs, executors.Output{Actor: a.id, Node: a.node})
		}
		for _, a := range f.actors {
			old = append(old, a.id)
		}
		for _, u := range f.up.actors {
			upd.Dispatchers = append(upd.Dispatchers, executors.DispatcherUpdate{Actor: u.id, Fragment: f.id, AddOutputs: outs, RemoveOutputs: old, Mapping: slices.Clone(mappings[fi])})
		}
	}
	var oldRoot []executors.ActorID
	for _, a := range root.actors {
		oldRoot = append(oldRoot, a.id)
	}
	for _, d := range root.downstream {
		for _, da := range d.actors {
			upd.Merges = append(upd.Merges, executors.MergeUpdate{Actor: da.id, AddInputs: placedAt(newRoot), RemoveInputs: oldRoot})
		}
	}
	if err := e.start(ctx, all); err != nil {
		return fmt.Errorf("reschedule materialized view %s: %w", name, err)
	}
	_, err = e.round(ctx, roundSpec{mutation: upd, stage: func() error {
		o.Role = role
		o.Parallelism = parallelism
		o.Mappings = o.Mappings[:0]
		for _, m := range mappings {
			o.Mappings = append(o.Mappings, m)
		}
		o.Mapping = o.Mappings[len(o.Mappings)-1]
		return e.cat.stage(e.store, o, false)
	}})
	if err != nil {
		return fmt.Errorf("reschedule materialized view %s: %w", name, err)
	}
	for fi, f := range j.frags {
		f.actors = sets[fi]
		f.mapping = mappings[fi]
	}
	// The reschedule is committed, and with it the old actors' last progress: the
	// new ones start from it.
	if err := e.seedProgress(o, j); err != nil {
		return fmt.Errorf("reschedule materialized view %s: %w", name, err)
	}
	return nil
}

// lookup finds a table or view of the catalog.
func (e *Engine) lookup(name string) (*object, bool) {
	o, ok := e.cat.objects[name]
	return o, ok
}
