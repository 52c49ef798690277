package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
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

// actor is the coordinator's placement of an actor: what runs it is its node's
// (nodeActor, node.go).
type actor struct {
	id     executors.ActorID
	frag   *fragment
	node   int
	vnodes *vnode.Bitmap
	// progress is the backfill progress the actor reported last (zero until its
	// first report), all the coordinator knows of it.
	progress executors.BackfillStats
}

// report is what an actor tells the coordinator: it passed barrier epoch on, or failed.
type report struct {
	actor    executors.ActorID
	epoch    executors.Epoch
	err      error
	backfill *executors.BackfillStats // a backfill actor's progress as it passed the barrier
	pending  int64                    // its node's uncommitted bytes then (ControlReport.Pending)
}

// dmlInput is the channel into a table's DML actor.
type dmlInput struct {
	mu    sync.RWMutex // writers hold it shared while sending; teardown exclusively
	c     chan executors.Message
	t     *schema.Table
	node  int               // the node of its DML actor
	actor executors.ActorID // its DML actor
	ready atomic.Bool       // set once the table's first barrier is through

	// slot is a lock that a select can wait on, held across every send into c so
	// that log and marks follow c's order (dmllog.go); they are guarded by it.
	slot  chan struct{}
	log   []dmlWrite // the chunks sent and not yet committed
	marks []dmlMark  // the barriers sent after them
	// committed is the Curr of the last checkpoint barrier committed: the log
	// drops what went before it when the slot is next taken (the coordinator
	// never waits for the slot, which a writer may hold while the input is full).
	committed atomic.Uint64
}

type edge struct{ from, to executors.ActorID }

type graph struct {
	e      *Engine
	ctx    context.Context
	cancel context.CancelFunc
	dead   chan struct{} // closed at teardown
	down   sync.Once     // teardown runs once (a failed recovery, then Close)

	// actors are the coordinator's placements (under e.mu, as the rest below).
	actors map[executors.ActorID]*actor
	nodes  []*nodeSide          // each node's side, by node
	frags  map[string]*fragment // tables' fragments and views' root fragments, by object name
	jobs   map[string]*job      // views, by name
	dml    map[string]*dmlInput // by table name, guarded by e.gmu

	generation uint64 // see ExchangeEdge.Generation
	nextActor  executors.ActorID
	nextFrag   executors.FragmentID
	reports    chan report
	ctl        ControlGraph // nil: reports are channel sends
	// pending is, by node, the uncommitted bytes its last report of a barrier
	// since the last checkpoint gave (the coordinator's only view of them).
	pending []int64
	// downNodes are the remote nodes the graph's control has no stream of
	// (ControlDown): nothing is placed on them.
	downNodes map[int]bool
}

func newGraph(e *Engine) *graph {
	ctx, cancel := context.WithCancel(e.labels)
	// Above the last one's, and the wall clock's: a graph of an engine reopened on
	// the directory (in this process or another) never takes an earlier one's.
	e.generation = max(e.generation+1, uint64(time.Now().UnixNano()))
	g := &graph{
		e: e, ctx: ctx, cancel: cancel, dead: make(chan struct{}), generation: e.generation,
		actors: map[executors.ActorID]*actor{},
		frags:  map[string]*fragment{}, jobs: map[string]*job{}, dml: map[string]*dmlInput{},
		nextActor: 1, nextFrag: 1, reports: make(chan report, 4096), downNodes: map[int]bool{},
	}
	for i := range e.nodes {
		var side *nodeSide // nil: the node's side is in its compute process
		if !e.remote(i) {
			side = newNodeSide(g.nodeEnv(i))
		}
		g.nodes = append(g.nodes, side)
	}
	g.pending = make([]int64, len(e.nodes))
	return g
}

func (g *graph) newActorID() executors.ActorID {
	id := g.nextActor
	g.nextActor++
	return id
}

// addTable places a table's DML and table actors and has their nodes build them (not
// started).
func (g *graph) addTable(o *object) (*fragment, error) {
	e := g.e
	f := &fragment{id: g.nextFrag, obj: o, mapping: vnode.Mapping(o.Mapping)}
	g.nextFrag++
	bitmaps := f.mapping.Bitmaps(o.Parallelism)
	regular := e.nodesOf("")
	for i := 0; i < o.Parallelism; i++ {
		a := &actor{id: g.newActorID(), frag: f, node: regular[i%len(regular)], vnodes: bitmaps[i]}
		f.actors = append(f.actors, a)
	}
	// The DML actor: its input is the writers' channel.
	dml := &actor{id: g.newActorID(), frag: f, node: e.dmlNode()}
	f.dml = dml
	g.actors[dml.id] = dml
	for _, a := range f.actors {
		g.actors[a.id] = a
	}
	all := append([]*actor{dml}, f.actors...)
	ok := false
	defer func() {
		if !ok {
			g.discard(all)
		}
	}()
	outs := make([]executors.Output, len(f.actors))
	for i, a := range f.actors {
		outs[i] = executors.Output{Actor: a.id, Node: a.node}
	}
	b := g.newSpecs()
	b.add(dml.node, actorSpec{ID: dml.id, Fragment: f.id, Role: roleDML, Object: o.Name, Dispatchers: []executors.NewDispatcher{
		{Actor: dml.id, Fragment: f.id, Kind: executors.Hash, Outputs: outs, Mapping: slices.Clone(vnode.Mapping(o.Mapping))},
	}}, nil, o)
	for _, a := range f.actors {
		b.add(a.node, actorSpec{ID: a.id, Fragment: f.id, Role: roleTable, Object: o.Name, Inputs: [][]executors.Output{{{Actor: dml.id, Node: dml.node}}}}, a.vnodes, o)
	}
	if err := b.run(); err != nil {
		return nil, fmt.Errorf("table %s: %w", o.Name, err)
	}
	ok = true
	g.frags[o.Name] = f
	return f, nil
}

