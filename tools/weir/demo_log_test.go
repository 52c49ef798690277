package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/internal/pgtest"
)

// startPostgres starts a private PostgreSQL server for one test, stopped when it ends.
func startPostgres(t *testing.T) *pgtest.Server {
	t.Helper()
	s, err := pgtest.Start("weir-tools")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// The demo over a commit log: every view verified after the crash emptied the
// engine's directory and the engine rebuilt it from the log; the bucket holds the
// checkpoints' sstables. A second run on the same database is refused.
func TestDemoCommitLog(t *testing.T) {
	pg := startPostgres(t)
	dsn := pg.NewDatabase(t, "demo")
	bucketDir := t.TempDir()
	args := []string{"demo", "--json", "--events", "10000", "--rate", "500", "--progress", "lines", "--meta", dsn, "--bucket", "file://" + filepath.ToSlash(bucketDir)}
	root := newRoot()
	var out, errw bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errw)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errw.String())
	}
	var r demoResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if len(r.MVs) != 5 || r.Recoveries < 1 || r.LogSequence == 0 {
		t.Fatalf("result %s", out.String())
	}
	for _, mv := range r.MVs {
		if !mv.Verified || mv.Rows == 0 {
			t.Errorf("view %+v", mv)
		}
	}
	if !strings.Contains(errw.String(), "rebuilds it from the commit log") {
		t.Errorf("the crash did not empty the directory:\n%s", errw.String())
	}
	objs, err := filepath.Glob(filepath.Join(bucketDir, "e*.sst"))
	if err != nil || len(objs) == 0 {
		t.Fatalf("the bucket holds %d sstables (%v)", len(objs), err)
	}
	t.Logf("%d sstables in the bucket over %d commits, %.1fs", len(objs), r.LogSequence, r.Seconds)

	root = newRoot()
	errw.Reset()
	root.SetOut(&out)
	root.SetErr(&errw)
	root.SetArgs(args)
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "already holds a commit log") {
		t.Fatalf("a second demo on the same database = %v", err)
	}
	if _, err := os.Stat(bucketDir); err != nil {
		t.Fatal(err)
	}
}
