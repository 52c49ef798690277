package exchange

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Mesh is an engine.Exchange over Arrow Flight for the nodes of one engine: every node
// has its own exchange Server on its own loopback port, and an edge between actors on
// two nodes is a DoExchange stream into the receiving node's server, carrying what a
// stream between two processes carries (package wire's encoding, Arrow IPC records,
// barrier acks, HTTP/2 flow control). Edges within a node stay Go channels (the engine
// does not ask the exchange for them).
//
// Break cuts every stream into a node, for fault injection: the rounds those edges
// were in fail, and the engine recovers with a new graph whose edges open new streams.
type Mesh struct {
	mem    memory.Allocator
	window int32
	nodes  []*meshNode
	opened atomic.Int64

	watching atomic.Int64 // OpenRecv's goroutines that wait for an inbox's context
}

type meshNode struct {
	srv  *Server
	fs   flight.Server
	addr string
	done chan struct{} // closed when fs.Serve returns

	mu     sync.Mutex
	client flight.Client // into this node's server, shared by its senders; nil: dial
}

// NewMesh starts one exchange server per node on 127.0.0.1 (nodes is the engine's
// Options.Nodes). window is the HTTP/2 flow-control window of every stream (see
// NewFlightServer; 0: grpc's default); mem is what encoding and decoding allocate
// from. Close stops the servers.
func NewMesh(nodes int, window int32, mem memory.Allocator) (*Mesh, error) {
	if nodes < 1 {
		return nil, fmt.Errorf("exchange: a mesh of %d nodes", nodes)
	}
	m := &Mesh{mem: mem, window: window}
	for i := range nodes {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			_ = m.Close()
			return nil, fmt.Errorf("exchange: node %d: listen: %w", i, err)
		}
		n := &meshNode{srv: NewServer(mem), addr: lis.Addr().String(), done: make(chan struct{})}
		n.fs = NewFlightServer(n.srv, window)
		n.fs.InitListener(lis)
		go func() {
			defer close(n.done)
			_ = n.fs.Serve()
		}()
		m.nodes = append(m.nodes, n)
	}
	return m, nil
}

// Addr is the address of node's exchange server.
func (m *Mesh) Addr(node int) string { return m.nodes[node].addr }