// placedAt lists actors with their nodes.
func placedAt(actors []*actor) []executors.Output {
	outs := make([]executors.Output, len(actors))
	for i, a := range actors {
		outs[i] = executors.Output{Actor: a.id, Node: a.node}
	}
	return outs
}

// jobActors places a new set of actors for every fragment of job j, p per fragment,
// with the mappings given (one per fragment) and nodeOf placing actor i of a fragment,
// and has their nodes build them. Within the job the actors are connected (each
// non-root actor hash-dispatches to its parent fragment's new actors), and each new
// root actor gets the dispatchers feeds returns (feeds may be nil); they are not
// started, and the scan actors are not yet fed by their upstreams: the caller connects
// the upstreams' dispatchers, directly or through an Add or Update barrier.
func (g *graph) jobActors(j *job, mappings []vnode.Mapping, p int, nodeOf func(f *fragment, i int, vnodes *vnode.Bitmap) int, feeds func(root *actor) []executors.NewDispatcher) ([][]*actor, error) {
	e := g.e
	sets := make([][]*actor, len(j.frags))
	for fi, f := range j.frags {
		bitmaps := mappings[fi].Bitmaps(p)
		for i := 0; i < p; i++ {
			a := &actor{id: g.newActorID(), frag: f, node: nodeOf(f, i, bitmaps[i]), vnodes: bitmaps[i]}
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
	objs := []*object{j.obj}
	for _, f := range j.scans() {
		objs = append(objs, f.up.obj)
	}
	b := g.newSpecs()
	ids := j.obj.StateIDs
	for fi, f := range j.frags {
		n := f.pn
		for i, a := range sets[fi] {
			s := actorSpec{ID: a.id, Fragment: f.id, Role: roleView, Object: j.obj.Name, PlanNode: n.idx, States: slices.Clone(ids[:n.tableIDs()])}
			switch n.kind {
			case scanNode:
				up := f.up
				from := up.actors
				if n.scan.kind.coLocated() {
					from = up.actors[i : i+1]
				}
				s.Inputs = [][]executors.Output{placedAt(from)}
				s.LocalUpstream = up.obj.Kind == kindTable && !e.opts.AlwaysReplicate && ownersOn(up, a.vnodes, a.node)
			default:
				for _, in := range n.inputs {
					s.Inputs = append(s.Inputs, placedAt(sets[in.idx]))
				}
			}
			if n.parent != nil {
				spec := executors.NewDispatcher{Actor: a.id, Fragment: j.frags[n.parent.idx].id, Kind: executors.Hash, Mapping: slices.Clone(mappings[n.parent.idx])}
				for _, pa := range sets[n.parent.idx] {
					spec.Outputs = append(spec.Outputs, executors.Output{Actor: pa.id, Node: pa.node})
				}
				s.Dispatchers = []executors.NewDispatcher{spec}
			} else if feeds != nil {
				s.Dispatchers = feeds(a)
			}
			b.add(a.node, s, a.vnodes, objs...)
		}
		ids = ids[n.tableIDs():]
	}
	if err := b.run(); err != nil {
		return nil, fmt.Errorf("materialized view %s: %w", j.obj.Name, err)
	}
	ok = true
	return sets, nil
}

// discard has the nodes of actors, placed and never started, drop what they built
// of them, and forgets them. A node that cannot be reached (its stream is lost)
// drops them when the graph is torn down, which the lost stream brings about.
func (g *graph) discard(actors []*actor) {
	b := g.newSpecs()
	for _, a := range actors {
		b.drop(a)
	}
	if err := b.run(); err != nil {
		g.e.log.Warn("discarding actors not started", "error", err)
	}
	for _, a := range actors {
		delete(g.actors, a.id)
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
		return g.e.viewNode(o.Role, f, i, int(f.id), func() (int, bool) { return upstreamNode(f, vnodes) })
	}
	sets, err := g.jobActors(j, mappings, o.Parallelism, nodeOf, nil)
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
		// The upstreams' actors are built and not started (at open and recovery):
		// their nodes add the dispatchers.
		// A node that fails adds none of its spec's; a recovery that fails here
		// fails the engine, whose teardown drops those another node added.
		b := g.newSpecs()
		for _, spec := range specs {
			u := g.actors[spec.Actor]
			b.add(u.node, actorSpec{ID: u.id, Fragment: u.frag.id, Role: roleFeed, Object: u.frag.obj.Name, Dispatchers: []executors.NewDispatcher{spec}}, nil, u.frag.obj)
		}
		if err := b.run(); err != nil {
			for _, set := range sets {
				g.discard(set)
			}
			return nil, nil, fmt.Errorf("materialized view %s: %w", o.Name, err)
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
	for _, n := range g.nodes {
		if n != nil {
			n.halt()
		}
	}
	for _, n := range g.nodes {
		if n != nil {
			n.release()
		}
	}
	for _, in := range ins {
		drainNow(in.c)
		in.mu.Unlock()
	}
}
