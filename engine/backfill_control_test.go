package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// Control of running backfills (docs/design.md §6–7, docs/testing.md I5): pause, rate limits,
// pause on bootstrap, cancel by drop, progress, and a busy upstream.

// ctlOptions are the engine options of the control tests.
type ctlOptions struct {
	interval         time.Duration // BarrierInterval; -1: barriers on demand only
	chunk            int           // ChunkSize
	pauseOnBootstrap bool
	memoryBudget     int64 // BackfillMemoryBudget
}

func openCtl(t *testing.T, fs vfs.FS, mem memory.Allocator, o ctlOptions) *engine.Engine {
	t.Helper()
	if o.chunk == 0 {
		o.chunk = 32
	}
	e, err := engine.Open(context.Background(), "db", engine.Options{
		FS: fs, Mem: mem, BarrierInterval: o.interval, ChannelCapacity: 4, ChunkSize: o.chunk,
		PauseOnBootstrap: o.pauseOnBootstrap, CacheSize: 4 << 20, MemTableSize: 1 << 20, Logger: quietLogger(),
		BackfillMemoryBudget: o.memoryBudget,
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return e
}

// ctlClose closes e (again: Close is idempotent) and fails on error.
func ctlClose(t *testing.T, e *engine.Engine) {
	t.Helper()
	if err := e.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

func ctlLimit(n int64) *int64 { return &n }

// ctlCheckpoint is WaitCheckpoint, failing the test on error.
func ctlCheckpoint(t *testing.T, e *engine.Engine) {
	t.Helper()
	if _, err := e.WaitCheckpoint(context.Background()); err != nil {
		t.Fatalf("wait checkpoint: %v", err)
	}
}

// ctlAwaitMidway drives barriers (when drive is set) until view name's backfill has read
// at least n rows, and fails if it finished first: the test would then test nothing.
func ctlAwaitMidway(t *testing.T, e *engine.Engine, name string, n int64, drive bool) engine.JobProgress {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := progressOf(t, e, name)
		if p.Done {
			t.Fatalf("%s: the backfill finished (%d rows) before the test caught it midway", name, p.RowsConsumed)
		}
		if p.RowsConsumed >= n {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d rows read after 10s, waiting for %d", name, p.RowsConsumed, n)
		}
		if drive {
			ctlCheckpoint(t, e)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ctlUpsert upserts n random rows with keys in [lo, hi) into t.
func ctlUpsert(t *testing.T, e *engine.Engine, mem memory.Allocator, rng *rand.Rand, lo, hi int64, n int) {
	t.Helper()
	rows := make([]kvRow, n)
	for i := range rows {
		s := fmt.Sprintf("u%d", rng.IntN(100))
		rows[i] = kvRow{k: lo + rng.Int64N(hi-lo), v: rng.Int64N(120), s: &s}
	}
	rec := kvRecord(mem, rows)
	defer rec.Release()
	if err := e.Upsert(context.Background(), "t", rec); err != nil {
		t.Fatalf("upsert: %v", err)
	}
}

// ctlCheckMV1 compares mv1 (and mv3, when it exists) with its query over t, all read at
// one committed epoch, for tests without mv2. It returns t's row count.
func ctlCheckMV1(t *testing.T, e *engine.Engine, when string) int {
	t.Helper()
	snap, err := e.Snapshot()
	if err != nil {
		t.Fatalf("%s: snapshot: %v", when, err)
	}
	defer snap.Release()
	table := readRows(t, snap, "t")
	if _, err := e.Table("mv1"); err == nil {
		if d := diffRows(expectMV1(table), readRows(t, snap, "mv1")); d != "" {
			t.Fatalf("%s (epoch %d): mv1 vs its query over t (%d rows): %s", when, snap.Epoch(), len(table), d)
		}
	}
	if _, err := e.Table("mv3"); err == nil {
		if d := diffRows(expectMV3(table), readRows(t, snap, "mv3")); d != "" {
			t.Fatalf("%s (epoch %d): mv3 vs its query over t: %s", when, snap.Epoch(), d)
		}
	}
	return len(table)
}

// ctlCommittedRows is the number of rows of name at the committed epoch.
func ctlCommittedRows(t *testing.T, e *engine.Engine, name string) int {
	t.Helper()
	snap, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	return len(readRows(t, snap, name))
}

func ctlTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// Pause during a backfill: from the pause barrier on, no snapshot row is read across
// many barriers, while writes keep landing, checkpoints keep committing and a view
// already backfilled keeps following its upstream; lifting the rate limit does not
// lift the pause; after Resume the backfills finish and every view is right.
func TestBackfillPauseResume(t *testing.T) {
	rng := vectest.NewRand(vectest.Seed(t))
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	e := openCtl(t, vfs.NewMem(), mem, ctlOptions{interval: -1})
	defer ctlClose(t, e)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	// mv3 is backfilled at once (t is empty): it shows the change stream flowing.
	if err := e.CreateMV(ctx, "mv3", mv3Plan(), engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, rng, 1500)
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2, RateLimit: ctlLimit(400), Background: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv2", mv2Plan(), engine.MVOptions{Parallelism: 2, Background: true}); err != nil {
		t.Fatal(err)
	}
	ctlAwaitMidway(t, e, "mv1", 100, true)
	if err := e.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	p1, p2 := progressOf(t, e, "mv1"), progressOf(t, e, "mv2")
	if p1.Done || !p1.Paused || !p2.Paused {
		t.Fatalf("after the pause barrier: %+v, %+v", p1, p2)
	}
	// Lifting mv1's limit while paused must not lift the pause.
	if err := e.SetRateLimit(ctx, "mv1", nil); err != nil {
		t.Fatal(err)
	}
	epoch := e.CommittedEpoch()
	rows := ctlCommittedRows(t, e, "t")
	for i := 0; i < 12; i++ {
		ctlUpsert(t, e, mem, rng, 0, 2000, 10)
		ctlCheckpoint(t, e)
		time.Sleep(time.Millisecond)
		if got := e.CommittedEpoch(); got <= epoch {
			t.Fatalf("barrier %d while paused: committed epoch %d, was %d", i, got, epoch)
		}
		epoch = e.CommittedEpoch()
		q1, q2 := progressOf(t, e, "mv1"), progressOf(t, e, "mv2")
		if q1.RowsConsumed != p1.RowsConsumed || q1.VnodesCompleted != p1.VnodesCompleted || q2.RowsConsumed != p2.RowsConsumed {
			t.Fatalf("barrier %d while paused: mv1 read %d rows (%d vnodes done), mv2 %d; at the pause: %d (%d), %d",
				i, q1.RowsConsumed, q1.VnodesCompleted, q2.RowsConsumed, p1.RowsConsumed, p1.VnodesCompleted, p2.RowsConsumed)
		}
		if !q1.Paused || q1.RateLimit != nil {
			t.Fatalf("barrier %d while paused: %+v", i, q1)
		}
		if i%4 == 3 {
			ctlCheckMV3(t, e, fmt.Sprintf("barrier %d while paused", i))
		}
	}
	if n := ctlCommittedRows(t, e, "t"); n <= rows {
		t.Fatalf("t did not grow while paused: %d rows, %d at the pause", n, rows)
	}
	if err := e.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := ctlTimeout(30 * time.Second)
	defer cancel()
	for _, mv := range []string{"mv1", "mv2"} {
		if err := e.WaitBackfill(wctx, mv); err != nil {
			t.Fatalf("after resume: %v", err)
		}
	}
	ctlCheckpoint(t, e)
	n := checkViews(t, e, "after resume")
	p := progressOf(t, e, "mv1")
	if !p.Done || p.Paused || p.Percent != 100 || p.RowsConsumed <= p1.RowsConsumed {
		t.Fatalf("after resume: %+v (at the pause: %+v)", p, p1)
	}
	t.Logf("paused mv1 at %d rows of %d; %d rows in t at the end", p1.RowsConsumed, p1.UpstreamRows, n)
}

// ctlCheckMV3 compares mv3 (backfilled before the pause or throttle under test) with
// its query over t, both read at one committed epoch.
func ctlCheckMV3(t *testing.T, e *engine.Engine, when string) {
	t.Helper()
	snap, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	table := readRows(t, snap, "t")
	if d := diffRows(expectMV3(table), readRows(t, snap, "mv3")); d != "" {
		t.Fatalf("%s (epoch %d): mv3 vs its query over t: %s", when, snap.Epoch(), d)
	}
}

// Rate limits: a small limit bounds the rows read over wall-clock time while the
// upstream's own writes go through unthrottled; a limit of 0 stops that view's reads
// only (another view backfills meanwhile) while barriers flow; nil lifts the limit and
// the backfill finishes right.
func TestBackfillRateLimit(t *testing.T) {
	rng := vectest.NewRand(vectest.Seed(t))
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	const chunk, limit = 64, 200
	e := openCtl(t, vfs.NewMem(), mem, ctlOptions{interval: -1, chunk: chunk})
	defer ctlClose(t, e)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, rng, 1000)
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 1, RateLimit: ctlLimit(limit), Background: true}); err != nil {
		t.Fatal(err)
	}
	if p := progressOf(t, e, "mv1"); p.RateLimit == nil || *p.RateLimit != limit {
		t.Fatalf("rate limit reported as %v, want %d", p.RateLimit, limit)
	}

	// A small limit: measured over about a second of barriers every 20ms. The bound is
	// loose (a loaded machine only reads fewer rows): 3x the limit, plus one batch.
	r0 := ctlAwaitMidway(t, e, "mv1", 1, true).RowsConsumed
	t0 := time.Now()
	var writing time.Duration
	for i := 0; time.Since(t0) < time.Second; i++ {
		if i == 10 {
			// The upstream's own writes are never throttled: 1000 rows (at the view's
			// limit they would take 5s) and their checkpoint go through at once.
			w0 := time.Now()
			for b := 0; b < 20; b++ {
				ctlUpsert(t, e, mem, rng, 100000, 200000, 50)
			}
			ctlCheckpoint(t, e)
			writing = time.Since(w0)
		}
		ctlCheckpoint(t, e)
		time.Sleep(20 * time.Millisecond)
	}
	p := progressOf(t, e, "mv1")
	elapsed := time.Since(t0)
	read := p.RowsConsumed - r0
	if bound := int64(3*limit*elapsed.Seconds()) + chunk; read > bound || read <= 0 {
		t.Fatalf("limit %d rows/s: %d rows read in %v, want 1 to %d", limit, read, elapsed, bound)
	}
	if p.Done {
		t.Fatalf("the backfill finished at a limit of %d rows/s: %+v", limit, p)
	}
	if writing > 3*time.Second {
		t.Fatalf("1000 upstream rows took %v to write and commit while the view is throttled", writing)
	}
	if n := ctlCommittedRows(t, e, "t"); p.UpstreamRows != int64(n) {
		t.Fatalf("upstream rows %d, t has %d committed rows", p.UpstreamRows, n)
	}
	t.Logf("limit %d rows/s: %d rows in %v (%.0f rows/s); 1000 upstream rows written and committed in %v", limit, read, elapsed.Round(time.Millisecond), float64(read)/elapsed.Seconds(), writing)

	// Limit 0: mv1 reads nothing, mv3 backfills meanwhile, barriers and writes flow.
	if err := e.SetRateLimit(ctx, "mv1", ctlLimit(0)); err != nil {
		t.Fatal(err)
	}
	stopped := progressOf(t, e, "mv1")
	if stopped.RateLimit == nil || *stopped.RateLimit != 0 {
		t.Fatalf("rate limit reported as %v, want 0", stopped.RateLimit)
	}
	cctx, cancel := ctlTimeout(20 * time.Second)
	defer cancel()
	if err := e.CreateMV(cctx, "mv3", mv3Plan(), engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatalf("a view created while another is throttled to 0: %v", err)
	}
	epoch := e.CommittedEpoch()
	for i := 0; i < 10; i++ {
		w0 := time.Now()
		ctlUpsert(t, e, mem, rng, 0, 3000, 20)
		ctlCheckpoint(t, e)
		if d := time.Since(w0); d > 3*time.Second {
			t.Fatalf("a write and its checkpoint took %v while mv1 is throttled to 0", d)
		}
		if q := progressOf(t, e, "mv1"); q.RowsConsumed != stopped.RowsConsumed || q.Done {
			t.Fatalf("barrier %d at limit 0: %d rows read, %d at the throttle", i, q.RowsConsumed, stopped.RowsConsumed)
		}
		time.Sleep(time.Millisecond)
	}
	if e.CommittedEpoch() <= epoch {
		t.Fatal("no checkpoint committed at limit 0")
	}
	if q := progressOf(t, e, "mv3"); !q.Done {
		t.Fatalf("mv3 (not throttled) is not done: %+v", q)
	}
	ctlCheckMV3(t, e, "mv1 throttled to 0")

	// nil lifts the limit.
	if err := e.SetRateLimit(ctx, "mv1", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitBackfill(cctx, "mv1"); err != nil {
		t.Fatalf("after lifting the limit: %v", err)
	}
	if err := e.CreateMV(cctx, "mv2", mv2Plan(), engine.MVOptions{}); err != nil {
		t.Fatal(err)
	}
	ctlCheckpoint(t, e)
	checkViews(t, e, "after lifting the limit")
	if p := progressOf(t, e, "mv1"); p.RateLimit != nil || !p.Done || p.RowsConsumed <= stopped.RowsConsumed {
		t.Fatalf("after lifting the limit: %+v", p)
	}
}

// Pause on bootstrap. A view created paused reads no snapshot row until Resume, while
// barriers (every 2ms) and writes flow: it stays empty, since every vnode is NotStarted
// and the upstream's changes to NotStarted vnodes are dropped. An engine reopened with
// PauseOnBootstrap keeps a backfill that was midway at its committed progress until
// Resume; then it finishes.
func TestBackfillPauseOnBootstrap(t *testing.T) {
	t.Run("created paused", func(t *testing.T) {
		rng := vectest.NewRand(vectest.Seed(t))
		mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
		defer mem.AssertSize(t, 0)
		ctx := context.Background()
		e := openCtl(t, vfs.NewMem(), mem, ctlOptions{interval: 2 * time.Millisecond})
		defer ctlClose(t, e)
		if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
			t.Fatal(err)
		}
		preload(t, e, mem, rng, 600)
		if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2, Paused: true, Background: true}); err != nil {
			t.Fatal(err)
		}
		if err := e.CreateMV(ctx, "mv2", mv2Plan(), engine.MVOptions{Parallelism: 2, Background: true}); err != nil {
			t.Fatal(err)
		}
		epoch := e.CommittedEpoch()
		for i := 0; i < 10; i++ {
			ctlUpsert(t, e, mem, rng, 0, 1000, 10)
			time.Sleep(10 * time.Millisecond)
			p := progressOf(t, e, "mv1")
			if p.RowsConsumed != 0 || p.VnodesCompleted != 0 || p.Done || !p.Paused || p.Percent != 0 {
				t.Fatalf("%d: a view created paused: %+v", i, p)
			}
			if n := ctlCommittedRows(t, e, "mv1"); n != 0 {
				t.Fatalf("%d: a view created paused has %d rows", i, n)
			}
		}
		if e.CommittedEpoch() <= epoch {
			t.Fatal("no checkpoint committed while the view was paused")
		}
		if err := e.ResumeMV(ctx, "mv1"); err != nil {
			t.Fatal(err)
		}
		if p := progressOf(t, e, "mv1"); p.Paused {
			t.Fatalf("after resume: %+v", p)
		}
		wctx, cancel := ctlTimeout(30 * time.Second)
		defer cancel()
		for _, mv := range []string{"mv1", "mv2"} {
			if err := e.WaitBackfill(wctx, mv); err != nil {
				t.Fatalf("after resume: %v", err)
			}
		}
		ctlCheckpoint(t, e)
		checkViews(t, e, "after resume")
	})

	t.Run("reopened paused", func(t *testing.T) {
		rng := vectest.NewRand(vectest.Seed(t))
		mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
		defer mem.AssertSize(t, 0)
		ctx := context.Background()
		fs := vfs.NewMem()
		e := openCtl(t, fs, mem, ctlOptions{interval: -1})
		if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
			t.Fatal(err)
		}
		preload(t, e, mem, rng, 1000)
		if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2, RateLimit: ctlLimit(400), Background: true}); err != nil {
			t.Fatal(err)
		}
		ctlAwaitMidway(t, e, "mv1", 100, true)
		// Pause (not persisted) so that what is read is exactly what is committed.
		if err := e.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		before := progressOf(t, e, "mv1")
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}

		e = openCtl(t, fs, mem, ctlOptions{interval: -1, pauseOnBootstrap: true})
		defer ctlClose(t, e)
		epoch := e.CommittedEpoch()
		for i := 0; i < 10; i++ {
			ctlUpsert(t, e, mem, rng, 0, 1500, 10)
			ctlCheckpoint(t, e) // the first one also has every actor load its progress
			p := progressOf(t, e, "mv1")
			if p.RowsConsumed != before.RowsConsumed || p.VnodesCompleted != before.VnodesCompleted || p.Done || !p.Paused {
				t.Fatalf("barrier %d after a paused reopen: %+v; committed before: %+v", i, p, before)
			}
		}
		if e.CommittedEpoch() <= epoch {
			t.Fatal("no checkpoint committed while paused on bootstrap")
		}
		if err := e.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		if err := e.SetRateLimit(ctx, "mv1", nil); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := ctlTimeout(30 * time.Second)
		defer cancel()
		if err := e.WaitBackfill(wctx, "mv1"); err != nil {
			t.Fatalf("after resume: %v", err)
		}
		if err := e.CreateMV(wctx, "mv2", mv2Plan(), engine.MVOptions{}); err != nil {
			t.Fatal(err)
		}
		ctlCheckpoint(t, e)
		checkViews(t, e, "after resume")
		if p := progressOf(t, e, "mv1"); !p.Done || p.Paused || p.RowsConsumed <= before.RowsConsumed {
			t.Fatalf("after resume: %+v (before the reopen: %+v)", p, before)
		}
		t.Logf("reopened at %d of %d rows", before.RowsConsumed, before.UpstreamRows)
	})
}

