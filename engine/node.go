package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"

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

// nodeSide is one node's side of one graph.
type nodeSide struct {
	g    *graph
	node int
	wg   sync.WaitGroup // the actors' goroutines

	mu     sync.Mutex // guards actors and dead
	actors map[executors.ActorID]*nodeActor
	dead   bool // torn down: no spec is applied any more

	lmu   sync.Mutex // guards links
	links map[edge]*link
}

func newNodeSide(g *graph, node int) *nodeSide {
	return &nodeSide{g: g, node: node, actors: map[executors.ActorID]*nodeActor{}, links: map[edge]*link{}}
}

// nodeActor is an actor as its node built it: a chain of executors whose output goes
// through its dispatchers.
type nodeActor struct {
	id     executors.ActorID
	frag   executors.FragmentID
	obj    string // the object it runs, for errors and profiles
	node   int
	store  *storage.Node // the node's store: its uncommitted bytes go with every report
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

// apply is the node's side of a build spec (ControlNode.Build): it drops the spec's
// Drop, builds its Actors from the spec alone (and the node's store), then starts its
// Start. It does all of it or none: on an error, the actors it built are dropped and
// the dispatchers it added are closed again.
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
	g := n.g
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dead {
		return fmt.Errorf("build: the graph of generation %d is torn down", g.generation)
	}
	// Checked before anything changes, so that a refused spec changes nothing.
	for _, id := range spec.Drop {
		if a := n.actors[id]; a != nil && a.started {
			return fmt.Errorf("drop actor %d (%s): it runs", id, a.obj)
		}
	}
	for _, id := range spec.Drop {
		if a := n.actors[id]; a != nil {
			a.close()
			delete(n.actors, id)
			n.forgetLinks(id, true)
			g.forgetDML(id)
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
		g.e.gmu.Lock()
		for _, in := range nb.dml {
			g.dml[in.t.Name] = in
		}
		g.e.gmu.Unlock()
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

// has reports whether the node has actor id (built, started or not).
func (n *nodeSide) has(id executors.ActorID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.actors[id] != nil
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
	return g.nodes[node].apply(ctx, spec)
}
