package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
)

// Engine is an embedded streaming engine over one directory: tables, materialized
// views kept up to date as the tables change, and consistent reads of both. It is safe
// for concurrent use.
type Engine struct {
	opts  Options
	dir   string
	store *storage.Store
	nodes []*storage.Node
	mem   memory.Allocator
	log   *slog.Logger

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
	paused     bool
	failed     error
	closed     bool
	recovering bool
	recoveries int
	samples    map[string]progressSample // Progress: the last reading per view

	gmu sync.RWMutex // guards e.g (the pointer) and g.dml for writers

	stopTicker chan struct{}
	tickerDone chan struct{}
	closeOnce  atomic.Bool
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
	store, err := storage.Open(dir, storage.Options{FS: opts.FS, Cache: opts.Cache, CacheSize: opts.CacheSize, MemTableSize: opts.MemTableSize, IngestBytes: opts.IngestBytes})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Engine{opts: opts, dir: dir, store: store, mem: opts.Mem, log: opts.Logger, paused: opts.PauseOnBootstrap, labels: labelsOf(ctx), scanMem: scanMem}
	for i := 0; i < opts.Nodes; i++ {
		e.nodes = append(e.nodes, store.AddNode())
	}
	e.mu.Lock()
	err = e.recover(ctx)
	e.mu.Unlock()
	if err != nil {
		e.mu.Lock()
		if e.g != nil {
			e.g.teardown()
		}
		e.mu.Unlock()
		store.Close()
		return nil, fmt.Errorf("engine: open %s: %w", dir, err)
	}
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
	if e.g != nil {
		e.g.teardown()
	}
	e.storeMu.Lock()
	e.storeClosed = true
	e.storeMu.Unlock()
	if err := e.store.Close(); err != nil {
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
	if err := e.store.DB().Flush(); err != nil {
		return fmt.Errorf("engine: flush: %w", err)
	}
	return nil
}

// StorageMetrics is pebble's metrics of the engine's store: its levels, compactions,
// flushes and ingests. It does not wait for a barrier round or a checkpoint in
// progress. Its block cache figures are those of the whole cache, which other stores
// may share (Options.Cache). It is nil once the engine is closed.
func (e *Engine) StorageMetrics() *pebble.Metrics {
	e.storeMu.RLock()
	defer e.storeMu.RUnlock()
	if e.storeClosed {
		return nil
	}
	return e.store.DB().Metrics()
}

// CreateTable creates table t (its name, columns, pk, distribution key and vnode
// count; a zero vnode count takes Options.VnodeCount). It returns once the table is
// committed.
func (e *Engine) CreateTable(ctx context.Context, t *schema.Table, opts TableOptions) error {
	t = cloneTable(t)
	if t.VnodeCount == 0 {
		t.VnodeCount = e.opts.VnodeCount
	}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("create table %s: %w", t.Name, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if _, ok := e.cat.objects[t.Name]; ok {
		return fmt.Errorf("create table %s: a table or materialized view of that name exists", t.Name)
	}
	if err := opts.validate(t); err != nil {
		return fmt.Errorf("create table %s: %w", t.Name, err)
	}
	p := opts.Parallelism
	if p == 0 {
		p = min(len(e.nodes), t.VnodeCount)
	}
	mapping, err := vnode.EvenSplit(t.VnodeCount, p)
	if err != nil {
		return fmt.Errorf("create table %s: parallelism %d: %w", t.Name, p, err)
	}
	o := &object{ID: e.cat.nextID, Name: t.Name, Kind: kindTable, Def: tableToJSON(t), Parallelism: p, Mapping: mapping, t: t}
	f, err := e.g.addTable(o)
	if err != nil {
		return fmt.Errorf("create table %s: %w", t.Name, err)
	}
	ids := []executors.ActorID{f.dml.id}
	for _, a := range f.actors {
		ids = append(ids, a.id)
	}
	e.g.start(append([]*actor{f.dml}, f.actors...))
	_, err = e.round(ctx, roundSpec{mutation: executors.Add{Actors: ids}, stage: func() error {
		e.cat.nextID++
		e.cat.objects[o.Name] = o
		return e.cat.stage(e.store, o, false)
	}})
	if err != nil {
		return fmt.Errorf("create table %s: %w", t.Name, err)
	}
	e.gmu.RLock()
	if in := e.g.dml[t.Name]; in != nil {
		in.ready.Store(true)
	}
	e.gmu.RUnlock()
	return nil
}

func cloneTable(t *schema.Table) *schema.Table {
	return &schema.Table{
		Name:       t.Name,
		GoName:     t.GoName,
		Columns:    slices.Clone(t.Columns),
		PK:         slices.Clone(t.PK),
		DistKey:    slices.Clone(t.DistKey),
		VnodeCount: t.VnodeCount,
	}
}

// Table returns the schema of a table or materialized view: a copy of the catalog's,
// which the caller may change.
func (e *Engine) Table(name string) (*schema.Table, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	o, ok := e.cat.objects[name]
	if !ok {
		return nil, fmt.Errorf("no table or materialized view %q", name)
	}
	return cloneTable(o.t), nil
}

// The writes. Each one's rec stays the caller's, to release when it likes: the
// engine retains what it keeps of it. A write that returns nil has sent its rows to the table's actors: they
// are in the next checkpoint (see WaitCheckpoint), and in the one Close commits,
// unless the engine crashes or recovers from a failure first, which loses every
// write since the last checkpoint (a write cut short by a recovery returns an error
// and is not applied). A write during or after Close or Crash returns an error that
// is ErrClosed (errors.Is), and is not written. Nothing is acknowledged and then
// dropped by Close. A write into a materialized view is refused: views are
// read-only.

// Insert writes rows into a table; a row whose pk exists replaces it. rec must have
// the table's columns (names, Arrow types, order; no NULL in a NOT NULL column).
func (e *Engine) Insert(ctx context.Context, table string, rec arrow.RecordBatch) error {
	return e.write(ctx, table, executors.DMLInsert, rec)
}

// Upsert is Insert.
func (e *Engine) Upsert(ctx context.Context, table string, rec arrow.RecordBatch) error {
	return e.write(ctx, table, executors.DMLUpsert, rec)
}

// Update replaces the rows with rec's pks (rec has the table's columns); rows whose
// pk does not exist are ignored.
func (e *Engine) Update(ctx context.Context, table string, rec arrow.RecordBatch) error {
	return e.write(ctx, table, executors.DMLUpdate, rec)
}

// Delete deletes the rows with rec's pks; rows whose pk does not exist are ignored.
// rec has either the table's columns (only the pk columns are read) or exactly its
// pk columns, by name, in any order.
func (e *Engine) Delete(ctx context.Context, table string, rec arrow.RecordBatch) error {
	return e.write(ctx, table, executors.DMLDelete, rec)
}

func (e *Engine) write(ctx context.Context, table string, kind executors.DMLKind, rec arrow.RecordBatch) error {
	if err := e.writable(); err != nil {
		return fmt.Errorf("%s %s: %w", kind, table, err)
	}
	e.gmu.RLock()
	g := e.g
	in := g.dml[table]
	e.gmu.RUnlock()
	if in == nil || !in.ready.Load() {
		return e.noTable(kind, table)
	}
	c, err := executors.DMLChunk(in.t, kind, rec, e.mem)
	if err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	in.mu.RLock()
	defer in.mu.RUnlock()
	if err := e.writable(); err != nil {
		c.Release()
		return fmt.Errorf("%s %s: %w", kind, table, err)
	}
	select {
	case <-g.dead:
		// Torn down (a recovery, or Close): its input has room, but no actor
		// would ever read this chunk.
		c.Release()
		if e.closing.Load() {
			return fmt.Errorf("%s %s: %w", kind, table, ErrClosed)
		}
		return fmt.Errorf("%s %s: interrupted by a recovery; not written", kind, table)
	default:
	}
	select {
	case in.c <- executors.ChunkMessage(c):
		return nil
	case <-g.dead:
		c.Release()
		if e.closing.Load() {
			return fmt.Errorf("%s %s: %w", kind, table, ErrClosed)
		}
		return fmt.Errorf("%s %s: interrupted by a recovery; not written", kind, table)
	case <-ctx.Done():
		c.Release()
		return fmt.Errorf("%s %s: %w", kind, table, ctx.Err())
	}
}

// writable is the error of a write that must not be taken: the engine is closing,
// or has failed.
func (e *Engine) writable() error {
	if e.closing.Load() {
		return ErrClosed
	}
	if err := e.broken.Load(); err != nil {
		return *err
	}
	return nil
}

// noTable is the error of a write into a name that has no DML input: a view, or no
// object at all.
func (e *Engine) noTable(kind executors.DMLKind, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return fmt.Errorf("%s %s: %w", kind, name, err)
	}
	if o, ok := e.cat.objects[name]; ok && o.Kind == kindMV {
		return fmt.Errorf("%s %s: %s is a materialized view, which is read-only; write into its upstream tables (%s)", kind, name, name, strings.Join(o.Upstreams, ", "))
	}
	return fmt.Errorf("%s %s: no such table", kind, name)
}

// CreateMV creates materialized view name over plan, and returns once it is
// committed. Planning errors (a missing table or column, an expression that does not
// type, an impossible no-shuffle placement) change nothing.
//
// The view's rows over the upstream's existing rows come from its backfill (see
// MVOptions.Backfill), while it follows the upstream's changes; Progress reports it.
// Unless opts.Background is set or the backfill starts paused (MVOptions.Paused, a
// rate limit of 0, the engine's Pause), CreateMV then waits for the backfill to
// finish. When ctx ends first, the view is dropped again and the error says so, as a
// cancelled CREATE MATERIALIZED VIEW is rolled back; when the wait fails otherwise
// (a recovery), the view stays and its backfill goes on.
func (e *Engine) CreateMV(ctx context.Context, name string, plan Plan, opts MVOptions) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if _, ok := e.cat.objects[name]; ok {
		return fmt.Errorf("create materialized view %s: a table or materialized view of that name exists", name)
	}
	if name == "" {
		return errors.New("create materialized view: empty name")
	}
	if err := checkPlanTree(plan); err != nil {
		return fmt.Errorf("create materialized view %s: %w", name, err)
	}
	if err := opts.validate(); err != nil {
		return fmt.Errorf("create materialized view %s: %w", name, err)
	}
	opts.RateLimit = copyLimit(opts.RateLimit) // the catalog's own
	low, err := lower(name, plan, e.lookup, opts.Backfill, e.mem)
	if err != nil {
		return fmt.Errorf("create %w", err)
	}
	scans := low.scans()
	p := opts.Parallelism
	if low.kind == NoShuffleBackfill {
		for _, n := range scans {
			up := n.scan.upstream
			if p == 0 {
				p = up.Parallelism
			}
			if p != up.Parallelism {
				return fmt.Errorf("create materialized view %s: a no-shuffle backfill co-locates one view actor with each of the %d actors of %s; parallelism %d cannot be placed", name, up.Parallelism, up.Name, p)
			}
		}
	}
	if p == 0 {
		p = min(len(e.nodes), low.out.VnodeCount)
	}
	var mappings [][]uint16
	for _, n := range low.nodes {
		if n.kind == scanNode && low.kind == NoShuffleBackfill {
			mappings = append(mappings, slices.Clone(n.scan.upstream.Mapping))
			continue
		}
		if err := checkParallelism(p, n.vnodeCount); err != nil {
			return fmt.Errorf("create materialized view %s: %w (the vnode count of its %s node)", name, err, n.kind)
		}
		m, err := vnode.EvenSplit(n.vnodeCount, p)
		if err != nil {
			return fmt.Errorf("create materialized view %s: parallelism %d: %w", name, p, err)
		}
		mappings = append(mappings, m)
	}
	planJSON, err := marshalPlan(plan)
	if err != nil {
		return fmt.Errorf("create materialized view %s: %w", name, err)
	}
	o := &object{
		ID: e.cat.nextID, Name: name, Kind: kindMV, Def: tableToJSON(low.out), Parallelism: p,
		Mapping: mappings[len(mappings)-1], Mappings: mappings,
		Plan: planJSON, Backfill: string(low.kind), RateLimit: opts.RateLimit, Paused: opts.Paused,
		t: low.out, plan: plan,
	}
	for i := range low.stateIDs() {
		o.StateIDs = append(o.StateIDs, e.cat.nextID+1+uint32(i))
	}
	o.ProgressID = o.StateIDs[0]
	for _, n := range scans {
		o.Upstreams = append(o.Upstreams, n.scan.upstream.Name)
		n.scan.common = backfillCommon{rateLimit: opts.RateLimit}
	}
	j, specs, err := e.g.addView(o, low, false)
	if err != nil {
		return fmt.Errorf("create materialized view %s: %w", name, err)
	}
	var ids []executors.ActorID
	actors := j.actors()
	for _, a := range actors {
		ids = append(ids, a.id)
	}
	e.g.start(actors)
	_, err = e.round(ctx, roundSpec{
		mutation: executors.Add{Actors: ids, Dispatchers: specs},
		stage: func() error {
			e.cat.nextID += 1 + uint32(len(o.StateIDs))
			e.cat.objects[o.Name] = o
			return e.cat.stage(e.store, o, false)
		},
	})
	if err != nil {
		return fmt.Errorf("create materialized view %s: %w", name, err)
	}
	if opts.Background || opts.Paused || e.paused || (opts.RateLimit != nil && *opts.RateLimit == 0) {
		return nil
	}
	e.mu.Unlock()
	err = e.WaitBackfill(ctx, name)
	e.mu.Lock()
	if err != nil {
		return e.undoCreate(ctx, o, err)
	}
	return nil
}

