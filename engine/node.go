package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// A node's side of a graph: the actors the node built from its build specs, and
// their goroutines. The coordinator only places actors (graph.go); everything an
// actor runs (its executors, dispatchers, status and goroutine) is its node's, as it
// is a compute process's in cluster mode. In one process every node of a graph has
// its side, which the node's control stream (or, without a Control, the
// coordinator) hands each spec.

// nodeEnv is what a node's side of a graph takes from the process it runs in: in the
// engine's process the graph supplies it (graph.nodeEnv); a compute process would
// supply its own. Nothing else of the coordinator's reaches a node's side.
type nodeEnv struct {
	ctx        context.Context // the graph's: cancelled when the graph is torn down
	generation uint64          // the graph's, which names its edges
	node       int
	store      *storage.Node         // the node's store
	cache      *executors.StateCache // the node's budget of cached operator state (nil: none)
	mem        memory.Allocator
	opts       *Options // the node's settings: channel capacity, chunk size, the backfills' workers and budgets
	exchange   Exchange // nil: every edge is a channel, the nodes' sides in one process
	// hold has the node's store hold the committed data of the vnodes of needs (per
	// table), before the actors that read them start (NodeServer.Hold); nil when
	// the store holds every vnode.
	hold func(ctx context.Context, needs map[uint32]*vnode.Bitmap) error
	// peers are the nodes' sides in this process, by node (nil: none but this
	// one): an edge between two nodes without an exchange is a channel held by
	// the receiving node's side.
	peers func() []*nodeSide
	// report hands an actor's report to the coordinator; finishing tells it that a
	// backfill read its whole snapshot.
	report    func(a *nodeActor, r report) error
	finishing func(a *nodeActor)
	// addDML and dropDML keep the table of the DML actors' inputs that the
	// writers send into.
	addDML  func(ins []*dmlInput)
	dropDML func(actor executors.ActorID)
}

// nodeSide is one node's side of one graph.
type nodeSide struct {
	env  nodeEnv
	node int
	wg   sync.WaitGroup // the actors' goroutines

	mu     sync.Mutex // guards actors and dead
	actors map[executors.ActorID]*nodeActor
	dead   bool // torn down: no spec is applied any more

	lmu   sync.Mutex // guards links
	links map[edge]*link
}

func newNodeSide(env nodeEnv) *nodeSide {
	return &nodeSide{env: env, node: env.node, actors: map[executors.ActorID]*nodeActor{}, links: map[edge]*link{}}
}

// nodeActor is an actor as its node built it: a chain of executors whose output goes
// through its dispatchers.
type nodeActor struct {
	id     executors.ActorID
	obj    string // the object it runs, for errors and profiles
	node   int
	vnodes *vnode.Bitmap
	exec   executors.Executor
	disp   []Dispatcher
	k      vec.Kernels // kernels of the rows the actor emits
	// backfill is a view actor's backfill executor: the actor reports its progress
	// with every barrier it passes.
	backfill *executors.ArrangementBackfill
	// started is set when the actor's goroutine is started: no spec builds more
	// of it, or drops it.
	started bool
	// status is what the actor is doing (for the warning about a stalled barrier).
	status actorStatus
}

// close releases what an actor not started holds.
func (a *nodeActor) close() {
	if a.exec != nil {
		a.exec.Close()
	}
	for _, d := range a.disp {
		d.Close()
	}
	a.exec, a.disp, a.backfill, a.k = nil, nil, nil, nil
}

