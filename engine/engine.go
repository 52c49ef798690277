package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/storage"
)

// Engine is an embedded streaming engine over one directory: tables, materialized
// views kept up to date as the tables change, and consistent reads of both. It is safe
// for concurrent use.
type Engine struct {
	opts  Options
	dir   string
	store *storage.Store
	// nodeStores are the nodes' own stores (Options.NodeStores; nil: every node's
	// uncommitted data is in store). See nodestores.go.
	nodeStores []*storage.Store
	nodes      []*storage.Node
	// caches are the nodes' budgets of cached operator state (nil: no cache; see
	// Options.StateCacheBytes).
	caches []*executors.StateCache
	mem    memory.Allocator
	log    *slog.Logger

	// labels is a context with the profiler labels of Open's (and nothing else of
	// it): the actors' goroutines set theirs on top of it. Set once, at Open.
	labels context.Context
	// scanMem allocates the records Scan hands out: Options.Mem when the caller set
	// it, else Arrow's Go allocator (see Options.Mem). Set once, at Open.
	scanMem memory.Allocator
	// storeMu guards storeClosed, set when close closes the store, for the readers
	// that do not take mu (StorageMetrics).
	storeMu     sync.RWMutex
	storeClosed bool

	// mu serialises barrier rounds, DDL and the fields below.
	mu         sync.Mutex
	cat        *catalog
	g          *graph
	prev       executors.Epoch
	sinceCkpt  int
	lastCkpt   time.Time // when the last checkpoint committed (or recovery ended)
	generation uint64    // the last graph's (see ExchangeEdge.Generation)
	paused     bool
	failed     error
	closed     bool
	recovering bool
	// unsent are the writes a recovery took from the torn-down graph's DML
	// inputs, to send into the new one (dmllog.go).
	unsent     map[string][]dmlWrite
	lostWrites atomic.Int64
	resent     atomic.Int64
	opened     bool // Open's own recovery succeeded: a later one may start over (recover)
	recoveries int
	// controlRetries counts the controls applied again after a lost node (retryLost).
	controlRetries int
	samples        map[string]progressSample // Progress: the last reading per view

	gmu sync.RWMutex // guards e.g (the pointer) and g.dml for writers

	stopTicker chan struct{}
	tickerDone chan struct{}
	// kick asks the ticker for a barrier now (a backfill finished its snapshot: it is
	// done at the next barrier); kickBarrier sends without blocking.
	kick chan struct{}
	// ckptAsked makes the next barrier a checkpoint (backfillFinishing).
	ckptAsked atomic.Bool
	// rounds is closed when a round ends (or the engine closes) and replaced, under
	// mu: WaitBackfill waits on it instead of polling.
	rounds chan struct{}

	closeOnce atomic.Bool
	// closing is set when Close or Crash begins: from then on every write and every
	// call that changes the engine returns ErrClosed. A writer checks it while
	// holding its table's dmlInput.mu shared, and Close takes every dmlInput.mu
	// exclusively once after setting it (fenceWriters), so a write either sent its
	// chunk before that (ahead of the final checkpoint's barrier) or sees closing.
	closing atomic.Bool
	// broken mirrors failed for the writers, which do not take mu: a write into a
	// failed engine would never be committed.
	broken atomic.Pointer[error]
}

// ErrClosed is the error (errors.Is) of every write, and of every call that changes
// the engine or waits on it, made once Close or Crash has begun. The calls that read
// the catalog (Table, Progress) go on answering from memory.
var ErrClosed = errors.New("engine: closed")

