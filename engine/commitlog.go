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
	// Commit commits epoch: store's sealed data up to epoch and its staged catalog
	// changes and table drops (storage.Store.Staged), durably in the log, then
	// applies the commit to store, so that store's committed epoch is epoch when
	// Commit returns nil. On an error the engine fails and nothing it wrote since
	// the last commit is kept; the error says whether the log may hold the commit
	// (a reopen catches up and so learns which). generation is that of the graph
	// whose barrier the checkpoint is: the log refuses one below its last commit's.
	Commit(ctx context.Context, store *storage.Store, epoch, generation uint64) (storage.CheckpointStats, error)
}

// commit commits epoch into the commit log, or into the store when there is none.
func (e *Engine) commit(epoch uint64) (storage.CheckpointStats, error) {
	if e.opts.CommitLog == nil {
		return e.store.Checkpoint(epoch)
	}
	cs, err := e.opts.CommitLog.Commit(context.Background(), e.store, epoch, e.generation)
	if err == nil && e.store.CommittedEpoch() != epoch {
		err = fmt.Errorf("the commit log returned with the store at epoch %d", e.store.CommittedEpoch())
	}
	return cs, err
}

// catchUp brings the store up to the commit log's committed state (nothing without
// one).
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
