package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// preload writes rows k = 0..n-1 into t and checkpoints.
func preload(t *testing.T, e *engine.Engine, mem memory.Allocator, rng *rand.Rand, n int) {
	t.Helper()
	ctx := context.Background()
	for lo := 0; lo < n; lo += 500 {
		var rows []kvRow
		for k := lo; k < min(n, lo+500); k++ {
			s := fmt.Sprintf("p%d", rng.IntN(100))
			rows = append(rows, kvRow{k: int64(k), v: rng.Int64N(120), s: &s})
		}
		rec := kvRecord(mem, rows)
		err := e.Insert(ctx, "t", rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
}

// progressOf returns the job of view name.
func progressOf(t *testing.T, e *engine.Engine, name string) engine.JobProgress {
	t.Helper()
	for _, p := range e.Progress() {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no job %s", name)
	return engine.JobProgress{}
}

// Views created over a table that already has rows and keeps changing are built by
// arrangement backfill: rate limited so that the backfill spans many barriers (some of
// them not checkpoints), rescaled 2 -> 4 -> 1 and crashed mid-backfill; the result
// equals the query over the final upstream, and progress never goes backwards.
func TestBackfillEndToEnd(t *testing.T) {
	base := vectest.Seed(t)
	for i := 0; i < scale(2, 10); i++ {
		seed := base + uint64(i)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
			runBackfillEndToEnd(t, seed)
		})
	}
}

func runBackfillEndToEnd(t *testing.T, seed uint64) {
	rng := vectest.NewRand(seed)
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	every := 1 + rng.IntN(3)
	// Half the seeds give the epoch buffers a tiny budget: they spill to disk.
	budget := int64(0)
	if seed%2 == 1 {
		budget = 512
	}
	// The other half commit every checkpoint by ingesting sstables.
	ingest := 0
	if seed%2 == 0 {
		ingest = 1
	}
	spilled := int64(0)
	open := func() *engine.Engine {
		e, err := engine.Open(ctx, "db", engine.Options{
			FS: fs, Mem: mem, BarrierInterval: 2 * time.Millisecond, CheckpointEvery: every, ChannelCapacity: 4,
			ChunkSize: 32, CacheSize: 4 << 20, MemTableSize: 1 << 20, Logger: quietLogger(),
			BackfillBufferBudget: budget, SpillDir: t.TempDir(), IngestBytes: ingest,
		})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return e
	}
	e := open()
	// Three table actors on two nodes: the views' actors (2, 4, then 1) each read
	// vnodes owned on both nodes, so they replicate the change stream (a backfill on
	// another node than its upstream), except where a quarter falls on one node.
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, rng, 3000)
	w := startWriter(e, mem, rng.Uint64())

	// Slow enough that the checks below find the backfills midway even on a loaded
	// machine under -race (the limits are lifted before the end).
	limit := int64(200)
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2, RateLimit: &limit, Background: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv2", mv2Plan(), engine.MVOptions{Parallelism: 2, RateLimit: &limit, Background: true}); err != nil {
		t.Fatal(err)
	}
	var last int64
	remote := 0 // observations of an actor replicating upstream actors on other nodes
	observe := func(when string) engine.JobProgress {
		p := progressOf(t, e, "mv1")
		if p.RowsConsumed < last {
			t.Fatalf("%s: mv1's progress went backwards: %d rows, was %d", when, p.RowsConsumed, last)
		}
		if !p.Done && p.Percent >= 100 {
			t.Fatalf("%s: %v%% before the backfill is done", when, p.Percent)
		}
		last = p.RowsConsumed
		spilled = max(spilled, p.SpilledChunks)
		for _, a := range p.Actors {
			if !a.Done && !a.LocalReads {
				remote++
			}
		}
		return p
	}
	midway := 0
	sleepBarriers := func() { time.Sleep(time.Duration(20+rng.IntN(30)) * time.Millisecond) }
	for _, p := range []int{4, 1} {
		sleepBarriers()
		if !observe(fmt.Sprintf("before rescale to %d", p)).Done {
			midway++
		}
		if err := e.RescheduleMV(ctx, "mv1", p); err != nil {
			t.Fatalf("reschedule mv1 to %d: %v", p, err)
		}
		observe(fmt.Sprintf("after rescale to %d", p))
	}

	// Crash mid-backfill: what a crash now leaves on disk, reopened.
	sleepBarriers()
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	committed := observe("before the crash")
	if !committed.Done {
		midway++
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	w.halt()
	writes := w.n
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	fs = crashed
	e = open()
	last = 0
	after := observe("after the crash")
	// Checked once the actors have loaded their progress (the first barriers).
	for i := 0; i < 100 && after.RowsConsumed < committed.RowsConsumed && !after.Done; i++ {
		time.Sleep(2 * time.Millisecond)
		after = observe("after the crash")
	}
	if after.RowsConsumed < committed.RowsConsumed && !after.Done {
		t.Fatalf("progress after the crash: %d rows, %d were committed before it", after.RowsConsumed, committed.RowsConsumed)
	}
	w = startWriter(e, mem, rng.Uint64())
	sleepBarriers()

	// Lift the limits and let the backfills finish while writes go on.
	for _, mv := range []string{"mv1", "mv2"} {
		if err := e.SetRateLimit(ctx, mv, nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		p1, p2 := observe("finishing"), progressOf(t, e, "mv2")
		if p1.Done && p2.Done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backfill not done after 60s: %+v %+v", p1, p2)
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.halt()
	writes += w.n
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	n := checkViews(t, e, "backfill done")
	p := observe("the end")
	if p.VnodesCompleted != p.VnodesTotal || p.VnodesTotal != 16 || p.Percent != 100 {
		t.Fatalf("final progress %+v", p)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows in t, %d write batches, %d of 3 checks mid-backfill, %d rows read by mv1's backfill", n, writes, midway, p.RowsConsumed)
	if midway == 0 {
		t.Fatalf("the backfill was never caught midway: the test tested nothing of it")
	}
	if remote == 0 {
		t.Fatalf("no backfill actor was seen replicating upstream actors on another node")
	}
	if budget > 0 {
		t.Logf("up to %d upstream chunks spilled to disk", spilled)
		if spilled == 0 {
			t.Fatalf("a %d-byte epoch buffer never spilled", budget)
		}
	}
}

// The no-shuffle backfill (the baseline) builds the same views, co-located with the
// upstream's actors and reading their node's uncommitted state, across a crash.
func TestNoShuffleBackfill(t *testing.T) {
	seed := vectest.Seed(t)
	rng := vectest.NewRand(seed)
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	ingest := 0 // odd seeds commit every checkpoint by ingesting sstables
	if seed%2 == 1 {
		ingest = 1
	}
	open := func() *engine.Engine {
		e, err := engine.Open(ctx, "db", engine.Options{
			FS: fs, Mem: mem, BarrierInterval: 2 * time.Millisecond, CheckpointEvery: 2, ChannelCapacity: 4,
			ChunkSize: 32, CacheSize: 4 << 20, MemTableSize: 1 << 20, Logger: quietLogger(),
			IngestBytes: ingest,
		})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return e
	}
	e := open()
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, rng, 2000)
	w := startWriter(e, mem, rng.Uint64())
	limit := int64(2000)
	for _, mv := range []struct {
		name string
		plan engine.Plan
	}{{"mv1", mv1Plan()}, {"mv3", mv3Plan()}} {
		if err := e.CreateMV(ctx, mv.name, mv.plan, engine.MVOptions{Backfill: engine.NoShuffleBackfill, RateLimit: &limit, Background: true}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(30 * time.Millisecond)
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	before := progressOf(t, e, "mv1")
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	w.halt()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	fs = crashed
	e = open()
	defer e.Close()
	w = startWriter(e, mem, rng.Uint64())
	for _, mv := range []string{"mv1", "mv3"} {
		if err := e.SetRateLimit(ctx, mv, nil); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err := e.WaitBackfill(wctx, mv)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	w.halt()
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	checkViews(t, e, "no-shuffle backfill done")
	if p := progressOf(t, e, "mv1"); p.Backfill != engine.NoShuffleBackfill || !p.Done || p.RowsConsumed < before.RowsConsumed {
		t.Fatalf("progress %+v after %+v", p, before)
	}
	if before.Done {
		t.Logf("the backfill was done before the crash")
	}
}

// Local reads: a backfill whose upstream owners run on its node reads the node's
// uncommitted store and holds no replicated epochs; the same backfill replicating holds
// the upstream's changes of every uncommitted epoch. Both peaks are logged, in bytes:
// go test -run TestLocalReadsSaveMemory -v ./engine/
func TestLocalReadsSaveMemory(t *testing.T) {
	seed := vectest.Seed(t)
	peak := map[bool]int{}
	for _, replicate := range []bool{false, true} {
		rng := vectest.NewRand(seed)
		ctx := context.Background()
		mem := memory.NewGoAllocator()
		e, err := engine.Open(ctx, "db", engine.Options{
			FS: vfs.NewMem(), Mem: mem, Nodes: 1, BarrierInterval: 2 * time.Millisecond, CheckpointEvery: 4,
			ChunkSize: 64, AlwaysReplicate: replicate, Logger: quietLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 1}); err != nil {
			t.Fatal(err)
		}
		preload(t, e, mem, rng, 3000)
		w := startWriter(e, mem, rng.Uint64())
		limit := int64(5000)
		if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 1, RateLimit: &limit, Background: true}); err != nil {
			t.Fatal(err)
		}
		for {
			p := progressOf(t, e, "mv1")
			peak[replicate] = max(peak[replicate], p.ReplicatedPeak)
			if p.Done {
				break
			}
			time.Sleep(time.Millisecond)
		}
		w.halt()
		if _, err := e.WaitCheckpoint(ctx); err != nil {
			t.Fatal(err)
		}
		checkViews(t, e, fmt.Sprintf("always replicate = %v", replicate))
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("peak replicated bytes during the backfill: %d with local reads, %d replicating", peak[false], peak[true])
	if peak[false] != 0 || peak[true] == 0 {
		t.Fatalf("peak replicated bytes: %d with local reads (want 0), %d replicating (want > 0)", peak[false], peak[true])
	}
}

// Actors that a rescale starts while the engine is paused stay paused until Resume.
func TestRescaleWhilePaused(t *testing.T) {
	rng := vectest.NewRand(vectest.Seed(t))
	ctx := context.Background()
	e, mem := kvEngine(t)
	preload(t, e, mem, rng, 2000)
	if err := e.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2, Background: true}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{3, 1} {
		if err := e.RescheduleMV(ctx, "mv1", p); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			if _, err := e.WaitCheckpoint(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		if got := progressOf(t, e, "mv1"); got.RowsConsumed != 0 || !got.Paused {
			t.Fatalf("paused view after a rescale to %d: %+v", p, got)
		}
	}
	if err := e.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitBackfill(ctx, "mv1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	checkViews(t, e, "after resume")
}
