package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seed04fbb902/weir/bench"
	"github.com/seed04fbb902/weir/storage"
	"github.com/spf13/cobra"
)

func newBench() *cobra.Command {
	var cpuprofile, memprofile string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run Weir's benchmarks",
	}
	cmd.PersistentFlags().StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file (read it with go tool pprof)")
	cmd.PersistentFlags().StringVar(&memprofile, "memprofile", "", "write a heap profile at the end of the run to this file: what the run allocated (go tool pprof -sample_index=alloc_space) and what it still held (allocators' free lists included)")
	for _, sub := range []*cobra.Command{newBenchSnapshot(), newBenchBackfill(), newBenchNexmark(), newBenchCluster()} {
		run := sub.RunE
		sub.RunE = func(c *cobra.Command, args []string) error {
			var mem *os.File
			if memprofile != "" {
				// Created first, so that a path that cannot be written fails the run
				// before it starts, not after.
				f, err := os.Create(memprofile)
				if err != nil {
					return fmt.Errorf("--memprofile: %w", err)
				}
				mem = f
			}
			stop := func() error { return nil }
			if cpuprofile != "" {
				var err error
				if stop, err = startCPUProfile(cpuprofile); err != nil {
					if mem != nil {
						mem.Close()
						os.Remove(mem.Name()) // nothing was profiled
					}
					return err
				}
			}
			err := run(c, args)
			err = errors.Join(err, stop())
			if mem != nil {
				err = errors.Join(err, writeHeapProfile(mem))
			}
			return err
		}
		cmd.AddCommand(sub)
	}
	return cmd
}

// startCPUProfile starts a CPU profile into path; stop ends it and closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile %s: %w", path, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("--cpuprofile %s: %w", path, err)
		}
		return nil
	}, nil
}

// writeHeapProfile writes the heap profile into f (after a collection, so that its
// in-use figures are current) and closes f.
func writeHeapProfile(f *os.File) error {
	runtime.GC()
	err := pprof.Lookup("heap").WriteTo(f, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--memprofile %s: %w", f.Name(), err)
	}
	return nil
}