// undoCreate drops view o again after its foreground CreateMV was cancelled waiting
// for the backfill (ctx ended), as a cancelled CREATE MATERIALIZED VIEW is rolled
// back: the returned error is cause's, and says whether the view is gone. A view
// whose backfill finished meanwhile is kept (and CreateMV returns nil), and so is one
// whose wait failed for another reason (a recovery: its backfill goes on). e.mu is
// held.
func (e *Engine) undoCreate(ctx context.Context, o *object, cause error) error {
	name := o.Name
	if err := e.usable(); err != nil {
		return fmt.Errorf("create materialized view %s: %w (the view stays, and its backfill goes on when the directory is opened again)", name, cause)
	}
	if e.cat.objects[name] != o {
		// Dropped (or dropped and created again) by another call meanwhile.
		return fmt.Errorf("create materialized view %s: %w", name, cause)
	}
	if j, ok := e.g.jobs[name]; ok && jobDone(j) {
		return nil
	}
	if ctx.Err() == nil {
		return fmt.Errorf("create materialized view %s: %w (the view stays, and its backfill goes on)", name, cause)
	}
	if err := e.dropLocked(context.WithoutCancel(ctx), name); err != nil {
		return fmt.Errorf("create materialized view %s: %w (dropping the view again failed: %v)", name, cause, err)
	}
	return fmt.Errorf("create materialized view %s: %w (the view was dropped again)", name, cause)
}

