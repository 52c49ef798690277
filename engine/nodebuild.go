package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// A node's build of the actors of one spec (node.go applies the spec): each actor's
// merges, executors and dispatchers, from the spec's catalog entries and the node's
// store.

// nodeBuild is one node's build of one spec.
type nodeBuild struct {
	n      *nodeSide
	objs   map[string]*object
	lows   map[string]*lowered
	paused bool // the engine's pause, from the spec
	dml    []*dmlInput
	// built are the actors the build made, fed the actors built earlier that it
	// gave more dispatchers (and how many they had), for undo.
	built []*nodeActor
	fed   map[*nodeActor]int
	// needs are the vnodes, per table, whose committed data the built actors read:
	// their state tables' (nodeEnv.hold); snapshots are the backfills whose
	// upstream's vnodes they read unless their progress is done.
	needs     map[uint32]*vnode.Bitmap
	snapshots []snapshotNeed
}

// snapshotNeed is the snapshot a built backfill reads: the vnodes of its upstream,
// needed unless its committed progress says every one of them is Completed.
type snapshotNeed struct {
	progress *storage.ProgressTable
	upstream uint32
	vnodes   *vnode.Bitmap
}

// hold has the node's store hold what the build's actors read (nodeEnv.hold, when
// the store may not hold every vnode): their state tables' vnodes, then those of the
// upstreams of the backfills whose committed progress is not done (a done backfill
// reads no snapshot again: Completed never changes back).
func (nb *nodeBuild) hold(ctx context.Context) error {
	env := &nb.n.env
	if env.hold == nil {
		return nil
	}
	if len(nb.needs) > 0 {
		if err := env.hold(ctx, nb.needs); err != nil {
			return err
		}
	}
	nb.needs = nil
	for _, s := range nb.snapshots {
		done, err := progressDone(env.store, s.progress, s.vnodes)
		if err != nil {
			return err
		}
		if !done {
			if err := nb.need(s.upstream, s.vnodes); err != nil {
				return err
			}
		}
	}
	if len(nb.needs) == 0 {
		return nil
	}
	return env.hold(ctx, nb.needs)
}

// progressDone reports whether the committed progress of every vnode of vnodes in p
// is Completed, read through a view of node.
func progressDone(node *storage.Node, p *storage.ProgressTable, vnodes *vnode.Bitmap) (bool, error) {
	view, err := node.View()
	if err != nil {
		return false, err
	}
	pos, _, err := p.Load(view)
	view.Release()
	if err != nil {
		return false, err
	}
	done := true
	vnodes.Iterate(func(v vnode.Vnode) bool {
		done = int(v) < len(pos.State) && pos.State[v] == vec.Completed
		return done
	})
	return done, nil
}

// need adds vnodes of table to what the build's actors read.
func (nb *nodeBuild) need(table uint32, vnodes *vnode.Bitmap) error {
	if nb.needs == nil {
		nb.needs = map[uint32]*vnode.Bitmap{}
	}
	return storage.AddVnodes(nb.needs, table, vnodes)
}

func (nb *nodeBuild) lookup(name string) (*object, bool) {
	o, ok := nb.objs[name]
	return o, ok
}

// undo releases what the build made: the dispatchers added to actors built earlier,
// then the actors it built (n.mu is held). The links go first: an exchange edge's
// sending side that never sent opens its stream at its close, which must not wait
// for a receiver that will never expect the edge.
func (nb *nodeBuild) undo() {
	for a, k := range nb.fed {
		for _, d := range a.disp[k:] {
			for _, o := range d.Outputs() {
				nb.n.forgetLink(edge{a.id, o})
			}
			d.Close()
		}
		a.disp = a.disp[:k]
	}
	for _, a := range nb.built {
		nb.n.forgetLinks(a.id, true)
		a.close()
		delete(nb.n.actors, a.id)
	}
}

// merge is actor id's merge of the edges from the actors from.
func (nb *nodeBuild) merge(id executors.ActorID, from []executors.Output, schema *arrow.Schema) (executors.Executor, error) {
	n := nb.n
	var inputs []MergeInput
	for _, u := range from {
		in, err := n.input(id, u)
		if err != nil {
			return nil, err
		}
		inputs = append(inputs, in)
	}
	return NewMerge(id, schema, inputs, n.inputTo(id)), nil
}