// Cancel: dropping a view while it backfills (reading, paused, throttled to 0), under
// writes and barriers every 5ms, returns within a few barriers and leaves nothing
// behind: no committed key or row count under the view's table id or its progress
// table id, no actor, channel or fragment; the name can be reused by a new view that
// backfills right.
func TestBackfillDropCancels(t *testing.T) {
	for _, mode := range []string{"reading", "paused", "throttled to 0"} {
		t.Run(mode, func(t *testing.T) {
			seed := vectest.Seed(t)
			rng := vectest.NewRand(seed)
			mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
			defer mem.AssertSize(t, 0)
			ctx := context.Background()
			e := openCtl(t, vfs.NewMem(), mem, ctlOptions{interval: 5 * time.Millisecond})
			defer ctlClose(t, e)
			if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
				t.Fatal(err)
			}
			preload(t, e, mem, rng, 800)
			w := startWriter(e, mem, rng.Uint64())
			defer func() {
				if w != nil {
					w.halt()
				}
			}()
			if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2, RateLimit: ctlLimit(300), Background: true}); err != nil {
				t.Fatal(err)
			}
			midway := ctlAwaitMidway(t, e, "mv1", 20, false)
			switch mode {
			case "paused":
				if err := e.Pause(ctx); err != nil {
					t.Fatal(err)
				}
			case "throttled to 0":
				if err := e.SetRateLimit(ctx, "mv1", ctlLimit(0)); err != nil {
					t.Fatal(err)
				}
			}
			ctlCheckpoint(t, e)
			old, err := engine.BackfillTestViewOf(e, "mv1")
			if err != nil {
				t.Fatal(err)
			}
			// The checks below look in the right places: the view has committed rows
			// and progress rows now.
			rowKeys, progressKeys, rowCount, progressCount, err := engine.BackfillTestStored(e, old)
			if err != nil {
				t.Fatal(err)
			}
			if rowKeys == 0 || progressKeys == 0 || rowCount != int64(rowKeys) || progressCount != int64(progressKeys) {
				t.Fatalf("before the drop: %d row keys (count %d), %d progress keys (count %d)", rowKeys, rowCount, progressKeys, progressCount)
			}

			dctx, cancel := ctlTimeout(5 * time.Second)
			defer cancel()
			start := time.Now()
			if err := e.DropMV(dctx, "mv1"); err != nil {
				t.Fatalf("drop while %s: %v", mode, err)
			}
			took := time.Since(start)
			w.halt()
			w = nil
			ctlCheckpoint(t, e)
			if left := engine.BackfillTestLeftovers(e, old); len(left) > 0 {
				t.Fatalf("the drop left behind:\n%s", strings.Join(left, "\n"))
			}
			for _, p := range e.Progress() {
				t.Fatalf("a job is left: %+v", p)
			}
			if _, err := e.Scan(ctx, "mv1"); err == nil {
				t.Fatal("scan of the dropped view succeeded")
			}

			// The name is free again, and the new view backfills right.
			if mode == "paused" {
				if err := e.Resume(ctx); err != nil {
					t.Fatal(err)
				}
			}
			cctx, cancel2 := ctlTimeout(20 * time.Second)
			defer cancel2()
			if err := e.CreateMV(cctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 3}); err != nil {
				t.Fatalf("recreate mv1: %v", err)
			}
			if err := e.CreateMV(cctx, "mv2", mv2Plan(), engine.MVOptions{}); err != nil {
				t.Fatal(err)
			}
			ctlCheckpoint(t, e)
			checkViews(t, e, "the view recreated")
			renewed, err := engine.BackfillTestViewOf(e, "mv1")
			if err != nil {
				t.Fatal(err)
			}
			if renewed.ID == old.ID || renewed.ProgressID == old.ProgressID {
				t.Fatalf("the new view reuses the ids of the dropped one: %+v, %+v", renewed, old)
			}
			if left := engine.BackfillTestLeftovers(e, old); len(left) > 0 {
				t.Fatalf("after the new view's backfill, the dropped view has:\n%s", strings.Join(left, "\n"))
			}
			t.Logf("dropped while %s after %d+ rows, in %v", mode, midway.RowsConsumed, took)
		})
	}
}

