package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/seed04fbb902/weir/vec"
)

// The cluster backfill under a fault: a table of 200,000 rows in a cluster of three
// compute processes, under a seeded writer of inserts, updates and deletes; a copy
// of it backfilled at parallelism 6 (and a count per group at 3), rate-limited so
// that the backfill spans at least 20 commits. At about 40% of the copy's snapshot
// rows one compute process meets the variant's fault:
//
//   - sigkill: SIGKILLed, and restarted on its directory;
//   - mid-upload: it kills itself with SIGKILL in the middle of a checkpoint's
//     upload, one object of it complete in the bucket (the WEIR_KILL_MID_UPLOAD
//     failpoint), and is restarted;
//   - sigstop: SIGSTOPped until the cluster has committed twice without it (its
//     control stream's keepalive ends the stream, and the recovery leaves the node
//     down), then resumed: what it sends for the torn-down graph is refused, and
//     it takes actors again through a recovery.
//
// Once the backfills are done, the copy is rescaled from 6 actors to 9.
// Throughout, the committed version (sequence and epoch) and every vnode's
// committed progress never go backwards; at the end, with the writer stopped, the
// copy equals the table and the counts equal the table's groups; with the cluster
// stopped and its garbage collected, the bucket holds exactly the objects the log
// references.
func TestClusterBackfillKill(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of processes")
	}
	for _, fault := range []string{"sigkill", "mid-upload", "sigstop"} {
		t.Run(fault, func(t *testing.T) { testClusterBackfillFault(t, fault) })
	}
}