// WaitBackfill blocks until the backfill of view name is done (or ctx ends). With
// barriers on demand only (a negative BarrierInterval), it injects them itself.
func (e *Engine) WaitBackfill(ctx context.Context, name string) error {
	for {
		e.mu.Lock()
		if err := e.usable(); err != nil {
			e.mu.Unlock()
			return err
		}
		j, ok := e.g.jobs[name]
		if !ok {
			e.mu.Unlock()
			return fmt.Errorf("wait for the backfill of %s: no such materialized view", name)
		}
		if jobDone(j) {
			e.mu.Unlock()
			return nil
		}
		var err error
		if e.opts.BarrierInterval < 0 {
			_, err = e.round(ctx, roundSpec{})
		}
		e.mu.Unlock()
		if err != nil {
			return fmt.Errorf("wait for the backfill of %s: %w", name, err)
		}
		pause := time.Millisecond
		if e.opts.BarrierInterval > 0 {
			pause = min(e.opts.BarrierInterval, 10*time.Millisecond)
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return fmt.Errorf("wait for the backfill of %s: %w", name, ctx.Err())
		}
	}
}

// jobDone reports whether every backfill actor of j is done.
func jobDone(j *job) bool {
	for _, f := range j.scans() {
		for _, a := range f.actors {
			if a.backfill != nil && !a.backfill.Stats().Done {
				return false
			}
		}
	}
	return true
}

