package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// The running graph: fragments of actors, one goroutine each, connected by bounded
// channels (the exchange). A graph is built from the catalog when the engine opens or
// recovers, and changed by DDL and rescale rounds; recovery tears it down whole.
//
// Every table has a DML fragment (one actor, fed by the engine's writers and the
// coordinator's barriers through one channel, so a barrier orders after the writes
// sent before it) that hash-dispatches to the table's fragment (materialize into the
// table's state). Every view's fragment reads its upstream's fragment through a hash
// or no-shuffle dispatcher, runs the plan's stages and materializes into the view's
// state. Barriers enter at the DML actors only and reach every actor through the
// dispatchers; merges align them.

// fragment is the actors that run one object (or a table's DML), or one node of a
// view's plan, in parallel.
type fragment struct {
	id      executors.FragmentID
	obj     *object
	actors  []*actor      // index = the mapping's actor index
	mapping vnode.Mapping // vnode -> actor index
	dml     *actor        // tables: the DML actor feeding the fragment
	// Views: the job the fragment belongs to, and its node of the view's plan.
	job *job
	pn  *pnode
	// up is the upstream's fragment a scan fragment backfills.
	up *fragment
	// downstream lists the scan fragments of the views that read this (table or view
	// root) fragment.
	downstream []*fragment
}

// job is a view's fragments, one per node of its plan, in the plan's post-order: the
// root (which materializes the view) is last.
type job struct {
	obj   *object
	low   *lowered
	frags []*fragment
	built time.Time // when this graph built it (its backfill, if any, started then)
}

func (j *job) root() *fragment { return j.frags[len(j.frags)-1] }

// scans lists the job's scan fragments.
func (j *job) scans() []*fragment {
	var out []*fragment
	for _, f := range j.frags {
		if f.pn.kind == scanNode {
			out = append(out, f)
		}
	}
	return out
}

// actors lists every actor of the job.
func (j *job) actors() []*actor {
	var out []*actor
	for _, f := range j.frags {
		out = append(out, f.actors...)
	}
	return out
}

// actor runs a chain of executors and sends its output through its dispatchers.
type actor struct {
	id     executors.ActorID
	frag   *fragment
	node   int
	vnodes *vnode.Bitmap
	exec   executors.Executor
	disp   []Dispatcher
	k      vec.Kernels // kernels of the rows the actor emits (its object's table)
	done   chan struct{}
	// backfill is the view actor's backfill executor (for its progress).
	backfill *executors.ArrangementBackfill
	// status is what the actor is doing (for the warning about a stalled barrier).
	status actorStatus
}

// report is what an actor tells the coordinator: it passed barrier epoch on, or failed.
type report struct {
	actor executors.ActorID
	epoch executors.Epoch
	err   error
}

// dmlInput is the channel into a table's DML actor.
type dmlInput struct {
	mu    sync.RWMutex // writers hold it shared while sending; teardown exclusively
	c     chan executors.Message
	t     *schema.Table
	node  int         // the node of its DML actor
	ready atomic.Bool // set once the table's first barrier is through
}

type edge struct{ from, to executors.ActorID }

type graph struct {
	e      *Engine
	ctx    context.Context
	cancel context.CancelFunc
	dead   chan struct{} // closed at teardown
	down   sync.Once     // teardown runs once (a failed recovery, then Close)

	mu     sync.Mutex // guards edges
	edges  map[edge]*link
	actors map[executors.ActorID]*actor
	frags  map[string]*fragment // tables' fragments and views' root fragments, by object name
	jobs   map[string]*job      // views, by name
	dml    map[string]*dmlInput // by table name, guarded by e.gmu

	generation uint64 // see ExchangeEdge.Generation
	nextActor  executors.ActorID
	nextFrag   executors.FragmentID
	reports    chan report
	ctl        ControlGraph // nil: reports are channel sends
	wg         sync.WaitGroup
}

func newGraph(e *Engine) *graph {
	ctx, cancel := context.WithCancel(e.labels)
	// Above the last one's, and the wall clock's: a graph of an engine reopened on
	// the directory (in this process or another) never takes an earlier one's.
	e.generation = max(e.generation+1, uint64(time.Now().UnixNano()))
	return &graph{
		e: e, ctx: ctx, cancel: cancel, dead: make(chan struct{}), generation: e.generation,
		edges: map[edge]*link{}, actors: map[executors.ActorID]*actor{},
		frags: map[string]*fragment{}, jobs: map[string]*job{}, dml: map[string]*dmlInput{},
		nextActor: 1, nextFrag: 1, reports: make(chan report, 4096),
	}
}

