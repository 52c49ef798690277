package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// Building actors is split in two, as it is between a meta node and its compute nodes:
// the coordinator places the actors (ids, nodes, vnodes, the edges between them) and
// sends each node a build spec; the node builds its actors from that spec and from
// nothing else of the coordinator's: the catalog entries of the objects they run are
// in the spec, and the node lowers a view's plan itself. With a Control, the spec
// travels over the node's control stream (ControlGraph.Build); without one, the
// coordinator hands it to the node's side directly, in the same encoding.

// BuildSpecVersion is the version of the encoding of a build spec (the payload of
// ControlGraph.Build); a change to the spec's fields bumps it.
const BuildSpecVersion = 1

// maxSpecActors bounds the actors of one build spec, so that a decoded spec never
// allocates past what its frame could describe.
const maxSpecActors = 1 << 16

// buildSpec is what a node is asked to build.
type buildSpec struct {
	Version uint32 `json:"version"`
	// Objects are the catalog entries (object.encode) of every object whose actors
	// the spec builds, and of the upstreams their views read.
	Objects []json.RawMessage `json:"objects"`
	Actors  []actorSpec       `json:"actors"`
}

// The roles of an actor spec.
const (
	roleDML   = "dml"   // a table's DML actor: the writers' channel, hash-dispatched
	roleTable = "table" // a table's actor: materializes what its DML actor sends
	roleView  = "view"  // one actor of one node of a view's plan
	roleFeed  = "feed"  // more dispatchers for an actor built earlier and not started
)

// actorSpec is one actor of a build spec.
type actorSpec struct {
	ID       executors.ActorID    `json:"id"`
	Fragment executors.FragmentID `json:"fragment"`
	Role     string               `json:"role"`
	Object   string               `json:"object"`
	// PlanNode is a view actor's node of the view's plan, its index in the plan's
	// post-order.
	PlanNode int `json:"plan_node,omitempty"`
	// Vnodes are the vnodes a table or view actor owns (vnode.Bitmap's encoding).
	Vnodes []byte `json:"vnodes,omitempty"`
	// States are a view actor's state tables: a scan's progress table, an
	// aggregate's or join's tables in its node's order.
	States []uint32 `json:"states,omitempty"`
	// Inputs are, per input of the actor's operator, the actors whose edges it
	// merges (a table actor: its DML actor).
	Inputs [][]executors.ActorID `json:"inputs,omitempty"`
	// Dispatchers are the actor's outputs.
	Dispatchers []executors.NewDispatcher `json:"dispatchers,omitempty"`
	// LocalUpstream: the scan's backfill reads its upstream's uncommitted data in
	// this node's store instead of replicating the change stream.
	LocalUpstream bool `json:"local_upstream,omitempty"`
}

// encodeBuildSpec encodes s (with its version set).
func encodeBuildSpec(s *buildSpec) ([]byte, error) {
	s.Version = BuildSpecVersion
	return json.Marshal(s)
}

