package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/seed04fbb902/weir/tools/sim"
)

// runSimCommand runs `weir sim args...` and returns its stdout.
func runSimCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := &cobra.Command{Use: "weir", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newSim())
	var o, e bytes.Buffer
	root.SetOut(&o)
	root.SetErr(&e)
	root.SetArgs(append([]string{"sim"}, args...))
	err := root.ExecuteContext(context.Background())
	if e.Len() > 0 {
		t.Logf("stderr: %s", e.String())
	}
	return o.String(), err
}

// `weir sim --commit-log` starts its own PostgreSQL server and runs the commit-log
// seeds through it: one such seed (4 % 3 == 1) with no mismatch. A single seed
// leaves counters at zero, which is the only error allowed.
func TestSimCommitLog(t *testing.T) {
	out, err := runSimCommand(t, "--seeds", "4", "--steps", "30", "--commit-log", "--json")
	if err != nil && !strings.Contains(err.Error(), "0 mismatches, counters at zero") {
		t.Fatalf("weir sim: %v\n%s", err, out)
	}
	var rep sim.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("weir sim --json printed %q: %v", out, err)
	}
	if rep.Seeds != 1 || rep.LogSeeds != 1 || rep.Mismatches != 0 || rep.Sometimes["bucket_checked_after_collection"] != 1 {
		t.Fatalf("report: %d seeds, %d through a commit log, %d mismatches, %d buckets checked; want 1, 1, 0, 1 (failures %v)",
			rep.Seeds, rep.LogSeeds, rep.Mismatches, rep.Sometimes["bucket_checked_after_collection"], rep.Failures)
	}
}

func TestSimFlags(t *testing.T) {
	_, err := runSimCommand(t, "--seeds", "4", "--commit-log", "--postgres", "postgres://127.0.0.1:1/postgres")
	if err == nil || !strings.Contains(err.Error(), "give one of them") {
		t.Fatalf("--commit-log with --postgres: %v, want an error saying to give one", err)
	}
	_, err = runSimCommand(t, "--seeds", "4", "--steps", "5", "--postgres", "postgres://127.0.0.1:1/postgres?connect_timeout=2")
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("an unreachable --postgres: %v, want an error naming the server", err)
	}
}