func (g *graph) newActorID() executors.ActorID {
	id := g.nextActor
	g.nextActor++
	return id
}

// addTable builds a table's DML and table fragments (not started).
func (g *graph) addTable(o *object) (*fragment, error) {
	e := g.e
	f := &fragment{id: g.nextFrag, obj: o, mapping: vnode.Mapping(o.Mapping)}
	g.nextFrag++
	bitmaps := f.mapping.Bitmaps(o.Parallelism)
	k := vec.For(o.t)
	for i := 0; i < o.Parallelism; i++ {
		a := &actor{id: g.newActorID(), frag: f, node: i % len(e.nodes), vnodes: bitmaps[i], k: k, done: make(chan struct{})}
		f.actors = append(f.actors, a)
	}
	// The DML actor: its input is the writers' channel.
	dml := &actor{id: g.newActorID(), frag: f, node: 0, k: k, done: make(chan struct{})}
	in := &dmlInput{c: make(chan executors.Message, e.opts.ChannelCapacity), t: o.t, node: dml.node}
	dml.exec = NewMerge(dml.id, o.t.ArrowSchema(), []MergeInput{{Actor: 0, C: in.c}}, nil)
	f.dml = dml
	g.actors[dml.id] = dml
	for _, a := range f.actors {
		g.actors[a.id] = a
	}
	outs := make([]executors.Output, len(f.actors))
	for i, a := range f.actors {
		outs[i] = executors.Output{Actor: a.id, Node: a.node}
	}
	d, err := NewDispatcher(dml.id, executors.NewDispatcher{Actor: dml.id, Fragment: f.id, Kind: executors.Hash, Outputs: outs, Mapping: slices.Clone(vnode.Mapping(o.Mapping))}, k, g.outputFrom(dml.id), e.mem)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", o.Name, err)
	}
	dml.disp = []Dispatcher{d}
	for _, a := range f.actors {
		in, err := g.inputTo(a.id)(dml.id)
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", o.Name, err)
		}
		merge := NewMerge(a.id, o.t.ArrowSchema(), []MergeInput{in}, g.inputTo(a.id))
		if err := a.materialize(e, merge); err != nil {
			return nil, fmt.Errorf("table %s: %w", o.Name, err)
		}
	}
	g.frags[o.Name] = f
	e.gmu.Lock()
	g.dml[o.Name] = in
	e.gmu.Unlock()
	return f, nil
}

// materialize ends a's chain with a materialize into its object's state, over in.
func (a *actor) materialize(e *Engine, in executors.Executor) error {
	o := a.frag.obj
	st, err := storage.NewStateTable(e.nodes[a.node], o.ID, o.t, a.vnodes)
	if err != nil {
		return err
	}
	m, err := executors.NewMaterialize(in, st, e.nodes[a.node], e.mem)
	if err != nil {
		return err
	}
	a.exec = m
	return nil
}

