package bench

import (
	"bytes"
	"flag"
	"os"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/seed04fbb902/weir/storage"
)

var (
	snapRows    = flag.Int("snapshot.rows", 200_000, "bid rows of the snapshot benchmarks (env WEIR_BENCH_ROWS overrides; the reported figure uses 2,000,000)")
	snapWorkers = flag.Int("snapshot.workers", 2, "workers of the snapshot benchmarks")
	snapBatch   = flag.Int("snapshot.batch", storage.DefaultSnapshotBatchSize, "rows per batch of the snapshot benchmarks")
	snapReps    = flag.Int("snapshot.reps", 7, "interleaved repetitions of BenchmarkSnapshotRatios")
)

func snapshotRows(tb testing.TB) int {
	if s := os.Getenv("WEIR_BENCH_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			tb.Fatalf("WEIR_BENCH_ROWS=%q: want a positive row count", s)
		}
		return n
	}
	return *snapRows
}

func newSnapshotBench(tb testing.TB, rows int) *SnapshotBench {
	sb, err := NewSnapshotBench(SnapshotBenchOptions{Rows: rows, Dir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := sb.Close(); err != nil {
			tb.Error(err)
		}
	})
	return sb
}

// BenchmarkSnapshotRatios is the snapshot read figure (the same code as `weir bench
// snapshot`): on bid rows in a store on disk, warm cache, interleaved repetitions,
// medians of snapshot read (vnodes → decoded Q0 batches) rows/s ÷ raw pebble scan
// rows/s with the same vnodes and workers (target ≥ 0.80 with 2 workers), rows/s with
// 2 workers ÷ (2 × with 1) (target ≥ 0.85), and heap allocations per row (< 0.01).
func BenchmarkSnapshotRatios(b *testing.B) {
	sb := newSnapshotBench(b, snapshotRows(b))
	b.ResetTimer()
	var res SnapshotResult
	for i := 0; i < b.N; i++ {
		var err error
		if res, err = sb.Measure(*snapWorkers, *snapBatch, *snapReps); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(res.Efficiency, "efficiency")
	b.ReportMetric(res.ParallelEfficiency, "parallel-efficiency")
	b.ReportMetric(res.RawParallel, "raw-parallel-efficiency")
	b.ReportMetric(res.RowsPerSec, "rows/s")
	b.ReportMetric(res.RawRowsPerSec, "raw-rows/s")
	b.ReportMetric(res.AllocsPerRow, "allocs/row")
	b.ReportMetric(res.CoresUsed, "cores-used")
}

// BenchmarkSnapshotPass times single passes over every vnode (for profiling with
// -cpuprofile): the snapshot read path and the raw scan, with 1 and 2 workers.
func BenchmarkSnapshotPass(b *testing.B) {
	sb := newSnapshotBench(b, snapshotRows(b))
	if _, err := sb.raw(1); err != nil { // warm the block cache
		b.Fatal(err)
	}
	for _, w := range []int{1, 2} {
		for _, kind := range []string{"snapshot", "raw", "rawcopy"} {
			b.Run(kind+"/workers="+strconv.Itoa(w), func(b *testing.B) {
				var rows int64
				for i := 0; i < b.N; i++ {
					var st passStats
					var err error
					switch kind {
					case "raw":
						st, err = sb.raw(w)
					case "rawcopy":
						st, err = sb.rawCopy(w)
					default:
						st, err = sb.snapshot(w, *snapBatch)
					}
					if err != nil {
						b.Fatal(err)
					}
					rows += st.rows
				}
				b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}

// TestSnapshotMeasure runs the measurement on a few rows: the figures exist and the
// pipeline reads every row (Measure checks the counts).
func TestSnapshotMeasure(t *testing.T) {
	sb := newSnapshotBench(t, 5000)
	res, err := sb.Measure(2, 100, 5)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 5000 || res.Repetitions != 5 || res.Workers != 2 || res.Kernels != "generated" {
		t.Errorf("result %+v", res)
	}
	for name, x := range map[string]float64{"efficiency": res.Efficiency, "parallel": res.ParallelEfficiency,
		"rows/s": res.RowsPerSec, "raw rows/s": res.RawRowsPerSec} {
		if !(x > 0) {
			t.Errorf("%s = %v", name, x)
		}
	}
	// The warm-up passes load the cache, which holds every block: no measured pass
	// misses it.
	if res.CacheMisses != 0 || res.RawCacheMisses != 0 {
		t.Errorf("cache misses per pass: snapshot %v, raw %v, want 0 after the warm-up", res.CacheMisses, res.RawCacheMisses)
	}
}

// TestBulkLoadMatchesEngine checks that the bulk loader leaves exactly the table
// contents that the engine's loader (state table writes, seals, checkpoints) does.
func TestBulkLoadMatchesEngine(t *testing.T) {
	const rows = LoadChunkRows + 1234 // more than one chunk
	var stores [2]*storage.Store
	for i, load := range []func(*storage.Store, int, uint64) error{LoadBids, BulkLoadBids} {
		s, err := storage.Open(t.TempDir(), storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := load(s, rows, 7); err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	lo, hi := storage.VnodePrefix(BidTableID, 0), storage.VnodePrefix(BidTableID+1, 0)
	var its [2]*pebble.Iterator
	for i, s := range stores {
		it, err := s.DB().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		its[i] = it
	}
	n := 0
	ea, eb := its[0].First(), its[1].First()
	for ; ea && eb; ea, eb = its[0].Next(), its[1].Next() {
		if !bytes.Equal(its[0].Key(), its[1].Key()) || !bytes.Equal(its[0].Value(), its[1].Value()) {
			t.Fatalf("row %d: engine %x = %x, bulk %x = %x", n, its[0].Key(), its[0].Value(), its[1].Key(), its[1].Value())
		}
		n++
	}
	if ea || eb || n != rows {
		t.Fatalf("engine and bulk loads differ in length: %d rows in common, engine more %v, bulk more %v", n, ea, eb)
	}
}
