package commitlog_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/storage"
)

// ahead is a log whose leader's clock runs an hour ahead: every commit carries a
// graph generation an hour of nanoseconds above the engine's.
type ahead struct{ *commitlog.Log }

func (a ahead) Commit(ctx context.Context, c engine.CommitRequest) (storage.CheckpointStats, error) {
	c.Generation += uint64(time.Hour)
	return a.Log.Commit(ctx, c)
}

// Every commit records its graph's generation, and a leader builds its graphs above
// the generation of the log's last commit: after a leader whose clock ran ahead,
// the next one (on an empty directory) still commits, above it, where a generation
// from its own clock would be refused as stale.
func TestGenerationAboveTheLog(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	log1 := c.open(t, 1)
	e1 := openEngine(t, filepath.Join(t.TempDir(), "a"), ahead{log1})
	if err := e1.CreateTable(ctx, kv, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	write(t, e1, e1.Insert, []any{1, "a", 10}, []any{2, "b", 20})
	checkpoint(t, e1)
	want := scan(t, e1, "kv")
	v1, err := c.meta.Committed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if now := uint64(time.Now().UnixNano()); v1.Generation <= now {
		t.Fatalf("committed generation %d, want one an hour ahead of %d", v1.Generation, now)
	}
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := log1.Close(); err != nil {
		t.Fatal(err)
	}

	log2 := c.open(t, 2)
	e2 := openEngine(t, filepath.Join(t.TempDir(), "b"), log2)
	defer e2.Close()
	write(t, e2, e2.Insert, []any{3, "c", 30})
	checkpoint(t, e2)
	v2, err := c.meta.Committed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Generation <= v1.Generation || v2.Seq <= v1.Seq {
		t.Fatalf("after the second leader's checkpoint the log is at %+v, after %+v: want a later sequence and generation", v2, v1)
	}
	if got := scan(t, e2, "kv"); !slices.Equal(got, append(want, "[3 c 30]")) {
		t.Fatalf("the second leader's engine holds %v, want %v and [3 c 30]", got, want)
	}
}