// jobActors builds a new set of actors for every fragment of job j, p per fragment,
// with the mappings given (one per fragment) and nodeOf placing actor i of a fragment.
// Within the job the actors are connected (each non-root actor hash-dispatches to its
// parent fragment's new actors); they are not started, and the scan actors are not yet
// fed by their upstreams: the caller connects the upstreams' dispatchers, directly or
// through an Add or Update barrier.
func (g *graph) jobActors(j *job, mappings []vnode.Mapping, p int, nodeOf func(f *fragment, i int, vnodes *vnode.Bitmap) int) ([][]*actor, error) {
	e := g.e
	sets := make([][]*actor, len(j.frags))
	for fi, f := range j.frags {
		bitmaps := mappings[fi].Bitmaps(p)
		k := f.pn.exchange
		if f.pn.parent == nil {
			k = vec.For(j.obj.t)
		}
		for i := 0; i < p; i++ {
			a := &actor{id: g.newActorID(), frag: f, node: nodeOf(f, i, bitmaps[i]), vnodes: bitmaps[i], k: k, done: make(chan struct{})}
			sets[fi] = append(sets[fi], a)
			g.actors[a.id] = a
		}
	}
	ok := false
	defer func() {
		if !ok {
			for _, set := range sets {
				g.discard(set)
			}
		}
	}()
	ids := j.obj.StateIDs
	for fi, f := range j.frags {
		n := f.pn
		for i, a := range sets[fi] {
			in, err := g.operator(j, f, a, i, sets, ids[:n.tableIDs()])
			if err == nil {
				in, err = n.buildStages(j.obj.Name, in, e.mem)
			}
			if err != nil {
				if in != nil {
					in.Close()
				}
				return nil, err
			}
			if n.parent == nil {
				if err := a.materialize(e, in); err != nil {
					in.Close()
					return nil, fmt.Errorf("materialized view %s: %w", j.obj.Name, err)
				}
				continue
			}
			a.exec = in
			parent := j.frags[n.parent.idx]
			spec := executors.NewDispatcher{Actor: a.id, Fragment: parent.id, Kind: executors.Hash, Mapping: slices.Clone(mappings[n.parent.idx])}
			for _, pa := range sets[n.parent.idx] {
				spec.Outputs = append(spec.Outputs, executors.Output{Actor: pa.id, Node: pa.node})
			}
			d, err := NewDispatcher(a.id, spec, a.k, g.outputFrom(a.id), e.mem)
			if err != nil {
				return nil, fmt.Errorf("materialized view %s: %w", j.obj.Name, err)
			}
			a.disp = append(a.disp, d)
		}
		ids = ids[n.tableIDs():]
	}
	ok = true
	return sets, nil
}

// operator builds the head of actor a (the i-th of fragment f): a scan's merge of its
// upstream's actors and backfill, or an aggregate's or join's merges of its input
// fragments' new actors (sets) and the operator over them, with its state tables (ids).
func (g *graph) operator(j *job, f *fragment, a *actor, i int, sets [][]*actor, ids []uint32) (executors.Executor, error) {
	e := g.e
	o := j.obj
	n := f.pn
	merge := func(from []*actor, s *arrow.Schema) (executors.Executor, error) {
		var inputs []MergeInput
		for _, u := range from {
			in, err := g.inputTo(a.id)(u.id)
			if err != nil {
				return nil, fmt.Errorf("materialized view %s: %w", o.Name, err)
			}
			inputs = append(inputs, in)
		}
		return NewMerge(a.id, s, inputs, g.inputTo(a.id)), nil
	}
	states := func() ([]*storage.StateTable, error) {
		var out []*storage.StateTable
		for k, t := range n.states {
			st, err := storage.NewStateTable(e.nodes[a.node], ids[k], t, a.vnodes)
			if err != nil {
				return nil, fmt.Errorf("materialized view %s: %w", o.Name, err)
			}
			out = append(out, st)
		}
		return out, nil
	}
	switch n.kind {
	case scanNode:
		up := f.up
		from := up.actors
		if n.scan.kind.coLocated() {
			from = up.actors[i : i+1]
		}
		in, err := merge(from, up.obj.t.ArrowSchema())
		if err != nil {
			return nil, err
		}
		return g.backfill(in, a, f, ids[0])
	case aggNode:
		sts, err := states()
		if err != nil {
			return nil, err
		}
		cfg := n.agg
		cfg.State, cfg.Node, cfg.Mem = sts[0], e.nodes[a.node], e.mem
		cfg.MultiSets = sts[1:] // the planner's multiset tables, one per slot
		in, err := merge(sets[n.inputs[0].idx], n.inputs[0].schema)
		if err != nil {
			return nil, err
		}
		h, err := executors.NewHashAgg(in, cfg)
		if err != nil {
			in.Close()
			return nil, fmt.Errorf("materialized view %s: %w", o.Name, err)
		}
		return h, nil
	case joinNode:
		sts, err := states()
		if err != nil {
			return nil, err
		}
		cfg := n.join
		cfg.LeftState, cfg.RightState, cfg.Node, cfg.Mem = sts[0], sts[1], e.nodes[a.node], e.mem
		if e.caches != nil {
			cfg.Cache = e.caches[a.node]
		}
		left, err := merge(sets[n.inputs[0].idx], n.inputs[0].schema)
		if err != nil {
			return nil, err
		}
		right, err := merge(sets[n.inputs[1].idx], n.inputs[1].schema)
		if err != nil {
			left.Close()
			return nil, err
		}
		h, err := executors.NewHashJoin(left, right, cfg)
		if err != nil {
			left.Close()
			right.Close()
			return nil, fmt.Errorf("materialized view %s: %w", o.Name, err)
		}
		return h, nil
	}
	return nil, fmt.Errorf("materialized view %s: unknown node kind %d", o.Name, n.kind)
}

