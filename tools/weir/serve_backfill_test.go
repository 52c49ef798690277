package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/seed04fbb902/weir/vec"
)

// A backfill across a SIGKILL of its server: a table of 200,000 rows under a seeded
// writer of inserts, updates and deletes; a view over it backfilled at parallelism
// 6, rate-limited to span at least 20 checkpoints; the server (over a commit log,
// cross-node edges on Flight, reports over control streams) SIGKILLed at about 40% progress and restarted on an
// EMPTY directory. Then: the committed epoch and every vnode's committed progress
// never went backwards; the backfill resumed and finished; the view equals its query
// over the table at the same committed epoch; and after a collection the bucket holds
// exactly the objects the version log references.
func TestServeBackfillKilled(t *testing.T) {
	const seed = 42
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0xbacf))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pg := startPostgres(t)
	dsn := pg.NewDatabase(t, "backfill")
	bucket := clusterBucket(t, "backfill")
	args := func(dir string) []string {
		return []string{"serve", "--dir", dir, "--addr", "127.0.0.1:0", "--meta", dsn, "--bucket", bucket, "--exchange", "flight", "--control", "grpc"}
	}
	cmd, addr, ok := startWeir(t, args(filepath.Join(t.TempDir(), "first"))...)
	if !ok {
		t.Fatalf("serve: %s", addr)
	}
	c, err := remote.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTable(ctx, kvTable, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	const rows = 200_000
	for lo := 0; lo < rows; lo += 10_000 {
		if err := insertKV(ctx, c, lo, lo+10_000, 97); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}

	// The writer: every 20ms a batch of inserts of new keys, updates (a new g) and
	// deletes of old ones, through whichever client is current, until stopped. Its
	// writes while the server is down fail (and those not checkpointed before the
	// kill are lost, as a crash loses them); it goes on with the next server.
	var (
		wmu    sync.Mutex
		cur    = c
		next   = rows
		stopW  = make(chan struct{})
		wdone  = make(chan struct{})
		writes int
	)
	go func() {
		defer close(wdone)
		for {
			select {
			case <-stopW:
				return
			case <-time.After(20 * time.Millisecond):
			}
			wmu.Lock()
			db := cur
			from := next
			next += 20
			k := rng.IntN(from)
			wmu.Unlock()
			if insertKV(ctx, db, from, from+20, 97) == nil {
				writes++
			}
			upd, del := kvRecord(k, fmt.Sprint("u", k%13)), kvRecord((k+7919)%from, "")
			_ = db.Update(ctx, "kv", upd.Record())
			_ = db.Delete(ctx, "kv", del.Record())
			upd.Release()
			del.Release()
		}
	}()

	view := engine.Project(engine.Scan("kv"), engine.As(engine.Column("g"), "g"))
	limit := engine.RowsPerSecond(4000) // 6 actors: about 8 s for 200,000 rows, 80 checkpoints
	if err := c.CreateMV(ctx, "all", view, engine.MVOptions{Parallelism: 6, RateLimit: limit, Background: true}); err != nil {
		t.Fatal(err)
	}
	epochBefore, progressBefore := waitPercent(t, ctx, c, "all", 40)
	killedAt := 0
	if ps, err := c.Progress(ctx); err == nil && len(ps) == 1 {
		t.Logf("killing the server at %.1f%% (%d of ~%d rows), committed epoch %d", ps[0].Percent, ps[0].RowsConsumed, ps[0].UpstreamRows, epochBefore)
		killedAt = int(ps[0].Percent)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	cmd, addr, ok = startWeir(t, args(filepath.Join(t.TempDir(), "second"))...)
	if !ok {
		t.Fatalf("serve after the kill: %s", addr)
	}
	c2, err := remote.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	wmu.Lock()
	cur = c2
	wmu.Unlock()
	epochAfter, err := c2.WaitCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(epochAfter) < epochBefore {
		t.Fatalf("the committed epoch went back from %d to %d", epochBefore, epochAfter)
	}
	after, err := c2.VnodeProgress(ctx, "all")
	if err != nil {
		t.Fatal(err)
	}
	checkNotBack(t, progressBefore, after)

	// Let it finish, with the writer still on.
	first := -1
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		ps, err := c2.Progress(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if first < 0 {
			first = int(ps[0].Percent)
		}
		if ps[0].Done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backfill did not finish: %+v", ps[0])
		}
	}
	t.Logf("the restarted backfill resumed at %d%% (killed at %d%%)", first, killedAt)
	close(stopW)
	<-wdone
	if writes == 0 {
		t.Fatal("the writer wrote nothing")
	}
	final, err := c2.VnodeProgress(ctx, "all")
	if err != nil {
		t.Fatal(err)
	}
	checkNotBack(t, after, final)
	if _, err := c2.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	// The view is its query over the table at the same epoch: no writes run now.
	tableRows := scanTwo(t, ctx, c2, "kv")
	r, err := c2.Scan(ctx, "all")
	if err != nil {
		t.Fatal(err)
	}
	var viewRows []string
	for r.Next() {
		rec := r.RecordBatch() // g, k
		for i := range int(rec.NumRows()) {
			viewRows = append(viewRows, rec.Column(1).ValueStr(i)+" "+rec.Column(0).ValueStr(i))
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	r.Release()
	slices.Sort(viewRows)
	if !slices.Equal(viewRows, tableRows) {
		t.Fatalf("the view has %d rows, its query over the table %d", len(viewRows), len(tableRows))
	}
	t.Logf("%d rows in the view and the table; %d write batches", len(viewRows), writes)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v", err)
	}
	checkBucketReferenced(t, ctx, dsn, bucket)
}

// kvRecord is one row of kv (g "" for a delete's pk).
func kvRecord(k int, g string) *vec.Chunk {
	b := vec.NewChunkBuilder(memory.DefaultAllocator, kvTable)
	defer b.Release()
	_ = b.AppendRow(vec.Insert, k, g)
	c, _ := b.Build()
	return c
}

// waitPercent waits until view's backfill passed percent and returns the committed
// epoch and committed per-vnode progress then.
func waitPercent(t *testing.T, ctx context.Context, c *remote.Client, view string, percent float64) (uint64, []engine.VnodeProgress) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		ps, err := c.Progress(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) == 1 && ps[0].Done {
			t.Fatalf("the backfill finished before %v%%: raise the rows or lower the rate limit", percent)
		}
		if len(ps) == 1 && ps[0].Percent >= percent {
			epoch, err := c.WaitCheckpoint(ctx)
			if err != nil {
				t.Fatal(err)
			}
			vs, err := c.VnodeProgress(ctx, view)
			if err != nil {
				t.Fatal(err)
			}
			return uint64(epoch), vs
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %v%% within a minute: %+v", percent, ps)
		}
	}
}

