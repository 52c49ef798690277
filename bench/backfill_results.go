package bench

import (
	"io"
	"time"
)

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
	// (see docs/operations.md).
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
