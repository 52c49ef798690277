package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// RunNexmarkBench end to end on a few thousand events, two reps: one result per
// query and mode, every build verified against the oracle, each kind's median build
// reported with every rep's seconds. It asserts no timing.
func TestRunNexmarkBench(t *testing.T) {
	if testing.Short() {
		t.Skip("builds views on disk")
	}
	res, err := RunNexmarkBench(context.Background(), NexmarkBenchOptions{
		Events: 3000, Queries: []string{"q0", "q8"}, Reps: 2, BusyRate: 2000, Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("%d results, want 4 (2 queries × idle, busy)", len(res))
	}
	for _, r := range res {
		if !r.Verified || r.NoShuffle == nil || r.Ratio == nil {
			t.Errorf("%s %s: verified %v, no-shuffle %v, ratio %v", r.Query, r.Upstream, r.Verified, r.NoShuffle, r.Ratio)
			continue
		}
		if len(r.ArrangementRepSeconds) != 2 || len(r.NoShuffleRepSeconds) != 2 {
			t.Errorf("%s %s: rep seconds %v / %v, want 2 each", r.Query, r.Upstream, r.ArrangementRepSeconds, r.NoShuffleRepSeconds)
		}
		// With two reps the median is the faster build.
		if want := min(r.ArrangementRepSeconds[0], r.ArrangementRepSeconds[1]); r.ArrangementSeconds != want {
			t.Errorf("%s %s: arrangement seconds %v, want the median %v", r.Query, r.Upstream, r.ArrangementSeconds, want)
		}
		if got, want := *r.Ratio, r.ArrangementSeconds/(*r.NoShuffleSeconds); got != want {
			t.Errorf("%s %s: ratio %v, want %v", r.Query, r.Upstream, got, want)
		}
		// Each rep's two builds make a pair.
		if st := r.RatioStats; st == nil || len(st.Pairs) != 2 || st.CI95 == nil ||
			st.Pairs[1] != r.ArrangementRepSeconds[1]/r.NoShuffleRepSeconds[1] {
			t.Errorf("%s %s: ratio stats %+v for reps %v / %v", r.Query, r.Upstream, st, r.ArrangementRepSeconds, r.NoShuffleRepSeconds)
		}
	}
}

// Bad options are refused before anything is loaded, with an error naming the option.
func TestRunNexmarkBenchBadOptions(t *testing.T) {
	for _, tc := range []struct {
		o    NexmarkBenchOptions
		want string
	}{
		{NexmarkBenchOptions{}, "no events"},
		{NexmarkBenchOptions{Events: 10, Reps: -1}, "reps"},
		{NexmarkBenchOptions{Events: 10, Workers: -1}, "workers"},
		{NexmarkBenchOptions{Events: 10, Queries: []string{"q99"}}, "q99"},
	} {
		tc.o.Dir = t.TempDir()
		_, err := RunNexmarkBench(context.Background(), tc.o)
		checkRefused(t, fmt.Sprintf("%+v", tc.o), err, tc.want, tc.o.Dir)
	}
}

// lsmWrites takes the bytes each level flushed, compacted and ingested between two
// metrics, not pebble's Total (which counts the WAL and the ingests as flushed too).
func TestLSMWrites(t *testing.T) {
	const mib = 1 << 20
	var a, b pebble.Metrics
	a.WAL.BytesWritten, b.WAL.BytesWritten = 1*mib, 5*mib
	a.Levels[0].TableBytesFlushed, b.Levels[0].TableBytesFlushed = 2*mib, 4*mib
	b.Levels[5].TableBytesCompacted = 3 * mib
	a.Levels[6].TableBytesCompacted, b.Levels[6].TableBytesCompacted = 1*mib, 2*mib
	a.Levels[6].TableBytesIngested, b.Levels[6].TableBytesIngested = 10*mib, 40*mib
	w := lsmWrites(&a, &b)
	if w.WALMB != 4 || w.FlushedMB != 2 || w.CompactedMB != 4 || w.IngestedMB != 30 {
		t.Fatalf("writes %+v, want WAL 4, flushed 2, compacted 4, ingested 30", w)
	}
	if w.RewrittenOverIngested == nil || *w.RewrittenOverIngested != 0.2 {
		t.Fatalf("rewritten over ingested %v, want 0.2", w.RewrittenOverIngested)
	}
	if w := lsmWrites(&a, &a); w.RewrittenOverIngested != nil {
		t.Fatalf("nothing ingested, yet a ratio %v", *w.RewrittenOverIngested)
	}
}
