package main

import (
	"bytes"
	"encoding/json"
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
