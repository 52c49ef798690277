package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Registry says which incarnation of a node is its current one. *meta.Store is one.
type Registry interface {
	// CheckIncarnation returns nil when inc is node's current incarnation.
	CheckIncarnation(ctx context.Context, node string, inc uint64) error
}

// Config configures a Coordinator.
type Config struct {
	// Term is the leader's lease term, which every message to a node carries and
	// every message from a node must carry.
	Term uint64
	// Generation is the graph's generation to start with.
	Generation uint64
	// Registry checks each Hello's incarnation; nil accepts any.
	Registry Registry
	// EventBuffer is the capacity of the Events channel.
	EventBuffer int
}

// Event is what the coordinator delivers on its Events channel: NodeJoined, FromNode,
// Refused or NodeLost.
type Event interface{ event() }

// NodeJoined: a node's stream was accepted. Every later event of the stream names the
// same incarnation.
type NodeJoined struct {
	Node, Role, Addr string
	Incarnation      uint64
}

// FromNode is a message a node sent: a Collected, Failed, Sealed, Built, Finishing or
// Answer whose stamp matched the leader's term, the current generation and the
// stream's incarnation.
type FromNode struct {
	Node string
	Msg  Message
}

// Refused is a message refused for its stamp (a Hello, or a message of an accepted
// stream, which goes on).
type Refused struct {
	Node        string
	Incarnation uint64
	Err         *RefusedError
}

// NodeLost: a node's stream ended (the node's process died, its context ended, a
// newer incarnation replaced it, a frame did not decode, or the coordinator closed).
// Err says why and names the node and incarnation. No event of that incarnation
// follows.
type NodeLost struct {
	Node        string
	Incarnation uint64
	Err         error
}

func (NodeJoined) event() {}
func (FromNode) event()   {}
func (Refused) event()    {}
func (NodeLost) event()   {}

// ErrNoStream is returned by Send to a node that has no stream.
var ErrNoStream = errors.New("no control stream")

// errClosed ends every stream when the coordinator closes.
var errClosed = errors.New("control: coordinator closed")

// Coordinator is the leader's side of the control streams: a gRPC service (Register)
// that keeps one stream per node, sends to a node (Send), and delivers what the nodes
// send, and the loss of their streams, to one channel (Events). Every method is safe
// for concurrent use.
type Coordinator struct {
	registry Registry
	events   chan Event
	quit     chan struct{}
	refused  atomic.Uint64
	wg       sync.WaitGroup // the streams' goroutines

	mu     sync.Mutex
	term   uint64
	gen    uint64
	nodes  map[string]*nodeStream
	closed bool
}

// nodeStream is one accepted stream.
type nodeStream struct {
	hello Hello
	out   chan sendReq
	dead  chan struct{} // closed by end
	once  sync.Once
	why   error // set by end, before dead closes

	emitMu sync.Mutex
	lost   bool // NodeLost delivered (or the coordinator closed); guarded by emitMu
}

type sendReq struct {
	frame []byte
	done  chan error // buffered: the stream's handler never blocks on it
}

func (st *nodeStream) end(why error) {
	st.once.Do(func() {
		st.why = why
		close(st.dead)
	})
}

// reason is why the stream ended; call it only after dead is closed.
func (st *nodeStream) reason() error {
	<-st.dead
	return st.why
}

// NewCoordinator returns a coordinator at cfg's term and generation.
func NewCoordinator(cfg Config) *Coordinator {
	return &Coordinator{
		registry: cfg.Registry,
		events:   make(chan Event, max(cfg.EventBuffer, 0)),
		quit:     make(chan struct{}),
		term:     cfg.Term,
		gen:      cfg.Generation,
		nodes:    map[string]*nodeStream{},
	}
}

// Register registers the control service on s, which should have ServerOptions.
func (c *Coordinator) Register(s grpc.ServiceRegistrar) { s.RegisterService(&serviceDesc, c) }

