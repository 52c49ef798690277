package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/seed04fbb902/weir/bench/nexmark/peers"
	"github.com/seed04fbb902/weir/bench/nexmark/queries"
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
		// A build's rounds, one by one, add up to its counts and sums, and end in
		// order within the build.
		for _, b := range []*NexmarkBuild{&r.Arrangement, r.NoShuffle} {
			var barriers, ckpts int64
			var collect, commit float64
			for i, rd := range b.Rounds {
				barriers++
				collect += rd.CollectSeconds
				if rd.Checkpoint {
					ckpts++
					commit += rd.CommitSeconds
				}
				if i > 0 && rd.EndSeconds < b.Rounds[i-1].EndSeconds || rd.EndSeconds < 0 || rd.EndSeconds > b.Seconds {
					t.Errorf("%s %s: round %d ends at %v s, after %v, in a build of %v s", r.Query, r.Upstream, i, rd.EndSeconds, b.Rounds[max(i-1, 0)].EndSeconds, b.Seconds)
				}
			}
			if barriers == 0 || barriers != b.Barriers || ckpts != b.Checkpoints || collect != b.CollectSeconds || commit != b.CommitSeconds {
				t.Errorf("%s %s: rounds %+v, for %d barriers, %d checkpoints, %v s collecting and %v s committing", r.Query, r.Upstream, b.Rounds, b.Barriers, b.Checkpoints, b.CollectSeconds, b.CommitSeconds)
			}
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

// scriptedPeer is the Go oracle as a peer (goOracle, whose Load it keeps) under its
// own name, each run taking the next of its durations; wrong drops a row of every
// result.
type scriptedPeer struct {
	goOracle
	secs  []time.Duration
	runs  int
	wrong bool
}

func (p *scriptedPeer) Name() string { return "scripted" }
func (p *scriptedPeer) Run(ctx context.Context, q queries.Query) (time.Duration, []queries.Row, error) {
	_, rows, err := p.goOracle.Run(ctx, q)
	if p.wrong && len(rows) > 0 {
		rows = rows[1:]
	}
	d := p.secs[p.runs%len(p.secs)]
	p.runs++
	return d, rows, err
}

// A peer runs the query after each rep of Weir's idle builds: its median, every run's
// seconds, Weir ÷ the peer as medians and paired by rep, and whether every run's
// rows were the oracle's. The Go batch oracle is timed as a peer too.
func TestRunNexmarkBenchPeerReps(t *testing.T) {
	if testing.Short() {
		t.Skip("builds views on disk")
	}
	for _, wrong := range []bool{false, true} {
		p := &scriptedPeer{secs: []time.Duration{300 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}, wrong: wrong}
		res, err := RunNexmarkBench(context.Background(), NexmarkBenchOptions{
			Events: 2000, Queries: []string{"q0"}, Reps: 3, BusyRate: 2000, Dir: t.TempDir(), Peers: []peers.Peer{p},
		})
		if err != nil {
			t.Fatal(err)
		}
		if p.runs != 3 {
			t.Fatalf("the peer ran %d times, want 3 (once a rep)", p.runs)
		}
		for _, r := range res {
			if r.Upstream != modeIdle {
				if r.PeerSeconds != nil {
					t.Errorf("busy %s: peer seconds %v, want none", r.Query, r.PeerSeconds)
				}
				continue
			}
			if got := r.PeerRepSeconds["scripted"]; !slices.Equal(got, []float64{0.3, 0.1, 0.2}) {
				t.Errorf("peer rep seconds %v, want [0.3 0.1 0.2]", got)
			}
			if got := r.PeerSeconds["scripted"]; got != 0.2 {
				t.Errorf("peer seconds %v, want the median 0.2", got)
			}
			if got, want := r.WeirOverPeer["scripted"], r.ArrangementSeconds/0.2; got != want {
				t.Errorf("Weir ÷ peer %v, want %v", got, want)
			}
			st := r.WeirOverPeerStats["scripted"]
			if st == nil || len(st.Pairs) != 3 || st.CI95 == nil || st.Pairs[1] != r.ArrangementRepSeconds[1]/0.1 {
				t.Errorf("paired Weir ÷ peer %+v for Weir's reps %v", st, r.ArrangementRepSeconds)
			}
			if r.PeerVerified["scripted"] == wrong {
				t.Errorf("peer verified %v with wrong rows %v", r.PeerVerified["scripted"], wrong)
			}
			if n := len(r.PeerRepSeconds["go-oracle"]); n != 3 || !r.PeerVerified["go-oracle"] || r.PeerSeconds["go-oracle"] <= 0 {
				t.Errorf("the Go oracle: %d runs, verified %v, %v s; want 3 verified runs", n, r.PeerVerified["go-oracle"], r.PeerSeconds["go-oracle"])
			}
		}
	}
}