// dispatchers builds a's dispatchers from specs, over kernels k.
func (nb *nodeBuild) dispatchers(a *nodeActor, specs []executors.NewDispatcher, k vec.Kernels) error {
	for _, spec := range specs {
		if spec.Actor != a.id {
			return fmt.Errorf("a dispatcher of actor %d", spec.Actor)
		}
		d, err := NewDispatcher(a.id, spec, k, nb.n.outputFrom(a.id), nb.n.env.mem)
		if err != nil {
			return err
		}
		a.disp = append(a.disp, d)
	}
	return nil
}

// actor builds one actor of the spec (n.mu is held).
func (nb *nodeBuild) actor(s actorSpec, vnodes *vnode.Bitmap) error {
	o := nb.objs[s.Object]
	n := nb.n
	if s.Role == roleFeed {
		a := n.actors[s.ID]
		switch {
		case a == nil:
			return errors.New("feed for an actor the node has not built")
		case a.started:
			return errors.New("feed for an actor that runs already")
		}
		if nb.fed == nil {
			nb.fed = map[*nodeActor]int{}
		}
		if _, ok := nb.fed[a]; !ok {
			nb.fed[a] = len(a.disp)
		}
		return nb.dispatchers(a, s.Dispatchers, a.k)
	}
	if a := n.actors[s.ID]; a != nil {
		if a.started {
			return errors.New("the actor runs already")
		}
		return errors.New("the actor is built already")
	}
	a := &nodeActor{id: s.ID, obj: s.Object, node: n.node, vnodes: vnodes}
	n.actors[a.id] = a
	nb.built = append(nb.built, a)
	env := &n.env
	switch s.Role {
	case roleDML:
		if len(s.Inputs) != 0 || len(s.Dispatchers) != 1 {
			return fmt.Errorf("a DML actor takes no inputs and has one dispatcher, not %d and %d", len(s.Inputs), len(s.Dispatchers))
		}
		in := &dmlInput{c: make(chan executors.Message, env.opts.ChannelCapacity), t: o.t, node: n.node, actor: a.id, slot: make(chan struct{}, 1)}
		a.k = vec.For(o.t)
		a.exec = NewMerge(a.id, o.t.ArrowSchema(), []MergeInput{{Actor: 0, C: in.c}}, nil)
		nb.dml = append(nb.dml, in)
		return nb.dispatchers(a, s.Dispatchers, a.k)
	case roleTable:
		if len(s.Inputs) != 1 || len(s.Inputs[0]) != 1 || len(s.Dispatchers) != 0 {
			return errors.New("a table actor takes its DML actor as its one input and has no dispatcher")
		}
		a.k = vec.For(o.t)
		in, err := nb.merge(a.id, s.Inputs[0], o.t.ArrowSchema())
		if err != nil {
			return err
		}
		return nb.materialize(a, o, in)
	}
	return nb.view(a, o, s)
}

// materialize ends a's chain with a materialize into o's state, over in.
func (nb *nodeBuild) materialize(a *nodeActor, o *object, in executors.Executor) error {
	env := &nb.n.env
	st, err := storage.NewStateTable(env.store, o.ID, o.t, a.vnodes)
	if err == nil {
		err = nb.need(o.ID, a.vnodes)
	}
	if err != nil {
		return err
	}
	m, err := executors.NewMaterialize(in, st, env.store, env.mem)
	if err != nil {
		return err
	}
	a.exec = m
	return nil
}

// view builds actor a of node s.PlanNode of view o's plan.
func (nb *nodeBuild) view(a *nodeActor, o *object, s actorSpec) error {
	env := &nb.n.env
	low := nb.lows[o.Name]
	if low == nil {
		var err error
		low, err = lower(o.Name, o.plan, nb.lookup, BackfillKind(o.Backfill), env.mem)
		if err != nil {
			return err
		}
		nb.lows[o.Name] = low
	}
	if s.PlanNode < 0 || s.PlanNode >= len(low.nodes) {
		return fmt.Errorf("plan node %d of %d", s.PlanNode, len(low.nodes))
	}
	n := low.nodes[s.PlanNode]
	if len(s.States) != n.tableIDs() {
		return fmt.Errorf("%d state tables for a %s node, which has %d", len(s.States), n.kind, n.tableIDs())
	}
	if len(s.Inputs) != max(1, len(n.inputs)) {
		return fmt.Errorf("%d inputs for a %s node, which has %d", len(s.Inputs), n.kind, max(1, len(n.inputs)))
	}
	a.k = n.exchange
	if n.parent == nil {
		a.k = vec.For(o.t)
	}
	in, err := nb.operator(a, o, n, s)
	if err == nil {
		in, err = n.buildStages(o.Name, in, env.mem)
	}
	if err != nil {
		if in != nil {
			in.Close()
		}
		return err
	}
	if n.parent == nil {
		if err := nb.materialize(a, o, in); err != nil {
			in.Close()
			return err
		}
	} else {
		a.exec = in
	}
	return nb.dispatchers(a, s.Dispatchers, a.k)
}

