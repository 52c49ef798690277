package exchange

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
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
	sides
	nodes []*meshNode
}

// meshNode is a node's server, and the way into it of the senders of every node.
type meshNode struct {
	*local
	in *peer // of the server's address, fixed
}

// NewMesh starts one exchange server per node on 127.0.0.1 (nodes is the engine's
// Options.Nodes). window is the HTTP/2 flow-control window of every stream (see
// NewFlightServer; 0: grpc's default); mem is what encoding and decoding allocate
// from. Close stops the servers.
func NewMesh(nodes int, window int32, mem memory.Allocator) (*Mesh, error) {
	if nodes < 1 {
		return nil, fmt.Errorf("exchange: a mesh of %d nodes", nodes)
	}
	m := &Mesh{sides: sides{mem: mem, window: window}}
	for i := range nodes {
		l, err := serveLocal(i, "127.0.0.1:0", window, mem)
		if err != nil {
			_ = m.Close()
			return nil, err
		}
		m.nodes = append(m.nodes, &meshNode{local: l, in: &peer{node: i, addr: l.addr}})
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
	s, err := m.openSender(ctx, ctx, e, n.in)
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
	out := m.output(ctx, e, n.in)
	out.s = s
	return out, recv, nil
}

// OpenRecv opens the receiving side of e, e.To's merge input: it registers the edge
// with node e.ToNode's server, whose inbox the returned Inbound reads, and returns
// without waiting for a sender. A sender that attaches (OpenSend's, in this process
// or another) ends the inbox with its stream. When ctx ends, the inbox ends too,
// with an error naming the edge: one no sender came to at once, so that its
// receiving actor ends with its graph; an attached one's stream is cut (its sender
// sees the edge broken), so that a receiver torn down while its sender, in another
// process, still runs does not wait for it.
func (m *Mesh) OpenRecv(ctx context.Context, e engine.ExchangeEdge) (engine.Inbound, error) {
	if err := m.check(e); err != nil {
		return nil, err
	}
	in, err := m.openRecv(ctx, e, m.nodes[e.ToNode].srv)
	if err != nil {
		return nil, err
	}
	return in, nil
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
	return m.output(ctx, e, m.nodes[e.ToNode].in), nil
}

// check validates e's nodes.
func (m *Mesh) check(e engine.ExchangeEdge) error {
	if e.ToNode < 0 || e.ToNode >= len(m.nodes) || e.FromNode < 0 || e.FromNode >= len(m.nodes) {
		return fmt.Errorf("exchange: %s: the mesh has nodes 0 to %d", e, len(m.nodes)-1)
	}
	return nil
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
	return m.nodes[node].in.drop(false)
}

// Close closes the clients and stops every node's server (the engine using the mesh
// must be closed first). Openings after Close fail.
func (m *Mesh) Close() error {
	var errs []error
	for _, n := range m.nodes {
		errs = append(errs, n.in.drop(true))
		n.stop("the mesh closed before a sender came")
	}
	return errors.Join(errs...)
}
