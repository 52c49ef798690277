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
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// EngineBidTableID is the table id an engine gives the bid table when it is the first
// object created in a fresh directory (the catalog numbers objects from 1). The
// backfill benchmark bulk-loads the engine's bid table under it; a test checks the
// round trip through the engine. It equals BidTableID, so SnapshotBench's raw scan
// reads the same keys.
const EngineBidTableID uint32 = 1

// BackfillBenchOptions configure RunBackfillBench. Zero values mean the defaults.
type BackfillBenchOptions struct {
	Rows        int    // bid rows to load (required)
	Parallelism int    // actors of the bid table and of each view (default 2)
	Reps        int    // builds of each kind in each mode; medians are reported (default 1; weir bench backfill passes 5)
	Dir         string // parent of the temporary directory; "": the system temp dir
	// BusyFraction is the busy writer's rate as a fraction of the idle snapshot rate
	// of the same kind (default 0.1).
	BusyFraction float64
	// BusyRate, when set, is the busy writer's rate in rows/s for both kinds instead
	// (the same upstream load for both, however fast each builds).
	BusyRate float64
	// Modes are the upstream modes to build in, "idle" and "busy" (nil: both). Busy
	// builds without idle ones need BusyRate. The efficiency passes and the warm-up
	// builds run whatever the modes.
	Modes []string
	// BarrierInterval is the engine's barrier interval, and that of the barriers fed to
	// the executor of the efficiency passes (default: the engine's, 100ms).
	BarrierInterval time.Duration
	// Workers is the engine's Options.BackfillWorkers: the snapshot read goroutines of
	// each arrangement backfill actor (0: the engine's default,
	// engine.DefaultBackfillWorkers; a no-shuffle backfill always reads with one).
	Workers int
	// MemoryBudget is the engine's Options.BackfillMemoryBudget in bytes (0: the
	// engine's default; negative: none).
	MemoryBudget int64
	// GoAllocator gives the builds' engines Arrow's Go allocator instead of their
	// default, a vec.PoolAllocator each (to compare the two).
	GoAllocator bool
	// EfficiencyReps is the interleaved repetitions of the efficiency passes (default
	// and minimum 5).
	EfficiencyReps int
	// NoWarmup skips the untimed build of each kind that comes before the timed ones.
	// Every build opens a fresh engine on a checkpoint of the same store, so no build
	// inherits another's block cache; but the process's first build is slower than the
	// rest (in 5 of 8 runs the slowest of its kind's idle builds: the Go heap grows,
	// the checkpoint's files are first read), and without the warm-up that build is
	// always the first kind's.
	NoWarmup bool
	// EfficiencyOnly measures the efficiency passes and runs no build: Modes is empty.
	// For profiling the executor's read path alone.
	EfficiencyOnly bool
	// Verify scans each view after its build (the busy writer stopped, a checkpoint
	// taken) and checks it holds every loaded and inserted row: for tests; costly.
	Verify bool
	// Log receives a line per build (nil: none).
	Log io.Writer
}