// Progress of one backfill, read after every barrier: rows consumed never decrease;
// vnodes completed stay within the vnodes owned; the percentage stays below 100 until
// done, then is exactly 100; the upstream's row count is its committed row count; the
// read rate is positive once the backfill runs unthrottled. At the end every upstream
// row has been read exactly once (nothing writes meanwhile).
func TestBackfillProgress(t *testing.T) {
	rng := vectest.NewRand(vectest.Seed(t))
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	e := openCtl(t, vfs.NewMem(), mem, ctlOptions{interval: -1})
	defer ctlClose(t, e)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, rng, 1200)
	// Delete 60 rows: the upstream's row count is its rows, not its key range.
	var gone []kvRow
	for k := 0; k < 1200; k += 20 {
		gone = append(gone, kvRow{k: int64(k)})
	}
	rec := kvRecord(mem, gone)
	err := e.Delete(ctx, "t", rec)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	ctlCheckpoint(t, e)
	const upstream = 1140
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2, RateLimit: ctlLimit(1000), Paused: true, Background: true}); err != nil {
		t.Fatal(err)
	}

	var last engine.JobProgress
	samples, midway := 0, 0
	maxRate := 0.0
	observe := func(when string) engine.JobProgress {
		t.Helper()
		p := progressOf(t, e, "mv1")
		samples++
		switch {
		case p.RowsConsumed < last.RowsConsumed:
			t.Fatalf("%s: rows consumed went from %d to %d", when, last.RowsConsumed, p.RowsConsumed)
		case p.VnodesTotal != 16 || p.VnodesCompleted < 0 || p.VnodesCompleted > p.VnodesTotal:
			t.Fatalf("%s: %d of %d vnodes completed, want of 16", when, p.VnodesCompleted, p.VnodesTotal)
		case p.VnodesCompleted < last.VnodesCompleted:
			t.Fatalf("%s: vnodes completed went from %d to %d", when, last.VnodesCompleted, p.VnodesCompleted)
		case p.UpstreamRows != upstream:
			t.Fatalf("%s: upstream rows %d, want %d", when, p.UpstreamRows, upstream)
		case !p.Done && (p.Percent < 0 || p.Percent >= 100):
			t.Fatalf("%s: %v%% before the backfill is done (%+v)", when, p.Percent, p)
		case p.Done && p.Percent != 100:
			t.Fatalf("%s: %v%% once done", when, p.Percent)
		case p.Done && p.VnodesCompleted != p.VnodesTotal:
			t.Fatalf("%s: done with %d of %d vnodes completed", when, p.VnodesCompleted, p.VnodesTotal)
		case last.Done && !p.Done:
			t.Fatalf("%s: done, then not done", when)
		case p.RowsPerSecond < 0 || (samples > 1 && p.RowsConsumed == last.RowsConsumed && p.RowsPerSecond != 0):
			t.Fatalf("%s: %v rows/s with rows consumed going from %d to %d", when, p.RowsPerSecond, last.RowsConsumed, p.RowsConsumed)
		}
		if !p.Done && p.RowsConsumed > 0 {
			midway++
		}
		last = p
		return p
	}
	observe("created paused")
	ctlCheckpoint(t, e)
	if p := observe("paused"); p.RowsConsumed != 0 || p.Percent != 0 || p.RowsPerSecond != 0 {
		t.Fatalf("paused: %+v", p)
	}
	if err := e.ResumeMV(ctx, "mv1"); err != nil {
		t.Fatal(err)
	}
	// Throttled: about 2000 rows/s over both actors.
	for last.RowsConsumed < 300 {
		ctlCheckpoint(t, e)
		time.Sleep(5 * time.Millisecond)
		if observe("throttled").Done {
			t.Fatalf("the backfill finished while throttled to 1000 rows/s per actor")
		}
	}
	// Unthrottled.
	if err := e.SetRateLimit(ctx, "mv1", nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !last.Done {
		if time.Now().After(deadline) {
			t.Fatalf("not done after 20s: %+v", last)
		}
		ctlCheckpoint(t, e)
		maxRate = max(maxRate, observe("unthrottled").RowsPerSecond)
	}
	if maxRate <= 0 {
		t.Fatalf("the read rate never showed above 0 while the backfill ran unthrottled")
	}
	ctlCheckpoint(t, e)
	p := observe("the end")
	if p.RowsConsumed != upstream || p.VnodesCompleted != 16 || p.Percent != 100 {
		t.Fatalf("at the end: %+v; want every one of the %d upstream rows read once", p, upstream)
	}
	if n := ctlCommittedRows(t, e, "t"); int64(n) != p.UpstreamRows {
		t.Fatalf("upstream rows %d, t has %d committed rows", p.UpstreamRows, n)
	}
	ctlCheckMV1(t, e, "the end")
	t.Logf("%d samples, %d midway; up to %.0f rows/s unthrottled", samples, midway, maxRate)
	if midway == 0 {
		t.Fatal("no sample caught the backfill midway")
	}
}

