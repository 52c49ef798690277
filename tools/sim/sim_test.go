package sim

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/internal/invariants"
	"github.com/seed04fbb902/weir/internal/pgtest"
)

// postgres is the private PostgreSQL server TestMain started, for the commit-log
// seeds.
var postgres *pgtest.Server

// TestMain starts a private PostgreSQL server for the commit-log seeds and stops it
// when the tests end. Without PostgreSQL the tests fail: `make pg-install`
// installs it.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	s, err := pgtest.Start("weir-sim")
	if err != nil {
		fmt.Fprintf(os.Stderr, "sim tests: %v\n", err)
		return 1
	}
	defer func() {
		if err := s.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "sim tests: %v\n", err)
		}
	}()
	postgres = s
	return m.Run()
}

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
		if invariants.RaceEnabled || testing.Short() {
			n = 3
		}
	}
	rep := NewReport()
	opts := Options{Postgres: postgres.DSN}
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
	if rep.LogSeeds == 0 {
		t.Errorf("no commit-log seed among seeds %d to %d", *simFrom, *simFrom+uint64(n)-1)
	}
	t.Logf("%d seeds (%d through a commit log): %d steps, %d barriers, %d checkpoints checked, %d rows compared; faults %v; sometimes %v; views %v; zero counters %v",
		rep.Seeds, rep.LogSeeds, rep.Steps, rep.Barriers, rep.CheckpointsChecked, rep.RowsCompared, rep.Faults, rep.Sometimes, rep.Views, rep.ZeroCounters)
}

// A seed replays the same schedule: configuration, steps, faults and their
// parameters. Only row counts (keys near a backfill's position follow the backfill,
// whose progress depends on timing), epochs and error texts may differ.
func TestSimReplaysSchedule(t *testing.T) {
	norm := regexp.MustCompile(`\d+ rows|epoch \d+|injected (\w+): .*`)
	run := func(seed uint64) []string {
		var buf bytes.Buffer
		if err := Seed(context.Background(), seed, Options{Steps: 40, Trace: &buf}, NewReport()); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			out = append(out, norm.ReplaceAllString(l, "#"))
		}
		return out
	}
	for _, seed := range []uint64{5, 6} {
		a, b := run(seed), run(seed)
		if len(a) < 40 {
			t.Fatalf("seed %d: %d trace lines, want one per step", seed, len(a))
		}
		if !slices.Equal(a, b) {
			for i := range min(len(a), len(b)) {
				if a[i] != b[i] {
					t.Fatalf("seed %d: schedules differ at line %d:\n%s\n%s", seed, i, a[i], b[i])
				}
			}
			t.Fatalf("seed %d: schedules of %d and %d lines", seed, len(a), len(b))
		}
	}
}