// apply is the node's side of a build spec (ControlNode.Build): it builds its Actors
// from the spec alone (and the node's store), then starts its Start, all of it or
// none (on an error, the actors it built are dropped and the dispatchers it added are
// closed again); or it drops the spec's Drop.
func (n *nodeSide) apply(ctx context.Context, data []byte) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("node %d: %w", n.node, err)
		}
	}()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	spec, objs, vnodes, err := decodeBuildSpec(data)
	if err != nil {
		return err
	}
	if spec.Node != n.node {
		return fmt.Errorf("build spec: for node %d", spec.Node)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dead {
		return fmt.Errorf("build: the graph of generation %d is torn down", n.env.generation)
	}
	// Checked before anything changes, so that a refused spec changes nothing.
	for _, id := range spec.Drop {
		if a := n.actors[id]; a != nil && a.started {
			return fmt.Errorf("drop actor %d (%s): it runs", id, a.obj)
		}
	}
	for _, id := range spec.Drop {
		if a := n.actors[id]; a != nil {
			n.forgetLinks(id, true) // first: see nodeBuild.undo
			a.close()
			delete(n.actors, id)
			n.env.dropDML(id)
		}
	}
	nb := &nodeBuild{n: n, objs: objs, lows: map[string]*lowered{}, paused: spec.Paused}
	defer func() {
		if err != nil {
			nb.undo()
		}
	}()
	for i, s := range spec.Actors {
		if err := nb.actor(s, vnodes[i]); err != nil {
			return fmt.Errorf("build actor %d (%s of %s): %w", s.ID, s.Role, s.Object, err)
		}
	}
	if err := nb.hold(ctx); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	var start []*nodeActor
	for _, id := range spec.Start {
		a := n.actors[id]
		switch {
		case a == nil:
			return fmt.Errorf("start actor %d: the node has no such actor", id)
		case a.started:
			return fmt.Errorf("start actor %d (%s): it runs already", id, a.obj)
		case slices.Contains(start, a):
			return fmt.Errorf("start actor %d (%s): twice", id, a.obj)
		}
		start = append(start, a)
	}
	if len(nb.dml) > 0 {
		n.env.addDML(nb.dml)
	}
	for _, a := range start {
		a.started = true
		n.wg.Add(1)
		go n.run(a)
	}
	return nil
}

// forget removes actor id, stopped or dropped, and its sides of its edges (an actor
// that failed keeps them until the graph is torn down: its upstreams may still send
// into them); a second call does nothing.
func (n *nodeSide) forget(id executors.ActorID) {
	n.mu.Lock()
	_, ok := n.actors[id]
	delete(n.actors, id)
	n.mu.Unlock()
	if ok {
		n.forgetLinks(id, false)
	}
}

// status is what actor id is doing, or nil when the node does not run it.
func (n *nodeSide) status(id executors.ActorID) *actorStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a := n.actors[id]; a != nil && a.started {
		return &a.status
	}
	return nil
}

// halt ends the node's side once the graph's context is cancelled: it applies no
// spec after, and waits for its actors' goroutines.
func (n *nodeSide) halt() {
	n.mu.Lock()
	n.dead = true
	n.mu.Unlock()
	n.wg.Wait()
}

// release releases the actors that were built and never started, and what the
// node's edges still buffer, once every node is halted (no actor sends any more).
func (n *nodeSide) release() {
	n.mu.Lock()
	for id, a := range n.actors {
		if !a.started {
			a.close()
		}
		delete(n.actors, id)
	}
	n.mu.Unlock()
	n.discardLinks()
}

// nodeEnv is the environment of node's side of g, in the engine's process.
func (g *graph) nodeEnv(node int) nodeEnv {
	e := g.e
	env := nodeEnv{
		ctx: g.ctx, generation: g.generation, node: node, store: e.nodes[node], mem: e.mem, opts: &e.opts, exchange: e.opts.Exchange,
		peers:  func() []*nodeSide { return g.nodes },
		report: g.report, finishing: g.finishing, addDML: g.addDML, dropDML: g.forgetDML,
	}
	if e.caches != nil {
		env.cache = e.caches[node]
	}
	if ns, ok := e.opts.CommitLog.(NodeServer); ok && node < len(e.nodeStores) && e.nodeStores[node] != nil {
		store := e.nodeStores[node]
		env.hold = func(ctx context.Context, needs map[uint32]*vnode.Bitmap) error {
			return ns.Hold(ctx, node, store, needs)
		}
	}
	return env
}

// addDML adds DML inputs to the writers' table.
func (g *graph) addDML(ins []*dmlInput) {
	g.e.gmu.Lock()
	defer g.e.gmu.Unlock()
	for _, in := range ins {
		g.dml[in.t.Name] = in
	}
}

// forgetDML removes the DML input of actor id from the writers' table, if it has one.
func (g *graph) forgetDML(id executors.ActorID) {
	g.e.gmu.Lock()
	defer g.e.gmu.Unlock()
	for name, in := range g.dml {
		if in.actor == id {
			delete(g.dml, name)
		}
	}
}

// buildAt hands spec to node's side (ControlNode.Build).
func (g *graph) buildAt(ctx context.Context, node int, spec []byte) error {
	if node < 0 || node >= len(g.nodes) {
		return fmt.Errorf("node %d: build: the engine has nodes 0 to %d", node, len(g.nodes)-1)
	}
	if g.nodes[node] == nil {
		return fmt.Errorf("node %d: build: its side runs in another process, reached through the control", node)
	}
	return g.nodes[node].apply(ctx, spec)
}