// Open opens (or creates) the engine in dir: it reads the catalog and the committed
// epoch, rebuilds every actor and sends the first barrier; every table and view then
// holds exactly its state at the last checkpoint.
//
// dir (on opts.FS) may be missing or empty, and a new engine is created in it, or
// hold an engine: any directory with one of its store's files in it (storage.Open
// lists them), so that a crash image holding only some of them opens too. A
// non-empty directory holding none is refused with an error naming it, and nothing
// is written to it. One engine at a time has dir open: while another, in this
// process or another, holds it, Open fails with an error naming the directory ("is
// in use by another engine") that wraps the lock's error.
//
// The engine's goroutines (its actors and their workers, the coordinator, pebble's)
// keep the profiler labels of ctx, under their own: a process that runs several
// engines opens each under pprof.Do to tell them apart in a CPU profile.
func Open(ctx context.Context, dir string, opts Options) (*Engine, error) {
	scanMem := opts.Mem
	if scanMem == nil {
		scanMem = memory.DefaultAllocator
	}
	if err := opts.fill(); err != nil {
		return nil, err
	}
	store, nodeStores, err := openStores(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Engine{opts: opts, dir: dir, store: store, nodeStores: nodeStores, mem: opts.Mem, log: opts.Logger, paused: opts.PauseOnBootstrap, labels: labelsOf(ctx), scanMem: scanMem,
		kick: make(chan struct{}, 1), rounds: make(chan struct{})}
	for i := 0; i < opts.Nodes; i++ {
		switch {
		case e.remote(i):
			e.nodes = append(e.nodes, nil) // its store is its compute process's
		case nodeStores != nil && nodeStores[i] != nil:
			e.nodes = append(e.nodes, nodeStores[i].AddNode())
		default:
			e.nodes = append(e.nodes, store.AddNode())
		}
		if opts.StateCacheBytes > 0 {
			var c *executors.StateCache
			if !e.remote(i) {
				c = executors.NewStateCache(opts.StateCacheBytes)
			}
			e.caches = append(e.caches, c)
		}
	}
	e.mu.Lock()
	err = e.recover(ctx)
	e.mu.Unlock()
	if err != nil {
		e.mu.Lock()
		if e.g != nil {
			e.g.teardown()
			e.takeLogs(e.g)
		}
		e.dropUnsent()
		e.mu.Unlock()
		e.quiesce()
		closeStores(e.stores())
		return nil, fmt.Errorf("engine: open %s: %w", dir, err)
	}
	e.opened = true
	if opts.BarrierInterval > 0 {
		e.stopTicker, e.tickerDone = make(chan struct{}), make(chan struct{})
		go e.ticker(e.stopTicker, e.tickerDone)
	}
	return e, nil
}

// Close makes everything written so far durable with a last checkpoint, stops every
// actor and closes the store. Every write that returned nil before Close began is in
// that checkpoint; a write made while Close runs either returns nil and is in it too,
// or returns ErrClosed and is not written. When the engine has failed, or an actor
// fails while Close waits for the writes in flight, there is no last checkpoint: the
// writes since the last one are lost, as in a crash, and Close returns an error that
// says so. After Close, writes and the calls that change the engine return ErrClosed.
// A second Close (or Crash) returns nil.
func (e *Engine) Close() error { return e.close(true) }

// Crash stops the engine as a crash of the process would, for tests and demos: no last
// checkpoint, every actor stopped, the store closed; the uncommitted epochs (held in
// memory) are lost, and reopening the directory recovers from the last checkpoint. A
// write made while Crash runs, or after, returns ErrClosed (or nil, if it was taken
// before Crash began: like every write since the last checkpoint, it is then lost).
func (e *Engine) Crash() error { return e.close(false) }

func (e *Engine) close(checkpoint bool) error {
	if e.closeOnce.Swap(true) {
		return nil
	}
	e.closing.Store(true)
	if e.stopTicker != nil {
		close(e.stopTicker)
		<-e.tickerDone
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	switch {
	case !checkpoint:
	case e.failed != nil:
		errs = append(errs, fmt.Errorf("engine: close: no final checkpoint, the writes since epoch %d are lost: %w", e.store.CommittedEpoch(), e.failed))
	default:
		if err := e.fenceWriters(); err != nil {
			errs = append(errs, fmt.Errorf("engine: close: no final checkpoint, the writes since epoch %d are lost: %w", e.store.CommittedEpoch(), err))
			break
		}
		if _, err := e.round(context.Background(), roundSpec{checkpoint: true}); err != nil {
			errs = append(errs, fmt.Errorf("engine: final checkpoint: %w", err))
		}
	}
	e.closed = true
	e.roundEnded() // waiters see the engine closed
	if e.g != nil {
		e.g.teardown()
		e.takeLogs(e.g)
	}
	e.dropUnsent() // what no checkpoint committed: a crash's, or a failed engine's
	e.storeMu.Lock()
	e.storeClosed = true
	e.storeMu.Unlock()
	e.quiesce()
	if err := closeStores(e.stores()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// labelsOf is a background context with the profiler labels of ctx.
func labelsOf(ctx context.Context) context.Context {
	var kv []string
	pprof.ForLabels(ctx, func(k, v string) bool {
		kv = append(kv, k, v)
		return true
	})
	if len(kv) == 0 {
		return context.Background()
	}
	return pprof.WithLabels(context.Background(), pprof.Labels(kv...))
}

// fenceWriters waits for the writes in flight into the graph's DML inputs: once
// closing is set, a write that has not yet checked it finds it set, so after this no
// write adds to the inputs. e.mu is held, so the graph does not change. A writer
// waits for room in its input while holding the input's lock shared; if an actor
// fails meanwhile, the input may never drain, so the fence watches the actors'
// reports too and returns the failure instead of waiting for ever (the teardown
// that follows releases such a writer, with ErrClosed).
func (e *Engine) fenceWriters() error {
	g := e.g
	for _, in := range g.inputs() {
		fenced := make(chan struct{})
		go func() {
			in.mu.Lock()
			defer in.mu.Unlock()
			close(fenced)
		}()
		select {
		case <-fenced:
		case r := <-g.reports:
			if r.err != nil {
				return r.err
			}
			// No round runs (e.mu is held), so no actor has a barrier to report.
			return fmt.Errorf("actor %d reported barrier %d outside a barrier round", r.actor, r.epoch)
		}
	}
	return nil
}

// usable is checked by every call under e.mu.
func (e *Engine) usable() error {
	if e.closed || e.closing.Load() {
		return ErrClosed
	}
	return e.failed
}

// CommittedEpoch is the epoch of the last checkpoint.
func (e *Engine) CommittedEpoch() executors.Epoch {
	return executors.Epoch(e.store.CommittedEpoch())
}

// Recoveries counts the graph rebuilds since Open (the first build included).
func (e *Engine) Recoveries() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.recoveries
}

// ControlRetries counts the controls (pauses, resumes, rate limits) that met a lost
// node and were applied again once the engine had recovered.
func (e *Engine) ControlRetries() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.controlRetries
}

// WaitCheckpoint injects a checkpoint barrier and waits until it is committed: every
// write made before the call is then durable and visible to Scan, in its tables and in
// every view over them. It returns the committed epoch.
func (e *Engine) WaitCheckpoint(ctx context.Context) (executors.Epoch, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return 0, err
	}
	b, err := e.round(ctx, roundSpec{checkpoint: true})
	if err != nil {
		return 0, err
	}
	e.moveBackfilled(ctx)
	return b.Prev, nil
}

// Barrier injects one barrier now and waits until every actor has passed it on and,
// when it is a checkpoint (every Options.CheckpointEvery-th barrier), until it is
// committed. It returns the barrier's epoch (the epoch of the writes made before the
// call) and whether it was a checkpoint. With a negative Options.BarrierInterval this
// is how a caller (a test, a simulation) drives the engine barrier by barrier.
func (e *Engine) Barrier(ctx context.Context) (executors.Epoch, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return 0, false, err
	}
	b, err := e.round(ctx, roundSpec{})
	if err != nil {
		return 0, false, err
	}
	return b.Prev, b.IsCheckpoint(), nil
}