// A busy upstream (a writer of small batches that never sleeps, one of mixed
// operations, barriers every 2ms) does not starve the snapshot: two views backfill
// without a limit within a bounded time, and end right.
func TestBackfillBusyUpstream(t *testing.T) {
	seed := vectest.Seed(t)
	rng := vectest.NewRand(seed)
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	e := openCtl(t, vfs.NewMem(), mem, ctlOptions{interval: 2 * time.Millisecond})
	defer ctlClose(t, e)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, rng, 1500)
	mixed := startWriter(e, mem, rng.Uint64())
	var hot atomic.Int64
	stop, hotDone := make(chan struct{}), make(chan struct{})
	hotRng := vectest.NewRand(rng.Uint64())
	go func() {
		defer close(hotDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			rows := make([]kvRow, 1+hotRng.IntN(3))
			for i := range rows {
				rows[i] = kvRow{k: hotRng.Int64N(1500), v: hotRng.Int64N(120)}
			}
			rec := kvRecord(mem, rows)
			if e.Upsert(ctx, "t", rec) == nil {
				hot.Add(1)
			}
			rec.Release()
		}
	}()
	halt := func() {
		if stop != nil {
			close(stop)
			<-hotDone
			mixed.halt()
			stop = nil
		}
	}
	defer halt()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	hot0 := hot.Load()
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2, Background: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv2", mv2Plan(), engine.MVOptions{Parallelism: 2, Background: true}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := ctlTimeout(30 * time.Second)
	defer cancel()
	for _, mv := range []string{"mv1", "mv2"} {
		if err := e.WaitBackfill(wctx, mv); err != nil {
			t.Fatalf("seed %d: %s under a busy upstream: %v (%+v)", seed, mv, err, progressOf(t, e, mv))
		}
	}
	took := time.Since(start)
	during := hot.Load() - hot0
	halt()
	ctlCheckpoint(t, e)
	n := checkViews(t, e, "busy upstream")
	t.Logf("backfilled in %v while the hot writer wrote %d batches (%d batches by the mixed writer in all); %d rows in t", took, during, mixed.n, n)
	if during < 10 {
		t.Fatalf("the upstream was not busy: %d batches during the backfill", during)
	}
}

