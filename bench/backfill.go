package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
)

// EngineBidTableID is the table id an engine gives the bid table when it is the first
// object created in a fresh directory (the catalog numbers objects from 1). The
// backfill benchmark bulk-loads the engine's bid table under it; a test checks the
// round trip through the engine. It equals BidTableID, so SnapshotBench's raw scan
// reads the same keys.
const EngineBidTableID uint32 = 1

// The upstream modes of a build: nothing writing (idle), or a writer inserting rows
// while the view backfills (busy).
const (
	modeIdle = "idle"
	modeBusy = "busy"
)

// benchKinds are the backfill kinds the benchmarks compare, arrangement first.
var benchKinds = []engine.BackfillKind{engine.ArrangementBackfill, engine.NoShuffleBackfill}

// RunBackfillBench measures view creation by arrangement backfill against no-shuffle
// backfill on the Nexmark bid table, and the arrangement backfill executor against a
// raw scan:
//
//  1. In a new directory on disk (removed at the end), an engine creates table bid
//     with Parallelism actors and closes; Rows bid rows are then bulk-loaded straight
//     into its store under EngineBidTableID (no row counts are written, so the jobs'
//     UpstreamRows estimates read 0 when idle) and compacted. This store, kept open
//     and never written again, is the golden copy.
//  2. Efficiency (after the builds of step 3, so that the block cache these passes
//     fill is not held through the builds): over the golden store, an
//     executors.ArrangementBackfill with no engine (its input gives barriers every
//     BarrierInterval and one as soon as every vnode is Completed, its sink counts
//     and releases chunks until Done) against the raw pebble scan of SnapshotBench,
//     both with 2 workers (the executor with S2 = every column and with Q0;
//     SnapshotBench's bare snapshot read of Q0 too); a warm-up pass of each, then
//     EfficiencyReps interleaved repetitions; medians.
//  3. Builds: every build runs on a fresh engine opened on a pebble checkpoint of the
//     golden store (hard-linked sstables), so each starts from identical data: in
//     busy mode earlier builds' inserts would otherwise grow the table for later ones.
//     Before each, the process collects its garbage and returns the freed heap to
//     the operating system (settleMemory), so each starts from the same memory too.
//     A build is CreateMV(pass-through view over bid, MVOptions{Backfill: kind,
//     Parallelism}), which returns once the backfill is done, timed; then DropMV, a
//     checkpoint and Close. After an untimed warm-up build of each kind (unless
//     NoWarmup), idle builds run first (order alternating by rep: arrangement first
//     on even reps), then busy builds (no-shuffle first on even reps), each with a
//     writer inserting new bid rows (new pks: their date_times follow the loaded
//     ones', and in key order they fall among the loaded rows) at BusyFraction ×
//     Rows ÷ the median idle seconds of the same kind (or at BusyRate rows/s for
//     both kinds), every 10ms by wall clock, for the whole build, stopped when
//     CreateMV returns. Modes limits the builds to idle or busy ones.
//
// In an idle build the job must have read exactly Rows snapshot rows (which also
// checks that the rows were loaded under the engine's table id).
func RunBackfillBench(ctx context.Context, o BackfillBenchOptions) (res BackfillResult, err error) {
	if o.Rows < 1 {
		return res, fmt.Errorf("bench: backfill: %d rows", o.Rows)
	}
	if o.Parallelism == 0 {
		o.Parallelism = 2
	}
	if o.Parallelism < 1 {
		return res, fmt.Errorf("bench: backfill: parallelism %d", o.Parallelism)
	}
	if o.Reps == 0 {
		o.Reps = 1
	}
	if o.Reps < 1 {
		return res, fmt.Errorf("bench: backfill: %d reps", o.Reps)
	}
	if o.BusyFraction == 0 {
		o.BusyFraction = 0.1
	}
	if o.BusyFraction < 0 {
		return res, fmt.Errorf("bench: backfill: busy fraction %v", o.BusyFraction)
	}
	if o.BusyRate < 0 {
		return res, fmt.Errorf("bench: backfill: busy rate %v rows/s", o.BusyRate)
	}
	if o.Modes == nil {
		o.Modes = []string{modeIdle, modeBusy}
	}
	if len(o.Modes) == 0 {
		return res, fmt.Errorf("bench: backfill: no modes (want %s, %s or both)", modeIdle, modeBusy)
	}
	for _, m := range o.Modes {
		if m != modeIdle && m != modeBusy {
			return res, fmt.Errorf("bench: backfill: unknown mode %q (want %s or %s)", m, modeIdle, modeBusy)
		}
	}
	runIdle, runBusy := slices.Contains(o.Modes, modeIdle), slices.Contains(o.Modes, modeBusy)
	if runBusy && !runIdle && o.BusyRate == 0 {
		return res, fmt.Errorf("bench: backfill: busy builds without idle ones need a busy rate (rows/s)")
	}
	if o.BarrierInterval == 0 {
		o.BarrierInterval = 100 * time.Millisecond
	}
	if o.BarrierInterval < 0 {
		return res, fmt.Errorf("bench: backfill: barrier interval %v", o.BarrierInterval)
	}
	if o.Workers < 0 {
		return res, fmt.Errorf("bench: backfill: %d workers, want >= 0", o.Workers)
	}
	o.EfficiencyReps = max(o.EfficiencyReps, 5)
	t0 := time.Now()
	defer func() {
		res.LoadAvgEnd = loadAvg()
		res.Seconds = time.Since(t0).Seconds()
	}()
	res = BackfillResult{
		Rows: o.Rows, Parallelism: o.Parallelism, Reps: o.Reps, BusyFraction: o.BusyFraction, BusyRate: o.BusyRate,
		BarrierIntervalMS: float64(o.BarrierInterval) / float64(time.Millisecond), BackfillWorkers: cmp.Or(o.Workers, engine.DefaultBackfillWorkers(runtime.GOMAXPROCS(0))), MemoryBudget: cmp.Or(max(o.MemoryBudget, -1), engine.DefaultBackfillMemoryBudget), Nodes: 2,
		Allocator:  map[bool]string{false: "pool", true: "go"}[o.GoAllocator],
		GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), Cgo: builtWithCgo, GOGC: os.Getenv("GOGC"), Env: runtimeEnv(), LoadAvgStart: loadAvg(),
	}
	if o.BusyRate > 0 {
		res.BusyFraction = 0 // not used
	}
	b, err := newBackfillBench(ctx, o)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := b.close(); err == nil {
			err = cerr
		}
	}()
	res.LoadSeconds = b.loadSeconds
	b.logf("loaded %d rows in %.1fs", o.Rows, b.loadSeconds)

	efficiency := func() error {
		var err error
		if res.Efficiency, res.EfficiencyDetail, err = b.measureEfficiency(ctx); err != nil {
			return err
		}
		b.logf("efficiency %.3f (q0 %.3f)", res.Efficiency, res.EfficiencyDetail.EfficiencyQ0)
		return nil
	}
	if o.EfficiencyOnly {
		return res, efficiency()
	}

	if !o.NoWarmup {
		for _, k := range benchKinds {
			if _, err := b.build(ctx, k, 0); err != nil {
				return res, fmt.Errorf("bench: backfill: warm-up: %w", err)
			}
		}
	}
	idle := map[engine.BackfillKind]*BackfillBuilds{}
	busy := map[engine.BackfillKind]*BackfillBuilds{}
	for _, k := range benchKinds {
		idle[k], busy[k] = &BackfillBuilds{}, &BackfillBuilds{}
	}
	for rep := 0; runIdle && rep < o.Reps; rep++ {
		order := slices.Clone(benchKinds)
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		for _, k := range order {
			r, err := b.build(ctx, k, 0)
			if err != nil {
				return res, err
			}
			idle[k].add(r)
			b.logf("idle %s rep %d: %.2fs", kindName(k), rep+1, r.seconds)
		}
	}
	rates := map[engine.BackfillKind]float64{}
	for _, k := range benchKinds {
		if rates[k] = o.BusyRate; o.BusyRate == 0 && runIdle {
			rates[k] = o.BusyFraction * float64(o.Rows) / median(idle[k].Seconds)
		}
		busy[k].InsertTargetPerSec = rates[k]
	}
	for rep := 0; runBusy && rep < o.Reps; rep++ {
		order := slices.Clone(benchKinds)
		if rep%2 == 0 {
			slices.Reverse(order)
		}
		for _, k := range order {
			r, err := b.build(ctx, k, rates[k])
			if err != nil {
				return res, err
			}
			busy[k].add(r)
			b.logf("busy %s rep %d: %.2fs, %d rows inserted", kindName(k), rep+1, r.seconds, r.inserted)
		}
	}
	// The efficiency passes come after the builds: they fill the golden store's block
	// cache (DefaultBenchCache), which would otherwise stay full through every build,
	// and without cgo it is Go heap, which a build's garbage collector would count.
	if err := efficiency(); err != nil {
		return res, err
	}
	for _, m := range []struct {
		name   string
		builds map[engine.BackfillKind]*BackfillBuilds
	}{{modeIdle, idle}, {modeBusy, busy}} {
		if !slices.Contains(o.Modes, m.name) {
			continue
		}
		a, n := m.builds[engine.ArrangementBackfill], m.builds[engine.NoShuffleBackfill]
		mr := BackfillModeResult{Mode: m.name, ArrangementSeconds: median(a.Seconds), NoShuffleSeconds: median(n.Seconds), Arrangement: *a, NoShuffle: *n}
		mr.Ratio = mr.ArrangementSeconds / mr.NoShuffleSeconds
		mr.RatioStats = pairedRatios(a.Seconds, n.Seconds)
		res.Modes = append(res.Modes, mr)
	}
	return res, nil
}

