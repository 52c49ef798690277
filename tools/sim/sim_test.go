package sim

import (
	"context"
	"flag"
	"os"
	"testing"
)

var (
	simFrom  = flag.Uint64("sim.from", 1, "first simulation seed")
	simSeeds = flag.Int("sim.seeds", 0, "number of simulation seeds (default 20; 3 under -race)")
	simTrace = flag.Bool("sim.trace", false, "print every step")
)

// TestSim runs a fixed range of seeds through the whole-engine simulation: no
// mismatch is allowed. A failure names its seed; rerun it with -sim.from=SEED
// -sim.seeds=1 -sim.trace (or weir sim --seeds SEED --trace).
func TestSim(t *testing.T) {
	n := *simSeeds
	if n == 0 {
		n = 20
		if raceEnabled || testing.Short() {
			n = 3
		}
	}
	rep := NewReport()
	opts := Options{}
	if *simTrace {
		opts.Trace = os.Stderr
	}
	for s := *simFrom; s < *simFrom+uint64(n); s++ {
		if err := Seed(context.Background(), s, opts, rep); err != nil {
			t.Fatalf("seed %d: %v", s, err)
		}
	}
	rep.Finish()
	for _, f := range rep.Failures {
		t.Error(f)
	}
	t.Logf("%d seeds: %d steps, %d barriers, %d checkpoints checked, %d rows compared; faults %v; sometimes %v; views %v; zero counters %v",
		rep.Seeds, rep.Steps, rep.Barriers, rep.CheckpointsChecked, rep.RowsCompared, rep.Faults, rep.Sometimes, rep.Views, rep.ZeroCounters)
}