// discard forgets actors that were built and never started, releasing what they hold.
func (g *graph) discard(actors []*actor) {
	for _, a := range actors {
		delete(g.actors, a.id)
		if a.exec != nil {
			a.exec.Close()
		}
		for _, d := range a.disp {
			d.Close()
		}
	}
}

// feedSpecs are the dispatchers that up's actors need towards the actors of scan
// fragment f with mapping.
func feedSpecs(f, up *fragment, actors []*actor, mapping vnode.Mapping) []executors.NewDispatcher {
	var specs []executors.NewDispatcher
	kind := f.pn.scan.kind.dispatcher()
	for i, u := range up.actors {
		spec := executors.NewDispatcher{Actor: u.id, Fragment: f.id, Kind: kind}
		if kind == executors.NoShuffle {
			spec.Outputs = []executors.Output{{Actor: actors[i].id, Node: actors[i].node}}
		} else {
			for _, a := range actors {
				spec.Outputs = append(spec.Outputs, executors.Output{Actor: a.id, Node: a.node})
			}
			spec.Mapping = slices.Clone(mapping)
		}
		specs = append(specs, spec)
	}
	return specs
}

// addView builds a view's job over its upstreams' fragments (not started). When
// connect is set, the upstreams' dispatchers are connected now (at open and recovery);
// otherwise the returned specs must travel in an Add barrier.
func (g *graph) addView(o *object, low *lowered, connect bool) (*job, []executors.NewDispatcher, error) {
	j := &job{obj: o, low: low, built: time.Now()}
	mappings := o.mappings()
	if len(mappings) != len(low.nodes) {
		return nil, nil, fmt.Errorf("materialized view %s: %d fragment mappings for %d plan nodes", o.Name, len(mappings), len(low.nodes))
	}
	for i, n := range low.nodes {
		f := &fragment{id: g.nextFrag, obj: o, job: j, pn: n, mapping: mappings[i]}
		g.nextFrag++
		if n.kind == scanNode {
			up, ok := g.frags[n.scan.upstream.Name]
			if !ok {
				return nil, nil, fmt.Errorf("materialized view %s: upstream %s is not running", o.Name, n.scan.upstream.Name)
			}
			f.up = up
		}
		j.frags = append(j.frags, f)
	}
	nodeOf := func(f *fragment, i int, vnodes *vnode.Bitmap) int {
		if f.pn.kind == scanNode && f.pn.scan.kind.coLocated() {
			return f.up.actors[i].node
		}
		if n, ok := upstreamNode(f, vnodes); ok {
			return n
		}
		return (i + int(f.id)) % len(g.e.nodes)
	}
	sets, err := g.jobActors(j, mappings, o.Parallelism, nodeOf)
	if err != nil {
		return nil, nil, err
	}
	var specs []executors.NewDispatcher
	for i, f := range j.frags {
		f.actors = sets[i]
		if f.up != nil {
			specs = append(specs, feedSpecs(f, f.up, f.actors, f.mapping)...)
		}
	}
	if connect {
		for _, spec := range specs {
			u := g.actors[spec.Actor]
			d, err := NewDispatcher(u.id, spec, u.k, g.outputFrom(u.id), g.e.mem)
			if err != nil {
				return nil, nil, fmt.Errorf("materialized view %s: %w", o.Name, err)
			}
			u.disp = append(u.disp, d)
		}
		specs = nil
	}
	for _, f := range j.scans() {
		f.up.downstream = append(f.up.downstream, f)
	}
	g.frags[o.Name] = j.root()
	g.jobs[o.Name] = j
	return j, specs, nil
}

