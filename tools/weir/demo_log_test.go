package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/internal/pgtest"
	"github.com/seed04fbb902/weir/internal/s3test"
)

// startPostgres starts a private PostgreSQL server for one test, stopped when it ends.
func startPostgres(t testing.TB) *pgtest.Server {
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
	bucketURL := "file://" + filepath.ToSlash(bucketDir)
	s3, err := s3test.FromEnv("weir-demo") // make test-s3: the bucket is on an S3-protocol server
	if err != nil {
		t.Fatal(err)
	}
	if s3 != nil {
		t.Cleanup(func() {
			if err := s3.Stop(); err != nil {
				t.Error(err)
			}
		})
		bucketURL = s3test.BucketURL(t, s3, "demo")
	}
	t.Logf("bucket %s", bucketURL)
	args := []string{"demo", "--json", "--events", "10000", "--rate", "500", "--progress", "lines", "--meta", dsn, "--bucket", bucketURL}
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
	b, err := objstore.OpenBucket(t.Context(), bucketURL)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var objs []string
	for it := b.List(nil); ; {
		o, err := it.Next(t.Context())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := objstore.ParseName(o.Key); err == nil {
			objs = append(objs, o.Key)
		}
	}
	if len(objs) == 0 {
		t.Fatalf("the bucket holds no sstables")
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
}