// A view created while the engine is paused (Pause) starts paused: Progress reports it
// paused, and it reads no snapshot row until Resume (I5).
func TestBackfillCreatedWhileEnginePaused(t *testing.T) {
	rng := vectest.NewRand(vectest.Seed(t))
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	e := openCtl(t, vfs.NewMem(), mem, ctlOptions{interval: -1})
	defer ctlClose(t, e)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, rng, 500)
	if err := e.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2, Background: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		ctlCheckpoint(t, e)
		time.Sleep(2 * time.Millisecond)
		if p := progressOf(t, e, "mv1"); !p.Paused || p.RowsConsumed != 0 || p.Done {
			t.Fatalf("barrier %d: a view created while the engine is paused: %+v", i, p)
		}
	}
	if err := e.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := ctlTimeout(20 * time.Second)
	defer cancel()
	if err := e.WaitBackfill(wctx, "mv1"); err != nil {
		t.Fatal(err)
	}
	ctlCheckpoint(t, e)
	ctlCheckMV1(t, e, "after resume")
}

// CreateMV without Background does not wait for the backfill of a view that starts
// paused (MVOptions.Background's documentation), and a view created while the engine
// is paused starts paused: CreateMV returns at once, with no error, and the view reads
// nothing until Resume.
func TestBackfillCreateMVWhileEnginePaused(t *testing.T) {
	rng := vectest.NewRand(vectest.Seed(t))
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	e := openCtl(t, vfs.NewMem(), mem, ctlOptions{interval: -1})
	defer ctlClose(t, e)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, rng, 500)
	if err := e.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := ctlTimeout(3 * time.Second)
	defer cancel()
	if err := e.CreateMV(cctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2}); err != nil {
		_, exists := e.Table("mv1")
		t.Fatalf("CreateMV (not Background) while the engine is paused: %v (the view exists: %v)", err, exists == nil)
	}
	if p := progressOf(t, e, "mv1"); !p.Paused || p.RowsConsumed != 0 || p.Done {
		t.Fatalf("a view created while the engine is paused: %+v", p)
	}
	if err := e.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel2 := ctlTimeout(20 * time.Second)
	defer cancel2()
	if err := e.WaitBackfill(wctx, "mv1"); err != nil {
		t.Fatal(err)
	}
	ctlCheckpoint(t, e)
	ctlCheckMV1(t, e, "after resume")
}