// DropMV drops a materialized view: its actors stop at a Stop barrier, and its rows
// and catalog entry are deleted in that barrier's checkpoint. A view that other views
// read cannot be dropped.
func (e *Engine) DropMV(ctx context.Context, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	return e.dropLocked(ctx, name)
}

func (e *Engine) dropLocked(ctx context.Context, name string) error {
	o, ok := e.cat.objects[name]
	if !ok || o.Kind != kindMV {
		return fmt.Errorf("drop materialized view %s: no such materialized view", name)
	}
	if deps := e.cat.dependents(name); len(deps) > 0 {
		return fmt.Errorf("drop materialized view %s: read by %v; drop those first", name, deps)
	}
	j := e.g.jobs[name]
	var ids []executors.ActorID
	for _, a := range j.actors() {
		ids = append(ids, a.id)
	}
	_, err := e.round(ctx, roundSpec{mutation: executors.Stop{Actors: ids}, stage: func() error {
		delete(e.cat.objects, name)
		if err := e.cat.stage(e.store, o, true); err != nil {
			return err
		}
		for _, id := range append([]uint32{o.ID}, o.StateIDs...) {
			if err := e.store.StageDropTable(id); err != nil {
				return err
			}
		}
		return nil
	}})
	if err != nil {
		return fmt.Errorf("drop materialized view %s: %w", name, err)
	}
	delete(e.g.frags, name)
	delete(e.g.jobs, name)
	delete(e.samples, name)
	for _, f := range j.scans() {
		f.up.downstream = slices.DeleteFunc(f.up.downstream, func(d *fragment) bool { return d == f })
	}
	return nil
}

