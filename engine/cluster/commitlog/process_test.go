package commitlog_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/vec"
)

// childEnv makes a re-executed test binary the writer: its value is "DSN BUCKET DIR".
const childEnv = "WEIR_COMMITLOG_CHILD"

// batchRows is the size of each of the writer's batches.
const batchRows = 500

// runWriter is the child: an engine over a log (node 1, a one-second lease) in DIR
// that inserts batch after batch of kv rows (batch i holds keys i*batchRows up to the
// next batch's) and, after each batch's checkpoint returns, prints "committed I".
// It runs until it is killed.
func runWriter() int {
	f := strings.Fields(os.Getenv(childEnv))
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "%s=%q: want DSN BUCKET DIR\n", childEnv, os.Getenv(childEnv))
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "writer:", err)
		return 1
	}
	ctx := context.Background()
	m, err := meta.Open(ctx, f[0])
	if err != nil {
		return fail(err)
	}
	b, err := objstore.OpenBucket(ctx, f[1])
	if err != nil {
		return fail(err)
	}
	var log *commitlog.Log
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		log, err = commitlog.Open(ctx, commitlog.Config{Meta: m, Bucket: b, BucketURL: f[1], Node: 1, LeaseTTL: time.Second, Grace: -1})
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fail(err)
	}
	e, err := engine.Open(ctx, f[2], engine.Options{BarrierInterval: 20 * time.Millisecond, CommitLog: log})
	if err != nil {
		return fail(err)
	}
	if err := e.CreateTable(ctx, kv, engine.TableOptions{}); err != nil {
		return fail(err)
	}
	for i := 0; ; i++ {
		bld := vec.NewChunkBuilder(memory.DefaultAllocator, kv)
		for k := range batchRows {
			if err := bld.AppendRow(vec.Insert, int64(i*batchRows+k), "x", int64(i)); err != nil {
				return fail(err)
			}
		}
		chunk, err := bld.Build()
		bld.Release()
		if err != nil {
			return fail(err)
		}
		err = e.Insert(ctx, "kv", chunk.Record())
		chunk.Release()
		if err != nil {
			return fail(err)
		}
		if _, err := e.WaitCheckpoint(ctx); err != nil {
			return fail(err)
		}
		fmt.Printf("committed %d\n", i)
	}
}

// TestKilledWriter kills a process writing through the log with SIGKILL after a few
// committed batches, then opens the log (once the dead writer's lease lapses) and an
// engine in an empty directory: it holds every batch the writer saw committed, at
// most the one batch after it, and no partial batch.
func TestKilledWriter(t *testing.T) {
	c := newCluster(t)
	dir := filepath.Join(t.TempDir(), "writer")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s", childEnv, c.dsn, c.bucketURL, dir))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err = cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	last := -1
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) != 2 || f[0] != "committed" {
			t.Fatalf("writer printed %q", lines.Text())
		}
		if last, err = strconv.Atoi(f[1]); err != nil {
			t.Fatal(err)
		}
		if last == 5 {
			break
		}
	}
	if last != 5 {
		t.Fatalf("the writer stopped after batch %d: %v", last, lines.Err())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true

	// The dead writer's lease lapses within its one-second ttl.
	var log *commitlog.Log
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		log, err = commitlog.Open(testContext(t), c.config(1))
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("open the log after the writer's death: %v", err)
	}
	defer log.Close()
	if log.Incarnation() < 2 {
		t.Fatalf("incarnation %d after a restart", log.Incarnation())
	}
	e := openEngine(t, filepath.Join(t.TempDir(), "rebuilt"), log)
	defer e.Close()
	rows := scan(t, e, "kv")
	batches := map[string]int{}
	for _, r := range rows {
		f := strings.Fields(strings.Trim(r, "[]"))
		batches[f[2]]++
	}
	for i := 0; i <= last; i++ {
		if n := batches[strconv.Itoa(i)]; n != batchRows {
			t.Fatalf("committed batch %d has %d of its %d rows after the kill", i, n, batchRows)
		}
		delete(batches, strconv.Itoa(i))
	}
	for b, n := range batches {
		if b != strconv.Itoa(last+1) || n != batchRows {
			t.Fatalf("batch %s has %d rows after the kill; only batch %d may follow the last seen committed, whole", b, n, last+1)
		}
	}
	t.Logf("%d rows rebuilt from the log; the writer saw batches 0..%d committed", len(rows), last)
}