// Events is the channel of the nodes' events. Each stream's events arrive in order,
// and a stream does not read its next message until its last event was taken. It is
// closed by Close.
func (c *Coordinator) Events() <-chan Event { return c.events }

// Refusals counts the messages refused for their stamps.
func (c *Coordinator) Refusals() uint64 { return c.refused.Load() }

// Term returns the leader's term, which the coordinator stamps its messages with.
func (c *Coordinator) Term() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term
}

// Generation returns the graph's current generation.
func (c *Coordinator) Generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// SetTerm moves the leader to term t (the lease was acquired again), which must be
// above the current term. Messages of the old term are refused from then on.
func (c *Coordinator) SetTerm(t uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t <= c.term {
		return fmt.Errorf("control: term %d is not above the leader's term %d", t, c.term)
	}
	c.term = t
	return nil
}

// SetGeneration moves the graph to generation g, which must be above the current
// one. Messages of older generations are refused from then on.
func (c *Coordinator) SetGeneration(g uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g <= c.gen {
		return fmt.Errorf("control: generation %d is not above the current generation %d", g, c.gen)
	}
	c.gen = g
	return nil
}

// Nodes returns the nodes with a stream, ordered by name.
func (c *Coordinator) Nodes() []NodeJoined {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]NodeJoined, 0, len(c.nodes))
	for _, st := range c.nodes {
		out = append(out, NodeJoined{Node: st.hello.Node, Role: st.hello.Role, Addr: st.hello.Addr, Incarnation: st.hello.Incarnation})
	}
	slices.SortFunc(out, func(a, b NodeJoined) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// Send sends m (a BuildActors, Inject, Teardown or Call) to node, stamped with the
// leader's term, the current generation and the node's incarnation (m's own stamp is
// ignored). It returns once the stream's transport took the frame; it fails with
// ErrNoStream for a node without a stream, and with the stream's end when it ended.
// When ctx ends first, the frame may or may not have been sent.
func (c *Coordinator) Send(ctx context.Context, node string, m Message) error {
	if m == nil || m.Kind().FromNode() || m.Kind() == KindAccept {
		return fmt.Errorf("control: send to node %q: %T is not a message to a node", node, m)
	}
	c.mu.Lock()
	st := c.nodes[node]
	s := Stamp{Term: c.term, Generation: c.gen}
	c.mu.Unlock()
	if st == nil {
		return fmt.Errorf("control: send %s to node %q: %w", m.Kind(), node, ErrNoStream)
	}
	s.Incarnation = st.hello.Incarnation
	m, err := withStamp(m, s)
	if err != nil {
		return err
	}
	frame, err := AppendFrame(nil, m)
	if err != nil {
		return fmt.Errorf("control: send to node %q: %w", node, err)
	}
	req := sendReq{frame: frame, done: make(chan error, 1)}
	select {
	case st.out <- req:
	case <-st.dead:
		return fmt.Errorf("control: send %s to node %q incarnation %d: %w", m.Kind(), node, s.Incarnation, st.reason())
	case <-ctx.Done():
		return fmt.Errorf("control: send %s to node %q incarnation %d: %w", m.Kind(), node, s.Incarnation, ctx.Err())
	}
	select {
	case err := <-req.done:
		if err != nil {
			return fmt.Errorf("control: send %s to node %q incarnation %d: %w", m.Kind(), node, s.Incarnation, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("control: send %s to node %q incarnation %d (the frame may have been sent): %w", m.Kind(), node, s.Incarnation, ctx.Err())
	}
}

// Close ends every stream and closes Events once every stream's goroutines have
// returned; events after Close began may be dropped. A stream whose handler is
// blocked sending to a node that does not read holds Close until its transport
// ends: stop the grpc.Server first to end them all.
func (c *Coordinator) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.quit)
	streams := make([]*nodeStream, 0, len(c.nodes))
	for _, st := range c.nodes {
		streams = append(streams, st)
	}
	c.mu.Unlock()
	for _, st := range streams {
		st.end(errClosed)
	}
	c.wg.Wait()
	close(c.events)
}

// emit delivers ev unless the coordinator closes first.
func (c *Coordinator) emit(ev Event) bool {
	select {
	case c.events <- ev:
		return true
	case <-c.quit:
		return false
	}
}

// emitFor delivers an event of stream st, unless st's NodeLost went out already;
// delivering a NodeLost marks it so.
func (c *Coordinator) emitFor(st *nodeStream, ev Event) bool {
	st.emitMu.Lock()
	defer st.emitMu.Unlock()
	if st.lost {
		return false
	}
	if _, ok := ev.(NodeLost); ok {
		st.lost = true
	}
	return c.emit(ev)
}

// lose ends st for why (unless it ended already) and delivers its NodeLost.
func (c *Coordinator) lose(st *nodeStream, why error) {
	st.end(why)
	c.mu.Lock()
	if c.nodes[st.hello.Node] == st {
		delete(c.nodes, st.hello.Node)
	}
	c.mu.Unlock()
	c.emitFor(st, NodeLost{Node: st.hello.Node, Incarnation: st.hello.Incarnation, Err: st.reason()})
}

func (c *Coordinator) refuse(node string, inc uint64, err *RefusedError) {
	c.refused.Add(1)
	c.emit(Refused{Node: node, Incarnation: inc, Err: err})
}

// enter counts a stream's handler in, unless the coordinator is closed.
func (c *Coordinator) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

// serve is the handler of one stream: it admits the node's Hello, answers with an
// Accept, then sends what Send hands it while recv delivers what the node sends.
func (c *Coordinator) serve(stream grpc.ServerStream) error {
	if !c.enter() {
		return status.Error(codes.Unavailable, errClosed.Error())
	}
	defer c.wg.Done()
	var f rawFrame
	if err := stream.RecvMsg(&f); err != nil {
		return status.Errorf(codes.InvalidArgument, "control: the stream ended before its hello: %v", err)
	}
	m, err := DecodeFrame(f)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	h, ok := m.(Hello)
	if !ok {
		return status.Errorf(codes.InvalidArgument, "control: the stream's first frame is a %s (%s), not a hello", m.Kind(), StampOf(m))
	}
	st, accept, err := c.admit(stream.Context(), h)
	if err != nil {
		return err
	}
	frame, err := AppendFrame(nil, accept)
	if err == nil {
		f = frame
		err = stream.SendMsg(&f)
	}
	if err != nil {
		err = fmt.Errorf("control: node %q incarnation %d: accepting the stream: %w", h.Node, h.Incarnation, err)
		st.end(err)
		c.mu.Lock()
		if c.nodes[h.Node] == st {
			delete(c.nodes, h.Node)
		}
		c.mu.Unlock()
		return status.Error(codes.Aborted, err.Error())
	}
	if !c.emitFor(st, NodeJoined{Node: h.Node, Role: h.Role, Addr: h.Addr, Incarnation: h.Incarnation}) {
		st.end(errClosed)
	}
	c.wg.Add(1)
	go c.recv(stream, st)
	for {
		select {
		case req := <-st.out:
			f = req.frame
			err := stream.SendMsg(&f)
			req.done <- err
			if err != nil {
				st.end(fmt.Errorf("control: node %q incarnation %d: send: %w", h.Node, h.Incarnation, err))
			}
		case <-st.dead:
			return status.Error(codes.Aborted, st.reason().Error())
		case <-c.quit:
			st.end(errClosed)
		}
	}
}

// admit checks h and makes its stream the node's: it refuses a term above the
// leader's (the node has seen a newer leader) or, at the leader's term, a generation
// above the current one (a newer graph), an incarnation the
// registry refuses or below the node's current stream's, and a second stream of the
// same incarnation; a newer incarnation replaces the current stream, which ends with
// an error naming the newer incarnation.
func (c *Coordinator) admit(ctx context.Context, h Hello) (*nodeStream, Accept, error) {
	c.mu.Lock()
	want := Stamp{Term: c.term, Generation: c.gen, Incarnation: h.Incarnation}
	c.mu.Unlock()
	refuse := func(reason string) (*nodeStream, Accept, error) {
		err := &RefusedError{Node: h.Node, Kind: KindHello, Got: h.Stamp, Want: want, Reason: reason}
		c.refuse(h.Node, h.Incarnation, err)
		return nil, Accept{}, status.Error(codes.FailedPrecondition, err.Error())
	}
	switch {
	case h.Term > want.Term:
		return refuse("the node has seen a term above the leader's")
	case h.Term == want.Term && h.Generation > want.Generation:
		// Generations are compared within a term: a node that saw a graph of an
		// earlier leader comes to the new one before its first graph.
		return refuse("the node has seen a generation above the current one")
	}
	if c.registry != nil {
		if err := c.registry.CheckIncarnation(ctx, h.Node, h.Incarnation); err != nil {
			return refuse(fmt.Sprintf("the registry refuses the incarnation: %v", err))
		}
	}
	st := &nodeStream{hello: h, out: make(chan sendReq), dead: make(chan struct{})}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, Accept{}, status.Error(codes.Unavailable, errClosed.Error())
	}
	old := c.nodes[h.Node]
	if old != nil {
		switch inc := old.hello.Incarnation; {
		case inc == h.Incarnation:
			c.mu.Unlock()
			return nil, Accept{}, status.Errorf(codes.AlreadyExists, "control: node %q incarnation %d already has a stream", h.Node, h.Incarnation)
		case inc > h.Incarnation:
			c.mu.Unlock()
			want.Incarnation = inc
			return refuse("an incarnation below the node's current stream's")
		}
	}
	c.nodes[h.Node] = st
	accept := Accept{Stamp: Stamp{Term: c.term, Generation: c.gen, Incarnation: h.Incarnation}}
	c.mu.Unlock()
	if old != nil {
		c.lose(old, fmt.Errorf("control: node %q incarnation %d: replaced by incarnation %d", h.Node, old.hello.Incarnation, h.Incarnation))
	}
	return st, accept, nil
}

