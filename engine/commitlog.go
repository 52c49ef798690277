package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
)

// CommitLog is where an engine's checkpoints commit when its directory is not their
// durable home: cluster mode's version log in PostgreSQL with its objects in a bucket
// (engine/cluster/commitlog implements it; the engine never imports that). The
// engine's store is then a copy of what the log committed: a directory that starts
// empty, or behind, is brought up to the log's committed state when the engine opens
// and at every recovery, before the catalog is read.
//
// The engine calls a CommitLog from one goroutine at a time (its barrier rounds).
type CommitLog interface {
	// CatchUp applies to store every commit of the log above the store's own, in
	// order, and returns the graph generation of the log's last commit (0 when it
	// has none): the engine builds its graphs above it, so that a leader whose
	// clock is behind its predecessor's still commits. It fails when store holds
	// commits the log lacks.
	CatchUp(ctx context.Context, store *storage.Store) (generation uint64, err error)
	// Commit commits c.Epoch: the sealed data up to it of c.Store, or with node
	// stores of each of c.Nodes, exported on its own, and c.Store's staged catalog
	// changes and table drops (storage.Store.Staged), durably in the log, then
	// applies the commit to c.Store and to every node store, so that each one's
	// committed epoch is c.Epoch when Commit returns nil. On an error the engine
	// fails and nothing it wrote since the last commit is kept; the error says
	// whether the log may hold the commit (a reopen catches up and so learns
	// which). The log refuses a c.Generation below its last commit's.
	Commit(ctx context.Context, c CommitRequest) (storage.CheckpointStats, error)
}

// Quiescer is implemented by a CommitLog that goes on reading the engine's store after
// Commit returned (a base of the log written in the background): Quiesce returns once
// it has stopped, and the engine calls it before it closes its stores.
type Quiescer interface {
	Quiesce()
}

// quiesce waits for the commit log's background work on the stores (see Quiescer).
func (e *Engine) quiesce() {
	if q, ok := e.opts.CommitLog.(Quiescer); ok {
		q.Quiesce()
	}
}

// CommitRequest is one checkpoint for CommitLog.Commit.
type CommitRequest struct {
	// Store is the engine's store: its staged changes are the commit's, and with no
	// Nodes its sealed data is too.
	Store *storage.Store
	// Nodes are the nodes with stores of their own (Options.NodeStores), in node
	// order: the log asks each to export its sealed data on its own (each vnode of a
	// table is written by one node between two checkpoints, so the exports never
	// overlap) and to apply the whole commit. Nil without node stores.
	Nodes []CommitNode
	// Epoch is the epoch committed; Generation that of the graph whose barrier the
	// checkpoint is.
	Epoch, Generation uint64
}

// CommitNode is how a commit log reaches one node's store for the node's part of a
// checkpoint: through Call, which hands the log's request (an opaque payload in the
// log's encoding) to the node's NodeServer and returns its answer; over the node's
// control stream when the engine has a Control, by a call in this process otherwise.
type CommitNode struct {
	Node int
	Call func(ctx context.Context, req []byte) ([]byte, error)
}

// NodeServer answers a commit log's requests on a node, with the node's own store:
// export its sealed data, apply a commit or discard an export, catch up at a
// recovery. A CommitLog used with Options.NodeStores implements it.
type NodeServer interface {
	ServeNode(ctx context.Context, node int, store *storage.Store, req []byte) ([]byte, error)
	// Hold has store, node's, hold the committed data of needs (vnodes per table)
	// when it does not yet: a partial store (storage.Options.Partial) gains them
	// from the log at the commit it applied. A node's side calls it once it built
	// actors, before they start: for the vnodes of their state tables and of the
	// upstreams whose snapshots their backfills read (none once done). After a
	// recovery, the vnodes that none of the new graph's actors asked for may be
	// given up at its first commit.
	Hold(ctx context.Context, node int, store *storage.Store, needs map[uint32]*vnode.Bitmap) error
}

// ErrNodesBehind marks a CommitLog.Commit error after the commit point that left the
// commit applied to the engine's store but not to some node's (the node was lost
// before it applied it): the checkpoint is committed, and the engine recovers so that
// every node catches up.
var ErrNodesBehind = errors.New("nodes behind the commit")

// ErrNotCommitted marks a CommitLog.Commit error that leaves the log without the
// commit, for a reason a recovery mends (a node lost before the commit point): the
// engine recovers from its last checkpoint instead of failing.
var ErrNotCommitted = errors.New("not committed")

// commit commits epoch into the commit log, or into the store when there is none.
func (e *Engine) commit(epoch uint64) (storage.CheckpointStats, error) {
	if e.opts.CommitLog == nil {
		return e.store.Checkpoint(epoch)
	}
	cs, err := e.opts.CommitLog.Commit(context.Background(), CommitRequest{Store: e.store, Nodes: e.commitNodes(e.g), Epoch: epoch, Generation: e.generation})
	if err != nil {
		return cs, err
	}
	// Each node's store is the node's, which answered the log's apply.
	if got := e.store.CommittedEpoch(); got != epoch {
		return cs, fmt.Errorf("the commit log returned with the store in %s at epoch %d", e.store.Dir(), got)
	}
	return cs, nil
}

// catchUp brings the engine's store up to the commit log's committed state (nothing
// without one); the nodes' own stores catch up at recoverNodes.
func (e *Engine) catchUp(ctx context.Context) error {
	if e.opts.CommitLog == nil {
		return nil
	}
	gen, err := e.opts.CommitLog.CatchUp(ctx, e.store)
	if err != nil {
		return fmt.Errorf("catch up from the commit log: %w", err)
	}
	e.generation = max(e.generation, gen)
	return nil
}