// RescheduleMV changes the parallelism of a materialized view online: one checkpoint
// Update barrier replaces every actor of its fragment. The upstream's dispatchers
// connect the new actors before the barrier and drop the old ones after it; the new
// actors start from the persisted state of their new vnodes.
func (e *Engine) RescheduleMV(ctx context.Context, name string, parallelism int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	o, ok := e.cat.objects[name]
	if !ok || o.Kind != kindMV {
		return fmt.Errorf("reschedule materialized view %s: no such materialized view", name)
	}
	g := e.g
	j := g.jobs[name]
	root := j.root()
	if j.low.kind == NoShuffleBackfill {
		return fmt.Errorf("reschedule materialized view %s: it is co-located with %s (no-shuffle backfill), so its parallelism is that of %s", name, strings.Join(o.Upstreams, ", "), strings.Join(o.Upstreams, ", "))
	}
	for _, d := range root.downstream {
		if _, ok := d.pn.scan.kind.(noShuffleVariant); ok {
			return fmt.Errorf("reschedule materialized view %s: %s is co-located with it (no-shuffle backfill)", name, d.obj.Name)
		}
	}
	var mappings []vnode.Mapping
	for _, f := range j.frags {
		if err := checkParallelism(parallelism, f.pn.vnodeCount); err != nil {
			return fmt.Errorf("reschedule materialized view %s: %w (the vnode count of its %s node)", name, err, f.pn.kind)
		}
		m, _, err := vnode.Rebalance(f.mapping, o.Parallelism, parallelism)
		if err != nil {
			return fmt.Errorf("reschedule materialized view %s: %w", name, err)
		}
		if h := e.opts.Hooks.Rebalance; h != nil {
			m = h(slices.Clone(f.mapping), o.Parallelism, parallelism)
			if err := m.Validate(f.pn.vnodeCount, parallelism); err != nil {
				return fmt.Errorf("reschedule materialized view %s: Hooks.Rebalance: %w", name, err)
			}
		}
		mappings = append(mappings, m)
	}
	base := int(g.nextActor)
	sets, err := g.jobActors(j, mappings, parallelism, func(f *fragment, i int, vnodes *vnode.Bitmap) int {
		if n, ok := upstreamNode(f, vnodes); ok {
			return n
		}
		return (base + i) % len(e.nodes)
	})
	if err != nil {
		return fmt.Errorf("reschedule materialized view %s: %w", name, err)
	}
	newRoot := sets[len(sets)-1]
	var all []*actor
	for _, set := range sets {
		all = append(all, set...)
	}
	// The new root actors feed the downstream views as the old ones did.
	for _, a := range newRoot {
		for _, d := range root.downstream {
			spec := feedSpecs(d, &fragment{actors: []*actor{a}}, d.actors, d.mapping)[0]
			disp, err := NewDispatcher(a.id, spec, a.k, g.outputFrom(a.id), e.mem)
			if err != nil {
				for _, set := range sets {
					g.discard(set)
				}
				return fmt.Errorf("reschedule materialized view %s: %w", name, err)
			}
			a.disp = append(a.disp, disp)
		}
	}
	var oldIDs []executors.ActorID
	for _, a := range j.actors() {
		oldIDs = append(oldIDs, a.id)
	}
	upd := executors.Update{Vnodes: map[executors.ActorID]*vnode.Bitmap{}, Stop: oldIDs}
	for _, a := range all {
		upd.Vnodes[a.id] = a.vnodes
	}
	for fi, f := range j.frags {
		if f.up == nil {
			continue
		}
		var outs []executors.Output
		var old []executors.ActorID
		for _, a := range sets[fi] {
			outs = append(outs, executors.Output{Actor: a.id, Node: a.node})
		}
		for _, a := range f.actors {
			old = append(old, a.id)
		}
		for _, u := range f.up.actors {
			upd.Dispatchers = append(upd.Dispatchers, executors.DispatcherUpdate{Actor: u.id, Fragment: f.id, AddOutputs: outs, RemoveOutputs: old, Mapping: slices.Clone(mappings[fi])})
		}
	}
	var oldRoot, newRootIDs []executors.ActorID
	for _, a := range root.actors {
		oldRoot = append(oldRoot, a.id)
	}
	for _, a := range newRoot {
		newRootIDs = append(newRootIDs, a.id)
	}
	for _, d := range root.downstream {
		for _, da := range d.actors {
			upd.Merges = append(upd.Merges, executors.MergeUpdate{Actor: da.id, AddInputs: newRootIDs, RemoveInputs: oldRoot})
		}
	}
	g.start(all)
	_, err = e.round(ctx, roundSpec{mutation: upd, stage: func() error {
		o.Parallelism = parallelism
		o.Mappings = o.Mappings[:0]
		for _, m := range mappings {
			o.Mappings = append(o.Mappings, m)
		}
		o.Mapping = o.Mappings[len(o.Mappings)-1]
		return e.cat.stage(e.store, o, false)
	}})
	if err != nil {
		return fmt.Errorf("reschedule materialized view %s: %w", name, err)
	}
	for fi, f := range j.frags {
		f.actors = sets[fi]
		f.mapping = mappings[fi]
	}
	return nil
}