// recv reads the node's frames and delivers them until the stream ends, then delivers
// the stream's NodeLost.
func (c *Coordinator) recv(stream grpc.ServerStream, st *nodeStream) {
	defer c.wg.Done()
	h := st.hello
	c.lose(st, func() error {
		for {
			var f rawFrame
			err := stream.RecvMsg(&f)
			select {
			case <-st.dead:
				return st.reason()
			default:
			}
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("control: node %q incarnation %d closed its stream", h.Node, h.Incarnation)
			}
			if err != nil {
				return fmt.Errorf("control: node %q incarnation %d: stream lost: %w", h.Node, h.Incarnation, err)
			}
			m, err := DecodeFrame(f)
			if err != nil {
				return fmt.Errorf("control: node %q incarnation %d: %w", h.Node, h.Incarnation, err)
			}
			if !m.Kind().FromNode() || m.Kind() == KindHello {
				return fmt.Errorf("control: node %q incarnation %d sent a %s (%s), which only a coordinator sends or only opens a stream", h.Node, h.Incarnation, m.Kind(), StampOf(m))
			}
			c.mu.Lock()
			want := Stamp{Term: c.term, Generation: c.gen, Incarnation: h.Incarnation}
			c.mu.Unlock()
			var ev Event = FromNode{Node: h.Node, Msg: m}
			if err := checkAtCoordinator(h.Node, m.Kind(), StampOf(m), want); err != nil {
				c.refused.Add(1)
				ev = Refused{Node: h.Node, Incarnation: h.Incarnation, Err: err}
			}
			if !c.emitFor(st, ev) {
				return errClosed
			}
		}
	}())
}