// checkNotBack fails unless every vnode of after is at least where it was in before:
// the same or a later state, and no fewer rows.
func checkNotBack(t *testing.T, before, after []engine.VnodeProgress) {
	t.Helper()
	type key struct {
		scan  int
		vnode uint16
	}
	was := map[key]engine.VnodeProgress{}
	for _, v := range before {
		was[key{v.Scan, v.Vnode}] = v
	}
	if len(after) != len(before) {
		t.Fatalf("%d vnodes, then %d", len(before), len(after))
	}
	moved := 0
	for _, v := range after {
		b := was[key{v.Scan, v.Vnode}]
		if v.State < b.State || v.Rows < b.Rows || (v.State == b.State && v.State == vec.InProgress && bytes.Compare(v.Position, b.Position) < 0) {
			t.Fatalf("vnode %d went back: %v at %x with %d rows, then %v at %x with %d", v.Vnode, b.State, b.Position, b.Rows, v.State, v.Position, v.Rows)
		}
		if v.Rows > b.Rows {
			moved++
		}
	}
	t.Logf("%d of %d vnodes moved on, none back", moved, len(after))
}

// checkBucketReferenced collects the garbage of a stopped cluster's bucket through
// commitlog.Collect (no grace: no commit runs) and requires the bucket to hold
// exactly the objects its log references: none lost, none left behind by a kill.
func checkBucketReferenced(t *testing.T, ctx context.Context, dsn, bucketURL string) {
	t.Helper()
	m, err := meta.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b, err := objstore.OpenBucket(ctx, bucketURL)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	n, err := commitlog.Collect(ctx, m, b, bucketURL, 0)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := commitlog.Referenced(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for it := b.List(nil); ; {
		o, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, o.Key)
	}
	slices.Sort(held)
	if want := slices.Sorted(maps.Keys(refs)); !slices.Equal(held, want) {
		t.Fatalf("after collecting %d objects bucket %s holds %d objects, its log references %d (held %v, referenced %v)", n, bucketURL, len(held), len(want), held, want)
	}
	t.Logf("collected %d objects; the bucket holds the %d its log references", n, len(held))
}
