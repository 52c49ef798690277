package commitlog_test

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
)

// A replica follows the log an engine commits to: after each checkpoint of the
// engine, the replica's WaitCheckpoint reaches its epoch and every table and view
// scans the same; views created and dropped on the engine appear and disappear;
// writes on the replica fail with ErrReadOnly; a replica left alone catches up in the
// background.
func TestReplicaFollows(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	log := c.open(t, 1)
	e := openEngine(t, filepath.Join(t.TempDir(), "leader"), log)
	defer e.Close()
	f, err := commitlog.OpenFollower(ctx, c.config(2))
	if err != nil {
		t.Fatal(err)
	}
	r, err := engine.OpenReplica(ctx, filepath.Join(t.TempDir(), "replica"), engine.Options{CommitLog: f, BarrierInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := e.CreateTable(ctx, kv, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	names := []string{"kv"}
	for round := range 6 {
		var rows [][]any
		for k := range 50 {
			rows = append(rows, []any{round*50 + k, []string{"a", "b", "c"}[k%3], k})
		}
		write(t, e, e.Insert, rows...)
		if round == 1 {
			agg := engine.Aggregate(engine.Scan("kv"), []string{"v"}, engine.Agg("count_star", "", "c"), engine.Agg("sum", "n", "s"))
			if err := e.CreateMV(ctx, "by_v", agg, engine.MVOptions{}); err != nil {
				t.Fatal(err)
			}
			names = append(names, "by_v")
		}
		if round == 3 {
			write(t, e, e.Delete, rows[:10]...)
		}
		epoch := checkpoint(t, e)
		got, err := r.WaitCheckpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got < epoch {
			t.Fatalf("round %d: the replica at epoch %d after the engine committed %d", round, got, epoch)
		}
		for _, name := range names {
			if a, b := scan(t, e, name), scan(t, r, name); !slices.Equal(a, b) {
				t.Fatalf("round %d: %s: the replica has %d rows, the engine %d", round, name, len(b), len(a))
			}
		}
	}
	if err := e.DropMV(ctx, "by_v"); err != nil {
		t.Fatal(err)
	}
	checkpoint(t, e)
	if _, err := r.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Scan(ctx, "by_v"); err == nil {
		t.Fatal("the replica scans a view the engine dropped")
	}
	err = r.Insert(ctx, "kv", nil)
	if !errors.Is(err, engine.ErrReadOnly) || !strings.Contains(err.Error(), "kv") {
		t.Fatalf("a write on the replica: %v, want ErrReadOnly naming kv", err)
	}

	// In the background: a replica catching up every 20ms reaches a new commit alone.
	f3, err := commitlog.OpenFollower(ctx, c.config(3))
	if err != nil {
		t.Fatal(err)
	}
	bg, err := engine.OpenReplica(ctx, filepath.Join(t.TempDir(), "bg"), engine.Options{CommitLog: f3, BarrierInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer bg.Close()
	write(t, e, e.Insert, []any{10_000, "z", 1})
	epoch := checkpoint(t, e)
	for deadline := time.Now().Add(30 * time.Second); bg.CommittedEpoch() < epoch; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the background replica is at epoch %d, the engine committed %d", bg.CommittedEpoch(), epoch)
		}
	}
	if a, b := scan(t, e, "kv"), scan(t, bg, "kv"); !slices.Equal(a, b) {
		t.Fatalf("the background replica has %d rows, the engine %d", len(b), len(a))
	}
	if err := bg.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bg.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := f3.Commit(ctx, engine.CommitRequest{Epoch: 1, Generation: 1}); err == nil {
		t.Fatal("a follower committed")
	}
}
