package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/seed04fbb902/weir/bench"
	"github.com/seed04fbb902/weir/storage"
	"github.com/spf13/cobra"
)

func newBench() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run Weir's benchmarks",
	}
	cmd.AddCommand(newBenchSnapshot())
	return cmd
}

func newBenchSnapshot() *cobra.Command {
	var (
		rows, workers, batch, reps int
		cacheMB                    int64
		dir                        string
		asJSON, engineLoad         bool
		allocator                  string
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
	fmt.Fprintf(tw, "workers\t%d (GOMAXPROCS %d), batch %d, %s kernels, %s allocator\n", r.Workers, r.GOMAXPROCS, r.BatchSize, r.Kernels, r.Allocator)
	fmt.Fprintf(tw, "efficiency\t%.3f (snapshot %.0f rows/s, raw %.0f rows/s)\n", r.Efficiency, r.RowsPerSec, r.RawRowsPerSec)
	fmt.Fprintf(tw, "parallel efficiency\t%.3f (1 worker: snapshot %.0f rows/s, raw %.0f rows/s)\n", r.ParallelEfficiency, r.RowsPerSec1, r.RawRowsPerSec1)
	fmt.Fprintf(tw, "allocs per row\t%.5f\n", r.AllocsPerRow)
	fmt.Fprintf(tw, "raw parallel efficiency\t%.3f (what the machine allowed; cores used: snapshot %.2f, raw %.2f)\n", r.RawParallel, r.CoresUsed, r.RawCoresUsed)
	fmt.Fprintf(tw, "CPU per row\t%.0f ns snapshot, %.0f ns raw; CPU parallel efficiency %.3f\n", r.NsPerRowCPU, r.RawNsPerRowCPU, r.CPUParallelEfficiency)
	fmt.Fprintf(tw, "repetitions\t%d (median), %.1fs measuring, %.1fs loading\n", r.Repetitions, r.Seconds, r.LoadSeconds)
	return tw.Flush()
}
