package commitlog_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/internal/s3test"
)

// A bucket that refuses writes mid-run (its S3-protocol server killed): the next
// checkpoint fails naming the object it could not write, the engine fails, and the
// version log does not move. With the server back, an engine opened on an empty
// directory holds the last committed state and commits again. It runs under make
// test-s3 (a real server to kill).
func TestBucketDownMidRun(t *testing.T) {
	if s3 == nil {
		t.Skipf("no S3-protocol server (%s unset; make test-s3 sets it)", s3test.BinaryEnv)
	}
	c := newCluster(t)
	ctx := testContext(t)
	log1 := c.open(t, 1)
	e1 := openEngine(t, filepath.Join(t.TempDir(), "a"), log1)
	defer e1.Crash()
	if err := e1.CreateTable(ctx, kv, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	write(t, e1, e1.Insert, []any{1, "a", 10}, []any{2, "b", 20})
	committed := checkpoint(t, e1)
	want := scan(t, e1, "kv")
	before, err := c.meta.Committed(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if err := s3.Kill(); err != nil {
		t.Fatal(err)
	}
	write(t, e1, e1.Insert, []any{3, "c", 30})
	_, err = e1.WaitCheckpoint(ctx)
	if err == nil || !strings.Contains(err.Error(), ".sst") {
		t.Fatalf("checkpoint with the bucket down = %v, want an error naming the object", err)
	}
	t.Logf("checkpoint with the bucket down: %v", err)
	if got := e1.CommittedEpoch(); got != committed {
		t.Fatalf("committed epoch moved from %d to %d", committed, got)
	}
	if _, err := e1.WaitCheckpoint(ctx); err == nil {
		t.Fatal("a failed engine took another checkpoint")
	}
	after, err := c.meta.Committed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("a failed upload moved the version from %+v to %+v", before, after)
	}

	if err := s3.Restart(); err != nil {
		t.Fatal(err)
	}
	e1.Crash()
	if err := log1.Close(); err != nil {
		t.Logf("closing the failed engine's log: %v", err)
	}
	log2 := c.open(t, 1)
	e2 := openEngine(t, filepath.Join(t.TempDir(), "b"), log2)
	defer e2.Close()
	if got := scan(t, e2, "kv"); !slices.Equal(got, want) {
		t.Fatalf("after the bucket came back: %v, want the last committed %v", got, want)
	}
	write(t, e2, e2.Insert, []any{3, "c", 30})
	checkpoint(t, e2)
	if got := scan(t, e2, "kv"); len(got) != 3 {
		t.Fatalf("after a new checkpoint: %v", got)
	}
}
