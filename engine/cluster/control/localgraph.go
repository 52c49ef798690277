package control

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
)

// The control of one graph of a Local: the requests sent to its nodes and waiting
// for their answers, each node's loss, and the engine.ControlGraph methods.

// localGraph is the control of one graph.
type localGraph struct {
	l      *Local
	gen    uint64
	nodes  []*Node
	incs   []uint64
	side   engine.ControlNode
	wg     sync.WaitGroup     // the nodes' Serve goroutines (localside.go)
	cancel context.CancelFunc // ends their builds and injections

	mu     sync.RWMutex // deliveries hold it shared; Close exclusively
	closed bool

	down []int // the remote nodes without a stream when the graph opened

	pmu      sync.Mutex
	rejoined map[int]bool       // the down nodes whose return was delivered
	pending  map[uint64]pending // the builds and calls sent and not answered, by id
	lost     []error            // each node's loss, once its stream is lost
	ended    error              // set by Close
}

// pending is a build or a call waiting for its node's answer.
type pending struct {
	node int
	kind Kind        // KindBuildActors or KindCall: what only a Built or an Answer ends
	done chan result // buffered: one answer
}

// result is the answer to a build (err) or a call (payload or err).
type result struct {
	payload []byte
	err     error
}

// await registers a request of kind to node under a new id, whose answer done takes.
// It fails when the node's stream is lost or the graph's control is closed.
func (g *localGraph) await(kind Kind, node int) (id uint64, done chan result, err error) {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	if g.ended != nil {
		return 0, nil, g.ended
	}
	if g.lost[node] != nil {
		return 0, nil, g.lost[node]
	}
	id = g.l.ids.Add(1)
	done = make(chan result, 1)
	g.pending[id] = pending{node: node, kind: kind, done: done}
	return id, done, nil
}

// answer ends the pending request id of kind with r; an id of no pending request
// (a caller that gave up, or of the other kind) is ignored.
func (g *localGraph) answer(kind Kind, id uint64, r result) {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	if p, ok := g.pending[id]; ok && p.kind == kind {
		p.done <- r
		delete(g.pending, id)
	}
}

// forget drops the pending request id, whose caller gives up on it.
func (g *localGraph) forget(id uint64) {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	delete(g.pending, id)
}

// lose marks node's stream lost for err: every request pending at node fails with
// it, and so does every later one. It reports false when the stream was lost
// already.
func (g *localGraph) lose(node int, err error) bool {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	if g.lost[node] != nil {
		return false
	}
	g.lost[node] = err
	for id, p := range g.pending {
		if p.node == node {
			p.done <- result{err: err}
			delete(g.pending, id)
		}
	}
	return true
}

// loseStream delivers the loss of node i's stream of incarnation inc, for why, once,
// if that is the stream the graph uses.
func (g *localGraph) loseStream(i int, inc uint64, why error) {
	if g.incs[i] != inc {
		return
	}
	lost := fmt.Errorf("control: %s (incarnation %d) lost its stream: %w: %w", g.l.nameOf(i), inc, engine.ErrNodeLost, why)
	if !g.lose(i, lost) {
		return
	}
	if g.send(engine.ControlReport{Err: lost}) {
		g.l.lost.Add(1)
	}
}

// lostErr is node's loss, or nil.
func (g *localGraph) lostErr(node int) error {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	return g.lost[node]
}

// send delivers r unless the graph is closed, and reports whether it did.
func (g *localGraph) send(r engine.ControlReport) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return false
	}
	g.side.Deliver(r)
	return true
}

// Build implements engine.ControlGraph: a BuildActors frame to node's stream, and the
// error of the Built frame that answers it.
func (g *localGraph) Build(ctx context.Context, node int, spec []byte) error {
	if node < 0 || node >= len(g.nodes) {
		return fmt.Errorf("control: build at node %d: the graph has nodes 0 to %d", node, len(g.nodes)-1)
	}
	id, done, err := g.await(KindBuildActors, node)
	if err != nil {
		return fmt.Errorf("control: build at %s: %w", g.l.nameOf(node), err)
	}
	if err := g.sendTo(ctx, node, BuildActors{ID: id, SpecVersion: engine.BuildSpecVersion, Spec: spec}); err != nil {
		g.forget(id)
		return fmt.Errorf("control: build %d at %s: %w", id, g.l.nameOf(node), err)
	}
	select {
	case r := <-done:
		return r.err
	case <-ctx.Done():
		g.forget(id)
		return fmt.Errorf("control: build %d at %s: %w", id, g.l.nameOf(node), ctx.Err())
	}
}