// Flush writes the committed state held in the store's memory (pebble's memtable) to
// sstables, and starts a new write-ahead log. Nothing changes for readers. A caller
// that injects faults into the write-ahead log flushes first, so that the next
// checkpoint's commit fits the fresh memtable and does not switch logs: pebble ends the
// process when a log switch fails.
func (e *Engine) Flush() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	for _, s := range e.stores() {
		if err := s.DB().Flush(); err != nil {
			return fmt.Errorf("engine: flush %s: %w", s.Dir(), err)
		}
	}
	return nil
}

// StateCacheStats sums the nodes' cached operator state figures (see
// Options.StateCacheBytes): the budget and what is held, the lookups answered from
// memory, read from the tables or known absent, and the evictions. Zero with no cache.
func (e *Engine) StateCacheStats() executors.StateCacheStats {
	var st executors.StateCacheStats
	for _, c := range e.caches {
		if c != nil { // a remote node's is in its compute process
			st = st.Add(c.Stats())
		}
	}
	return st
}

// StorageMetrics is pebble's metrics of the engine's store (not of its nodes' own,
// Options.NodeStores): its levels, compactions, flushes and ingests. It does not wait
// for a barrier round or a checkpoint in progress. Its block cache figures are those
// of the whole cache, which other stores may share (Options.Cache). It is nil once
// the engine is closed.
func (e *Engine) StorageMetrics() *pebble.Metrics {
	e.storeMu.RLock()
	defer e.storeMu.RUnlock()
	if e.storeClosed {
		return nil
	}
	return e.store.DB().Metrics()
}
