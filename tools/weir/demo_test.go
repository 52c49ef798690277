package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A small demo end to end: every view verified, every control exercised, and the
// directory kept with --dir holds the views for weir status and export.
func TestDemoJSON(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	r, _, errw := runDemoJSON(t, "--events", "20000", "--rate", "1000", "--progress", "lines", "--dir", dir, "--metrics-addr", "127.0.0.1:0")
	if r.Rescales < 1 || r.Throttles < 1 || r.Pauses < 1 || r.Recoveries < 1 {
		t.Errorf("controls %+v", r)
	}
	if !strings.Contains(errw.String(), "progress q4") || !strings.Contains(errw.String(), "crash the engine") {
		t.Errorf("no progress lines or steps on stderr:\n%s", errw.String())
	}
	// The kept directory: its views export.
	out, err := runRoot("export", "--dir", dir, "--table", "q4", "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(out, "\n"); lines != 1+r.MVs[1].Rows {
		t.Errorf("export of q4: %d lines, want a header and %d rows:\n%s", lines, r.MVs[1].Rows, out)
	}
}

func TestDemoBadDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	root := newRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"demo", "--dir", dir})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "is not empty") {
		t.Fatalf("got %v", err)
	}
}

// The progress bars in a terminal: the demo runs in a tmux pane, whose screen shows a
// bar per job at 100% at the end.
func TestDemoBarsInTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs the demo in tmux")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("no tmux")
	}
	bin := filepath.Join(t.TempDir(), "weir")
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	sock := filepath.Join(t.TempDir(), "tmux.sock")
	done := filepath.Join(t.TempDir(), "done")
	tmux := func(args ...string) string {
		b, err := exec.Command("tmux", append([]string{"-S", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	tmux("new-session", "-d", "-x", "220", "-y", "40", "sh", "-c", bin+" demo --events 20000 --rate 1000 >/dev/null; touch "+done+"; sleep 60")
	defer exec.Command("tmux", "-S", sock, "kill-server").Run()
	deadline := time.Now().Add(3 * time.Minute)
	sawBar := false
	for {
		screen := tmux("capture-pane", "-p")
		if strings.Contains(screen, "q16") && strings.Contains(screen, "%") && strings.Contains(screen, "rows/s") {
			sawBar = true
		}
		if _, err := os.Stat(done); err == nil {
			if !sawBar {
				t.Fatalf("no progress bar seen; the screen:\n%s", screen)
			}
			for _, q := range []string{"q0", "q4", "q7", "q8", "q16"} {
				if !strings.Contains(screen, q+" ") {
					t.Errorf("no bar for %s", q)
				}
			}
			if n := strings.Count(screen, "100 %"); n < 5 {
				t.Fatalf("%d bars at 100%%; the screen:\n%s", n, screen)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not finish; the screen:\n%s", screen)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The demo on a local cluster of three compute processes: one is killed with
// SIGKILL mid-backfill and restarted, and every view is still verified; --json
// reports the kill and no leader change, and the cluster's processes are gone after.
func TestDemoCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	r, out, errw := runDemoJSON(t, "--cluster", "3", "--events", "10000", "--rate", "500", "--progress", "lines", "--dir", dir)
	if r.Cluster != 3 || r.NodeKills == nil || *r.NodeKills != 1 || r.LeaderChanges == nil || *r.LeaderChanges != 0 {
		t.Errorf("cluster figures in %s", out.String())
	}
	if !strings.Contains(errw.String(), "SIGKILL compute-3") {
		t.Errorf("no kill on stderr:\n%s", errw.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "cluster", "logs", "compute-3.log"))
	if err != nil || strings.Count(string(b), "computing node 3 at") != 2 {
		t.Errorf("compute-3's log does not show it started twice (%v):\n%s", err, b)
	}
	var st clusterState
	if b, err = os.ReadFile(filepath.Join(dir, "cluster", "cluster.json")); err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil || len(st.Processes) != 4 {
		t.Fatalf("the cluster's state: %v, %+v", err, st)
	}
	for _, p := range st.Processes {
		if running(p.PID) {
			t.Errorf("%s (pid %d) still runs after the demo", p.Role, p.PID)
		}
	}
}

// runDemoJSON runs weir demo --json with args and returns its result, what it
// printed and what it logged, having checked that every one of the five views was
// verified against its oracle.
func runDemoJSON(t *testing.T, args ...string) (demoResult, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	root := newRoot()
	var out, errw bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errw)
	root.SetArgs(append([]string{"demo", "--json"}, args...))
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errw.String())
	}
	var r demoResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if len(r.MVs) != 5 {
		t.Fatalf("%d views: %s", len(r.MVs), out.String())
	}
	for _, mv := range r.MVs {
		if !mv.Verified || mv.Mismatches != 0 || mv.Rows == 0 {
			t.Errorf("view %+v", mv)
		}
	}
	return r, &out, &errw
}