// The pause state of a backfill survives a rescale: a view created paused and then
// resumed keeps reading after RescheduleMV; a view paused by Pause reads nothing after
// RescheduleMV until Resume.
func TestBackfillPauseAcrossRescale(t *testing.T) {
	for _, mode := range []string{"created paused, resumed", "engine paused"} {
		t.Run(mode, func(t *testing.T) {
			rng := vectest.NewRand(vectest.Seed(t))
			mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
			defer mem.AssertSize(t, 0)
			ctx := context.Background()
			e := openCtl(t, vfs.NewMem(), mem, ctlOptions{interval: -1})
			defer ctlClose(t, e)
			if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
				t.Fatal(err)
			}
			preload(t, e, mem, rng, 1000)
			opts := engine.MVOptions{Parallelism: 2, RateLimit: ctlLimit(300), Background: true, Paused: mode == "created paused, resumed"}
			if err := e.CreateMV(ctx, "mv1", mv1Plan(), opts); err != nil {
				t.Fatal(err)
			}
			if opts.Paused {
				if err := e.ResumeMV(ctx, "mv1"); err != nil {
					t.Fatal(err)
				}
			}
			ctlAwaitMidway(t, e, "mv1", 50, true)
			if !opts.Paused {
				if err := e.Pause(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.RescheduleMV(ctx, "mv1", 3); err != nil {
				t.Fatal(err)
			}
			ctlCheckpoint(t, e) // the new actors have loaded their progress
			before := progressOf(t, e, "mv1")
			for i := 0; i < 10; i++ {
				ctlCheckpoint(t, e)
				time.Sleep(10 * time.Millisecond)
			}
			after := progressOf(t, e, "mv1")
			if opts.Paused && after.RowsConsumed == before.RowsConsumed && !after.Done {
				t.Fatalf("resumed, then rescaled: the backfill stalls at %d rows over 10 barriers (%+v)", after.RowsConsumed, after)
			}
			if !opts.Paused && after.RowsConsumed != before.RowsConsumed {
				t.Fatalf("paused, then rescaled: the backfill read %d rows while paused (%+v)", after.RowsConsumed-before.RowsConsumed, after)
			}
			if !opts.Paused {
				if err := e.Resume(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.SetRateLimit(ctx, "mv1", nil); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := ctlTimeout(10 * time.Second)
			defer cancel()
			if err := e.WaitBackfill(wctx, "mv1"); err != nil {
				t.Fatalf("%v (%+v)", err, progressOf(t, e, "mv1"))
			}
			ctlCheckpoint(t, e)
			ctlCheckMV1(t, e, "the end")
		})
	}
}

// A rate limit holds across barriers: at 5 rows/s per actor, with barriers every 1ms,
// one actor reads about 5 rows a second, not one row per barrier.
func TestBackfillRateLimitAcrossBarriers(t *testing.T) {
	rng := vectest.NewRand(vectest.Seed(t))
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	const chunk, limit = 16, 5
	e := openCtl(t, vfs.NewMem(), mem, ctlOptions{interval: time.Millisecond, chunk: chunk})
	defer ctlClose(t, e)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 1}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, rng, 1000)
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 1, RateLimit: ctlLimit(limit), Background: true}); err != nil {
		t.Fatal(err)
	}
	r0 := ctlAwaitMidway(t, e, "mv1", 1, false).RowsConsumed
	t0 := time.Now()
	time.Sleep(time.Second)
	p := progressOf(t, e, "mv1")
	elapsed := time.Since(t0)
	read := p.RowsConsumed - r0
	if bound := int64(3*limit*elapsed.Seconds()) + chunk; read > bound {
		t.Fatalf("limit %d rows/s, barriers every 1ms: %d rows read in %v (%.0f rows/s), want at most %d", limit, read, elapsed, float64(read)/elapsed.Seconds(), bound)
	}
}

// A node over its memory budget (Options.BackfillMemoryBudget; 1 byte here, so every
// epoch is over it once it has written) holds its backfills back for the rest of each
// epoch: they still finish, a few rows an epoch, and the views are right.
func TestBackfillMemoryBudget(t *testing.T) {
	seed := vectest.Seed(t)
	rng := vectest.NewRand(seed)
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	e := openCtl(t, vfs.NewMem(), mem, ctlOptions{interval: 2 * time.Millisecond, memoryBudget: 1})
	defer ctlClose(t, e)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, rng, 1500)
	ctlCheckpoint(t, e)
	wctx, cancel := ctlTimeout(30 * time.Second)
	defer cancel()
	if err := e.CreateMV(wctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	ctlCheckpoint(t, e)
	checkViews(t, e, "memory budget")
	p := progressOf(t, e, "mv1")
	var held int64
	for _, a := range p.Actors {
		held += a.HeldBack
	}
	t.Logf("seed %d: %d rows backfilled, %d actor epochs held back", seed, p.RowsConsumed, held)
	if !p.Done || held == 0 {
		t.Fatalf("seed %d: done %v, %d epochs held back; want the budget to hold the backfill back", seed, p.Done, held)
	}
}
