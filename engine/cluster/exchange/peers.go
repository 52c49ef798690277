package exchange

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
)

// PeerConfig configures a PeerMesh: the node this process serves, its exchange
// server, and how it finds the servers of the other nodes.
type PeerConfig struct {
	// Node is the node this process serves: the receiving node of the edges it opens
	// the receiving side of, and the sending node of those it opens the sending side
	// of.
	Node int
	// Listen is the address, host:port, the node's exchange server listens on; "":
	// 127.0.0.1:0, a free loopback port. Addr tells the address it got.
	Listen string
	// Window is the HTTP/2 flow-control window of every stream, into this node's
	// server and out of it, as NewMesh's window (0: grpc's default).
	Window int32
	// Mem is what encoding and decoding allocate from (nil: memory.DefaultAllocator).
	Mem memory.Allocator
	// Resolve returns the address of another node's exchange server (what that node's
	// PeerMesh.Addr said, from the cluster's node registry). It is called at the
	// first opening of a stream into the node, and again after a connection to the
	// address it returned failed (the node's process may have restarted elsewhere);
	// its errors fail the opening. It may be called from several goroutines at once.
	Resolve func(ctx context.Context, node int) (string, error)
}

// PeerMesh is an engine.Exchange for a process that serves one node of a cluster whose
// other nodes run in other processes: it serves the node's exchange server, where the
// receiving sides of the node's edges are (OpenRecv), and opens the sending sides of
// the node's edges (OpenSend) as streams into the receiving nodes' servers, found with
// PeerConfig.Resolve. An edge between two actors of the node does not come here (the
// engine keeps it a channel), but one opened anyway goes through the node's own
// server. The edges and their streams are Mesh's: see OpenSend and OpenRecv there.
//
// The streams into a node share one connection, dialled to the address Resolve gave
// at the first opening into the node. An opening that fails for any other reason than
// its receiver's side not being open yet (which it waits for, as Mesh's does) retires
// that connection, whose streams go on until they end, and tries once more on an
// address resolved anew; if that fails too, the opening fails, and the next one
// resolves again. So a node whose process restarted elsewhere is found there.
// Connections are without TLS.
type PeerMesh struct {
	sides
	node    int
	local   *local
	resolve func(context.Context, int) (string, error)

	mu     sync.Mutex
	peers  map[int]*peer // by node, made by the first OpenSend into it
	closed bool
}

// NewPeerMesh starts the exchange server of node cfg.Node; Close stops it.
func NewPeerMesh(cfg PeerConfig) (*PeerMesh, error) {
	if cfg.Node < 0 {
		return nil, fmt.Errorf("exchange: a peer mesh of node %d", cfg.Node)
	}
	if cfg.Resolve == nil {
		return nil, fmt.Errorf("exchange: the peer mesh of node %d has no Resolve", cfg.Node)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Mem == nil {
		cfg.Mem = memory.DefaultAllocator
	}
	l, err := serveLocal(cfg.Node, cfg.Listen, cfg.Window, cfg.Mem)
	if err != nil {
		return nil, err
	}
	return &PeerMesh{
		sides:   sides{mem: cfg.Mem, window: cfg.Window},
		node:    cfg.Node,
		local:   l,
		resolve: cfg.Resolve,
		peers:   map[int]*peer{},
	}, nil
}

// Node is the node the mesh serves.
func (m *PeerMesh) Node() int { return m.node }

// Addr is the address of the node's exchange server, the one to register for the
// other nodes' Resolve (with a wildcard Listen, a host the other nodes reach must
// replace its host).
func (m *PeerMesh) Addr() string { return m.local.addr }

// OpenRecv implements engine.Exchange for an edge into the mesh's node (as
// Mesh.OpenRecv); it refuses one into another node.
func (m *PeerMesh) OpenRecv(ctx context.Context, e engine.ExchangeEdge) (engine.Inbound, error) {
	if e.ToNode != m.node {
		return nil, fmt.Errorf("exchange: %s: its receiving side is on node %d, and this process serves node %d", e, e.ToNode, m.node)
	}
	if m.isClosed() {
		return nil, fmt.Errorf("exchange: %s: the peer mesh of node %d is closed", e, m.node)
	}
	in, err := m.openRecv(ctx, e, m.local.srv)
	if err != nil {
		return nil, err
	}
	return in, nil
}

// OpenSend implements engine.Exchange for an edge out of the mesh's node (as
// Mesh.OpenSend); it refuses one out of another node. The stream's opening, at the
// first Send or Close, resolves the address of node e.ToNode if no connection into it
// is open, and its errors name the edge, the node and its address.
func (m *PeerMesh) OpenSend(ctx context.Context, e engine.ExchangeEdge) (engine.Output, error) {
	if e.FromNode != m.node {
		return nil, fmt.Errorf("exchange: %s: its sending side is on node %d, and this process serves node %d", e, e.FromNode, m.node)
	}
	if e.ToNode < 0 {
		return nil, fmt.Errorf("exchange: %s: there is no node %d", e, e.ToNode)
	}
	p, err := m.peerOf(e.ToNode)
	if err != nil {
		return nil, fmt.Errorf("exchange: %s: %w", e, err)
	}
	return m.output(ctx, e, p), nil
}

// peerOf is the way into node, made at its first use: through Resolve, or for the mesh's
// own node, to its own server.
func (m *PeerMesh) peerOf(node int) (*peer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("the peer mesh of node %d is closed", m.node)
	}
	p := m.peers[node]
	if p == nil {
		p = &peer{node: node, resolve: m.resolve}
		if node == m.node {
			p.resolve, p.addr = nil, m.local.addr
		}
		m.peers[node] = p
	}
	return p, nil
}

func (m *PeerMesh) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// Opened counts the edges the mesh has opened the sending side of: an edge counts once
// its stream is open.
func (m *PeerMesh) Opened() int64 { return m.opened.Load() }

// Close closes the connections into the other nodes, which breaks the streams still
// on them, and stops the node's server: the inboxes no sender came to end, with an
// error, and Close waits for the streams into the node to end (the engine using the
// mesh must be closed first). Openings after Close fail.
func (m *PeerMesh) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	peers := m.peers
	m.mu.Unlock()
	var errs []error
	for _, p := range peers {
		errs = append(errs, p.drop(true))
	}
	m.local.stop(fmt.Sprintf("the peer mesh of node %d closed before a sender came", m.node))
	return errors.Join(errs...)
}