func newBenchSnapshot() *cobra.Command {
	var (
		rows, workers, batch, reps, blockSize int
		cacheMB                               int64
		dir, compression                      string
		asJSON, engineLoad                    bool
		allocator                             string
	)
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Measure the snapshot read path against a raw pebble scan of the same Nexmark bid rows",
		Long: `snapshot loads --rows Nexmark bid rows into a store on disk (in a temporary
directory under --dir), then reads every vnode, alternately through the snapshot read
path (vnodes to decoded Arrow batches of auction, bidder, price, date_time) and with a
raw pebble scan, with --workers and with one worker, --reps times after a warm-up.
It reports the median ratios: efficiency (snapshot rows/s ÷ raw rows/s) and parallel
efficiency (rows/s with --workers ÷ (--workers × rows/s with 1)), and the Go heap
allocations per row.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if allocator != "pool" && allocator != "go" {
				return fmt.Errorf("--allocator %q: want pool or go", allocator)
			}
			sb, err := bench.NewSnapshotBench(bench.SnapshotBenchOptions{
				Rows: rows, Dir: dir, CacheBytes: cacheMB << 20, EngineLoad: engineLoad, GoAllocator: allocator == "go",
				Compression: compression, BlockSize: blockSize,
			})
			if err != nil {
				return err
			}
			res, err := sb.Measure(workers, batch, reps)
			if cerr := sb.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			return printSnapshotResult(cmd.OutOrStdout(), res, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&rows, "rows", 2_000_000, "bid rows to load")
	f.IntVar(&workers, "workers", 2, "snapshot workers (and raw scan goroutines)")
	f.IntVar(&batch, "batch", storage.DefaultSnapshotBatchSize, "rows per snapshot batch")
	f.IntVar(&reps, "reps", 7, "interleaved repetitions (at least 5)")
	f.StringVar(&dir, "dir", "", "directory for the temporary store (default: the system temp directory)")
	f.Int64Var(&cacheMB, "cache-mb", bench.DefaultBenchCache>>20, "pebble block cache in MiB (the default holds 2M rows: a warm cache)")
	f.StringVar(&compression, "compression", storage.DefaultCompression, "block compression of the store: snappy, zstd, minlz or none")
	f.IntVar(&blockSize, "block-size", 0, "target uncompressed bytes of a data block (0: the store's default, 32768)")
	f.BoolVar(&engineLoad, "engine-load", false, "load through state tables and checkpoints instead of the bulk loader (same data, much slower)")
	f.StringVar(&allocator, "allocator", "pool", "Arrow allocator of the batches: pool (vec.PoolAllocator) or go (Arrow's Go allocator)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func printSnapshotResult(w io.Writer, r bench.SnapshotResult, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(r)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "rows\t%d (%d vnodes, %.0f key+value bytes/row)\n", r.Rows, r.Vnodes, r.BytesPerRow)
	fmt.Fprintf(tw, "store\t%d MiB block cache, %s compression, %d-byte blocks\n", r.CacheMB, r.Compression, r.BlockSize)
	fmt.Fprintf(tw, "workers\t%d (GOMAXPROCS %d), batch %d, %s kernels, %s allocator\n", r.Workers, r.GOMAXPROCS, r.BatchSize, r.Kernels, r.Allocator)
	fmt.Fprintf(tw, "efficiency\t%.3f (snapshot %.0f rows/s, raw %.0f rows/s)\n", r.Efficiency, r.RowsPerSec, r.RawRowsPerSec)
	fmt.Fprintf(tw, "parallel efficiency\t%.3f (1 worker: snapshot %.0f rows/s, raw %.0f rows/s)\n", r.ParallelEfficiency, r.RowsPerSec1, r.RawRowsPerSec1)
	fmt.Fprintf(tw, "allocs per row\t%.5f\n", r.AllocsPerRow)
	fmt.Fprintf(tw, "raw parallel efficiency\t%.3f (what the machine allowed; cores used: snapshot %.2f, raw %.2f)\n", r.RawParallel, r.CoresUsed, r.RawCoresUsed)
	fmt.Fprintf(tw, "CPU per row\t%.0f ns snapshot, %.0f ns raw; CPU parallel efficiency %.3f\n", r.NsPerRowCPU, r.RawNsPerRowCPU, r.CPUParallelEfficiency)
	fmt.Fprintf(tw, "repetitions\t%d (median), %.1fs measuring, %.1fs loading\n", r.Repetitions, r.Seconds, r.LoadSeconds)
	return tw.Flush()
}

func newBenchBackfill() *cobra.Command {
	var (
		o      bench.BackfillBenchOptions
		asJSON bool
		quiet  bool
		warmup bool
	)
	cmd := &cobra.Command{
		Use:   "backfill",
		Short: "Time view creation by arrangement backfill against no-shuffle backfill, idle and with a busy upstream",
		Long: `backfill creates the Nexmark bid table in an engine on disk (a temporary directory
under --dir) with --parallelism actors, bulk-loads --rows rows into it, then times
CreateMV of a pass-through view over bid (which returns once the backfill is done) with
arrangement and with no-shuffle backfill, --parallelism actors each. Every build runs
on a fresh engine opened on a checkpoint of the loaded store, so each starts from the
same data, and after a collection that returns the freed heap to the operating system,
so each starts from the same memory. Idle: no writes meanwhile. Busy: a writer inserts new bid rows, every 10ms,
at --busy-fraction of the snapshot rate of the idle builds of the same kind, or at
--busy-rate rows/s for both kinds; --modes picks idle or busy builds alone. With
--reps, the order of the kinds alternates and medians are reported; ratio is
arrangement seconds ÷ no-shuffle seconds.

It also reports efficiency, measured after the builds: the arrangement backfill
executor, driven with no engine over the same rows into a discarding sink (2 workers,
every column), in rows/s ÷ a raw pebble scan of the same vnodes with 2 goroutines,
medians of interleaved passes.

Progress lines go to stderr (see --quiet).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !quiet {
				o.Log = cmd.ErrOrStderr()
			}
			o.NoWarmup = !warmup
			res, err := bench.RunBackfillBench(cmd.Context(), o)
			if err != nil {
				return err
			}
			return printBackfillResult(cmd.OutOrStdout(), res, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Rows, "rows", 2_000_000, "bid rows to load")
	f.IntVar(&o.Parallelism, "parallelism", 2, "actors of the bid table and of each view")
	f.IntVar(&o.Reps, "reps", 5, "builds of each kind in each mode (medians reported; 5 give a paired interval of about ±10%, 15 about ±5%)")
	f.StringVar(&o.Dir, "dir", "", "directory for the temporary engine (default: the system temp directory)")
	f.Float64Var(&o.BusyFraction, "busy-fraction", 0.1, "busy writer's rate as a fraction of the idle snapshot rate of the same kind")
	f.Float64Var(&o.BusyRate, "busy-rate", 0, "busy writer's rate in rows/s, the same for both kinds (0: --busy-fraction)")
	f.StringSliceVar(&o.Modes, "modes", []string{"idle", "busy"}, "upstream modes to build in (busy alone needs --busy-rate)")
	f.DurationVar(&o.BarrierInterval, "barrier-interval", 100*time.Millisecond, "the engine's barrier interval (and the efficiency passes')")
	f.IntVar(&o.Workers, "workers", 0, "snapshot read goroutines per arrangement backfill actor (0: the engine's default, half of GOMAXPROCS, between 1 and 2)")
	f.IntVar(&o.EfficiencyReps, "efficiency-reps", 5, "interleaved repetitions of the efficiency passes (at least 5)")
	f.Int64Var(&o.MemoryBudget, "memory-budget", 0, "the engine's backfill memory budget per node, in bytes (0: the engine's default, 512 MiB; negative: none)")
	f.BoolVar(&o.GoAllocator, "go-allocator", false, "give the builds' engines Arrow's Go allocator instead of their default pool")
	f.BoolVar(&warmup, "warmup", true, "run an untimed build of each kind before the timed ones")
	f.BoolVar(&o.EfficiencyOnly, "efficiency-only", false, "measure the efficiency passes only, no builds")
	f.BoolVar(&o.Verify, "verify", false, "count each view's rows after its build (slow)")
	f.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func printBackfillResult(w io.Writer, r bench.BackfillResult, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(r)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "rows\t%d bid rows, parallelism %d, %d rep(s), GOMAXPROCS %d\n", r.Rows, r.Parallelism, r.Reps, r.GOMAXPROCS)
	fmt.Fprintf(tw, "mode\tarrangement s\tno-shuffle s\tratio\tpaired ratios: geomean [95%% CI]\n")
	for _, m := range r.Modes {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.3f\t%s\n", m.Mode, m.ArrangementSeconds, m.NoShuffleSeconds, m.Ratio, pairedText(m.RatioStats))
	}
	for _, m := range r.Modes {
		if m.Mode != "busy" {
			continue
		}
		fmt.Fprintf(tw, "busy writer\tarrangement %.0f rows/s target (%s inserted), no-shuffle %.0f rows/s target (%s inserted)\n",
			m.Arrangement.InsertTargetPerSec, ints(m.Arrangement.Inserted), m.NoShuffle.InsertTargetPerSec, ints(m.NoShuffle.Inserted))
	}
	for _, m := range r.Modes {
		fmt.Fprintf(tw, "%s checkpoints\tarrangement %s taking %s s (medians), no-shuffle %s taking %s s\n", m.Mode,
			medianText(intsToFloats(m.Arrangement.Checkpoints), 0), medianText(m.Arrangement.CheckpointSeconds, 2),
			medianText(intsToFloats(m.NoShuffle.Checkpoints), 0), medianText(m.NoShuffle.CheckpointSeconds, 2))
		fmt.Fprintf(tw, "%s barriers\tarrangement %s s, no-shuffle %s s (medians of their latencies summed per build)\n", m.Mode,
			medianText(m.Arrangement.BarrierSeconds, 2), medianText(m.NoShuffle.BarrierSeconds, 2))
	}
	d := r.EfficiencyDetail
	fmt.Fprintf(tw, "efficiency\t%.3f (executor %.0f rows/s, raw scan %.0f rows/s, %d workers, every column)\n", r.Efficiency, d.RowsPerSec, d.RawRowsPerSec, d.Workers)
	fmt.Fprintf(tw, "efficiency, q0 columns\t%.3f (executor %.0f rows/s; the bare snapshot read: %.3f, %.0f rows/s)\n", d.EfficiencyQ0, d.RowsPerSecQ0, d.SnapshotReadEfficiencyQ0, d.SnapshotReadRowsPerSecQ0)
	fmt.Fprintf(tw, "load average\t%s at start, %s at end\n", r.LoadAvgStart, r.LoadAvgEnd)
	fmt.Fprintf(tw, "time\t%.1fs in all, %.1fs loading\n", r.Seconds, r.LoadSeconds)
	return tw.Flush()
}

// medianText is the median of xs with prec decimals, or "-" when xs is empty.
func medianText(xs []float64, prec int) string {
	if len(xs) == 0 {
		return "-"
	}
	ys := slices.Clone(xs)
	slices.Sort(ys)
	m := ys[len(ys)/2]
	if len(ys)%2 == 0 {
		m = (ys[len(ys)/2-1] + ys[len(ys)/2]) / 2
	}
	return strconv.FormatFloat(m, 'f', prec, 64)
}

func intsToFloats(xs []int) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

func ints(xs []int64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

// pairedText is the geometric mean of paired build ratios and its 95% interval.
func pairedText(s *bench.RatioStats) string {
	switch {
	case s == nil:
		return "-"
	case s.CI95 == nil:
		return fmt.Sprintf("%.3f (one pair)", s.GeoMean)
	}
	return fmt.Sprintf("%.3f [%.3f, %.3f]", s.GeoMean, s.CI95[0], s.CI95[1])
}