// Pause pauses every job's snapshot reads (and sources) at the next barrier; writes
// and the change stream keep flowing. It is the engine's pause, which Resume undoes;
// a view's own pause (PauseMV) is apart from it.
func (e *Engine) Pause(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if _, err := e.round(ctx, roundSpec{mutation: executors.Pause{}}); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	e.paused = true
	return nil
}

// Resume undoes Pause and Options.PauseOnBootstrap. Views under their own pause
// (MVOptions.Paused, PauseMV) stay paused until ResumeMV.
func (e *Engine) Resume(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if _, err := e.round(ctx, roundSpec{mutation: executors.Resume{}}); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	e.paused = false
	return nil
}

// PauseMV pauses the backfill of view name at the next barrier (a checkpoint, which
// persists it: the view stays paused across recoveries and reopens) until ResumeMV:
// no snapshot row is read, while barriers and the upstream's changes keep flowing, as
// a rate limit of 0 does, but the view's rate limit is kept for the resume. Pausing a
// paused view, or one whose backfill is done, changes nothing that shows.
func (e *Engine) PauseMV(ctx context.Context, name string) error {
	return e.setPaused(ctx, name, true)
}

// ResumeMV undoes PauseMV and MVOptions.Paused for view name. The engine's own pause
// (Pause), if any, still holds.
func (e *Engine) ResumeMV(ctx context.Context, name string) error {
	return e.setPaused(ctx, name, false)
}