func testClusterBackfillFault(t *testing.T, fault string) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	failpoint := filepath.Join(t.TempDir(), "kill-mid-upload")
	if fault == "mid-upload" {
		t.Setenv(killMidUploadEnv, failpoint) // the compute processes inherit it
	}
	st, ms := upCluster(t, ctx, "backfill_"+strings.ReplaceAll(fault, "-", "_"), 3)
	c, err := remote.Dial(ctx, st.Processes[len(st.Processes)-1].Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTable(ctx, kvTable, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	const rows, groups = 200_000, 7
	for k := 0; k < rows; k += 20_000 {
		if err := insertKV(ctx, c, k, k+20_000, groups); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}

	// The writer: inserts of new keys, updates and deletes of random ones.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		rng := rand.New(rand.NewPCG(seed, 1))
		next := rows
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			// Errors are a recovery's (the kill): what it lost is not in the table.
			_ = insertKV(ctx, c, next, next+50, groups)
			next += 50
			_ = writeKV(ctx, c, c.Update, rng, next, groups)
			_ = writeKV(ctx, c, c.Delete, rng, next, groups)
		}
	}()
	stopWriter := sync.OnceFunc(func() { close(stop); <-stopped })
	defer stopWriter()

	before, err := ms.Committed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	limit := int64(2000) // about 17 s of backfill, with a commit at least every second
	if err := c.CreateMV(ctx, "copy", engine.Scan("kv"), engine.MVOptions{Parallelism: 6, Background: true, RateLimit: &limit}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateMV(ctx, "by_g", byG, engine.MVOptions{Parallelism: 3, Background: true, RateLimit: &limit}); err != nil {
		t.Fatal(err)
	}

	// Watch: the committed version and every vnode's committed progress only move
	// forward; kill node 3 at about 40%.
	last := before
	seen := map[string]engine.VnodeProgress{}
	checkForward := func() {
		t.Helper()
		v, err := ms.Committed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v.Seq < last.Seq || v.Epoch < last.Epoch {
			t.Fatalf("the committed version went back: %+v after %+v", v, last)
		}
		last = v
		for _, name := range []string{"copy", "by_g"} {
			vps, err := c.VnodeProgress(ctx, name)
			if err != nil {
				continue // the engine recovers
			}
			for _, vp := range vps {
				k := fmt.Sprint(name, "/", vp.Scan, "/", vp.Vnode)
				if old, ok := seen[k]; ok && (vp.State < old.State || vp.Rows < old.Rows || vp.State == old.State && bytes.Compare(vp.Position, old.Position) < 0) {
					t.Fatalf("%s vnode %d's committed progress went back: %+v after %+v", name, vp.Vnode, vp, old)
				}
				seen[k] = vp
			}
		}
	}
	killed := false
	for done := false; !done; {
		checkForward()
		ps, err := c.Progress(ctx)
		if err != nil {
			t.Logf("progress: %v", err)
		}
		done = len(ps) == 2
		for _, p := range ps {
			done = done && p.Done
			if p.Name == "copy" && !killed && p.UpstreamRows > 0 && float64(p.RowsConsumed) >= 0.4*float64(p.UpstreamRows) {
				killed = true
				i := len(st.Processes) - 2 // compute-3
				t.Logf("%s %s at %d of %d rows", fault, st.Processes[i].Role, p.RowsConsumed, p.UpstreamRows)
				injectFault(t, ctx, fault, st, i, ms, failpoint)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the backfills did not finish: %v", ps)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkForward()
	if !killed {
		t.Fatal("the backfill finished before node 3 was killed")
	}
	if last.Seq-before.Seq < 20 {
		t.Fatalf("the backfill spanned %d commits, want at least 20", last.Seq-before.Seq)
	}
	// A rescale 6 -> 9 after the restart, the writer still writing: one Update
	// barrier moves the copy's vnodes across the three processes.
	if err := c.RescheduleMV(ctx, "copy", 9); err != nil {
		t.Fatalf("rescale the copy 6 -> 9: %v", err)
	}
	checkForward()
	stopWriter()
	for {
		if _, err := c.WaitCheckpoint(ctx); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	kv, cp := scanTwo(t, ctx, c, "kv"), scanTwo(t, ctx, c, "copy")
	if !slices.Equal(kv, cp) {
		t.Fatalf("copy holds %d rows, kv %d", len(cp), len(kv))
	}
	counts := map[string]int{}
	for _, r := range kv {
		var k int
		var g string
		if _, err := fmt.Sscan(r, &k, &g); err != nil {
			t.Fatal(err)
		}
		counts[g]++
	}
	var want []string
	for g, n := range counts {
		want = append(want, fmt.Sprintf("%s %d", g, n))
	}
	slices.Sort(want)
	if got := scanTwo(t, ctx, c, "by_g"); !slices.Equal(got, want) {
		t.Fatalf("by_g holds %v, want %v", got, want)
	}
	t.Logf("%d rows, %d commits during the backfill", len(kv), last.Seq-before.Seq)
	c.Close()
	if err := stopCluster(*st, io.Discard); err != nil {
		t.Fatal(err)
	}
	checkBucketReferenced(t, ctx, st.Meta, st.Bucket)
}

// injectFault gives compute process i of st the fault of TestClusterBackfillKill's
// variant, and returns once the process runs again.
func injectFault(t *testing.T, ctx context.Context, fault string, st *clusterState, i int, ms *meta.Store, failpoint string) {
	t.Helper()
	p := &st.Processes[i]
	var err error
	switch fault {
	case "sigkill":
		if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	case "mid-upload":
		if err := os.WriteFile(failpoint, []byte(p.Role), 0o644); err != nil {
			t.Fatal(err)
		}
	case "sigstop":
		v, err := ms.Committed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(p.PID, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		for {
			w, err := ms.Committed(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if w.Seq >= v.Seq+2 {
				t.Logf("%s stopped: the cluster committed sequences %d to %d without it", p.Role, v.Seq+1, w.Seq)
				break
			}
			if ctx.Err() != nil {
				syscall.Kill(p.PID, syscall.SIGCONT)
				t.Fatalf("the cluster committed nothing past sequence %d while %s was stopped", v.Seq, p.Role)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := syscall.Kill(p.PID, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// Its late messages, of the graph torn down while it was stopped, are
		// refused (when they arrive on its new stream; those sent on the old one
		// are lost with it): the leader logs each.
		t.Cleanup(func() {
			leader := st.Processes[len(st.Processes)-1]
			logged, err := os.ReadFile(leader.Log)
			if err != nil {
				t.Error(err)
				return
			}
			t.Logf("the leader refused %d messages for their stamps", bytes.Count(logged, []byte("refused a message for its stamp")))
		})
		return
	}
	if err := awaitExit(p.PID); err != nil {
		t.Fatal(err)
	}
	if fault == "mid-upload" {
		logged, err := os.ReadFile(p.Log)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(logged, []byte("failpoint: SIGKILL mid-upload")) {
			t.Fatalf("%s exited, but not at the failpoint: its log %s says nothing of it", p.Role, p.Log)
		}
		if err := os.WriteFile(failpoint, nil, 0o644); err != nil { // disarmed for the restart
			t.Fatal(err)
		}
	}
	if *p, err = p.restart(); err != nil {
		t.Fatal(err)
	}
}

// upCluster starts a local cluster of nodes compute processes under weir meta on a
// new database db of a private PostgreSQL and a new bucket (on a private versitygw
// under make test-s3, else file://), and opens its meta store; the test's end
// stops exactly the cluster's processes (those st holds then: a test that restarts
// one records it there).
func upCluster(t *testing.T, ctx context.Context, db string, nodes int) (*clusterState, *meta.Store) {
	t.Helper()
	dsn := startPostgres(t).NewDatabase(t, db)
	// On a private versitygw under make test-s3 (a bucket's name has no '_').
	bucket := clusterBucket(t, strings.ReplaceAll(db, "_", "-"))
	t.Logf("bucket %s", bucket)
	st, err := clusterUp(ctx, filepath.Join(t.TempDir(), "cluster"), clusterUpOptions{meta: dsn, bucket: bucket, exchange: "channel", control: "channel", nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stopCluster(st, io.Discard); err != nil {
			t.Error(err)
		}
	})
	ms, err := meta.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ms.Close)
	return &st, ms
}

// writeKV applies op (Update or Delete) to 20 random keys below next.
func writeKV(ctx context.Context, c *remote.Client, op func(context.Context, string, arrow.RecordBatch) error, rng *rand.Rand, next, groups int) error {
	b := vec.NewChunkBuilder(memory.DefaultAllocator, kvTable)
	defer b.Release()
	keys := map[int]bool{}
	for range 20 {
		k := rng.IntN(next)
		if keys[k] {
			continue
		}
		keys[k] = true
		if err := b.AppendRow(vec.Insert, k, fmt.Sprint("g", rng.IntN(groups))); err != nil {
			return err
		}
	}
	ch, err := b.Build()
	if err != nil {
		return err
	}
	defer ch.Release()
	return op(ctx, "kv", ch.Record())
}

// The meta process killed mid-backfill: weir meta is SIGKILLed while a view
// backfills across two compute processes, and restarted on its directory. It takes
// the lease anew (a higher term); the compute processes, not restarted, reconnect to
// it, drop what the old leader's graph left and catch up from the log; the backfill
// resumes from its committed progress, and the view equals its table at the end;
// with the cluster stopped and its garbage collected, the bucket holds exactly the
// objects the log references.
func TestClusterMetaKill(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, ms := upCluster(t, ctx, "meta_kill", 2)
	leader := len(st.Processes) - 1
	c, err := remote.Dial(ctx, st.Processes[leader].Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTable(ctx, kvTable, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := insertKV(ctx, c, 0, 40_000, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	limit := int64(2000)
	if err := c.CreateMV(ctx, "copy", engine.Scan("kv"), engine.MVOptions{Parallelism: 4, Background: true, RateLimit: &limit}); err != nil {
		t.Fatal(err)
	}
	progress := func() (engine.JobProgress, error) {
		ps, err := c.Progress(ctx)
		if err != nil || len(ps) != 1 {
			return engine.JobProgress{}, fmt.Errorf("progress: %v (%d jobs)", err, len(ps))
		}
		return ps[0], nil
	}
	for {
		p, err := progress()
		if err != nil {
			t.Fatal(err)
		}
		if p.Done {
			t.Fatal("the backfill finished before the meta was killed")
		}
		if float64(p.RowsConsumed) >= 0.3*float64(p.UpstreamRows) {
			t.Logf("SIGKILL the meta at %d of %d rows", p.RowsConsumed, p.UpstreamRows)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	before, err := ms.Committed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := syscall.Kill(st.Processes[leader].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := awaitExit(st.Processes[leader].PID); err != nil {
		t.Fatal(err)
	}
	computes := st.Processes[:leader]
	if st.Processes[leader], err = st.Processes[leader].restart(); err != nil {
		t.Fatal(err)
	}
	if c, err = remote.Dial(ctx, st.Processes[leader].Addr, nil); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetRateLimit(ctx, "copy", nil); err != nil {
		t.Fatal(err)
	}
	for {
		p, err := progress()
		if err != nil {
			t.Fatal(err)
		}
		if p.Done {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the backfill did not finish after the meta's restart: %+v", p)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := ms.Committed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Seq <= before.Seq || after.Epoch <= before.Epoch {
		t.Fatalf("the committed version %+v after the restart is not past %+v", after, before)
	}
	if kv, cp := scanTwo(t, ctx, c, "kv"), scanTwo(t, ctx, c, "copy"); len(kv) != 40_000 || !slices.Equal(kv, cp) {
		t.Fatalf("copy holds %d rows, kv %d (want 40000)", len(cp), len(kv))
	}
	for _, p := range computes {
		if !running(p.PID) {
			t.Fatalf("%s (pid %d) does not run: it should have reconnected to the new meta", p.Role, p.PID)
		}
	}
	c.Close()
	if err := stopCluster(*st, io.Discard); err != nil {
		t.Fatal(err)
	}
	checkBucketReferenced(t, ctx, st.Meta, st.Bucket)
}
