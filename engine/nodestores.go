package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/storage"
)

// Node stores (Options.NodeStores): each node keeps a store of its own, as a compute
// process does, under the engine's directory. A node's store is a rebuildable copy of
// the commit log's committed state (every vnode's) plus the node's own sealed,
// uncommitted data: its actors' state tables, their lookups and its backfills'
// snapshots read it, and nothing of another node's uncommitted data is in it. A
// checkpoint exports every node's store on its own and the commit log commits the
// exports together (CommitRequest), then every store, the engine's included, applies
// the commit. The engine's own store holds no node: it keeps the catalog and serves
// Scan and the progress reads.

// nodeStoreDir is the directory of node i's store in the engine's directory dir.
func nodeStoreDir(fs vfs.FS, dir string, i int) string {
	return fs.PathJoin(dir, storage.NodeStoresDirName, fmt.Sprintf("node-%d", i))
}

// openStores opens the engine's store in dir and, with opts.NodeStores, every node's
// store, sharing one block cache (opts.Cache, or one of CacheSize made here).
func openStores(dir string, opts Options) (*storage.Store, []*storage.Store, error) {
	so := storage.Options{FS: opts.FS, Cache: opts.Cache, CacheSize: opts.CacheSize, MemTableSize: opts.MemTableSize, IngestBytes: opts.IngestBytes}
	if opts.NodeStores && so.Cache == nil {
		size := so.CacheSize
		if size == 0 {
			size = storage.DefaultCacheSize
		}
		so.Cache = pebble.NewCache(size)
		defer so.Cache.Unref() // each store holds a reference of its own
	}
	store, err := storage.Open(dir, so)
	if err != nil || !opts.NodeStores {
		return store, nil, err
	}
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	var nodes []*storage.Store
	for i := range opts.Nodes {
		if slices.Contains(opts.RemoteNodes, i) || dmlOnly(&opts, i) {
			nodes = append(nodes, nil) // in its compute process, or none (the engine's)
			continue
		}
		d := nodeStoreDir(fs, dir, i)
		nso := so
		nso.Partial = true // it holds the vnodes its actors read only (NodeServer.Hold)
		s, err := storage.Open(d, nso)
		if err != nil {
			closeStores(append(nodes, store))
			return nil, nil, fmt.Errorf("the store of node %d: %w", i, err)
		}
		nodes = append(nodes, s)
	}
	return store, nodes, nil
}

// closeStores closes stores (skipping nil ones) and returns their errors joined.
func closeStores(stores []*storage.Store) error {
	var errs []error
	for _, s := range stores {
		if s == nil {
			continue
		}
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stores is the engine's store followed by its nodes' own in this process
// (Options.NodeStores; a remote node's is in its compute process).
func (e *Engine) stores() []*storage.Store {
	out := []*storage.Store{e.store}
	for _, s := range e.nodeStores {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// dropUncommitted drops the engine's store's sealed, uncommitted data and staged
// changes: recovery's first step (each node drops its own at recoverNodes).
func (e *Engine) dropUncommitted() {
	e.store.DropUncommitted()
	e.store.DiscardStaged()
}

// NodeCommitLog is a CommitLog that commits the nodes' own stores
// (Options.NodeStores): it serves a node's side of the requests it sends the nodes
// (NodeServer), and has every node recover its store.
type NodeCommitLog interface {
	CommitLog
	NodeServer
	// RecoverNodes has each of nodes drop its store's uncommitted data and catch
	// up from the log: a recovery, before the new graph's actors are built.
	RecoverNodes(ctx context.Context, nodes []CommitNode) error
}

// commitNodes are the nodes of graph g as the commit log reaches them (nil without
// node stores): over g's control streams when it has a control, by a call to the
// node's side in this process otherwise.
func (e *Engine) commitNodes(g *graph) []CommitNode {
	if len(e.nodeStores) == 0 {
		return nil
	}
	var nodes []CommitNode
	for i := range e.nodeStores {
		if g.downNodes[i] {
			continue // no actor of g runs there; it catches up when it is back
		}
		if dmlOnly(&e.opts, i) {
			continue // no store of its own
		}
		nodes = append(nodes, CommitNode{Node: i, Call: func(ctx context.Context, req []byte) ([]byte, error) {
			if g.ctl != nil {
				return g.ctl.Call(ctx, i, req)
			}
			return e.serveNode(ctx, i, req)
		}})
	}
	return nodes
}

// serveNode is node's side of a commit log's request: the log's NodeServer with the
// node's own store.
func (e *Engine) serveNode(ctx context.Context, node int, req []byte) ([]byte, error) {
	ns, ok := e.opts.CommitLog.(NodeServer)
	if !ok || node < 0 || node >= len(e.nodeStores) || e.nodeStores[node] == nil {
		return nil, fmt.Errorf("node %d: no store of its own to serve the commit log's request (the engine has %d)", node, len(e.nodeStores))
	}
	return ns.ServeNode(ctx, node, e.nodeStores[node], req)
}

// recoverNodes has every node with a store of its own recover it (drop its
// uncommitted data, catch up from the log) over g's control: once g's control is
// open and before g's actors are built.
func (e *Engine) recoverNodes(ctx context.Context, g *graph) error {
	if len(e.nodeStores) == 0 {
		return nil
	}
	return e.opts.CommitLog.(NodeCommitLog).RecoverNodes(ctx, e.commitNodes(g))
}