func (e *Engine) setPaused(ctx context.Context, name string, paused bool) error {
	what := "resume"
	if paused {
		what = "pause"
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	o, ok := e.cat.objects[name]
	if !ok || o.Kind != kindMV {
		return fmt.Errorf("%s %s: no such materialized view", what, name)
	}
	j, ok := e.g.jobs[name]
	if !ok {
		return fmt.Errorf("%s %s: the view has no running job", what, name)
	}
	var frags []executors.FragmentID
	for _, f := range j.scans() {
		frags = append(frags, f.id)
	}
	// A Pause or Resume without fragments is the engine's: a view with no backfill
	// fragment has nothing to pause, and only its flag is persisted.
	var m executors.Mutation
	switch {
	case len(frags) == 0:
	case paused:
		m = executors.Pause{Fragments: frags}
	default:
		m = executors.Resume{Fragments: frags}
	}
	_, err := e.round(ctx, roundSpec{mutation: m, checkpoint: true, stage: func() error {
		o.Paused = paused
		return e.cat.stage(e.store, o, false)
	}})
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, name, err)
	}
	return nil
}

// SetRateLimit sets a materialized view's backfill rate limit (rows per second per
// actor; nil: unlimited, 0: paused), persisted with the view.
func (e *Engine) SetRateLimit(ctx context.Context, name string, limit *int64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	o, ok := e.cat.objects[name]
	if !ok || o.Kind != kindMV {
		return fmt.Errorf("set rate limit of %s: no such materialized view", name)
	}
	if err := checkRateLimit(limit); err != nil {
		return fmt.Errorf("set rate limit of %s: %w", name, err)
	}
	j := e.g.jobs[name]
	l := copyLimit(limit)
	limits := map[executors.FragmentID]*int64{}
	for _, f := range j.scans() {
		limits[f.id] = l
	}
	_, err := e.round(ctx, roundSpec{mutation: executors.Throttle{Limits: limits}, checkpoint: true, stage: func() error {
		o.RateLimit = l
		return e.cat.stage(e.store, o, false)
	}})
	if err != nil {
		return fmt.Errorf("set rate limit of %s: %w", name, err)
	}
	for _, f := range j.scans() {
		f.pn.scan.common.rateLimit = l
	}
	return nil
}

// JobProgress is the state of one materialized view's creation job: its backfill.
type JobProgress struct {
	Name        string
	Upstream    string
	Backfill    BackfillKind
	Parallelism int
	RateLimit   *int64
	Paused      bool
	// RowsConsumed is the snapshot rows the backfill has read (restored after recovery:
	// it never goes backwards).
	RowsConsumed int64
	// VnodesCompleted of VnodesTotal upstream vnodes have finished their snapshot.
	VnodesCompleted, VnodesTotal int
	// UpstreamRows is the upstream's committed row count: the estimate of the rows to
	// read.
	UpstreamRows int64
	// RowsPerSecond is the read rate since the previous Progress call.
	RowsPerSecond float64
	// Percent is RowsConsumed of UpstreamRows, capped below 100 until every actor is
	// done, then 100.
	Percent float64
	// Done reports that every actor finished its backfill: the view follows its upstream.
	Done bool
	// ReplicatedBytes is the memory the backfill's replicated epochs hold now, and
	// ReplicatedPeak the sum of the running actors' peaks.
	ReplicatedBytes, ReplicatedPeak int
	// SpilledChunks counts upstream chunks the backfill's epoch buffers spilled to
	// disk (by the actors running now).
	SpilledChunks int64
	// Actors are the backfill actors running now, by scan and actor.
	Actors []ActorProgress
}

