package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchSnapshotJSON(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"bench", "snapshot", "--rows", "3000", "--workers", "2", "--batch", "100", "--reps", "5", "--dir", t.TempDir(), "--json"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	for _, k := range []string{"efficiency", "parallel_efficiency", "rows_per_sec", "raw_rows_per_sec", "allocs_per_row"} {
		if x, ok := got[k].(float64); !ok || !(x >= 0) {
			t.Errorf("%s = %v", k, got[k])
		}
	}
	if got["rows"] != 3000.0 || got["workers"] != 2.0 || got["batch_size"] != 100.0 || got["repetitions"] != 5.0 {
		t.Errorf("figures %v", got)
	}
	if n := strings.Count(strings.TrimSpace(out.String()), "\n"); n != 0 {
		t.Errorf("want one JSON line, got %d more", n)
	}
}

func TestBenchSnapshotText(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"bench", "snapshot", "--rows", "500", "--workers", "1", "--dir", t.TempDir()})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "efficiency") {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestBenchSnapshotBadRows(t *testing.T) {
	root := newRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"bench", "snapshot", "--rows", "0"})
	if err := root.Execute(); err == nil {
		t.Fatal("no error for --rows 0")
	}
}

func TestBenchBackfillJSON(t *testing.T) {
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"bench", "backfill", "--rows", "5000", "--parallelism", "2", "--barrier-interval", "20ms", "--reps", "2", "--dir", t.TempDir(), "--json"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Rows        int      `json:"rows"`
		Parallelism int      `json:"parallelism"`
		Efficiency  *float64 `json:"efficiency"`
		Modes       []struct {
			Mode        string   `json:"mode"`
			Arrangement *float64 `json:"arrangement_seconds"`
			NoShuffle   *float64 `json:"noshuffle_seconds"`
			Ratio       *float64 `json:"ratio"`
			Arr         struct {
				Seconds        []float64 `json:"seconds"`
				BarrierBatches []int64   `json:"barrier_batches"`
			} `json:"arrangement"`
			NS struct {
				Seconds        []float64 `json:"seconds"`
				BarrierBatches []int64   `json:"barrier_batches"`
			} `json:"noshuffle"`
			Stats *struct {
				Pairs   []float64   `json:"pair_ratios"`
				GeoMean float64     `json:"geomean"`
				CI95    *[2]float64 `json:"ci95"`
			} `json:"ratio_stats"`
		} `json:"modes"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if got.Rows != 5000 || got.Parallelism != 2 || got.Efficiency == nil || !(*got.Efficiency > 0) || len(got.Modes) != 2 {
		t.Fatalf("result %s", out.String())
	}
	for i, want := range []string{"idle", "busy"} {
		m := got.Modes[i]
		if m.Mode != want || m.Arrangement == nil || m.NoShuffle == nil || m.Ratio == nil || !(*m.Ratio > 0) {
			t.Errorf("mode %d in %s", i, out.String())
			continue
		}
		// Two reps: each rep's builds make a pair, and the pairs an interval.
		st := m.Stats
		if st == nil || len(st.Pairs) != 2 || len(m.Arr.Seconds) != 2 || len(m.NS.Seconds) != 2 || st.CI95 == nil ||
			len(m.Arr.BarrierBatches) != 2 || len(m.NS.BarrierBatches) != 2 {
			t.Errorf("mode %s: ratio_stats in %s", want, out.String())
			continue
		}
		for j, r := range st.Pairs {
			if w := m.Arr.Seconds[j] / m.NS.Seconds[j]; r != w {
				t.Errorf("mode %s: pair %d ratio %v, want %v", want, j, r, w)
			}
		}
		if !(st.CI95[0] <= st.GeoMean && st.GeoMean <= st.CI95[1]) {
			t.Errorf("mode %s: geomean %v outside %v", want, st.GeoMean, *st.CI95)
		}
	}
	if n := strings.Count(strings.TrimSpace(out.String()), "\n"); n != 0 {
		t.Errorf("want one JSON line, got %d more", n)
	}
	if !strings.Contains(errOut.String(), "busy arrangement") {
		t.Errorf("progress lines:\n%s", errOut.String())
	}
}

func TestBenchBackfillText(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"bench", "backfill", "--rows", "2000", "--reps", "1", "--barrier-interval", "20ms", "--quiet", "--dir", t.TempDir()})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"idle", "busy", "ratio", "efficiency", "(one pair)", "idle checkpoints", "s (medians), no-shuffle"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("no %q in output:\n%s", s, out.String())
		}
	}
}

func TestBenchBackfillBadRows(t *testing.T) {
	root := newRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"bench", "backfill", "--rows", "0", "--quiet"})
	if err := root.Execute(); err == nil {
		t.Fatal("no error for --rows 0")
	}
}

// TestBenchProfiles checks that --cpuprofile and --memprofile write profiles
// (gzipped protobuf) of the run, alone and together, and that a file either cannot
// create is an error naming it.
func TestBenchProfiles(t *testing.T) {
	for _, flags := range [][]string{{"--cpuprofile"}, {"--memprofile"}, {"--cpuprofile", "--memprofile"}} {
		t.Run(strings.Join(flags, ","), func(t *testing.T) {
			args := []string{"bench", "snapshot", "--rows", "500", "--workers", "1", "--reps", "5", "--dir", t.TempDir()}
			var paths []string
			for _, f := range flags {
				p := filepath.Join(t.TempDir(), strings.TrimPrefix(f, "--")+".pprof")
				paths, args = append(paths, p), append(args, f, p)
			}
			root := newRoot()
			root.SetOut(&bytes.Buffer{})
			root.SetArgs(args)
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			for _, p := range paths {
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
					t.Fatalf("%s is not gzipped: %d bytes starting %x", p, len(data), data[:min(len(data), 4)])
				}
			}
			for _, f := range flags {
				bad := filepath.Join(t.TempDir(), "missing", "x.pprof")
				root = newRoot()
				root.SetOut(&bytes.Buffer{})
				root.SetErr(&bytes.Buffer{})
				root.SetArgs([]string{"bench", "snapshot", "--rows", "500", "--dir", t.TempDir(), f, bad})
				if err := root.Execute(); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), f) {
					t.Fatalf("%s %s: %v", f, bad, err)
				}
			}
		})
	}
}