// decodeBuildSpec decodes what encodeBuildSpec wrote and checks what it can without
// the node's state: the version, the objects' entries, every actor's role, object
// and vnodes. It returns the objects by name and the actors' vnodes in spec order.
func decodeBuildSpec(data []byte) (*buildSpec, map[string]*object, []*vnode.Bitmap, error) {
	var s buildSpec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, nil, nil, fmt.Errorf("build spec: %w", err)
	}
	if s.Version != BuildSpecVersion {
		return nil, nil, nil, fmt.Errorf("build spec: version %d, want %d", s.Version, BuildSpecVersion)
	}
	if len(s.Actors) > maxSpecActors {
		return nil, nil, nil, fmt.Errorf("build spec: %d actors, more than the %d a spec may hold", len(s.Actors), maxSpecActors)
	}
	objs := map[string]*object{}
	for i, raw := range s.Objects {
		o, err := decodeObject(fmt.Sprintf("build spec object %d", i), raw)
		if err != nil {
			return nil, nil, nil, err
		}
		if _, dup := objs[o.Name]; dup {
			return nil, nil, nil, fmt.Errorf("build spec: object %s twice", o.Name)
		}
		objs[o.Name] = o
	}
	vnodes := make([]*vnode.Bitmap, len(s.Actors))
	seen := map[executors.ActorID]bool{}
	for i, a := range s.Actors {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("build spec: actor %d (%s of %s): %s", a.ID, a.Role, a.Object, fmt.Sprintf(format, args...))
		}
		if a.ID == 0 {
			return nil, nil, nil, fail("actor id 0")
		}
		if seen[a.ID] {
			return nil, nil, nil, fail("built twice, or built and fed")
		}
		if a.Role != roleFeed {
			seen[a.ID] = true
		}
		o, ok := objs[a.Object]
		if !ok {
			return nil, nil, nil, fail("the spec has no object %s", a.Object)
		}
		want := kindTable
		if a.Role == roleView {
			want = kindMV
		}
		switch {
		case a.Role != roleDML && a.Role != roleTable && a.Role != roleView && a.Role != roleFeed:
			return nil, nil, nil, fail("unknown role")
		case a.Role != roleFeed && o.Kind != want:
			return nil, nil, nil, fail("%s is a %s", o.Name, o.Kind)
		}
		if a.Role == roleTable || a.Role == roleView {
			b, err := vnode.UnmarshalBitmap(a.Vnodes)
			if err != nil {
				return nil, nil, nil, fail("vnodes: %v", err)
			}
			vnodes[i] = b
		}
	}
	return &s, objs, vnodes, nil
}

// specBuilder collects the build specs of one change of the graph, one per node.
type specBuilder struct {
	g     *graph
	specs map[int]*buildSpec
	objs  map[int]map[string]bool
	err   error
}

func (g *graph) newSpecs() *specBuilder {
	return &specBuilder{g: g, specs: map[int]*buildSpec{}, objs: map[int]map[string]bool{}}
}

// add adds actor s to node's spec, with the catalog entries of objs.
func (b *specBuilder) add(node int, s actorSpec, vnodes *vnode.Bitmap, objs ...*object) {
	if b.err != nil {
		return
	}
	spec := b.specs[node]
	if spec == nil {
		spec = &buildSpec{}
		b.specs[node], b.objs[node] = spec, map[string]bool{}
	}
	for _, o := range objs {
		if b.objs[node][o.Name] {
			continue
		}
		raw, err := o.encode()
		if err != nil {
			b.err = fmt.Errorf("%s: %w", o.Name, err)
			return
		}
		spec.Objects = append(spec.Objects, raw)
		b.objs[node][o.Name] = true
	}
	if vnodes != nil {
		v, err := vnodes.MarshalBinary()
		if err != nil {
			b.err = fmt.Errorf("actor %d: vnodes: %w", s.ID, err)
			return
		}
		s.Vnodes = v
	}
	spec.Actors = append(spec.Actors, s)
}

