package views_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/bench/nexmark/gen"
	"github.com/seed04fbb902/weir/bench/nexmark/queries"
	"github.com/seed04fbb902/weir/bench/nexmark/views"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// nexmarkWriter inserts generated events [next, ...) in batches and, every few
// batches, deletes the bids of an earlier batch: the views see retractions.
type nexmarkWriter struct {
	e       *engine.Engine
	g       *gen.Generator
	mem     memory.Allocator
	next    uint64
	max     uint64 // the writer stops at event max
	batch   uint64
	stop    chan struct{}
	done    chan struct{}
	batches int
}

func startNexmarkWriter(e *engine.Engine, g *gen.Generator, mem memory.Allocator, from, max, batch uint64) *nexmarkWriter {
	w := &nexmarkWriter{e: e, g: g, mem: mem, next: from, max: max, batch: batch, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *nexmarkWriter) run() {
	defer close(w.done)
	ctx := context.Background()
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		if w.next >= w.max {
			time.Sleep(time.Millisecond)
			continue
		}
		from, to := w.next, w.next+w.batch
		w.next = to
		apply(ctx, w.e, w.g, w.mem, from, to, false)
		w.batches++
		if w.batches%3 == 0 && from >= 4*w.batch {
			// Delete the bids of the batch written three batches ago.
			apply(ctx, w.e, w.g, w.mem, from-3*w.batch, from-2*w.batch, true)
		}
		time.Sleep(5 * time.Millisecond) // about 20,000 events/s
	}
}

func (w *nexmarkWriter) halt() { close(w.stop); <-w.done }

// apply inserts events [from, to) into the three tables, or deletes their bids. A
// write that recovery or Close cuts short was not applied; the oracle reads the
// tables as committed, so nothing needs redoing.
func apply(ctx context.Context, e *engine.Engine, g *gen.Generator, mem memory.Allocator, from, to uint64, deleteBids bool) {
	for kind, c := range g.Chunks(from, to, 256, mem) {
		switch {
		case deleteBids && kind == gen.KindBid:
			_ = e.Delete(ctx, "bid", c.Record())
		case !deleteBids:
			_ = e.Insert(ctx, kind.String(), c.Record())
		}
		c.Release()
	}
}

// readTables reads the committed person, auction and bid tables.
func readTables(t *testing.T, e *engine.Engine, names ...string) map[string][]arrow.RecordBatch {
	t.Helper()
	snap, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	out := map[string][]arrow.RecordBatch{}
	for _, n := range names {
		r, err := snap.Scan(context.Background(), n)
		if err != nil {
			t.Fatalf("scan %s: %v", n, err)
		}
		for r.Next() {
			rec := r.RecordBatch()
			rec.Retain()
			out[n] = append(out[n], rec)
		}
		if err := r.Err(); err != nil {
			t.Fatalf("scan %s: %v", n, err)
		}
		r.Release()
	}
	return out
}

func releaseAll(m map[string][]arrow.RecordBatch) {
	for _, recs := range m {
		for _, r := range recs {
			r.Release()
		}
	}
}

// The five Nexmark queries as views, built by arrangement backfill over tables that
// already hold events and keep receiving them (with deletes of earlier bids), rate
// limited so that the backfills span many barriers, with one view rescaled up and
// another down mid-backfill and a crash mid-backfill: every view equals its oracle
// (queries.Eval over the committed tables) at the end.
func TestViews(t *testing.T) {
	seed := vectest.Seed(t)
	t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	open := func() *engine.Engine {
		e, err := engine.Open(ctx, "db", engine.Options{
			FS: fs, Mem: mem, BarrierInterval: 5 * time.Millisecond, CheckpointEvery: 2, ChannelCapacity: 8,
			ChunkSize: 256, CacheSize: 8 << 20, MemTableSize: 4 << 20,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return e
	}
	e := open()
	g := gen.New(gen.Config{Seed: seed})
	for _, tab := range views.Tables() {
		if err := e.CreateTable(ctx, tab, engine.TableOptions{Parallelism: 2}); err != nil {
			t.Fatal(err)
		}
	}
	const preload = 6000
	apply(ctx, e, g, mem, 0, preload, false)
	w := startNexmarkWriter(e, g, mem, preload, preload+4000, 100)

	limit := int64(1500)
	for _, q := range views.Queries {
		plan, err := views.Plan(q)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.CreateMV(ctx, q, plan, engine.MVOptions{Parallelism: 2, RateLimit: &limit, Background: true}); err != nil {
			t.Fatalf("create %s: %v", q, err)
		}
	}
	done := func() (all bool, some bool) {
		all = true
		for _, p := range e.Progress() {
			all = all && p.Done
			some = some || p.Done
		}
		return all, some
	}
	time.Sleep(30 * time.Millisecond)
	if all, _ := done(); all {
		t.Fatalf("every backfill finished before the rescales: the test tested nothing of them")
	}
	if err := e.RescheduleMV(ctx, "q4", 3); err != nil {
		t.Fatalf("reschedule q4: %v", err)
	}
	if err := e.RescheduleMV(ctx, "q16", 1); err != nil {
		t.Fatalf("reschedule q16: %v", err)
	}
	time.Sleep(30 * time.Millisecond)

	// Crash mid-backfill.
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	w.halt()
	next := w.next
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	fs = crashed
	e = open()
	defer e.Close()
	w = startNexmarkWriter(e, g, mem, next, next+4000, 100)
	for _, q := range views.Queries {
		if err := e.SetRateLimit(ctx, q, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range views.Queries {
		wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
		err := e.WaitBackfill(wctx, q)
		cancel()
		if err != nil {
			t.Fatalf("wait for %s: %v", q, err)
		}
	}
	w.halt()
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if w.next < preload+1000 {
		t.Fatalf("only %d events written during the backfills", w.next-preload)
	}
	recs := readTables(t, e, append([]string{"person", "auction", "bid"}, views.Queries...)...)
	defer releaseAll(recs)
	tabs := queries.Tables{Person: recs["person"], Auction: recs["auction"], Bid: recs["bid"]}
	t.Logf("tables: %d person, %d auction, %d bid rows (%d events written)", rows(recs["person"]), rows(recs["auction"]), rows(recs["bid"]), w.next)
	counts := map[string]int{}
	for _, q := range views.Queries {
		spec, _ := queries.ByName(q)
		want, err := queries.Eval(q, tabs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := queries.Canon(recs[q], spec.Columns)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if d := queries.Diff(want, got, spec.RelTol); !d.OK() {
			t.Errorf("%s: the view differs from its oracle: %s", q, d)
		} else {
			t.Logf("%s: %d rows, equal to the oracle", q, len(got))
		}
		if len(want) == 0 {
			t.Errorf("%s: the oracle has no rows: the check checks nothing", q)
		}
		counts[q] = len(got)
	}
	// Verify, the check weir demo runs, finds the same.
	checks, err := views.Verify(ctx, e, views.Queries)
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != len(views.Queries) {
		t.Fatalf("%d checks for %d views", len(checks), len(views.Queries))
	}
	for i, c := range checks {
		if c.Query != views.Queries[i] || !c.Verified || c.Mismatches != 0 || c.Rows != counts[c.Query] {
			t.Errorf("Verify: %+v, want %s verified with %d rows", c, views.Queries[i], counts[views.Queries[i]])
		}
	}
}

func rows(recs []arrow.RecordBatch) int64 {
	n := int64(0)
	for _, r := range recs {
		n += r.NumRows()
	}
	return n
}

func TestPlanUnknown(t *testing.T) {
	if _, err := views.Plan("q99"); err == nil {
		t.Fatal("no error for q99")
	}
}