// Open implements engine.Exchange: it opens both sides of e at once, OpenRecv's and
// OpenSend's, and opens the sender's stream before it returns, so that an edge that
// cannot be opened fails Open.
func (m *Mesh) Open(ctx context.Context, e engine.ExchangeEdge) (engine.Output, engine.Inbound, error) {
	recv, err := m.OpenRecv(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	n := m.nodes[e.ToNode]
	s, err := m.openSender(ctx, ctx, e)
	if err != nil {
		in := recv.(*meshInbound).in
		if !n.srv.Forget(in.edge, err) {
			// The stream attached and then broke: it closes the inbox itself.
			for msg := range in.Messages() {
				msg.Release()
			}
		}
		return nil, nil, err
	}
	return &meshOutput{m: m, e: e, ctx: ctx, s: s}, recv, nil
}

// OpenRecv opens the receiving side of e, e.To's merge input: it registers the edge
// with node e.ToNode's server, whose inbox the returned Inbound reads, and returns
// without waiting for a sender. A sender that attaches (OpenSend's, in this process
// or another) ends the inbox with its stream. If ctx ends before one attached, the
// inbox ends then, with an error naming the edge, so that the receiving actor of an
// edge no sender came to ends with its graph.
func (m *Mesh) OpenRecv(ctx context.Context, e engine.ExchangeEdge) (engine.Inbound, error) {
	if err := m.check(e); err != nil {
		return nil, err
	}
	n := m.nodes[e.ToNode]
	in, err := n.srv.Expect(meshEdge(e), nil, e.Capacity)
	if err != nil {
		return nil, err
	}
	m.watching.Add(1)
	go func() {
		defer m.watching.Add(-1)
		select {
		case <-ctx.Done():
			// Does nothing when a stream attached: that stream ends the inbox.
			n.srv.Forget(in.edge, fmt.Errorf("exchange: %s: no sender came before the context ended: %w", e, context.Cause(ctx)))
		case <-in.done:
		}
	}()
	return &meshInbound{in: in}, nil
}

// OpenSend opens the sending side of e, what e.From's dispatcher sends into, and
// returns at once: the stream into node e.ToNode is opened by the first Send, or by
// Close when nothing was sent, so that the receiver sees the edge end cleanly. Until
// the receiving server expects the edge (its side is not open yet), opening retries
// with a short backoff while ctx, and the Send's own context, last; any other failure
// fails the Send at once. ctx bounds the edge's whole life, as Open's does: its end
// breaks the stream, and it bounds the opening that Close may have to do.
func (m *Mesh) OpenSend(ctx context.Context, e engine.ExchangeEdge) (engine.Output, error) {
	if err := m.check(e); err != nil {
		return nil, err
	}
	return &meshOutput{m: m, e: e, ctx: ctx}, nil
}

// check validates e's nodes.
func (m *Mesh) check(e engine.ExchangeEdge) error {
	if e.ToNode < 0 || e.ToNode >= len(m.nodes) || e.FromNode < 0 || e.FromNode >= len(m.nodes) {
		return fmt.Errorf("exchange: %s: the mesh has nodes 0 to %d", e, len(m.nodes)-1)
	}
	return nil
}

func meshEdge(e engine.ExchangeEdge) Edge {
	return Edge{Up: e.From, Down: e.To, Generation: e.Generation}
}

// Backoff of openSender while the receiver does not expect the edge yet.
const (
	minOpenBackoff = time.Millisecond
	maxOpenBackoff = 50 * time.Millisecond
)

// openSender opens e's stream into node e.ToNode, within edgeCtx (the edge's life)
// and ctx (this attempt's): the stream lives until edgeCtx ends; the end of ctx while
// opening fails the opening. While the server refuses the edge as not expected, it
// retries. Its errors name the node and its address, and wrap the Sender's, which name
// the edge.
func (m *Mesh) openSender(edgeCtx, ctx context.Context, e engine.ExchangeEdge) (*Sender, error) {
	n := m.nodes[e.ToNode]
	edge := meshEdge(e)
	if c := ended(edgeCtx, ctx); c != nil {
		return nil, fmt.Errorf("node %d at %s: the context ended before the stream opened: %w", e.ToNode, n.addr, context.Cause(c))
	}
	backoff := minOpenBackoff
	for {
		client, err := n.dial(m.window)
		if err != nil {
			return nil, fmt.Errorf("node %d at %s: %w", e.ToNode, n.addr, err)
		}
		s, err := handshake(edgeCtx, ctx, client, edge, m.mem)
		if err == nil {
			m.opened.Add(1)
			return s, nil
		}
		notExpected := status.Code(err) == codes.NotFound
		if !notExpected {
			if c := ended(edgeCtx, ctx); c != nil {
				// What failed is most likely the stream the context's end cancelled.
				return nil, fmt.Errorf("node %d at %s: the context ended while opening the stream: %w (%v)", e.ToNode, n.addr, context.Cause(c), err)
			}
			return nil, fmt.Errorf("node %d at %s: %w", e.ToNode, n.addr, err)
		}
		if ended(edgeCtx, ctx) == nil {
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-edgeCtx.Done():
			case <-ctx.Done():
			}
			t.Stop()
		}
		if c := ended(edgeCtx, ctx); c != nil {
			return nil, fmt.Errorf("node %d at %s: %s is not expected there (its receiver did not open its side) and the context ended: %w",
				e.ToNode, n.addr, edge, context.Cause(c))
		}
		backoff = min(2*backoff, maxOpenBackoff)
	}
}

// ended returns the first of cs that has ended, or nil.
func ended(cs ...context.Context) context.Context {
	for _, c := range cs {
		if c.Err() != nil {
			return c
		}
	}
	return nil
}

// handshake is NewSender(edgeCtx, ...) whose opening also fails when ctx ends.
func handshake(edgeCtx, ctx context.Context, client flight.Client, edge Edge, mem memory.Allocator) (*Sender, error) {
	if ctx == edgeCtx || ctx.Done() == nil {
		return NewSender(edgeCtx, client, edge, nil, mem)
	}
	// The stream's context is edgeCtx's child, which the Sender's Close or failure
	// cancels (after its own), so that it does not outlive the stream.
	sctx, cancel := context.WithCancel(edgeCtx)
	stop := context.AfterFunc(ctx, cancel)
	s, err := NewSender(sctx, client, edge, nil, mem)
	if !stop() && err == nil {
		// ctx ended while opening: the stream is cancelled.
		err = s.abort(fmt.Errorf("exchange: %s: opening the stream: %w", edge, context.Cause(ctx)))
	}
	if err != nil {
		cancel()
		return nil, err
	}
	s.release = cancel
	return s, nil
}

