package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
)

// A compute process's side of the nodes: a Host serves one node of an engine that
// runs in another process (Options.RemoteNodes), with a store of its own. What the
// engine's control sends the node (build specs, barriers for its sources, the commit
// log's requests, teardowns) reaches the Host stamped with the graph's generation;
// the Host keeps the node's side of that generation's graph, as the engine keeps its
// own nodes' sides, and sends its actors' reports back through HostConfig.Report.

// HostConfig configures a Host.
type HostConfig struct {
	// Node is the node the host serves: its place in the engine's nodes.
	Node int
	// Dir is the directory of the node's store (on Options.FS), a rebuildable copy
	// of the commit log's committed state plus the node's sealed, uncommitted data.
	Dir string
	// Options are the node's settings: the store's (FS, Cache, CacheSize,
	// MemTableSize, IngestBytes), the actors' (Mem, ChannelCapacity, ChunkSize, the
	// backfills' workers and budgets, StateCacheBytes) and Exchange, which carries
	// every edge to another node and is required. The engine's own settings
	// (Control, CommitLog, Nodes and the rest) are ignored.
	Options Options
	// Server answers the commit log's requests with the node's store (the log's
	// node server, over the same meta store and bucket as the engine's log).
	Server NodeServer
	// Report sends an actor's report to the coordinator, stamped with generation
	// gen: the graph the actor belongs to. An error means it did not leave (the
	// stream is lost, which the coordinator sees as the node's failure).
	Report func(ctx context.Context, gen uint64, r ControlReport) error
}

// GraphAt is where a message to a Host belongs: the leader's term and the
// generation of the graph in that term.
type GraphAt struct {
	Term, Generation uint64
}

// Host is a compute process's side of one node. Its methods are safe for concurrent
// use; each takes the term and generation of the graph its message belongs to. A
// message of a newer generation than the host's current graph tears that graph's
// actors down and starts the new one's side (the coordinator builds a new graph at
// every recovery); one of an older generation is refused. A message of a newer term
// (a new leader, whose generations start anew) tears the graph down and forgets the
// generations seen; one of an older term is refused, whatever its generation, so
// that a call of a deposed leader still in flight cannot start a graph.
type Host struct {
	cfg   HostConfig
	opts  Options
	store *storage.Store
	node  *storage.Node
	cache *executors.StateCache

	mu     sync.Mutex
	cur    *hostGraph // nil before the first message, and after Close
	term   uint64     // the leader's term the generations below are of
	gen    uint64     // the newest generation seen
	down   uint64     // the newest generation torn down (Teardown)
	closed bool
}

// hostGraph is the host's side of one graph.
type hostGraph struct {
	gen    uint64
	ctx    context.Context
	cancel context.CancelFunc
	side   *nodeSide

	dmu sync.Mutex
	dml []*dmlInput // the DML actors the node built (the engine keeps them on its own node)
}

// OpenHost opens the store in cfg.Dir (creating it when missing) and returns the
// host of node cfg.Node. Close closes it.
func OpenHost(cfg HostConfig) (*Host, error) {
	opts := cfg.Options
	opts.Control, opts.CommitLog, opts.NodeStores, opts.RemoteNodes, opts.NodeRoles = nil, nil, false, nil, nil
	opts.Nodes = cfg.Node + 1
	if cfg.Node < 0 || cfg.Node >= 64 {
		return nil, fmt.Errorf("engine: host of node %d: want a node in 0..63", cfg.Node)
	}
	if err := opts.fill(); err != nil {
		return nil, fmt.Errorf("engine: host of node %d: %w", cfg.Node, err)
	}
	switch {
	case opts.Exchange == nil:
		return nil, fmt.Errorf("engine: host of node %d: no Exchange: every edge to another node crosses processes", cfg.Node)
	case cfg.Server == nil:
		return nil, fmt.Errorf("engine: host of node %d: no NodeServer for the commit log's requests", cfg.Node)
	case cfg.Report == nil:
		return nil, fmt.Errorf("engine: host of node %d: no Report to send its actors' reports with", cfg.Node)
	}
	// Partial: the store holds the committed data of the vnodes the node's actors
	// write and read only (NodeServer.Hold).
	store, err := storage.Open(cfg.Dir, storage.Options{FS: opts.FS, Cache: opts.Cache, CacheSize: opts.CacheSize, MemTableSize: opts.MemTableSize, IngestBytes: opts.IngestBytes, Partial: true})
	if err != nil {
		return nil, fmt.Errorf("engine: host of node %d: %w", cfg.Node, err)
	}
	h := &Host{cfg: cfg, opts: opts, store: store, node: store.AddNode()}
	if opts.StateCacheBytes > 0 {
		h.cache = executors.NewStateCache(opts.StateCacheBytes)
	}
	return h, nil
}

// Store is the node's store.
func (h *Host) Store() *storage.Store { return h.store }

// Generation is the newest generation the host has seen (0: none yet).
func (h *Host) Generation() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen
}

// Term is the leader's term whose generations the host takes (0: none yet).
func (h *Host) Term() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.term
}

// newTermLocked moves the host to leader term t, above its current one: a new
// leader's generations start anew, so the host tears its graph down and forgets the
// generations it saw. A term not above the current one changes nothing. h.mu is held.
func (h *Host) newTermLocked(t uint64) {
	if t <= h.term {
		return
	}
	if h.cur != nil {
		h.cur.stop()
		h.cur = nil
	}
	h.term, h.gen, h.down = t, 0, 0
}

// Running counts the actors of the current graph the node runs.
func (h *Host) Running() int {
	h.mu.Lock()
	g := h.cur
	h.mu.Unlock()
	if g == nil {
		return 0
	}
	g.side.mu.Lock()
	defer g.side.mu.Unlock()
	n := 0
	for _, a := range g.side.actors {
		if a.started {
			n++
		}
	}
	return n
}

