package control

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"google.golang.org/grpc"
)

// Local is an engine.Control for the nodes of one engine: a Coordinator served on a
// loopback port and, for each graph the engine builds, one control stream per node,
// so that every node's actors are built from a BuildActors frame (answered by a Built
// frame), every barrier travels to the nodes that hold the sources as an Inject frame,
// every actor's report back as a Collected or Failed frame, and every request of the
// commit log to a node as a Call frame (answered by an Answer frame), each stamped
// with the term, the graph's generation and the node's incarnation and checked as a
// node's in another process would be. Each graph connects every node anew, with a
// new incarnation: the streams of an old graph are replaced, and nothing of them
// reaches the new one. A lost stream is delivered to the engine as its node's
// failure, which fails the round; that failure, and every Build, Inject and Call of
// the node that fails for it, wraps engine.ErrNodeLost.
//
// A Local made by NewCluster also serves remote nodes (engine.Options.RemoteNodes):
// compute processes that open their streams themselves (Connect, then Serve with
// their engine.Host) and keep them across graphs. Each graph uses the stream a
// remote node has when the graph opens (waiting for it), and tears the graph down
// on it with a Teardown frame when it closes.
//
// Lose ends a node's stream, for fault injection.
type Local struct {
	coord *Coordinator
	srv   *grpc.Server
	addr  string
	term  uint64

	remote      map[int]bool // the remote nodes
	roles       []string     // the engine's node roles
	registry    Registry     // checks the remote nodes' incarnations (nil: any)
	wait, grace time.Duration
	opened      bool // a graph has opened: the next ones wait grace, not wait

	served, looped chan struct{}

	mu    sync.Mutex
	graph *localGraph
	incs  map[string]uint64 // the registry of this process's nodes: each one's current incarnation
	inc   uint64

	lost      atomic.Int64
	injected  atomic.Int64
	built     atomic.Int64
	finishing atomic.Int64
	calls     atomic.Int64
	ids       atomic.Uint64 // the last request id, of a BuildActors or a Call
}

// ClusterConfig configures NewCluster.
type ClusterConfig struct {
	// Listen is the coordinator's listen address ("": 127.0.0.1:0).
	Listen string
	// Term is the leader's term (0: 1).
	Term uint64
	// Remote are the nodes served by compute processes, which connect as
	// "node-<i>" (NodeName).
	Remote []int
	// Registry checks a remote node's incarnation when it connects (nil: any).
	Registry Registry
	// Wait bounds how long the first graph waits for every remote node's stream
	// when it opens (0: one minute); a node still missing then fails the open.
	Wait time.Duration
	// Roles are the engine's node roles (engine.Options.NodeRoles: node i's role,
	// "" past the end): a remote node whose hello gives another role is not taken
	// (the first graph fails to open, naming both; a later one leaves it down).
	Roles []string
	// Grace bounds how long a later graph (a recovery's) waits for a remote node's
	// stream (0: five seconds); a node still missing then is down in that graph
	// (engine.ControlDown): nothing is placed on it, and its stream's return fails
	// the round, so that the next recovery places actors on it again.
	Grace time.Duration
}

// NewLocal starts a Local's coordinator on 127.0.0.1. Close stops it.
func NewLocal() (*Local, error) { return NewCluster(ClusterConfig{}) }

// NewCluster starts a Local's coordinator on cfg.Listen, whose cfg.Remote nodes are
// compute processes. Close stops it.
func NewCluster(cfg ClusterConfig) (*Local, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Term == 0 {
		cfg.Term = 1
	}
	if cfg.Wait == 0 {
		cfg.Wait = time.Minute
	}
	if cfg.Grace == 0 {
		cfg.Grace = 5 * time.Second
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("control: listen on %s: %w", cfg.Listen, err)
	}
	l := &Local{addr: lis.Addr().String(), term: cfg.Term, incs: map[string]uint64{}, served: make(chan struct{}), looped: make(chan struct{}),
		remote: map[int]bool{}, roles: cfg.Roles, registry: cfg.Registry, wait: cfg.Wait, grace: cfg.Grace}
	for _, n := range cfg.Remote {
		l.remote[n] = true
	}
	l.coord = NewCoordinator(Config{Term: l.term, Registry: (*localRegistry)(l), EventBuffer: 256})
	l.srv = grpc.NewServer(ServerOptions()...)
	l.coord.Register(l.srv)
	go func() {
		defer close(l.served)
		_ = l.srv.Serve(lis)
	}()
	go l.events()
	return l, nil
}