// Inject implements engine.ControlGraph: an Inject frame to node's stream.
func (g *localGraph) Inject(ctx context.Context, node int, b *executors.Barrier) error {
	if node < 0 || node >= len(g.nodes) {
		return fmt.Errorf("control: inject barrier %d at node %d: the graph has nodes 0 to %d", b.Curr, node, len(g.nodes)-1)
	}
	if err := g.sendTo(ctx, node, Inject{Barrier: b}); err != nil {
		return fmt.Errorf("control: inject barrier %d at %s: %w", b.Curr, g.l.nameOf(node), err)
	}
	return nil
}

// Call implements engine.ControlGraph: a Call frame to node's stream, and the payload
// or the error of the Answer frame that answers it. While it waits, a loss of the
// node's stream fails it with an error that wraps engine.ErrNodeLost, and the end
// of ctx with ctx's error (a late answer is dropped).
func (g *localGraph) Call(ctx context.Context, node int, req []byte) ([]byte, error) {
	if node < 0 || node >= len(g.nodes) {
		return nil, fmt.Errorf("control: call at node %d: the graph has nodes 0 to %d", node, len(g.nodes)-1)
	}
	id, done, err := g.await(KindCall, node)
	if err != nil {
		return nil, fmt.Errorf("control: call at %s: %w", g.l.nameOf(node), err)
	}
	if err := g.sendTo(ctx, node, Call{ID: id, Payload: req}); err != nil {
		g.forget(id)
		return nil, fmt.Errorf("control: call %d at %s: %w", id, g.l.nameOf(node), err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("control: call %d at %s: %w", id, g.l.nameOf(node), r.err)
		}
		return r.payload, nil
	case <-ctx.Done():
		g.forget(id)
		return nil, fmt.Errorf("control: call %d at %s: %w", id, g.l.nameOf(node), ctx.Err())
	}
}

// maxStamp is the stamp of the longest encoding.
var maxStamp = Stamp{Term: math.MaxUint64, Generation: math.MaxUint64, Incarnation: math.MaxUint64}

// sendTo sends m to node's stream. It fails with an error that wraps
// engine.ErrNodeLost when the stream is lost (or was), with ctx's error when ctx
// ends first, and with the encoder's error when m does not encode, whatever its
// stamp: the one failure of Coordinator.Send that is no stream's loss, ruled out
// before it.
func (g *localGraph) sendTo(ctx context.Context, node int, m Message) error {
	if err := g.lostErr(node); err != nil {
		return err
	}
	probe, err := withStamp(m, maxStamp)
	if err == nil {
		_, err = AppendFrame(nil, probe)
	}
	if err != nil {
		return err
	}
	err = g.l.coord.Send(ctx, g.l.nameOf(node), m)
	if err == nil || ctx.Err() != nil {
		return err
	}
	if lost := g.lostErr(node); lost != nil {
		return lost
	}
	return fmt.Errorf("%w: %w", engine.ErrNodeLost, err)
}

// Report implements engine.ControlGraph.
func (g *localGraph) Report(ctx context.Context, node int, r engine.ControlReport) error {
	if node < 0 || node >= len(g.nodes) {
		return fmt.Errorf("control: report of actor %d from node %d: the graph has nodes 0 to %d", r.Actor, node, len(g.nodes)-1)
	}
	n := g.nodes[node]
	if n == nil {
		return fmt.Errorf("control: report of actor %d from node %d: the node is remote and reports over its own stream", r.Actor, node)
	}
	return n.Report(ctx, g.gen, r)
}

// Close implements engine.ControlGraph: it closes the graph's streams, and nothing
// is delivered after it returns.
func (g *localGraph) Close() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	g.mu.Unlock()
	g.pmu.Lock()
	g.ended = errors.New("control: the graph's control is closed")
	for id, p := range g.pending {
		p.done <- result{err: g.ended}
		delete(g.pending, id)
	}
	g.pmu.Unlock()
	g.cancel()
	for i, n := range g.nodes {
		if n != nil {
			n.Close()
		} else if g.l.remote[i] && g.incs[i] != 0 && g.lostErr(i) == nil {
			// A remote node keeps its stream: it tears the graph down on a
			// Teardown frame (or at the next graph's first message).
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = g.l.coord.Send(ctx, g.l.nameOf(i), Teardown{Generation: g.gen})
			cancel()
		}
	}
	g.wg.Wait()
	g.l.mu.Lock()
	if g.l.graph == g {
		g.l.graph = nil
	}
	g.l.mu.Unlock()
}