// BackfillResult is the outcome of RunBackfillBench.
type BackfillResult struct {
	Rows        int `json:"rows"`
	Parallelism int `json:"parallelism"`
	Reps        int `json:"reps"`
	// Modes are idle (no writes during the build) and busy (a writer inserting new
	// rows at BusyFraction of the idle snapshot rate of the same kind, or at
	// BusyRate), those that were built.
	Modes []BackfillModeResult `json:"modes"`
	// Efficiency is the arrangement backfill executor's rows/s into a discarding sink
	// ÷ a raw pebble scan's rows/s over the same vnodes with as many workers, S2 = all
	// of bid's columns (the pass-through view's); medians of interleaved passes.
	Efficiency       float64            `json:"efficiency"`
	EfficiencyDetail BackfillEfficiency `json:"efficiency_detail"`

	// The busy writer's target: BusyFraction of each kind's idle rate, or BusyRate
	// rows/s when that is set (the other is then left out).
	BusyFraction      float64 `json:"busy_fraction,omitempty"`
	BusyRate          float64 `json:"busy_rate,omitempty"`
	BarrierIntervalMS float64 `json:"barrier_interval_ms"`
	BackfillWorkers   int     `json:"backfill_workers"` // per arrangement actor
	// MemoryBudget is the engine's BackfillMemoryBudget per node (-1: none).
	MemoryBudget int64 `json:"backfill_memory_budget"`
	// Allocator is the builds' engines' Arrow allocator: "pool" (their default) or
	// "go" (GoAllocator).
	Allocator  string `json:"allocator"`
	Nodes      int    `json:"nodes"` // engine default
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"num_cpu"`
	GoVersion  string `json:"go_version"`
	// Cgo is whether the binary was built with cgo (CGO_ENABLED=1), and GOGC the GOGC
	// it ran with ("" when unset). With cgo, pebble allocates its block cache and
	// memtables with C's calloc, outside the Go heap; without it, from the Go heap
	// (see README, "cgo and pebble's block cache").
	Cgo  bool   `json:"cgo"`
	GOGC string `json:"gogc"`
	// Env is the other environment variables that change how the runtime or C's
	// allocator behave, those set: GODEBUG, GOMEMLIMIT, GLIBC_TUNABLES.
	Env map[string]string `json:"env,omitempty"`
	// LoadAvg is /proc/loadavg at the start and end of the run ("" elsewhere).
	LoadAvgStart string  `json:"loadavg_start,omitempty"`
	LoadAvgEnd   string  `json:"loadavg_end,omitempty"`
	LoadSeconds  float64 `json:"load_seconds"`
	Seconds      float64 `json:"seconds"` // the whole run, loading included
}

// BackfillModeResult is one upstream mode: the medians of the build times of each
// kind, and their ratio.
type BackfillModeResult struct {
	Mode               string  `json:"mode"`
	ArrangementSeconds float64 `json:"arrangement_seconds"`
	NoShuffleSeconds   float64 `json:"noshuffle_seconds"`
	// Ratio is ArrangementSeconds ÷ NoShuffleSeconds.
	Ratio float64 `json:"ratio"`
	// RatioStats is the ratios of the builds paired by rep (nil with no build).
	RatioStats  *RatioStats    `json:"ratio_stats,omitempty"`
	Arrangement BackfillBuilds `json:"arrangement"`
	NoShuffle   BackfillBuilds `json:"noshuffle"`
}

// BackfillBuilds details the builds of one kind in one mode, one entry per rep.
type BackfillBuilds struct {
	Seconds []float64 `json:"seconds"`
	// CoresUsed is process CPU time ÷ wall time during each build (the busy writer
	// included): below what the build could use when other processes took CPU.
	CoresUsed []float64 `json:"cores_used"`
	// SnapshotRows is the rows the backfill read from its snapshot (the job's
	// RowsConsumed): the loaded rows when idle, more when busy.
	SnapshotRows []int64 `json:"snapshot_rows"`
	// BarrierBatches is the snapshot batches (with rows) the backfill actors took at
	// barriers that stopped their reads: those ready then plus those their workers
	// were filling (engine.ActorProgress's ReadyTaken + StopFlushed, summed).
	BarrierBatches []int64 `json:"barrier_batches"`
	// Checkpoints is the checkpoints the engine committed during each build, and
	// CheckpointSeconds the time their commits took in all (engine.BarrierStats's
	// CheckpointDuration): a barrier round holds the next one until its commit is
	// done, so a build whose commits take longer than the barrier interval runs its
	// rounds back to back, and its epochs (and their commits) grow.
	Checkpoints       []int     `json:"checkpoints"`
	CheckpointSeconds []float64 `json:"checkpoint_seconds"`
	// BarrierSeconds is, per build, the time its barrier rounds took from injecting
	// the barrier until every actor passed it on (engine.BarrierStats's Latency),
	// summed: with CheckpointSeconds, most of a build whose rounds run back to back.
	BarrierSeconds []float64 `json:"barrier_seconds"`
	// MinorFaults is the process's minor page faults during each build, and GCs the
	// garbage collections: memory the build touched for the first time since the
	// heap grew or gave pages back costs a fault each 4 KiB.
	MinorFaults []int64  `json:"minor_faults"`
	GCs         []uint32 `json:"gcs"`
	// The store's LSM during each build (engine.StorageMetrics, after CreateMV
	// returns less before it starts): sstables ingested by checkpoints and their
	// bytes, the bytes of those that pebble had to place in L0 (they overlap
	// committed keys; a compaction rewrites them later), the ingests that overlapped
	// the memtable (pebble queues those behind a memtable flush), the bytes written
	// by memtable flushes and by compactions, and the block cache's hits and misses
	// (every read of the build: the snapshot's and the view's writes' lookups).
	IngestedTables   []uint64 `json:"ingested_tables"`
	IngestedBytes    []uint64 `json:"ingested_bytes"`
	IngestedBytesL0  []uint64 `json:"ingested_bytes_l0"`
	FlushableIngests []uint64 `json:"flushable_ingests"`
	FlushedBytes     []uint64 `json:"flushed_bytes"`
	CompactedBytes   []uint64 `json:"compacted_bytes"`
	CacheHits        []uint64 `json:"block_cache_hits"`
	CacheMisses      []uint64 `json:"block_cache_misses"`
	// Busy mode: the writer's target rate, and what it inserted during the build.
	InsertTargetPerSec float64   `json:"insert_target_rows_per_sec,omitempty"`
	Inserted           []int64   `json:"inserted_rows,omitempty"`
	InsertedPerSec     []float64 `json:"inserted_rows_per_sec,omitempty"`
}

// BackfillEfficiency details the efficiency measurement.
type BackfillEfficiency struct {
	Workers   int `json:"workers"`
	BatchSize int `json:"batch_size"`
	Reps      int `json:"reps"`
	// RowsPerSec is the executor's, S2 = every column; RawRowsPerSec the raw scan's.
	RowsPerSec    float64 `json:"rows_per_sec"`
	RawRowsPerSec float64 `json:"raw_rows_per_sec"`
	// Barriers is the barriers a pass took (the first included), median.
	Barriers float64 `json:"barriers"`
	// CPU nanoseconds per row and cores used (CPU time ÷ wall time), median.
	NsPerRowCPU    float64 `json:"cpu_ns_per_row"`
	RawNsPerRowCPU float64 `json:"raw_cpu_ns_per_row"`
	CoresUsed      float64 `json:"cores_used"`
	RawCoresUsed   float64 `json:"raw_cores_used"`
	// CacheMisses and RawCacheMisses are the golden store's block cache misses in a
	// pass, median: each a block read from its file (and, with cgo, a calloc).
	CacheMisses    float64 `json:"block_cache_misses"`
	RawCacheMisses float64 `json:"raw_block_cache_misses"`
	// The same with S2 = Q0 (auction, bidder, price, date_time: 4 of 7 columns).
	EfficiencyQ0 float64 `json:"efficiency_q0"`
	RowsPerSecQ0 float64 `json:"rows_per_sec_q0"`
	// SnapshotReadEfficiencyQ0 is the bare snapshot read (storage.OpenSnapshot, Q0,
	// as SnapshotBench measures it) ÷ the raw scan, in the same repetitions: what the
	// read path alone allows, against which EfficiencyQ0 shows the executor's share.
	SnapshotReadEfficiencyQ0 float64 `json:"snapshot_read_efficiency_q0"`
	SnapshotReadRowsPerSecQ0 float64 `json:"snapshot_read_rows_per_sec_q0"`
}

// Backfill kinds as the benchmark names them.
const (
	modeIdle = "idle"
	modeBusy = "busy"
)

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

func kindName(k engine.BackfillKind) string {
	if k == engine.NoShuffleBackfill {
		return "noshuffle"
	}
	return string(k)
}

func (bb *BackfillBuilds) add(r buildResult) {
	bb.Seconds = append(bb.Seconds, r.seconds)
	bb.CoresUsed = append(bb.CoresUsed, r.cores)
	bb.SnapshotRows = append(bb.SnapshotRows, r.snapshotRows)
	bb.BarrierBatches = append(bb.BarrierBatches, r.barrierBatches)
	bb.Checkpoints = append(bb.Checkpoints, r.checkpoints)
	bb.CheckpointSeconds = append(bb.CheckpointSeconds, r.checkpointSeconds)
	bb.BarrierSeconds = append(bb.BarrierSeconds, r.barrierSeconds)
	bb.MinorFaults = append(bb.MinorFaults, r.faults)
	bb.GCs = append(bb.GCs, r.gcs)
	bb.IngestedTables = append(bb.IngestedTables, r.lsm.ingestedTables)
	bb.IngestedBytes = append(bb.IngestedBytes, r.lsm.ingestedBytes)
	bb.IngestedBytesL0 = append(bb.IngestedBytesL0, r.lsm.ingestedBytesL0)
	bb.FlushableIngests = append(bb.FlushableIngests, r.lsm.flushableIngests)
	bb.FlushedBytes = append(bb.FlushedBytes, r.lsm.flushedBytes)
	bb.CompactedBytes = append(bb.CompactedBytes, r.lsm.compactedBytes)
	bb.CacheHits = append(bb.CacheHits, r.lsm.cacheHits)
	bb.CacheMisses = append(bb.CacheMisses, r.lsm.cacheMisses)
	if r.rate > 0 {
		bb.Inserted = append(bb.Inserted, r.inserted)
		bb.InsertedPerSec = append(bb.InsertedPerSec, float64(r.inserted)/r.seconds)
	}
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

// buildResult is one timed build.
type buildResult struct {
	seconds, cores float64
	snapshotRows   int64
	barrierBatches int64
	faults         int64   // minor page faults during the build
	gcs            uint32  // garbage collections during the build
	rate           float64 // the busy writer's target rows/s (0: idle)
	inserted       int64
	// checkpoints committed during the build, and the seconds their commits took
	checkpoints       int
	checkpointSeconds float64
	barrierSeconds    float64 // the rounds' barrier latencies, summed
	lsm               lsmDelta
}

// lsmDelta is what a build did to the store's LSM (see BackfillBuilds).
type lsmDelta struct {
	ingestedTables, ingestedBytes, ingestedBytesL0, flushedBytes, compactedBytes uint64
	flushableIngests, cacheHits, cacheMisses                                     uint64
}

// lsmTotals reads the cumulative counters of m that lsmDelta differences. It sums
// the levels itself: pebble's Metrics.Total counts the WAL and ingests as flushed.
func lsmTotals(m *pebble.Metrics) lsmDelta {
	var d lsmDelta
	for i := range m.Levels {
		l := &m.Levels[i]
		d.ingestedTables += l.TablesIngested
		d.ingestedBytes += l.TableBytesIngested
		d.flushedBytes += l.TableBytesFlushed
		d.compactedBytes += l.TableBytesCompacted
	}
	d.ingestedBytesL0 = m.Levels[0].TableBytesIngested
	d.flushableIngests = m.Flush.AsIngestCount
	d.cacheHits, d.cacheMisses = uint64(m.BlockCache.Hits), uint64(m.BlockCache.Misses)
	return d
}

func (d lsmDelta) sub(o lsmDelta) lsmDelta {
	return lsmDelta{d.ingestedTables - o.ingestedTables, d.ingestedBytes - o.ingestedBytes,
		d.ingestedBytesL0 - o.ingestedBytesL0, d.flushedBytes - o.flushedBytes, d.compactedBytes - o.compactedBytes,
		d.flushableIngests - o.flushableIngests, d.cacheHits - o.cacheHits, d.cacheMisses - o.cacheMisses}
}

// build opens an engine on a fresh checkpoint of the golden store, times the
// creation of a pass-through view over bid by backfill kind (with a writer inserting
// rate rows/s meanwhile when rate > 0), checks its job, drops it and closes.
//
// The build runs under the profiler label weir_build (kind and mode, such as
// "arrangement_idle"), which the engine's goroutines and pebble's inherit, as the
// engine is opened inside it: go tool pprof -tagfocus 'weir_build=^arrangement_idle$'
// FILE shows those builds (warm-ups included) and nothing else.
func (b *backfillBench) build(ctx context.Context, kind engine.BackfillKind, rate float64) (res buildResult, err error) {
	mode := modeIdle
	if rate > 0 {
		mode = modeBusy
	}
	pprof.Do(ctx, pprof.Labels("weir_build", kindName(kind)+"_"+mode), func(ctx context.Context) {
		res, err = b.buildLabeled(ctx, kind, rate)
	})
	return res, err
}

func (b *backfillBench) buildLabeled(ctx context.Context, kind engine.BackfillKind, rate float64) (res buildResult, err error) {
	b.builds++
	settleMemory()
	dir := filepath.Join(b.dir, fmt.Sprintf("build-%d", b.builds))
	if err := b.golden.DB().Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return res, fmt.Errorf("bench: backfill: clone the store: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); err == nil && rerr != nil {
			err = rerr
		}
	}()
	// The checkpoints of the timed build: rounds that end while CreateMV runs.
	var ckMu sync.Mutex
	timing := false
	onBarrier := func(bs engine.BarrierStats) {
		ckMu.Lock()
		defer ckMu.Unlock()
		if timing {
			res.barrierSeconds += bs.Latency.Seconds()
		}
		if timing && bs.Checkpoint {
			res.checkpoints++
			res.checkpointSeconds += bs.CheckpointDuration.Seconds()
		}
	}
	e, err := engine.Open(ctx, dir, engine.Options{BarrierInterval: b.o.BarrierInterval, BackfillWorkers: b.o.Workers,
		BackfillMemoryBudget: b.o.MemoryBudget, Logger: b.log, OnBarrier: onBarrier, Mem: b.buildMem()})
	if err != nil {
		return res, fmt.Errorf("bench: backfill: %w", err)
	}
	defer func() {
		if cerr := e.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("bench: backfill: %w", cerr)
		}
	}()
	const view = "bid_view"
	var w *busyWriter
	if rate > 0 {
		w = startBusyWriter(ctx, e, b.o.Rows, rate)
	}
	ckMu.Lock()
	timing = true
	ckMu.Unlock()
	m0 := e.StorageMetrics()
	if m0 == nil {
		return res, fmt.Errorf("bench: backfill: %s build: the engine closed before the build", kindName(kind))
	}
	lsm0 := lsmTotals(m0)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0, faults0 := processUsage()
	t0 := time.Now()
	err = e.CreateMV(ctx, view, engine.Scan(b.table.Name), engine.MVOptions{Backfill: kind, Parallelism: b.o.Parallelism})
	wall := time.Since(t0)
	cpu1, faults1 := processUsage()
	cpu := cpu1 - cpu0
	runtime.ReadMemStats(&ms1)
	res.faults, res.gcs = faults1-faults0, ms1.NumGC-ms0.NumGC
	if m := e.StorageMetrics(); m != nil {
		res.lsm = lsmTotals(m).sub(lsm0)
	}
	ckMu.Lock()
	timing = false
	ckMu.Unlock()
	if w != nil {
		res.inserted, res.rate = w.stop(), rate
		if err == nil {
			err = w.err
		}
	}
	if err != nil {
		return res, fmt.Errorf("bench: backfill: %s build: %w", kindName(kind), err)
	}
	res.seconds, res.cores = wall.Seconds(), cpu.Seconds()/wall.Seconds()
	var job *engine.JobProgress
	for _, p := range e.Progress() {
		if p.Name == view {
			job = &p
		}
	}
	switch {
	case job == nil || !job.Done:
		return res, fmt.Errorf("bench: backfill: %s build: the job is not done after CreateMV: %+v", kindName(kind), job)
	case rate == 0 && job.RowsConsumed != int64(b.o.Rows), job.RowsConsumed < int64(b.o.Rows):
		// Idle, the snapshot is exactly the loaded rows: any other count means they
		// are not the engine's bid table (a wrong table id).
		return res, fmt.Errorf("bench: backfill: %s build read %d snapshot rows, want %d", kindName(kind), job.RowsConsumed, b.o.Rows)
	}
	res.snapshotRows = job.RowsConsumed
	for _, a := range job.Actors {
		res.barrierBatches += a.ReadyTaken + a.StopFlushed
	}
	if b.o.Verify {
		if err := verifyView(ctx, e, view, int64(b.o.Rows)+res.inserted); err != nil {
			return res, fmt.Errorf("bench: backfill: %s build: %w", kindName(kind), err)
		}
	}
	if err := e.DropMV(ctx, view); err != nil {
		return res, fmt.Errorf("bench: backfill: %w", err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		return res, fmt.Errorf("bench: backfill: %w", err)
	}
	return res, nil
}

// verifyView takes a checkpoint and counts the rows of view.
func verifyView(ctx context.Context, e *engine.Engine, view string, want int64) error {
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		return err
	}
	rr, err := e.Scan(ctx, view)
	if err != nil {
		return err
	}
	defer rr.Release()
	var n int64
	for rr.Next() {
		n += rr.RecordBatch().NumRows()
	}
	if err := rr.Err(); err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("view %s holds %d rows, want %d (loaded and inserted)", view, n, want)
	}
	return nil
}

// busyWriter inserts new bid rows at a fixed rate, paced by the wall clock.
type busyWriter struct {
	done     chan struct{}
	finished chan struct{}
	inserted int64
	err      error
}

// busyTick is how often the busy writer inserts the rows due.
const busyTick = 10 * time.Millisecond

// busyMaxBatch is the most rows of one insert; a writer behind its rate inserts
// several batches in a row.
const busyMaxBatch = 1024

// startBusyWriter inserts rows from start on (BidChunk, seed 1: new pks for a table
// loaded with start rows, among the loaded ones in key order) at rate rows/s until
// stop.
func startBusyWriter(ctx context.Context, e *engine.Engine, start int, rate float64) *busyWriter {
	w := &busyWriter{done: make(chan struct{}), finished: make(chan struct{})}
	mem := memory.NewGoAllocator()
	go func() {
		defer close(w.finished)
		tick := time.NewTicker(busyTick)
		defer tick.Stop()
		t0 := time.Now()
		for {
			select {
			case <-w.done:
				return
			case <-ctx.Done():
				w.err = ctx.Err()
				return
			case <-tick.C:
			}
			due := int64(rate*time.Since(t0).Seconds()) - w.inserted
			for due > 0 {
				n := int(min(due, busyMaxBatch))
				c := BidChunk(mem, start+int(w.inserted), n, 1)
				err := e.Insert(ctx, "bid", c.Record())
				c.Release()
				if err != nil {
					w.err = fmt.Errorf("busy writer: %w", err)
					return
				}
				w.inserted += int64(n)
				due -= int64(n)
				select {
				case <-w.done:
					return
				default:
				}
			}
		}
	}()
	return w
}

// stop stops the writer and returns the rows it inserted.
func (w *busyWriter) stop() int64 {
	close(w.done)
	<-w.finished
	return w.inserted
}

// measureEfficiency runs the efficiency passes over the golden store.
func (b *backfillBench) measureEfficiency(ctx context.Context) (float64, BackfillEfficiency, error) {
	const workers = 2
	all := make([]int, len(b.table.Columns))
	for i := range all {
		all[i] = i
	}
	q0 := []int(Q0)
	sb := &SnapshotBench{Rows: b.o.Rows, store: b.golden, table: b.table, mem: b.mem, allocator: "pool"}
	for v := 0; v < b.table.VnodeCount; v++ {
		sb.vnodes = append(sb.vnodes, uint16(v))
	}
	res := BackfillEfficiency{Workers: workers, BatchSize: storage.DefaultSnapshotBatchSize, Reps: b.o.EfficiencyReps}
	type pass struct {
		raw  bool
		q0   bool
		read bool // the bare snapshot read of Q0
	}
	run := func(p pass) (st passStats, n int, err error) {
		// Each pass starts on a collected heap, so that no pass pays for collecting
		// the garbage of the one before it (on 2 cores the collector takes a quarter
		// of the CPU while it runs).
		runtime.GC()
		// Each pass runs under the profiler label weir_pass (its goroutines inherit
		// it): go tool pprof -tagfocus 'weir_pass=^executor$' FILE shows one pass.
		name := "executor"
		switch {
		case p.raw:
			name = "raw"
		case p.read:
			name = "read_q0"
		case p.q0:
			name = "executor_q0"
		}
		misses0 := b.golden.DB().Metrics().BlockCache.Misses
		defer func() { st.cacheMisses = b.golden.DB().Metrics().BlockCache.Misses - misses0 }()
		pprof.Do(ctx, pprof.Labels("weir_pass", name), func(ctx context.Context) {
			switch {
			case p.raw:
				st, err = sb.raw(workers)
			case p.read:
				st, err = sb.snapshot(workers, storage.DefaultSnapshotBatchSize)
			case p.q0:
				st, n, err = b.executorPass(ctx, q0, workers)
			default:
				st, n, err = b.executorPass(ctx, all, workers)
			}
		})
		return st, n, err
	}
	passes := []pass{{raw: true}, {}, {q0: true}, {read: true}}
	for _, p := range passes { // warm-up
		if _, _, err := run(p); err != nil {
			return 0, res, err
		}
	}
	var eff, effQ0, effRead, rate, rateQ0, rateRead, raw, barriers, ns, rawNs, cores, rawCores, misses, rawMisses []float64
	for rep := 0; rep < b.o.EfficiencyReps; rep++ {
		order := slices.Clone(passes)
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		st := map[pass]passStats{}
		for _, p := range order {
			ps, n, err := run(p)
			if err != nil {
				return 0, res, err
			}
			st[p] = ps
			if p == (pass{}) {
				barriers = append(barriers, float64(n))
			}
		}
		r, a, q, rd := st[pass{raw: true}], st[pass{}], st[pass{q0: true}], st[pass{read: true}]
		eff = append(eff, a.rate()/r.rate())
		effQ0 = append(effQ0, q.rate()/r.rate())
		effRead = append(effRead, rd.rate()/r.rate())
		rate, rateQ0, rateRead, raw = append(rate, a.rate()), append(rateQ0, q.rate()), append(rateRead, rd.rate()), append(raw, r.rate())
		ns = append(ns, float64(a.cpu.Nanoseconds())/float64(a.rows))
		rawNs = append(rawNs, float64(r.cpu.Nanoseconds())/float64(r.rows))
		cores = append(cores, a.cpu.Seconds()/a.wall.Seconds())
		rawCores = append(rawCores, r.cpu.Seconds()/r.wall.Seconds())
		misses, rawMisses = append(misses, float64(a.cacheMisses)), append(rawMisses, float64(r.cacheMisses))
	}
	res.CacheMisses, res.RawCacheMisses = median(misses), median(rawMisses)
	res.EfficiencyQ0 = median(effQ0)
	res.SnapshotReadEfficiencyQ0, res.SnapshotReadRowsPerSecQ0 = median(effRead), median(rateRead)
	res.RowsPerSec, res.RowsPerSecQ0, res.RawRowsPerSec = median(rate), median(rateQ0), median(raw)
	res.Barriers = median(barriers)
	res.NsPerRowCPU, res.RawNsPerRowCPU = median(ns), median(rawNs)
	res.CoresUsed, res.RawCoresUsed = median(cores), median(rawCores)
	return median(eff), res, nil
}

// executorPass drives an ArrangementBackfill over every vnode of the golden store's
// bid table with no engine: a fresh node and progress table, an input of barriers
// only (barrierSource), and a sink that counts and releases every chunk until the
// executor reports Done. It returns the rows, wall and CPU time, and the barriers the
// input gave. The pass's uncommitted progress is dropped afterwards.
func (b *backfillBench) executorPass(ctx context.Context, s2 []int, workers int) (st passStats, barriers int, err error) {
	b.passes++
	store := b.golden
	defer store.DropUncommitted()
	node := store.AddNode()
	full := vnode.Full(b.table.VnodeCount)
	// Ids far above the engine's objects: nothing is committed under them.
	prog, err := storage.NewProgressTable(node, 1<<20+b.passes, "bench_progress", b.table, full)
	if err != nil {
		return st, 0, err
	}
	in := &barrierSource{schema: b.table.ArrowSchema(), prev: executors.Epoch(store.CommittedEpoch()), interval: b.o.BarrierInterval, rowsSeen: make(chan struct{})}
	bf, err := executors.NewArrangementBackfill(in, executors.BackfillConfig{
		Actor: 1, Fragment: 1, Upstream: b.table, UpstreamID: EngineBidTableID, S2: s2, Vnodes: full,
		Node: node, Progress: prog, Workers: workers, Mem: b.mem,
	})
	if err != nil {
		return st, 0, err
	}
	in.bf = bf
	defer func() {
		if cerr := bf.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	cpu0, t0 := processCPU(), time.Now()
	for {
		m, err := bf.Next(ctx)
		if err != nil {
			return st, 0, fmt.Errorf("bench: backfill executor: %w", err)
		}
		if m.Chunk != nil {
			before := st.rows
			st.rows += int64(m.Chunk.NumRows())
			if before < int64(b.o.Rows) && st.rows >= int64(b.o.Rows) {
				close(in.rowsSeen)
			}
		}
		done := m.Barrier != nil && bf.Stats().Done
		m.Release()
		if done {
			break
		}
	}
	st.wall, st.cpu = time.Since(t0), processCPU()-cpu0
	if st.rows != int64(b.o.Rows) {
		return st, 0, fmt.Errorf("bench: backfill executor emitted %d rows, want %d", st.rows, b.o.Rows)
	}
	return st, in.count(), nil
}

// barrierSource is the input of an engine-less backfill: no upstream changes, only
// barriers. The first comes at once, with Prev the store's committed epoch (the
// executor waits for Prev to commit); the next ones every interval, and one as soon
// as every vnode is Completed once the sink has closed rowsSeen, so that the executor
// finishes without waiting out an interval. Next is called from the executor's
// goroutines, one at a time.
type barrierSource struct {
	schema   *arrow.Schema
	interval time.Duration
	bf       *executors.ArrangementBackfill

	mu        sync.Mutex
	prev      executors.Epoch
	n         int
	last      time.Time
	completed bool // a barrier was given after every vnode was Completed
	// rowsSeen is closed by the sink when it has every row: then the last vnodes'
	// End batches are due, and Next polls for them. Without it (nil) Next notices the
	// completion only at the next interval.
	rowsSeen chan struct{}
}

// barrierPoll is how often barrierSource looks at the executor's progress once the sink
// has seen every row.
const barrierPoll = 100 * time.Microsecond

func (s *barrierSource) Schema() *arrow.Schema { return s.schema }

func (s *barrierSource) Close() error { return nil }

func (s *barrierSource) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *barrierSource) barrier() executors.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &executors.Barrier{Prev: s.prev, Curr: s.prev + 1, Kind: executors.Checkpoint}
	if s.n > 0 {
		b.Kind = executors.Plain
	}
	s.prev = b.Curr
	s.n++
	s.last = time.Now()
	return executors.BarrierMessage(b)
}

func (s *barrierSource) Next(ctx context.Context) (executors.Message, error) {
	s.mu.Lock()
	first := s.n == 0
	s.mu.Unlock()
	if first {
		return s.barrier(), nil
	}
	seen, polling := s.rowsSeen, false
	for {
		st := s.bf.Stats()
		s.mu.Lock()
		wait := s.interval - time.Since(s.last)
		due := wait <= 0
		if st.Started && st.Completed == st.Owned && !s.completed {
			s.completed, due = true, true
		}
		s.mu.Unlock()
		if due {
			return s.barrier(), nil
		}
		// Sleep until the interval is out, or until the sink has seen every row;
		// from then on poll for the vnodes' End batches, which follow their last rows
		// at once. (A source that woke every millisecond all along took the
		// executor's goroutines off their cores ~10% of the time, which an engine's
		// barrier input, a channel, does not.)
		if polling {
			wait = min(wait, barrierPoll)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return executors.Message{}, ctx.Err()
		case <-t.C:
		case <-seen:
			t.Stop()
			seen, polling = nil, true
		}
	}
}

var _ executors.Executor = (*barrierSource)(nil)
