package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed04fbb902/weir/engine"
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
	log         *slog.Logger

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
	// Logger receives the remote nodes' joins and losses and every message the
	// coordinator refuses for its stamp (nil: discarded).
	Logger *slog.Logger
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
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("control: listen on %s: %w", cfg.Listen, err)
	}
	l := &Local{addr: lis.Addr().String(), term: cfg.Term, incs: map[string]uint64{}, served: make(chan struct{}), looped: make(chan struct{}),
		remote: map[int]bool{}, roles: cfg.Roles, registry: cfg.Registry, wait: cfg.Wait, grace: cfg.Grace, log: cfg.Logger}
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

// Calls counts the calls the nodes took from their streams and served.
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
		go g.serveLocal(rctx, i, n)
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

// SendLate sends on node's stream of the current graph what a reply delayed past a
// recovery looks like (fault injection): a Failed report stamped with the
// generation before the node's (stale "generation"), or with an incarnation below
// the node's (stale "incarnation"; a node of incarnation 1 gets the generation's).
// The coordinator must refuse it, as a late reply of a torn-down graph or a
// replaced process: SendLate returns what it sent once the coordinator did, and an
// error if it did not within 30s. Were it taken, the graph's round would fail.
func (l *Local) SendLate(node int, stale string) (string, error) {
	l.mu.Lock()
	g := l.graph
	l.mu.Unlock()
	if g == nil || node < 0 || node >= len(g.nodes) {
		return "", fmt.Errorf("control: late reply of node %d: no such node in the current graph", node)
	}
	n := g.nodes[node]
	if n == nil {
		return "", fmt.Errorf("control: late reply of node %d: its stream is its compute process's", node)
	}
	s := n.Known()
	if stale == "incarnation" && s.Incarnation > 1 {
		s.Incarnation--
	} else {
		stale = "generation"
		s.Generation--
	}
	what := fmt.Sprintf("a Failed report of %s stamped %s (%s below its own)", l.nameOf(node), s, stale)
	before := l.coord.Refusals()
	if err := n.sendStamped(context.Background(), Failed{Actor: 1, Err: "a late reply"}, s); err != nil {
		return what, fmt.Errorf("control: send %s: %w", what, err)
	}
	for deadline := time.Now().Add(30 * time.Second); l.coord.Refusals() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return what, fmt.Errorf("control: %s was not refused within 30s", what)
		}
	}
	return what, nil
}

// events hands the coordinator's events to the current graph.
func (l *Local) events() {
	defer close(l.looped)
	for ev := range l.coord.Events() {
		l.logEvent(ev)
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

// logEvent logs a remote node's join or loss, and a refused message.
func (l *Local) logEvent(ev Event) {
	switch ev := ev.(type) {
	case NodeJoined:
		if i, ok := nodeIndex(ev.Node); ok && l.remote[i] {
			l.log.Info("compute node joined", "compute", ev.Node, "incarnation", ev.Incarnation, "role", ev.Role, "addr", ev.Addr)
		}
	case NodeLost:
		if i, ok := nodeIndex(ev.Node); ok && l.remote[i] {
			l.log.Warn("compute node lost", "compute", ev.Node, "incarnation", ev.Incarnation, "error", ev.Err)
		}
	case Refused:
		l.log.Warn("refused a message for its stamp", "from", ev.Node, "incarnation", ev.Incarnation, "error", ev.Err)
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
