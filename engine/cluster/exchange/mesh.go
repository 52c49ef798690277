package exchange

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
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

// Open implements engine.Exchange: it registers the edge with the receiving node's
// server and opens the sender's stream into it.
func (m *Mesh) Open(ctx context.Context, e engine.ExchangeEdge) (engine.Output, engine.Inbound, error) {
	if e.ToNode < 0 || e.ToNode >= len(m.nodes) || e.FromNode < 0 || e.FromNode >= len(m.nodes) {
		return nil, nil, fmt.Errorf("exchange: %s: the mesh has nodes 0 to %d", e, len(m.nodes)-1)
	}
	n := m.nodes[e.ToNode]
	edge := Edge{Up: e.From, Down: e.To, Generation: e.Generation}
	in, err := n.srv.Expect(edge, nil, e.Capacity)
	if err != nil {
		return nil, nil, err
	}
	client, err := n.dial(m.window)
	if err == nil {
		var s *Sender
		if s, err = NewSender(ctx, client, edge, nil, m.mem); err == nil {
			m.opened.Add(1)
			return &meshOutput{to: e.To, s: s}, &meshInbound{in: in}, nil
		}
	}
	err = fmt.Errorf("node %d at %s: %w", e.ToNode, n.addr, err)
	if !n.srv.Forget(edge, err) {
		// The stream attached and then broke: it closes the inbox itself.
		for msg := range in.Messages() {
			msg.Release()
		}
	}
	return nil, nil, err
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

// Opened counts the edges the mesh has opened.
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

// meshOutput is the dispatcher's side of a mesh edge.
type meshOutput struct {
	to executors.ActorID
	s  *Sender
}

func (o *meshOutput) Actor() executors.ActorID { return o.to }

// Send implements engine.Output: the Sender encodes m, and m is released after.
func (o *meshOutput) Send(ctx context.Context, m executors.Message) error {
	err := o.s.Send(ctx, m)
	m.Release()
	return err
}

// Close implements engine.Output. A Close that fails leaves the receiving side's
// inbox closed with the error, which fails the receiving actor.
func (o *meshOutput) Close() { _ = o.s.Close() }

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