// dial returns the client into n, dialling it when there is none.
func (n *meshNode) dial(window int32) (flight.Client, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.client != nil {
		return n.client, nil
	}
	c, err := Dial(n.addr, window)
	if err != nil {
		return nil, err
	}
	n.client = c
	return c, nil
}

// Opened counts the edges the mesh has opened: an edge counts once its sender's stream
// is open.
func (m *Mesh) Opened() int64 { return m.opened.Load() }

// Break closes the connection into node: every stream into it breaks, on both sides.
// The next Open into the node dials a new connection.
func (m *Mesh) Break(node int) error {
	if node < 0 || node >= len(m.nodes) {
		return fmt.Errorf("exchange: break node %d: the mesh has nodes 0 to %d", node, len(m.nodes)-1)
	}
	n := m.nodes[node]
	n.mu.Lock()
	c := n.client
	n.client = nil
	n.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Close()
}

// Close closes the clients and stops every node's server (the engine using the mesh
// must be closed first).
func (m *Mesh) Close() error {
	var errs []error
	for _, n := range m.nodes {
		// An inbox no sender came to ends now, and OpenRecv's goroutine with it.
		n.srv.forgetUnattached("the mesh closed before a sender came")
		n.mu.Lock()
		if n.client != nil {
			errs = append(errs, n.client.Close())
			n.client = nil
		}
		n.mu.Unlock()
		n.fs.Shutdown()
		<-n.done
	}
	return errors.Join(errs...)
}

// meshOutput is the dispatcher's side of a mesh edge. Its stream is opened by the
// first Send or by Close (OpenSend), or by Open.
type meshOutput struct {
	m   *Mesh
	e   engine.ExchangeEdge
	ctx context.Context // the edge's life

	s      *Sender // nil until the stream is open
	err    error   // sticky: the stream could not be opened
	closed bool
}

func (o *meshOutput) Actor() executors.ActorID { return o.e.To }

// open opens the stream if it is not, within ctx.
func (o *meshOutput) open(ctx context.Context) error {
	if o.s != nil {
		return nil
	}
	if o.err != nil {
		return o.err
	}
	s, err := o.m.openSender(o.ctx, ctx, o.e)
	if err != nil {
		// Sticky: an output whose stream never opened sends nothing, not even the end
		// (a Close after a failed Send must not end the edge cleanly).
		o.err = fmt.Errorf("exchange: %s: %w", o.e, err)
		return o.err
	}
	o.s = s
	return nil
}

// Send implements engine.Output: the Sender encodes m, and m is released after.
func (o *meshOutput) Send(ctx context.Context, m executors.Message) error {
	if o.closed {
		m.Release()
		return fmt.Errorf("exchange: %s: the sender is closed", o.e)
	}
	if err := o.open(ctx); err != nil {
		m.Release()
		return err
	}
	err := o.s.Send(ctx, m)
	m.Release()
	return err
}

// Close implements engine.Output. A Close that fails leaves the receiving side's
// inbox closed with the error, which fails the receiving actor. An output that sent
// nothing opens its stream, within the edge's context, to send the end; one whose
// stream could not be opened sends nothing, and its receiver's inbox ends with the
// receiver's context.
func (o *meshOutput) Close() {
	if o.closed {
		return
	}
	o.closed = true
	if o.open(o.ctx) != nil {
		return
	}
	_ = o.s.Close()
}

// meshInbound is the merge's side of a mesh edge.
type meshInbound struct{ in *Inbox }

func (i *meshInbound) C() <-chan executors.Message { return i.in.Messages() }
func (i *meshInbound) Err() error                  { return i.in.Err() }

// Discard implements engine.Inbound: it releases messages until the stream ends.
func (i *meshInbound) Discard() {
	for msg := range i.in.Messages() {
		msg.Release()
	}
}
