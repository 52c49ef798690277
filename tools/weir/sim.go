package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed04fbb902/weir/internal/pgtest"
	"github.com/seed04fbb902/weir/tools/sim"
)

func newSim() *cobra.Command {
	var (
		seeds         string
		steps, jobs   int
		duration      time.Duration
		asJSON, trace bool
		commitLog     bool
		postgres      string
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the seeded whole-engine simulation with faults and check invariants I1 to I6",
		Long: `sim runs seeds of the whole-engine simulation (package tools/sim): for each seed a
random workload (insert, update, pk-changing update, delete, range delete) against an
engine on a crashable in-memory file system, views of five shapes built by arrangement
backfill, and faults between steps (crashes at named points, I/O errors in a
checkpoint, rescales, pause, resume, throttle changes, pause on bootstrap). The oracle
checks invariants I1 to I6 (docs/testing.md) at every checkpoint.

--seeds is a seed or a range A-B. --duration stops starting new seeds after that
long (0: run them all). --jobs runs that many seeds at once. With --json it prints one
JSON object of figures: seeds, barriers, checkpoints_checked, rows_compared,
mismatches, faults (counts by kind), sometimes (scenario counters), failures.

With --commit-log (or --postgres DSN, a server's postgres database that may create
databases) a third of the seeds commit through cluster mode's commit log: a version
log in a PostgreSQL database of their own and a file:// bucket, with two more faults
(a bucket that refuses a checkpoint's writes, a leader deposed before its commit),
reopens on empty directories and, at the end, the bucket checked to hold exactly the
objects the log references. --commit-log starts a private server through
scripts/pg.sh (run it in the repository) and stops it at the end.

It exits non-zero when any check failed or when a fault kind or scenario counter
stayed 0. A failure names its seed; "weir sim --seeds N --trace" replays it step by
step.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			from, to, err := parseSeeds(seeds)
			if err != nil {
				return err
			}
			if jobs < 1 {
				return fmt.Errorf("sim: --jobs %d, want >= 1", jobs)
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			opts := sim.Options{Steps: steps, Postgres: postgres}
			if commitLog && postgres != "" {
				return fmt.Errorf("sim: --commit-log starts a server; --postgres names one: give one of them")
			}
			if commitLog {
				srv, err := pgtest.Start("weir-sim")
				if err != nil {
					return fmt.Errorf("sim: --commit-log: %w", err)
				}
				defer func() {
					if err := srv.Stop(); err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "sim: stop the private PostgreSQL server: %v\n", err)
					}
				}()
				opts.Postgres = srv.DSN
			}
			if trace {
				opts.Trace = cmd.ErrOrStderr()
				jobs = 1
			}
			rep, err := runSim(ctx, from, to, jobs, duration, opts)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printSim(w, rep)
			}
			if !rep.OK() {
				return fmt.Errorf("sim: %d mismatches, counters at zero: %v", rep.Mismatches, rep.ZeroCounters)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&seeds, "seeds", "1-100", "a seed N or a range A-B")
	f.IntVar(&steps, "steps", 60, "workload and fault steps per seed")
	f.IntVar(&jobs, "jobs", 2, "seeds run at once")
	f.DurationVar(&duration, "duration", 0, "stop starting new seeds after this long (0: run every seed)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object of figures")
	f.BoolVar(&trace, "trace", false, "print every step to stderr (runs one seed at a time)")
	f.BoolVar(&commitLog, "commit-log", false, "start a private PostgreSQL server and run a third of the seeds through a commit log")
	f.StringVar(&postgres, "postgres", "", "run a third of the seeds through a commit log on this PostgreSQL server (DSN of its postgres database)")
	return cmd
}

func parseSeeds(s string) (uint64, uint64, error) {
	a, b, ok := strings.Cut(s, "-")
	from, err := strconv.ParseUint(a, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("sim: --seeds %q: want N or A-B", s)
	}
	to := from
	if ok {
		if to, err = strconv.ParseUint(b, 10, 64); err != nil || to < from {
			return 0, 0, fmt.Errorf("sim: --seeds %q: want N or A-B with A <= B", s)
		}
	}
	return from, to, nil
}

func runSim(ctx context.Context, from, to uint64, jobs int, duration time.Duration, opts sim.Options) (*sim.Report, error) {
	start := time.Now()
	seeds := make(chan uint64)
	var (
		mu    sync.Mutex
		total = sim.NewReport()
		errs  []error
		wg    sync.WaitGroup
	)
	for j := 0; j < jobs; j++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range seeds {
				rep := sim.NewReport()
				err := sim.Seed(ctx, s, opts, rep)
				mu.Lock()
				total.Merge(rep)
				if err != nil {
					errs = append(errs, fmt.Errorf("seed %d: %w", s, err))
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for s := from; s <= to; s++ {
		if duration > 0 && time.Since(start) > duration {
			break
		}
		select {
		case seeds <- s:
		case <-ctx.Done():
			break feed
		}
		if s == to {
			break // to may be the largest uint64
		}
	}
	close(seeds)
	wg.Wait()
	total.Seconds = time.Since(start).Seconds()
	total.Finish()
	if len(errs) > 0 {
		return total, errs[0]
	}
	return total, ctx.Err()
}

func printSim(w io.Writer, r *sim.Report) {
	fmt.Fprintf(w, "%d seeds (%d through a commit log) in %.1f s: %d steps, %d barriers, %d checkpoints, %d checked, %d rows compared, %d mismatches\n",
		r.Seeds, r.LogSeeds, r.Seconds, r.Steps, r.Barriers, r.Checkpoints, r.CheckpointsChecked, r.RowsCompared, r.Mismatches)
	fmt.Fprintf(w, "rows by op: %v\nviews: %v\nfaults: %v\nsometimes: %v\n", r.RowsByOp, r.Views, r.Faults, r.Sometimes)
	if len(r.ZeroCounters) > 0 {
		fmt.Fprintf(w, "counters at zero: %v\n", r.ZeroCounters)
	}
	for _, f := range r.Failures {
		fmt.Fprintln(w, f)
	}
}