// ActorProgress is one backfill actor of a job.
type ActorProgress struct {
	Actor executors.ActorID
	Node  int
	// Upstream is the table or view the actor's scan reads.
	Upstream string
	// Rows is the snapshot rows it consumed (restored after recovery); Completed of
	// Owned upstream vnodes finished their snapshot.
	Rows             int64
	Completed, Owned int
	Done             bool
	// UpstreamMessages counts the upstream messages (chunks and barriers) it took
	// while backfilling, and UpstreamRowsForwarded the upstream rows it passed
	// downstream (both since the actor started: they restart at a recovery or rescale).
	UpstreamMessages      int64
	UpstreamRowsForwarded int64
	ReplicatedBytes       int
	// ReadsKept counts the barriers its snapshot read went on across (epochs with no
	// upstream change), since the actor started.
	ReadsKept int64
	// ReadyTaken counts the snapshot batches its read had ready when a barrier closed
	// the read, taken before the barrier rather than read again, since the actor
	// started.
	ReadyTaken int64
	// StopFlushed counts the batches its read delivered after it was stopped at a
	// barrier, mostly the partial ones its workers were filling, since the actor
	// started.
	StopFlushed int64
	// HeldBack counts the epochs in which the actor stopped taking snapshot batches
	// before the barrier because its node held more uncommitted bytes than
	// Options.BackfillMemoryBudget.
	HeldBack int64
	// LocalReads: it reads its node's store (every upstream owner of its vnodes runs
	// on its node, or a no-shuffle backfill); otherwise it replicates the change
	// stream of upstream actors on other nodes.
	LocalReads bool
}

// copyLimit is a copy of a rate limit, so that the caller's and the catalog's never
// alias.
func copyLimit(l *int64) *int64 {
	if l == nil {
		return nil
	}
	v := *l
	return &v
}

type progressSample struct {
	rows int64
	at   time.Time
}

// lookup finds a table or view of the catalog.
func (e *Engine) lookup(name string) (*object, bool) {
	o, ok := e.cat.objects[name]
	return o, ok
}

// Progress lists every materialized view's job, by name.
func (e *Engine) Progress() []JobProgress {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.samples == nil {
		e.samples = map[string]progressSample{}
	}
	now := time.Now()
	var out []JobProgress
	for _, o := range e.cat.sorted() {
		if o.Kind != kindMV {
			continue
		}
		p := JobProgress{Name: o.Name, Upstream: strings.Join(o.Upstreams, ","), Backfill: BackfillKind(o.Backfill), Parallelism: o.Parallelism, RateLimit: copyLimit(o.RateLimit), Paused: o.Paused || e.paused}
		for _, u := range o.Upstreams {
			if up, ok := e.cat.objects[u]; ok {
				n, _ := e.store.TableRowCount(up.ID)
				p.UpstreamRows += n
			}
		}
		p.Done = true
		started := true
		if j, ok := e.g.jobs[o.Name]; ok {
			for _, a := range j.actors() {
				if a.backfill == nil {
					continue
				}
				st := a.backfill.Stats()
				p.Actors = append(p.Actors, ActorProgress{Actor: a.id, Node: a.node, Upstream: a.frag.up.obj.Name, Rows: st.Rows,
					Completed: st.Completed, Owned: st.Owned, Done: st.Done, UpstreamMessages: st.UpstreamMessages, UpstreamRowsForwarded: st.UpstreamRowsForwarded, ReplicatedBytes: st.ReplicatedBytes, ReadsKept: st.ReadsKept, ReadyTaken: st.ReadyTaken, StopFlushed: st.StopFlushed, HeldBack: st.HeldBack, LocalReads: st.Local})
				started = started && st.Started
				p.RowsConsumed += st.Rows
				p.VnodesCompleted += st.Completed
				p.VnodesTotal += st.Owned
				p.Done = p.Done && st.Done
				p.ReplicatedBytes += st.ReplicatedBytes
				p.ReplicatedPeak += st.ReplicatedPeak
				p.SpilledChunks += st.SpilledChunks
			}
		}
		last, seen := e.samples[o.Name]
		if !started && seen {
			// Actors still loading their progress (after recovery or a rescale): report
			// what was last known rather than going backwards.
			p.RowsConsumed = max(p.RowsConsumed, last.rows)
		}
		if seen && now.After(last.at) && p.RowsConsumed >= last.rows {
			p.RowsPerSecond = float64(p.RowsConsumed-last.rows) / now.Sub(last.at).Seconds()
		}
		e.samples[o.Name] = progressSample{rows: p.RowsConsumed, at: now}
		switch {
		case p.Done:
			p.Percent = 100
		case p.UpstreamRows > 0:
			p.Percent = min(99.9, 100*float64(p.RowsConsumed)/float64(p.UpstreamRows))
		}
		out = append(out, p)
	}
	return out
}
