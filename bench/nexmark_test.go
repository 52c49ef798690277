package bench

import (
	"context"
	"fmt"
	"testing"
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