// operator builds the head of view actor a: a scan's merge of its upstream's actors
// and backfill, or an aggregate's or join's merges of its inputs and the operator
// over them, with its state tables.
func (nb *nodeBuild) operator(a *nodeActor, o *object, n *pnode, s actorSpec) (executors.Executor, error) {
	env := &nb.n.env
	node := env.store
	states := func() ([]*storage.StateTable, error) {
		var out []*storage.StateTable
		for k, t := range n.states {
			st, err := storage.NewStateTable(node, s.States[k], t, a.vnodes)
			if err == nil {
				err = nb.need(s.States[k], a.vnodes)
			}
			if err != nil {
				return nil, err
			}
			out = append(out, st)
		}
		return out, nil
	}
	switch n.kind {
	case scanNode:
		up := n.scan.upstream
		in, err := nb.merge(a.id, s.Inputs[0], up.t.ArrowSchema())
		if err != nil {
			return nil, err
		}
		return nb.backfill(in, a, o, n, up, s)
	case aggNode:
		sts, err := states()
		if err != nil {
			return nil, err
		}
		cfg := n.agg
		cfg.State, cfg.Node, cfg.Mem = sts[0], node, env.mem
		cfg.MultiSets = sts[1:] // the planner's multiset tables, one per slot
		if env.cache != nil {
			cfg.Cache = env.cache
		}
		in, err := nb.merge(a.id, s.Inputs[0], n.inputs[0].schema)
		if err != nil {
			return nil, err
		}
		h, err := executors.NewHashAgg(in, cfg)
		if err != nil {
			in.Close()
			return nil, err
		}
		return h, nil
	case joinNode:
		sts, err := states()
		if err != nil {
			return nil, err
		}
		cfg := n.join
		cfg.LeftState, cfg.RightState, cfg.Node, cfg.Mem = sts[0], sts[1], node, env.mem
		if env.cache != nil {
			cfg.Cache = env.cache
		}
		left, err := nb.merge(a.id, s.Inputs[0], n.inputs[0].schema)
		if err != nil {
			return nil, err
		}
		right, err := nb.merge(a.id, s.Inputs[1], n.inputs[1].schema)
		if err != nil {
			left.Close()
			return nil, err
		}
		h, err := executors.NewHashJoin(left, right, cfg)
		if err != nil {
			left.Close()
			right.Close()
			return nil, err
		}
		return h, nil
	}
	return nil, fmt.Errorf("unknown node kind %d", n.kind)
}

// backfill is the backfill executor of scan actor a over upstream up, reading up's
// change stream from in, with its progress in the spec's first state table.
func (nb *nodeBuild) backfill(in executors.Executor, a *nodeActor, o *object, n *pnode, up *object, s actorSpec) (executors.Executor, error) {
	env := &nb.n.env
	opts := env.opts
	node := env.store
	prog, err := storage.NewProgressTable(node, s.States[0], fmt.Sprintf("%s_progress%d", o.Name, n.idx), up.t, a.vnodes)
	if err == nil {
		err = nb.need(s.States[0], a.vnodes)
	}
	if err != nil {
		return in, err
	}
	nb.snapshots = append(nb.snapshots, snapshotNeed{progress: prog, upstream: up.ID, vnodes: a.vnodes})
	bf, err := executors.NewArrangementBackfill(in, executors.BackfillConfig{
		Actor: a.id, Fragment: s.Fragment, Upstream: up.t, UpstreamID: up.ID, S2: n.scan.s2,
		Vnodes: a.vnodes, Node: node, Progress: prog, BatchSize: opts.ChunkSize, Workers: opts.BackfillWorkers,
		RateLimit: copyLimit(o.RateLimit), Paused: o.Paused, EnginePaused: nb.paused, Mem: env.mem,
		BufferBudget: opts.BackfillBufferBudget, SpillDir: opts.SpillDir,
		NoShuffle:     n.scan.kind.coLocated(),
		LocalUpstream: s.LocalUpstream,
		Pressure:      memoryPressure(node, opts.BackfillMemoryBudget),
		Relief:        node.Store().CommitSignal,   // a commit frees the epochs it writes
		OnFinishing:   func() { env.finishing(a) }, // done at the next barrier: inject it now
	})
	if err != nil {
		return in, err
	}
	a.backfill = bf
	return bf, nil
}
