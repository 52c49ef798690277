package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
)

// ErrReadOnly is the error (errors.Is) of a write, a catalog change or a control
// made on a Replica.
var ErrReadOnly = errors.New("a replica is read-only: write to the engine that commits to the log")

// Replica is a read-only copy of an engine whose checkpoints commit to a commit log:
// its directory follows the log, applying each commit as the engine that made it did
// (engine/cluster/commitlog's Follower reads the log without taking part in it). It
// runs no actors. Scan and Snapshot read at the epoch the replica applied last;
// WaitCheckpoint catches up with the log first, so that after the committing
// engine's WaitCheckpoint returned epoch E, the replica's returns E or later. A
// Replica is an engine.DB whose writes, catalog changes and controls fail with
// ErrReadOnly. Every method is safe for concurrent use.
type Replica struct {
	opts    Options
	dir     string
	store   *storage.Store
	scanMem memory.Allocator

	follow sync.Mutex // one catch-up at a time

	mu     sync.Mutex // guards cat and closed
	cat    *catalog
	closed bool

	stop, done chan struct{} // the follower goroutine's (nil when BarrierInterval < 0)
}

var _ DB = (*Replica)(nil)

// OpenReplica opens the replica in dir (created when missing; a directory an
// embedded engine committed into is refused) following opts.CommitLog, which is
// required, and catches up with it. Every opts.BarrierInterval (default 100ms;
// negative: never) it catches up again in the background. Of the other options only
// those of the store (FS, Cache, CacheSize, MemTableSize), ChunkSize, Mem and Logger
// apply.
func OpenReplica(ctx context.Context, dir string, opts Options) (*Replica, error) {
	if opts.CommitLog == nil {
		return nil, errors.New("engine: open replica: Options.CommitLog is required (the log it follows)")
	}
	scanMem := opts.Mem
	if scanMem == nil {
		scanMem = memory.DefaultAllocator
	}
	if err := opts.fill(); err != nil {
		return nil, err
	}
	store, err := storage.Open(dir, storage.Options{FS: opts.FS, Cache: opts.Cache, CacheSize: opts.CacheSize, MemTableSize: opts.MemTableSize})
	if err != nil {
		return nil, fmt.Errorf("engine: open replica: %w", err)
	}
	r := &Replica{opts: opts, dir: dir, store: store, scanMem: scanMem}
	if _, err := r.catchUp(ctx); err != nil {
		store.Close()
		return nil, fmt.Errorf("engine: open replica %s: %w", dir, err)
	}
	if opts.BarrierInterval > 0 {
		r.stop, r.done = make(chan struct{}), make(chan struct{})
		go r.background(opts.BarrierInterval)
	}
	return r, nil
}

// catchUp applies the log's commits above the store's and reloads the catalog.
func (r *Replica) catchUp(ctx context.Context) (executors.Epoch, error) {
	r.follow.Lock()
	defer r.follow.Unlock()
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	if _, err := r.opts.CommitLog.CatchUp(ctx, r.store); err != nil {
		return 0, fmt.Errorf("catch up from the commit log: %w", err)
	}
	cat, err := loadCatalog(r.store)
	if err != nil {
		return 0, fmt.Errorf("catch up from the commit log: %w", err)
	}
	r.mu.Lock()
	r.cat = cat
	r.mu.Unlock()
	return executors.Epoch(r.store.CommittedEpoch()), nil
}

func (r *Replica) background(every time.Duration) {
	defer close(r.done)
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := r.catchUp(ctx)
			cancel()
			switch {
			case err != nil && !failing:
				r.opts.Logger.Warn("replica: catching up failed; retrying", "dir", r.dir, "error", err)
			case err == nil && failing:
				r.opts.Logger.Info("replica: caught up again", "dir", r.dir, "committed_epoch", r.store.CommittedEpoch())
			}
			failing = err != nil
		}
	}
}

// CommittedEpoch is the epoch the replica applied last.
func (r *Replica) CommittedEpoch() executors.Epoch { return executors.Epoch(r.store.CommittedEpoch()) }