// run sends every node its spec, in node order, and returns the first node's error.
// Actors built on other nodes before it stay built: the caller discards them.
func (b *specBuilder) run() error {
	if b.err != nil {
		return b.err
	}
	nodes := make([]int, 0, len(b.specs))
	for n := range b.specs {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	g := b.g
	for _, n := range nodes {
		data, err := encodeBuildSpec(b.specs[n])
		if err != nil {
			return fmt.Errorf("build spec for node %d: %w", n, err)
		}
		if g.ctl != nil {
			err = g.ctl.Build(g.ctx, n, data)
		} else {
			err = g.buildAt(g.ctx, n, data)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// buildAt is a node's side of a build: it builds the actors of spec that run on node
// from the spec alone (and the node's store), and hands each to the actor the
// coordinator placed (in one process, the graph's record of it). It builds all of
// them or none.
func (g *graph) buildAt(ctx context.Context, node int, data []byte) (err error) {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("node %d: build: %w", node, err)
	}
	if node < 0 || node >= len(g.e.nodes) {
		return fmt.Errorf("node %d: build: the engine has nodes 0 to %d", node, len(g.e.nodes)-1)
	}
	spec, objs, vnodes, err := decodeBuildSpec(data)
	if err != nil {
		return fmt.Errorf("node %d: %w", node, err)
	}
	// A build whose coordinator gave up on it (a lost stream, an ended context)
	// finds its actors discarded, and builds nothing.
	g.amu.Lock()
	defer g.amu.Unlock()
	nb := &nodeBuild{g: g, node: node, objs: objs, lows: map[string]*lowered{}}
	defer func() {
		if err != nil {
			nb.undo()
			err = fmt.Errorf("node %d: %w", node, err)
		}
	}()
	for i, s := range spec.Actors {
		if err := nb.actor(s, vnodes[i]); err != nil {
			return fmt.Errorf("build actor %d (%s of %s): %w", s.ID, s.Role, s.Object, err)
		}
	}
	if len(nb.dml) > 0 {
		g.e.gmu.Lock()
		for _, in := range nb.dml {
			g.dml[in.t.Name] = in
		}
		g.e.gmu.Unlock()
	}
	return nil
}

// nodeBuild is one node's build of one spec.
type nodeBuild struct {
	g    *graph
	node int
	objs map[string]*object
	lows map[string]*lowered
	dml  []*dmlInput
	// built are the actors given an executor, fed the actors given more
	// dispatchers (and how many they had), for undo.
	built []*actor
	fed   map[*actor]int
}

func (nb *nodeBuild) lookup(name string) (*object, bool) {
	o, ok := nb.objs[name]
	return o, ok
}

// undo releases what the build made: the dispatchers added to actors built earlier,
// then the actors it built.
func (nb *nodeBuild) undo() {
	for a, n := range nb.fed {
		for _, d := range a.disp[n:] {
			d.Close()
		}
		a.disp = a.disp[:n]
	}
	for _, a := range nb.built {
		if a.exec != nil {
			a.exec.Close()
		}
		for _, d := range a.disp {
			d.Close()
		}
		a.exec, a.disp, a.backfill, a.k = nil, nil, nil, nil
	}
}

// placed returns the graph's record of actor id, which the coordinator placed on this
// node.
func (nb *nodeBuild) placed(id executors.ActorID) (*actor, error) {
	a := nb.g.actors[id]
	if a == nil {
		return nil, errors.New("the coordinator placed no such actor")
	}
	if a.node != nb.node {
		return nil, fmt.Errorf("it is placed on node %d", a.node)
	}
	return a, nil
}

// merge is actor id's merge of the edges from the actors from.
func (nb *nodeBuild) merge(id executors.ActorID, from []executors.ActorID, schema *arrow.Schema) (executors.Executor, error) {
	g := nb.g
	var inputs []MergeInput
	for _, u := range from {
		in, err := g.inputTo(id)(u)
		if err != nil {
			return nil, err
		}
		inputs = append(inputs, in)
	}
	return NewMerge(id, schema, inputs, g.inputTo(id)), nil
}

// dispatchers builds a's dispatchers from specs, over kernels k.
func (nb *nodeBuild) dispatchers(a *actor, specs []executors.NewDispatcher, k vec.Kernels) error {
	for _, spec := range specs {
		if spec.Actor != a.id {
			return fmt.Errorf("a dispatcher of actor %d", spec.Actor)
		}
		d, err := NewDispatcher(a.id, spec, k, nb.g.outputFrom(a.id), nb.g.e.mem)
		if err != nil {
			return err
		}
		a.disp = append(a.disp, d)
	}
	return nil
}

// actor builds one actor of the spec.
func (nb *nodeBuild) actor(s actorSpec, vnodes *vnode.Bitmap) error {
	o := nb.objs[s.Object]
	a, err := nb.placed(s.ID)
	if err != nil {
		return err
	}
	if a.started {
		return errors.New("the actor runs already")
	}
	if s.Role == roleFeed {
		if a.exec == nil {
			return errors.New("feed for an actor not built")
		}
		if nb.fed == nil {
			nb.fed = map[*actor]int{}
		}
		if _, ok := nb.fed[a]; !ok {
			nb.fed[a] = len(a.disp)
		}
		return nb.dispatchers(a, s.Dispatchers, a.k)
	}
	if a.exec != nil {
		return errors.New("the actor is built already")
	}
	nb.built = append(nb.built, a)
	a.vnodes = vnodes
	e := nb.g.e
	switch s.Role {
	case roleDML:
		if len(s.Inputs) != 0 || len(s.Dispatchers) != 1 {
			return fmt.Errorf("a DML actor takes no inputs and has one dispatcher, not %d and %d", len(s.Inputs), len(s.Dispatchers))
		}
		in := &dmlInput{c: make(chan executors.Message, e.opts.ChannelCapacity), t: o.t, node: nb.node, actor: a.id}
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
		return a.materialize(e, o, in)
	}
	return nb.view(a, o, s)
}

// view builds actor a of node s.PlanNode of view o's plan.
func (nb *nodeBuild) view(a *actor, o *object, s actorSpec) error {
	e := nb.g.e
	low := nb.lows[o.Name]
	if low == nil {
		var err error
		low, err = lower(o.Name, o.plan, nb.lookup, BackfillKind(o.Backfill), e.mem)
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
		in, err = n.buildStages(o.Name, in, e.mem)
	}
	if err != nil {
		if in != nil {
			in.Close()
		}
		return err
	}
	if n.parent == nil {
		if err := a.materialize(e, o, in); err != nil {
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
func (nb *nodeBuild) operator(a *actor, o *object, n *pnode, s actorSpec) (executors.Executor, error) {
	e := nb.g.e
	node := e.nodes[nb.node]
	states := func() ([]*storage.StateTable, error) {
		var out []*storage.StateTable
		for k, t := range n.states {
			st, err := storage.NewStateTable(node, s.States[k], t, a.vnodes)
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
		cfg.State, cfg.Node, cfg.Mem = sts[0], node, e.mem
		cfg.MultiSets = sts[1:] // the planner's multiset tables, one per slot
		if e.caches != nil {
			cfg.Cache = e.caches[nb.node]
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
		cfg.LeftState, cfg.RightState, cfg.Node, cfg.Mem = sts[0], sts[1], node, e.mem
		if e.caches != nil {
			cfg.Cache = e.caches[nb.node]
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
func (nb *nodeBuild) backfill(in executors.Executor, a *actor, o *object, n *pnode, up *object, s actorSpec) (executors.Executor, error) {
	e := nb.g.e
	node := e.nodes[nb.node]
	prog, err := storage.NewProgressTable(node, s.States[0], fmt.Sprintf("%s_progress%d", o.Name, n.idx), up.t, a.vnodes)
	if err != nil {
		return in, err
	}
	bf, err := executors.NewArrangementBackfill(in, executors.BackfillConfig{
		Actor: a.id, Fragment: s.Fragment, Upstream: up.t, UpstreamID: up.ID, S2: n.scan.s2,
		Vnodes: a.vnodes, Node: node, Progress: prog, BatchSize: e.opts.ChunkSize, Workers: e.opts.BackfillWorkers,
		RateLimit: copyLimit(o.RateLimit), Paused: o.Paused, EnginePaused: e.paused, Mem: e.mem,
		BufferBudget: e.opts.BackfillBufferBudget, SpillDir: e.opts.SpillDir,
		NoShuffle:     n.scan.kind.coLocated(),
		LocalUpstream: s.LocalUpstream,
		Pressure:      memoryPressure(node, e.opts.BackfillMemoryBudget),
		Relief:        node.Store().CommitSignal,    // a commit frees the epochs it writes
		OnFinishing:   func() { nb.g.finishing(a) }, // done at the next barrier: inject it now
	})
	if err != nil {
		return in, err
	}
	a.backfill = bf
	return bf, nil
}