// graph returns the host's side of the graph at, tearing an older one down first.
func (h *Host) graph(at GraphAt, what string) (*hostGraph, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	gen := at.Generation
	switch {
	case h.closed:
		return nil, fmt.Errorf("node %d: %s of generation %d: the host is closed", h.cfg.Node, what, gen)
	case at.Term < h.term:
		return nil, fmt.Errorf("node %d: %s of term %d, generation %d: the node follows term %d", h.cfg.Node, what, at.Term, gen, h.term)
	}
	h.newTermLocked(at.Term)
	switch {
	case gen < h.gen:
		return nil, fmt.Errorf("node %d: %s of generation %d: the node is at generation %d", h.cfg.Node, what, gen, h.gen)
	case gen <= h.down:
		return nil, fmt.Errorf("node %d: %s of generation %d: the graph is torn down", h.cfg.Node, what, gen)
	case h.cur != nil && h.cur.gen == gen:
		return h.cur, nil
	}
	if h.cur != nil {
		h.cur.stop()
	}
	h.gen = gen
	ctx, cancel := context.WithCancel(context.Background())
	g := &hostGraph{gen: gen, ctx: ctx, cancel: cancel}
	g.side = newNodeSide(nodeEnv{
		ctx: ctx, generation: gen, node: h.cfg.Node, store: h.node, cache: h.cache, mem: h.opts.Mem, opts: &h.opts, exchange: h.opts.Exchange,
		hold: func(ctx context.Context, needs map[uint32]*vnode.Bitmap) error {
			return h.cfg.Server.Hold(ctx, h.cfg.Node, h.store, needs)
		},
		report: func(a *nodeActor, r report) error {
			err := h.cfg.Report(ctx, gen, ControlReport{Actor: r.actor, Epoch: r.epoch, Err: r.err, Backfill: r.backfill, Pending: r.pending})
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("actor %d: report to the coordinator: %w", a.id, err)
			}
			return ctx.Err()
		},
		finishing: func(a *nodeActor) {
			// A report that does not leave is a lost stream, which fails the round.
			_ = h.cfg.Report(ctx, gen, ControlReport{Actor: a.id, Finishing: true})
		},
		addDML: func(ins []*dmlInput) {
			g.dmu.Lock()
			defer g.dmu.Unlock()
			g.dml = append(g.dml, ins...)
		},
		dropDML: func(id executors.ActorID) {
			g.dmu.Lock()
			defer g.dmu.Unlock()
			for i, in := range g.dml {
				if in.actor == id {
					g.dml = append(g.dml[:i], g.dml[i+1:]...)
					break
				}
			}
		},
	})
	h.cur = g
	return g, nil
}

// stop tears the graph's side down: its actors stop, and what its edges buffer is
// released.
func (g *hostGraph) stop() {
	g.cancel()
	g.side.halt()
	g.side.release()
	g.dmu.Lock()
	defer g.dmu.Unlock()
	for _, in := range g.dml {
		drainNow(in.c)
	}
	g.dml = nil
}

// Build builds (or starts, or drops) the actors of spec, a build spec of version
// BuildSpecVersion for the host's node: all of it, or nothing and an error.
func (h *Host) Build(ctx context.Context, at GraphAt, spec []byte) error {
	g, err := h.graph(at, "build")
	if err != nil {
		return err
	}
	return g.side.apply(ctx, spec)
}

// Inject puts barrier b at the node's sources, its DML actors (the engine keeps them
// on its own node, so a compute node usually has none), and returns once they all
// took it.
func (h *Host) Inject(ctx context.Context, at GraphAt, b *executors.Barrier) error {
	g, err := h.graph(at, fmt.Sprintf("barrier %d", b.Curr))
	if err != nil {
		return err
	}
	g.dmu.Lock()
	ins := append([]*dmlInput(nil), g.dml...)
	g.dmu.Unlock()
	for _, in := range ins {
		select {
		case in.c <- executors.BarrierMessage(b):
		case <-g.ctx.Done():
			return fmt.Errorf("barrier %d at node %d: the graph of generation %d is torn down", b.Curr, h.cfg.Node, at.Generation)
		case <-ctx.Done():
			return fmt.Errorf("barrier %d at node %d: %w", b.Curr, h.cfg.Node, ctx.Err())
		}
	}
	return nil
}

// Call answers a request of the commit log for the node's part of a checkpoint, or
// its recovery, with the node's store. A request of a newer generation (a recovery's)
// tears the older graph's actors down first.
func (h *Host) Call(ctx context.Context, at GraphAt, req []byte) ([]byte, error) {
	if _, err := h.graph(at, "call"); err != nil {
		return nil, err
	}
	return h.cfg.Server.ServeNode(ctx, h.cfg.Node, h.store, req)
}

// Teardown stops the actors of generation at.Generation and of every older one of
// its term; the node's uncommitted data stays until the next recovery's request drops
// it. A teardown of an older term changes nothing.
func (h *Host) Teardown(at GraphAt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if at.Term < h.term {
		return
	}
	h.newTermLocked(at.Term)
	gen := at.Generation
	if h.cur != nil && h.cur.gen <= gen {
		h.cur.stop()
		h.cur = nil
	}
	h.gen, h.down = max(h.gen, gen), max(h.down, gen)
}

// Close tears the current graph's side down and closes the node's store.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return errors.New("engine: host: closed twice")
	}
	h.closed = true
	g := h.cur
	h.cur = nil
	h.mu.Unlock()
	if g != nil {
		g.stop()
	}
	if err := h.store.Close(); err != nil {
		return fmt.Errorf("engine: host of node %d: %w", h.cfg.Node, err)
	}
	return nil
}