// kindName is a backfill kind as the logs and profiler labels name it.
func kindName(k engine.BackfillKind) string {
	if k == engine.NoShuffleBackfill {
		return "noshuffle"
	}
	return string(k)
}

// loadAvg is the first three fields of /proc/loadavg, or "".
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// backfillBench is the golden store and the state of one run.
type backfillBench struct {
	o           BackfillBenchOptions
	dir         string // the run's temporary directory
	golden      *storage.Store
	goldenDir   string
	table       *schema.Table
	mem         memory.Allocator
	loadSeconds float64
	builds      int    // clones made so far
	passes      uint32 // efficiency passes run so far (progress table ids)
	log         *slog.Logger
}

func newBackfillBench(ctx context.Context, o BackfillBenchOptions) (*backfillBench, error) {
	d, err := os.MkdirTemp(o.Dir, "weir-backfill-bench-")
	if err != nil {
		return nil, err
	}
	logOut := o.Log
	if logOut == nil {
		logOut = io.Discard
	}
	b := &backfillBench{o: o, dir: d, goldenDir: filepath.Join(d, "golden"), table: tables.BidTable(), mem: vec.NewPoolAllocator(),
		log: slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	fail := func(err error) (*backfillBench, error) {
		if b.golden != nil {
			b.golden.Close()
		}
		os.RemoveAll(d)
		return nil, fmt.Errorf("bench: backfill: setup: %w", err)
	}
	t0 := time.Now()
	e, err := engine.Open(ctx, b.goldenDir, engine.Options{BarrierInterval: o.BarrierInterval, Logger: b.log})
	if err != nil {
		return fail(err)
	}
	err = e.CreateTable(ctx, b.table, engine.TableOptions{Parallelism: o.Parallelism})
	if cerr := e.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	// The efficiency passes read the golden store: a cache that holds 2M rows keeps
	// them warm, as SnapshotBench's does.
	if b.golden, err = storage.Open(b.goldenDir, storage.Options{CacheSize: DefaultBenchCache}); err != nil {
		return fail(err)
	}
	if err := BulkLoadBidsTable(b.golden, EngineBidTableID, o.Rows, 1); err != nil {
		return fail(err)
	}
	b.loadSeconds = time.Since(t0).Seconds()
	return b, nil
}

// buildMem is the Arrow allocator of a build's engine: nil (the engine's default
// pool) unless GoAllocator.
func (b *backfillBench) buildMem() memory.Allocator {
	if b.o.GoAllocator {
		return memory.NewGoAllocator()
	}
	return nil
}

func (b *backfillBench) close() error {
	err := b.golden.Close()
	if rerr := os.RemoveAll(b.dir); err == nil {
		err = rerr
	}
	return err
}

func (b *backfillBench) logf(format string, args ...any) {
	if b.o.Log != nil {
		fmt.Fprintf(b.o.Log, "weir bench backfill: "+format+"\n", args...)
	}
}
