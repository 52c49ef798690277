package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/storage"
)

// TestEngineBidTableID checks the id the backfill benchmark bulk-loads under: bid,
// created first in a fresh engine directory, then bulk-loaded under EngineBidTableID
// while the engine is closed, holds the loaded rows and takes inserts after reopening.
func TestEngineBidTableID(t *testing.T) {
	if EngineBidTableID != BidTableID {
		t.Fatalf("EngineBidTableID %d, BidTableID %d: SnapshotBench's raw scan would read another table", EngineBidTableID, BidTableID)
	}
	ctx := context.Background()
	dir := t.TempDir()
	opts := engine.Options{BarrierInterval: -1, Logger: quietLog()}
	e, err := engine.Open(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.CreateTable(ctx, tables.BidTable(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	const loaded, inserted = 3000, 100
	s, err := storage.Open(dir, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := BulkLoadBidsTable(s, EngineBidTableID, loaded, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if e, err = engine.Open(ctx, dir, opts); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := BidChunk(memory.NewGoAllocator(), loaded, inserted, 1)
	err = e.Insert(ctx, "bid", c.Record())
	c.Release()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	rr, err := e.Scan(ctx, "bid")
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	n := 0
	for rr.Next() {
		n += int(rr.RecordBatch().NumRows())
	}
	if err := rr.Err(); err != nil {
		t.Fatal(err)
	}
	if n != loaded+inserted {
		t.Fatalf("bid holds %d rows through the engine, want %d loaded + %d inserted", n, loaded, inserted)
	}
}

// TestBackfillBench runs the whole backfill benchmark on a few rows, with every view
// checked to hold every loaded and inserted row: the JSON has its shape, every figure
// is positive (no timing is asserted).
func TestBackfillBench(t *testing.T) {
	res, err := RunBackfillBench(context.Background(), BackfillBenchOptions{
		Rows: 20_000, Parallelism: 2, Dir: t.TempDir(), BarrierInterval: 20 * time.Millisecond, Verify: true, Workers: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Rows        int     `json:"rows"`
		Parallelism int     `json:"parallelism"`
		Efficiency  float64 `json:"efficiency"`
		Modes       []struct {
			Mode        string  `json:"mode"`
			Arrangement float64 `json:"arrangement_seconds"`
			NoShuffle   float64 `json:"noshuffle_seconds"`
			Ratio       float64 `json:"ratio"`
		} `json:"modes"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Rows != 20_000 || got.Parallelism != 2 || len(got.Modes) != 2 || got.Modes[0].Mode != "idle" || got.Modes[1].Mode != "busy" {
		t.Fatalf("result %s", data)
	}
	if !(got.Efficiency > 0) {
		t.Errorf("efficiency %v", got.Efficiency)
	}
	if res.BackfillWorkers != 1 {
		t.Errorf("backfill_workers %d, want the 1 asked for", res.BackfillWorkers)
	}
	for _, m := range got.Modes {
		if !(m.Arrangement > 0 && m.NoShuffle > 0 && m.Ratio > 0) {
			t.Errorf("mode %+v", m)
		}
	}
	for _, k := range []BackfillBuilds{res.Modes[1].Arrangement, res.Modes[1].NoShuffle} {
		if !(k.InsertTargetPerSec > 0) || len(k.Inserted) != 1 {
			t.Errorf("busy builds %+v", k)
		}
	}
	// The binary's build and environment as reported.
	if res.Cgo != builtWithCgo || res.GOGC != os.Getenv("GOGC") {
		t.Errorf("cgo %v, GOGC %q: want %v, %q", res.Cgo, res.GOGC, builtWithCgo, os.Getenv("GOGC"))
	}
	// Every build commits at least the checkpoint that creates the view, and its
	// commits and its barriers take part of its time.
	var faults int64
	for _, m := range res.Modes {
		for _, k := range []BackfillBuilds{m.Arrangement, m.NoShuffle} {
			if len(k.Checkpoints) != 1 || len(k.CheckpointSeconds) != 1 || k.Checkpoints[0] < 1 ||
				!(k.CheckpointSeconds[0] > 0 && k.CheckpointSeconds[0] < k.Seconds[0]) {
				t.Errorf("%s builds: checkpoints %v taking %v s, in builds of %v s", m.Mode, k.Checkpoints, k.CheckpointSeconds, k.Seconds)
			}
			if len(k.BarrierSeconds) != 1 || !(k.BarrierSeconds[0] > 0 && k.BarrierSeconds[0] < k.Seconds[0]) {
				t.Errorf("%s builds: barrier latencies %v s, in builds of %v s", m.Mode, k.BarrierSeconds, k.Seconds)
			}
			// The LSM figures: one per build; the snapshot read misses the cache
			// (each build's engine is new), and nothing was ingested into L0 that
			// was not ingested.
			if len(k.IngestedTables) != 1 || len(k.IngestedBytes) != 1 || len(k.IngestedBytesL0) != 1 || len(k.FlushableIngests) != 1 ||
				len(k.FlushedBytes) != 1 || len(k.CompactedBytes) != 1 || len(k.CacheHits) != 1 || len(k.CacheMisses) != 1 ||
				k.CacheMisses[0] == 0 || k.IngestedBytesL0[0] > k.IngestedBytes[0] {
				t.Errorf("%s builds: LSM figures %+v", m.Mode, k)
			}
			if len(k.MinorFaults) != 1 || len(k.GCs) != 1 {
				t.Errorf("%s builds: minor faults %v, GCs %v", m.Mode, k.MinorFaults, k.GCs)
			} else {
				faults += k.MinorFaults[0]
			}
		}
	}
	// Four builds, each on a new engine, touch memory the process never had: Linux
	// counts minor faults for it.
	if runtime.GOOS == "linux" && faults <= 0 {
		t.Errorf("minor faults summed over the builds: %d, want > 0", faults)
	}
	t.Logf("%s", data)
}

// TestBackfillBenchBusyOnly runs busy builds alone at a fixed writer rate: one mode in
// the result, the same target rate for both kinds, rows inserted in every build, and
// every view holding every loaded and inserted row.
func TestBackfillBenchBusyOnly(t *testing.T) {
	res, err := RunBackfillBench(context.Background(), BackfillBenchOptions{
		Rows: 5_000, Parallelism: 2, Dir: t.TempDir(), BarrierInterval: 20 * time.Millisecond, Verify: true,
		Modes: []string{"busy"}, BusyRate: 2_000, NoWarmup: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Modes) != 1 || res.Modes[0].Mode != "busy" {
		t.Fatalf("modes %+v, want busy alone", res.Modes)
	}
	if res.BusyRate != 2_000 || res.BusyFraction != 0 {
		t.Errorf("busy_rate %v, busy_fraction %v: want 2000, and no fraction", res.BusyRate, res.BusyFraction)
	}
	for _, k := range []BackfillBuilds{res.Modes[0].Arrangement, res.Modes[0].NoShuffle} {
		if k.InsertTargetPerSec != 2_000 || len(k.Seconds) != 1 || len(k.Inserted) != 1 {
			t.Errorf("busy builds %+v, want one build at a target of 2000 rows/s", k)
		}
	}
}

// Bad options are refused before anything is loaded, with an error naming the option.
func TestBackfillBenchBadOptions(t *testing.T) {
	for _, tc := range []struct {
		o    BackfillBenchOptions
		want string
	}{
		{BackfillBenchOptions{Rows: 10, Workers: -1}, "workers"},
		{BackfillBenchOptions{Rows: 10, BusyFraction: -1}, "busy fraction"},
		{BackfillBenchOptions{Rows: 10, BarrierInterval: -time.Second}, "barrier interval"},
		{BackfillBenchOptions{Rows: 10, Reps: -1}, "reps"},
		{BackfillBenchOptions{Rows: 10, BusyRate: -1}, "busy rate"},
		{BackfillBenchOptions{Rows: 10, Modes: []string{"busy"}}, "busy rate"},
		{BackfillBenchOptions{Rows: 10, Modes: []string{"idle", "bussy"}}, `mode "bussy"`},
		{BackfillBenchOptions{Rows: 10, Modes: []string{}}, "no modes"},
	} {
		tc.o.Dir = t.TempDir()
		_, err := RunBackfillBench(context.Background(), tc.o)
		checkRefused(t, fmt.Sprintf("%+v", tc.o), err, tc.want, tc.o.Dir)
	}
}

// checkRefused checks that a benchmark run with bad options (what) failed with an
// error naming want, and left nothing in its directory dir.
func checkRefused(t *testing.T, what string, err error, want, dir string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v, want an error naming %q", what, err, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("%s: left %d entries in its directory", what, len(entries))
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
