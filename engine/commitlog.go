package engine

import (
	"context"
	"fmt"

	"github.com/seed04fbb902/weir/storage"
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
	// Nodes are the nodes' own stores (Options.NodeStores), in node order: each
	// one's sealed data is exported on its own (each vnode of a table is written by
	// one node between two checkpoints, so the exports never overlap), and each
	// applies the whole commit. Nil without node stores.
	Nodes []*storage.Store
	// Epoch is the epoch committed; Generation that of the graph whose barrier the
	// checkpoint is.
	Epoch, Generation uint64
}

// commit commits epoch into the commit log, or into the store when there is none.
func (e *Engine) commit(epoch uint64) (storage.CheckpointStats, error) {
	if e.opts.CommitLog == nil {
		return e.store.Checkpoint(epoch)
	}
	cs, err := e.opts.CommitLog.Commit(context.Background(), CommitRequest{Store: e.store, Nodes: e.nodeStores, Epoch: epoch, Generation: e.generation})
	if err != nil {
		return cs, err
	}
	for _, s := range e.stores() {
		if got := s.CommittedEpoch(); got != epoch {
			return cs, fmt.Errorf("the commit log returned with the store in %s at epoch %d", s.Dir(), got)
		}
	}
	return cs, nil
}

// catchUp brings the store up to the commit log's committed state (nothing without
// one).
func (e *Engine) catchUp(ctx context.Context) error {
	if e.opts.CommitLog == nil {
		return nil
	}
	for _, s := range e.stores() {
		gen, err := e.opts.CommitLog.CatchUp(ctx, s)
		if err != nil {
			if s != e.store {
				return fmt.Errorf("catch up the store in %s from the commit log: %w", s.Dir(), err)
			}
			return fmt.Errorf("catch up from the commit log: %w", err)
		}
		e.generation = max(e.generation, gen)
	}
	return nil
}