// localRegistry is a Local's registry of incarnations.
type localRegistry Local

// CheckIncarnation implements Registry: a remote node's incarnation is the
// cluster's registry's to check, this process's nodes' the Local's own.
func (r *localRegistry) CheckIncarnation(ctx context.Context, node string, inc uint64) error {
	i, ok := nodeIndex(node)
	if !ok {
		return fmt.Errorf("node %q: not a node of this engine", node)
	}
	if node != (*Local)(r).nameOf(i) {
		if !r.remote[i] && node == ComputeName(i) {
			return fmt.Errorf("node %q: node %d of this engine is not a compute node (the compute nodes are %v)", node, i, r.remoteNodes())
		}
		return fmt.Errorf("node %q: node %d's stream is %q", node, i, (*Local)(r).nameOf(i))
	}
	if r.remote[i] {
		if r.registry == nil {
			return nil
		}
		return r.registry.CheckIncarnation(ctx, node, inc)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.incs[node]; cur == 0 || cur != inc {
		return fmt.Errorf("node %q: incarnation %d is not its current one, %d", node, inc, cur)
	}
	return nil
}

// remoteNodes lists the remote nodes, in order.
func (r *localRegistry) remoteNodes() []int {
	var out []int
	for n := range r.remote {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Addr is the coordinator's address.
func (l *Local) Addr() string { return l.addr }

// Lost counts the lost streams delivered to the engine as failures.
func (l *Local) Lost() int64 { return l.lost.Load() }

// Injected counts the barriers the nodes took from their streams and injected at
// their sources.
func (l *Local) Injected() int64 { return l.injected.Load() }

// Built counts the build specs the nodes took from their streams and built.
func (l *Local) Built() int64 { return l.built.Load() }

// Calls counts the calls the nodes took from their streams and answered.
func (l *Local) Calls() int64 { return l.calls.Load() }

// Finishings counts the backfills whose Finishing frame (a snapshot read to its end:
// inject the next barrier now) reached the coordinator.
func (l *Local) Finishings() int64 { return l.finishing.Load() }

// Refusals counts the frames the coordinator refused for their stamps.
func (l *Local) Refusals() uint64 { return l.coord.Refusals() }

// nameOf is node i's stream's name: "node-<i>" for a node of this process,
// ComputeName(i) for a remote one.
func (l *Local) nameOf(i int) string {
	if l.remote[i] {
		return ComputeName(i)
	}
	return "node-" + strconv.Itoa(i)
}

// ComputeName is the name of remote node i, a compute process, in the meta store's
// registry and on its control stream: "compute-<i>" (the committing process
// registers as "node-<n>").
func ComputeName(i int) string { return "compute-" + strconv.Itoa(i) }

// nodeIndex is the node a stream's name names.
func nodeIndex(name string) (int, bool) {
	for _, prefix := range []string{"node-", "compute-"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			i, err := strconv.Atoi(rest)
			return i, err == nil && i >= 0 && prefix+strconv.Itoa(i) == name
		}
	}
	return 0, false
}

// Open implements engine.Control.
func (l *Local) Open(ctx context.Context, gen uint64, nodes int, side engine.ControlNode) (engine.ControlGraph, error) {
	if gen > l.coord.Generation() {
		if err := l.coord.SetGeneration(gen); err != nil {
			return nil, err
		}
	} else {
		return nil, fmt.Errorf("control: generation %d is not above the last, %d", gen, l.coord.Generation())
	}
	g := &localGraph{l: l, gen: gen, side: side, nodes: make([]*Node, nodes), incs: make([]uint64, nodes), lost: make([]error, nodes), pending: map[uint64]pending{}}
	// The receivers' injections end with the graph's control too, not only with the
	// engine's graph: Close waits for them.
	rctx, cancel := context.WithCancel(ctx)
	g.cancel = cancel
	l.mu.Lock()
	first, wait := !l.opened, l.wait
	if !first {
		wait = l.grace
	}
	l.mu.Unlock()
	deadline := time.Now().Add(wait)
	for i := range nodes {
		if l.remote[i] {
			inc, err := l.awaitRemote(ctx, i, deadline, wait)
			if err != nil && (first || ctx.Err() != nil) {
				g.Close()
				return nil, err
			}
			if err != nil {
				g.down = append(g.down, i)
				g.lost[i] = fmt.Errorf("control: %s is down in generation %d: %w", l.nameOf(i), gen, err)
				continue
			}
			g.incs[i] = inc
			continue
		}
		l.mu.Lock()
		l.inc++
		inc := l.inc
		l.incs[l.nameOf(i)] = inc
		l.mu.Unlock()
		n, err := Connect(ctx, l.addr, Hello{Stamp: Stamp{Term: l.term, Generation: gen, Incarnation: inc}, Node: l.nameOf(i)})
		if err != nil {
			g.Close()
			return nil, err
		}
		g.nodes[i], g.incs[i] = n, inc
		g.wg.Add(1)
		go g.recv(rctx, i, n)
	}
	l.mu.Lock()
	old := l.graph
	l.graph, l.opened = g, true
	l.mu.Unlock()
	if old != nil {
		old.Close()
	}
	// A remote stream lost between its wait and the graph's taking the events is
	// the graph's loss too: its NodeLost went to no graph; so is a down node's that
	// came back meanwhile.
	for i := range nodes {
		switch {
		case slices.Contains(g.down, i):
			if inc, err := l.remoteStream(i); inc != 0 && err == nil {
				g.rejoin(i, inc)
			}
		case l.remote[i] && l.streamOf(i) != g.incs[i]:
			g.loseStream(i, g.incs[i], errors.New("the stream ended as the graph opened"))
		}
	}
	return g, nil
}

// rejoin fails the round once for down node i's stream of incarnation inc, which is
// back: the recovery that follows places actors on the node again.
func (g *localGraph) rejoin(i int, inc uint64) {
	g.pmu.Lock()
	first := !g.rejoined[i]
	if g.rejoined == nil {
		g.rejoined = map[int]bool{}
	}
	g.rejoined[i] = true
	g.pmu.Unlock()
	if first {
		g.send(engine.ControlReport{Err: fmt.Errorf("control: %s is back (incarnation %d), down in generation %d: recover to place actors on it", g.l.nameOf(i), inc, g.gen)})
	}
}

// Down implements engine.ControlDown: the remote nodes the graph has no stream of.
func (g *localGraph) Down() []int { return slices.Clone(g.down) }

// ExchangeAddr is the exchange address remote node i gave in the hello of its
// current stream; false when it has none.
func (l *Local) ExchangeAddr(i int) (string, bool) {
	for _, n := range l.coord.Nodes() {
		if n.Node == l.nameOf(i) && n.Addr != "" {
			return n.Addr, true
		}
	}
	return "", false
}

// streamOf is the incarnation of node i's current stream, 0 when it has none.
func (l *Local) streamOf(i int) uint64 {
	for _, n := range l.coord.Nodes() {
		if n.Node == l.nameOf(i) {
			return n.Incarnation
		}
	}
	return 0
}

// remoteStream is the incarnation of remote node i's current stream (0: none), or
// an error naming both roles when its hello gave another role than the engine's.
func (l *Local) remoteStream(i int) (uint64, error) {
	want := ""
	if i < len(l.roles) {
		want = l.roles[i]
	}
	for _, n := range l.coord.Nodes() {
		if n.Node != l.nameOf(i) {
			continue
		}
		if n.Role != want {
			return 0, fmt.Errorf("control: %s (incarnation %d) registered with role %q, and the engine gives node %d role %q (weir meta --node-roles, weir compute --role)", n.Node, n.Incarnation, n.Role, i, want)
		}
		return n.Incarnation, nil
	}
	return 0, nil
}

// awaitRemote waits until deadline (wait after the graph began to open) for remote
// node i's stream and returns its incarnation. A stream whose role is not the
// engine's for the node fails it at once.
func (l *Local) awaitRemote(ctx context.Context, i int, deadline time.Time, wait time.Duration) (uint64, error) {
	for {
		inc, err := l.remoteStream(i)
		if err != nil {
			return 0, err
		}
		if inc != 0 {
			return inc, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("control: %s has no control stream after %s: its compute process is not connected to %s: %w", l.nameOf(i), wait, l.addr, engine.ErrNodeLost)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("control: waiting for %s's stream: %w", l.nameOf(i), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Lose ends the stream of node of the current graph (fault injection) and returns
// once the engine was handed the node's failure: the round in progress, or the next
// one, fails. (A node with no actors has no report that would fail otherwise.)
func (l *Local) Lose(node int) error {
	l.mu.Lock()
	g := l.graph
	l.mu.Unlock()
	if g == nil || node < 0 || node >= len(g.nodes) {
		return fmt.Errorf("control: lose node %d: no such node in the current graph", node)
	}
	if g.nodes[node] == nil {
		return fmt.Errorf("control: lose node %d: its stream is its compute process's", node)
	}
	before := l.lost.Load()
	g.nodes[node].Close()
	for deadline := time.Now().Add(30 * time.Second); l.lost.Load() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("control: lose node %d: the loss was not delivered within 30s", node)
		}
	}
	return nil
}

// events hands the coordinator's events to the current graph.
func (l *Local) events() {
	defer close(l.looped)
	for ev := range l.coord.Events() {
		l.mu.Lock()
		g := l.graph
		l.mu.Unlock()
		if g == nil {
			continue
		}
		switch ev := ev.(type) {
		case NodeJoined:
			if i, ok := nodeIndex(ev.Node); ok && slices.Contains(g.down, i) {
				g.rejoin(i, ev.Incarnation)
			}
		case FromNode:
			switch m := ev.Msg.(type) {
			case Collected:
				if StampOf(m).Generation != g.gen {
					continue
				}
				for _, a := range m.Actors {
					g.send(engine.ControlReport{Actor: a, Epoch: m.Epoch, Backfill: m.Progress, Pending: int64(min(m.Pending, math.MaxInt64))})
				}
			case Failed:
				if StampOf(m).Generation == g.gen {
					g.send(engine.ControlReport{Actor: m.Actor, Err: errors.New(m.Err)})
				}
			case Finishing:
				if StampOf(m).Generation == g.gen && g.send(engine.ControlReport{Actor: m.Actor, Finishing: true}) {
					l.finishing.Add(1)
				}
			case Built:
				if StampOf(m).Generation == g.gen {
					var err error
					if m.Err != "" {
						err = errors.New(m.Err)
					}
					g.answer(KindBuildActors, m.ID, result{err: err})
				}
			case Answer:
				// An answer of no pending call (its caller gave up) is dropped.
				if StampOf(m).Generation == g.gen {
					r := result{payload: m.Payload}
					if m.Err != "" {
						r = result{err: errors.New(m.Err)}
					}
					g.answer(KindCall, m.ID, r)
				}
			}
		case NodeLost:
			if i, ok := nodeIndex(ev.Node); ok && i < len(g.incs) {
				g.loseStream(i, ev.Incarnation, ev.Err)
			}
		}
	}
}

// Close stops the coordinator and its server (the engine must be closed first).
func (l *Local) Close() error {
	l.mu.Lock()
	g := l.graph
	l.graph = nil
	l.mu.Unlock()
	if g != nil {
		g.Close()
	}
	l.coord.Close()
	<-l.looped
	l.srv.Stop()
	<-l.served
	return nil
}

// localGraph is the control of one graph.
type localGraph struct {
	l      *Local
	gen    uint64
	nodes  []*Node
	incs   []uint64
	side   engine.ControlNode
	wg     sync.WaitGroup     // the nodes' receivers
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

// recv is node i's side of its stream n: it builds the actors of each build spec and
// injects each barrier the coordinator sent at the node's sources, in order, until
// the stream ends. A refused frame (a stale stamp) is dropped; a build answers with
// a Built frame, with the build's error if it failed; a call is served on its own
// (call), so that what follows it is not held behind it; a message a Local node
// does not take (a teardown: the engine tears a graph down itself) fails the node,
// and so does an injection that fails while the graph is not closed.
func (g *localGraph) recv(ctx context.Context, i int, n *Node) {
	defer g.wg.Done()
	// The calls end with the stream: their answers could not leave.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for {
		m, err := n.Recv()
		var refused *RefusedError
		if errors.As(err, &refused) {
			continue
		}
		if err != nil {
			return // the stream ended: the coordinator sees it lost
		}
		g.mu.RLock()
		closed := g.closed
		g.mu.RUnlock()
		if closed {
			return
		}
		if b, ok := m.(BuildActors); ok {
			if err := n.Send(ctx, Built{ID: b.ID, Err: errText(g.build(ctx, i, b))}); err != nil {
				return // the stream ended
			}
			continue
		}
		if c, ok := m.(Call); ok {
			g.wg.Add(1) // while recv's own count holds Close's Wait
			go g.call(cctx, i, n, c)
			continue
		}
		in, ok := m.(Inject)
		if !ok {
			g.fail(ctx, n, fmt.Errorf("control: %s: a local node does not take a %s (%s)", g.l.nameOf(i), m.Kind(), StampOf(m)))
			return
		}
		if err := g.side.Inject(ctx, i, in.Barrier); err != nil {
			g.fail(ctx, n, err)
			return
		}
		g.l.injected.Add(1)
	}
}

// build builds the actors of b at node i.
func (g *localGraph) build(ctx context.Context, i int, b BuildActors) error {
	if b.SpecVersion != engine.BuildSpecVersion {
		return fmt.Errorf("control: %s: build %d: spec version %d, this node builds version %d", g.l.nameOf(i), b.ID, b.SpecVersion, engine.BuildSpecVersion)
	}
	if err := g.side.Build(ctx, i, b.Spec); err != nil {
		return err
	}
	g.l.built.Add(1)
	return nil
}

// call serves c at node i, and answers it on n with the answer or the error of the
// node's side, or the error that the answer does not fit in a frame.
func (g *localGraph) call(ctx context.Context, i int, n *Node, c Call) {
	defer g.wg.Done()
	var payload []byte
	var err error
	if g.side.Call == nil {
		err = fmt.Errorf("control: %s: call %d: the node serves no calls", g.l.nameOf(i), c.ID)
	} else {
		payload, err = g.side.Call(ctx, i, c.Payload)
	}
	a := Answer{ID: c.ID, Payload: payload}
	if err != nil {
		a = Answer{ID: c.ID, Err: errText(err)}
	}
	if err := n.Send(ctx, a); err != nil {
		// An answer too long for a frame; or a lost stream, which fails this too.
		_ = n.Send(ctx, Answer{ID: c.ID, Err: errText(fmt.Errorf("control: %s: call %d: %w", g.l.nameOf(i), c.ID, err))})
		return
	}
	g.l.calls.Add(1)
}

// errText is err's text as a frame carries it (valid UTF-8, no NUL byte); "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(strings.ToValidUTF8(err.Error(), "\uFFFD"), "\x00", "\uFFFD")
}

// fail reports err as node n's failure, then ends its stream.
func (g *localGraph) fail(ctx context.Context, n *Node, err error) {
	_ = n.Send(ctx, Failed{Err: err.Error()})
	n.Close()
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
