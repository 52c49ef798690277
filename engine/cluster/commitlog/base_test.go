package commitlog_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/internal/faultblob"
)

// A log that writes a base every few commits stays bounded: once collected, the
// bucket holds exactly the objects of the last base and of the deltas since the one
// before it. An empty directory rebuilds from the base and the deltas after it, to
// scan what the engine scans, before and after the collection; a directory left at a
// sequence the log has compacted away is refused, naming what to do.
func TestLogBases(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	cfg := c.config(1)
	cfg.BaseEvery = 3
	log := openLog(t, cfg)
	e := openLeader(t, log)
	agg := engine.Aggregate(engine.Scan("kv"), []string{"v"}, engine.Agg("count_star", "", "c"), engine.Agg("sum", "n", "s"))
	if err := e.CreateMV(ctx, "by_v", agg, engine.MVOptions{}); err != nil {
		t.Fatal(err)
	}
	follower := func() *commitlog.Follower {
		f, err := commitlog.OpenFollower(ctx, c.config(2))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	replica := func(dir string) (*engine.Replica, error) {
		return engine.OpenReplica(ctx, dir, engine.Options{CommitLog: follower(), BarrierInterval: -1})
	}
	same := func(when string, r *engine.Replica) {
		t.Helper()
		if _, err := r.WaitCheckpoint(ctx); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"kv", "by_v"} {
			if a, b := scan(t, e, name), scan(t, r, name); !slices.Equal(a, b) {
				t.Fatalf("%s: %s: the rebuilt directory has %d rows, the engine %d", when, name, len(b), len(a))
			}
		}
	}
	stale := filepath.Join(t.TempDir(), "stale")
	for round := range 12 {
		var rows [][]any
		for k := range 40 {
			rows = append(rows, []any{round*40 + k, []string{"a", "b", "c", "d"}[k%4], k})
		}
		write(t, e, e.Insert, rows...)
		if round > 0 {
			write(t, e, e.Delete, []any{(round-1)*40 + 1, "b", 1})
			write(t, e, e.Upsert, []any{(round-1)*40 + 2, "a", 100 + round})
		}
		checkpoint(t, e)
		if round == 0 {
			r, err := replica(stale)
			if err != nil {
				t.Fatal(err)
			}
			same("the replica that goes stale", r)
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	log.WaitBase() // the last base, written in the background, is in
	b, ok, err := c.meta.LatestBase(ctx)
	if err != nil || !ok {
		t.Fatalf("no base after 12 rounds of 3 commits between bases: %v", err)
	}
	first, err := c.meta.FirstDelta(ctx)
	if err != nil || first <= 1 {
		t.Fatalf("the log still holds deltas from %d (%v) after its bases", first, err)
	}
	t.Logf("base at sequence %d with %d objects; deltas from %d", b.Seq, len(b.Objects), first)
	if _, err := replica(stale); err == nil || !strings.Contains(err.Error(), "compacted") || !strings.Contains(err.Error(), "start the directory empty") {
		t.Fatalf("a directory at a compacted sequence: %v, want a refusal saying so", err)
	}
	r, err := replica(filepath.Join(t.TempDir(), "empty"))
	if err != nil {
		t.Fatal(err)
	}
	same("rebuilt from the base", r)
	r.Close()

	n, err := log.Collect(ctx, 0)
	if err != nil || n == 0 {
		t.Fatalf("collect after the bases: %d, %v; want the compacted objects deleted", n, err)
	}
	b, _, _ = c.meta.LatestBase(ctx)
	deltas, err := c.meta.Deltas(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, o := range b.Objects {
		want = append(want, o.Name)
	}
	for _, d := range deltas {
		for _, o := range d.Objects {
			want = append(want, o.Name)
		}
	}
	slices.Sort(want)
	if got := bucketObjects(t, c.bucket); !slices.Equal(got, want) {
		t.Fatalf("after collection the bucket holds %v, want exactly the referenced %v", got, want)
	}
	r, err = replica(filepath.Join(t.TempDir(), "after"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	same("rebuilt after the collection", r)
	// The log goes on, and the rebuilt directory follows it.
	write(t, e, e.Insert, []any{100_000, "z", 1})
	checkpoint(t, e)
	same("after another commit", r)
}

// A base is written in the background, from a snapshot of the store at the commit
// that made it due: while its upload is held, the next checkpoints commit, and no
// second base starts; once released, the base holds that commit's state, and an empty
// directory rebuilds from it and the deltas after it to what the engine holds. An
// engine that closes while a base is held stops the base (Quiesce) and closes.
func TestBaseInBackground(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	var faults faultblob.Faults
	cfg := c.config(1)
	cfg.Bucket = faultblob.Wrap(c.bucket, &faults)
	cfg.BaseEvery = 2
	release := faults.Hold("b") // a base's objects are named b<epoch>-...
	defer release()
	log := openLog(t, cfg)
	e := openLeader(t, log)
	k := 0
	commit := func() {
		t.Helper()
		write(t, e, e.Insert, []any{k, "a", k}, []any{k + 1, "b", k})
		k += 2
		checkpoint(t, e)
	}
	for faults.Held() == 0 {
		if k > 40 {
			t.Fatal("no base started after 20 commits of a log that writes one every 2")
		}
		commit()
	}
	held, err := c.meta.Committed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		commit() // while the base's first object is held
	}
	if n := faults.Held(); n != 1 {
		t.Fatalf("%d base objects held, want the first one of one base", n)
	}
	if written, _ := log.Bases(); written != 0 {
		t.Fatalf("%d bases written while the upload is held", written)
	}
	release()
	log.WaitBase()
	if written, failed := log.Bases(); written != 1 || failed != 0 {
		t.Fatalf("%d bases written and %d failed, want 1 and 0", written, failed)
	}
	b, ok, err := c.meta.LatestBase(ctx)
	if err != nil || !ok {
		t.Fatalf("no base after the release: %v", err)
	}
	if b.Seq > held.Seq || b.Seq == 0 {
		t.Fatalf("the base is at sequence %d, want the one due before the held commits (at most %d)", b.Seq, held.Seq)
	}
	commit() // the next base starts, and is written at once
	log.WaitBase()
	f, err := commitlog.OpenFollower(ctx, c.config(2))
	if err != nil {
		t.Fatal(err)
	}
	r, err := engine.OpenReplica(ctx, filepath.Join(t.TempDir(), "empty"), engine.Options{CommitLog: f, BarrierInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if a, b := scan(t, e, "kv"), scan(t, r, "kv"); !slices.Equal(a, b) {
		t.Fatalf("the directory rebuilt from the base has %d rows, the engine %d", len(b), len(a))
	}

	// An engine that closes while a base is held stops it, and closes.
	written, _ := log.Bases()
	release2 := faults.Hold("b")
	defer release2()
	for faults.Held() == 0 {
		if k > 200 {
			t.Fatal("no base started after 20 more commits")
		}
		commit()
	}
	if err := e.Close(); err != nil {
		t.Fatalf("close with a base held: %v", err)
	}
	if w, failed := log.Bases(); w != written || failed != 0 {
		t.Fatalf("after the close %d bases written and %d failed, want %d and 0 (the held one stopped)", w, failed, written)
	}
}