// WaitCheckpoint catches up with the log and returns the epoch it then holds.
func (r *Replica) WaitCheckpoint(ctx context.Context) (executors.Epoch, error) {
	return r.catchUp(ctx)
}

// Snapshot opens a read at the epoch the replica applied last (see Engine.Snapshot).
func (r *Replica) Snapshot() (*Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	return newSnapshot(r.store, r.cat, r.opts.ChunkSize, r.scanMem)
}

// Scan reads a table or view at the epoch the replica applied last.
func (r *Replica) Scan(ctx context.Context, name string) (array.RecordReader, error) {
	s, err := r.Snapshot()
	if err != nil {
		return nil, err
	}
	defer s.Release()
	return s.Scan(ctx, name)
}

// Table returns a copy of a table's or view's schema, as of the last catch-up.
func (r *Replica) Table(name string) (*schema.Table, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.cat.objects[name]
	if !ok {
		return nil, fmt.Errorf("no table or materialized view %q", name)
	}
	return cloneTable(o.t), nil
}

// Close stops following the log and closes the store. A second Close returns nil.
func (r *Replica) Close() error {
	if r.stop != nil {
		select {
		case <-r.done:
		default:
			close(r.stop)
			<-r.done
		}
	}
	r.follow.Lock()
	defer r.follow.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	return r.store.Close()
}

func (r *Replica) readOnly(what string) error { return fmt.Errorf("%s: %w", what, ErrReadOnly) }

// CreateTable implements DB: it fails with ErrReadOnly.
func (r *Replica) CreateTable(context.Context, *schema.Table, TableOptions) error {
	return r.readOnly("create table")
}

// Insert implements DB: it fails with ErrReadOnly.
func (r *Replica) Insert(_ context.Context, table string, _ arrow.RecordBatch) error {
	return r.readOnly("insert into " + table)
}

// Upsert implements DB: it fails with ErrReadOnly.
func (r *Replica) Upsert(_ context.Context, table string, _ arrow.RecordBatch) error {
	return r.readOnly("upsert into " + table)
}

// Update implements DB: it fails with ErrReadOnly.
func (r *Replica) Update(_ context.Context, table string, _ arrow.RecordBatch) error {
	return r.readOnly("update " + table)
}

// Delete implements DB: it fails with ErrReadOnly.
func (r *Replica) Delete(_ context.Context, table string, _ arrow.RecordBatch) error {
	return r.readOnly("delete from " + table)
}

// CreateMV implements DB: it fails with ErrReadOnly.
func (r *Replica) CreateMV(_ context.Context, name string, _ Plan, _ MVOptions) error {
	return r.readOnly("create materialized view " + name)
}

// DropMV implements DB: it fails with ErrReadOnly.
func (r *Replica) DropMV(_ context.Context, name string) error {
	return r.readOnly("drop materialized view " + name)
}

// RescheduleMV implements DB: it fails with ErrReadOnly.
func (r *Replica) RescheduleMV(_ context.Context, name string, _ int) error {
	return r.readOnly("reschedule materialized view " + name)
}

// PauseMV implements DB: it fails with ErrReadOnly.
func (r *Replica) PauseMV(_ context.Context, name string) error {
	return r.readOnly("pause materialized view " + name)
}

// ResumeMV implements DB: it fails with ErrReadOnly.
func (r *Replica) ResumeMV(_ context.Context, name string) error {
	return r.readOnly("resume materialized view " + name)
}

// SetRateLimit implements DB: it fails with ErrReadOnly.
func (r *Replica) SetRateLimit(_ context.Context, name string, _ *int64) error {
	return r.readOnly("set the rate limit of materialized view " + name)
}

// Pause implements DB: it fails with ErrReadOnly.
func (r *Replica) Pause(context.Context) error { return r.readOnly("pause") }

// Resume implements DB: it fails with ErrReadOnly.
func (r *Replica) Resume(context.Context) error { return r.readOnly("resume") }