// backfill is the backfill executor of actor a of scan fragment f over its upstream,
// reading the upstream's change stream from in, with its progress in table progressID.
func (g *graph) backfill(in executors.Executor, a *actor, f *fragment, progressID uint32) (executors.Executor, error) {
	e := g.e
	o := f.obj
	n := f.pn
	up := f.up
	node := e.nodes[a.node]
	prog, err := storage.NewProgressTable(node, progressID, fmt.Sprintf("%s_progress%d", o.Name, n.idx), up.obj.t, a.vnodes)
	if err != nil {
		return in, fmt.Errorf("materialized view %s: %w", o.Name, err)
	}
	bf, err := executors.NewArrangementBackfill(in, executors.BackfillConfig{
		Actor: a.id, Fragment: f.id, Upstream: up.obj.t, UpstreamID: up.obj.ID, S2: n.scan.s2,
		Vnodes: a.vnodes, Node: node, Progress: prog, BatchSize: e.opts.ChunkSize, Workers: e.opts.BackfillWorkers,
		RateLimit: copyLimit(o.RateLimit), Paused: o.Paused, EnginePaused: e.paused, Mem: e.mem,
		BufferBudget: e.opts.BackfillBufferBudget, SpillDir: e.opts.SpillDir,
		NoShuffle:     n.scan.kind.coLocated(),
		LocalUpstream: up.obj.Kind == kindTable && !e.opts.AlwaysReplicate && ownersOn(up, a.vnodes, a.node),
		Pressure:      memoryPressure(node, e.opts.BackfillMemoryBudget),
		Relief:        node.Store().CommitSignal, // a commit frees the epochs it writes
		OnFinishing:   e.backfillFinishing,       // done at the next barrier: inject it now
	})
	if err != nil {
		return in, fmt.Errorf("materialized view %s: %w", o.Name, err)
	}
	a.backfill = bf
	return bf, nil
}

// memoryPressure is a backfill's BackfillConfig.Pressure on node with budget bytes
// (nil when budget is negative: no budget).
func memoryPressure(node *storage.Node, budget int64) func() bool {
	if budget < 0 {
		return nil
	}
	return func() bool { return node.PendingBytes() >= budget }
}

// upstreamNode places a scan fragment's actor that owns vnodes on the node where the
// upstream actors owning most of them run (ties: the lower node), so that its
// backfill reads that node's store instead of replicating the change stream whenever
// the mappings allow (see ownersOn). It reports false for other fragments and for an
// actor with no vnode.
func upstreamNode(f *fragment, vnodes *vnode.Bitmap) (int, bool) {
	if f.pn.kind != scanNode || f.up == nil || vnodes.Len() == 0 {
		return 0, false
	}
	count := map[int]int{}
	for _, u := range f.up.actors {
		if both, err := u.vnodes.And(vnodes); err == nil {
			count[u.node] += both.Len()
		}
	}
	best, most := 0, -1
	for node, n := range count {
		if n > most || (n == most && node < best) {
			best, most = node, n
		}
	}
	return best, most > 0
}

// ownersOn reports whether every actor of up that owns one of vnodes runs on node.
func ownersOn(up *fragment, vnodes *vnode.Bitmap, node int) bool {
	for _, u := range up.actors {
		if u.node != node && u.vnodes.Intersects(vnodes) {
			return false
		}
	}
	return true
}

// inputs lists the graph's DML inputs.
func (g *graph) inputs() []*dmlInput {
	g.e.gmu.RLock()
	defer g.e.gmu.RUnlock()
	ins := make([]*dmlInput, 0, len(g.dml))
	for _, in := range g.dml {
		ins = append(ins, in)
	}
	return ins
}

// teardown stops every actor and releases everything in flight. A second call does
// nothing.
func (g *graph) teardown() { g.down.Do(g.stop) }

func (g *graph) stop() {
	close(g.dead)
	g.cancel()
	if g.ctl != nil {
		defer g.ctl.Close() // after the actors: their last reports fail, not hang
	}
	ins := g.inputs()
	for _, in := range ins {
		in.mu.Lock() // writers see dead and leave
	}
	g.wg.Wait()
	for _, in := range ins {
		drainNow(in.c)
		in.mu.Unlock()
	}
	g.mu.Lock()
	for _, l := range g.edges {
		l.discard()
	}
	g.mu.Unlock()
}
