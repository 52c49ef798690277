package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/seed04fbb902/weir/storage"
)

// A cluster of processes: weir meta and two weir compute processes on one meta
// store and bucket. Every table's and view's actor runs in a compute process; a
// client writes through the meta and reads what the views committed. One compute
// process is SIGKILLed and restarted on its directory: the round it broke fails, the
// engine recovers with the node back, and every view still equals its query, with
// every write that a checkpoint covered kept. A compute process of a node the meta does not run is
// refused, naming the node; SIGTERM stops every process cleanly.
func TestComputeProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cc := newComputeCluster(t, "compute")
	computes := []*exec.Cmd{nil, cc.compute(t, 1, ""), cc.compute(t, 2, "")}
	meta, c := cc.meta(t, ctx, 3000, "--compute", "2")
	if err := c.CreateMV(ctx, "by_g", byG, engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	check := func(when string, rows int) {
		t.Helper()
		kv, groups := scanTwo(t, ctx, c, "kv"), scanTwo(t, ctx, c, "by_g")
		if len(kv) != rows {
			t.Fatalf("%s: kv holds %d rows, want %d", when, len(kv), rows)
		}
		var want []string
		for g := range 5 {
			n := 0
			for k := range rows {
				if k%5 == g {
					n++
				}
			}
			want = append(want, fmt.Sprintf("g%d %d", g, n))
		}
		if strings.Join(groups, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: by_g holds %v, want %v", when, groups, want)
		}
	}
	check("after the backfill", 3000)

	// Node 2's process dies, and comes back on its directory.
	if err := computes[2].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = computes[2].Wait()
	computes[2] = cc.compute(t, 2, "")
	rows := 3000
	for deadline := time.Now().Add(time.Minute); rows < 4000; {
		// The recovery loses the writes since the last checkpoint, and the
		// checkpoint that would have covered them fails: write them again (an
		// insert replaces a row whose key exists).
		err := insertKV(ctx, c, rows, rows+500, 5)
		if err == nil {
			_, err = c.WaitCheckpoint(ctx)
		}
		if err == nil {
			rows += 500
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint within a minute of node 2's return: %v", err)
		}
		t.Logf("while node 2 comes back: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	check("after node 2 came back", rows)

	// A compute process of a node the meta does not run is refused, and exits.
	out, err := runWeirProcess(t, "compute", "--node", "3", "--dir", filepath.Join(cc.dir, "compute-3"),
		"--meta", cc.dsn, "--bucket", cc.bucket, "--coordinator", cc.coordinator)
	if err == nil || !strings.Contains(out, `"compute-3"`) || !strings.Contains(out, "not a compute node") {
		t.Fatalf("compute node 3 of a meta of 2: %v, said %s; want it refused naming compute-3", err, out)
	}

	for _, cmd := range []*exec.Cmd{meta, computes[1], computes[2]} {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%v after SIGTERM: %v", cmd.Args, err)
		}
	}
}

// computeCluster is a meta store, a bucket and a coordinator's address for weir
// meta and weir compute processes of one test, in a directory of its own.
type computeCluster struct {
	dsn, bucket, coordinator, dir string
}

func newComputeCluster(t *testing.T, name string) *computeCluster {
	t.Helper()
	pg := startPostgres(t)
	port, err := freeFixedPort()
	if err != nil {
		t.Fatal(err)
	}
	return &computeCluster{dsn: pg.NewDatabase(t, strings.ReplaceAll(name, "-", "_")), bucket: clusterBucket(t, name), coordinator: "127.0.0.1:" + port, dir: t.TempDir()}
}

// compute starts weir compute of node with role and waits until it registered.
func (cc *computeCluster) compute(t *testing.T, node int, role string) *exec.Cmd {
	t.Helper()
	cmd, addr, ok := startWeirSaying(t, fmt.Sprintf("computing node %d at ", node), "compute", "--node", strconv.Itoa(node), "--role", role,
		"--dir", filepath.Join(cc.dir, fmt.Sprint("compute-", node)), "--meta", cc.dsn, "--bucket", cc.bucket, "--coordinator", cc.coordinator)
	if !ok {
		t.Fatalf("compute node %d did not start: %s", node, addr)
	}
	return cmd
}

// meta starts weir meta with args, its engine open, and returns a client of it
// with a table kv holding keys 0 to rows (k mod 5 their g), committed.
func (cc *computeCluster) meta(t *testing.T, ctx context.Context, rows int, args ...string) (*exec.Cmd, *remote.Client) {
	t.Helper()
	cmd, addr, ok := startWeir(t, append([]string{"meta", "--dir", filepath.Join(cc.dir, "meta"), "--addr", "127.0.0.1:0",
		"--control-addr", cc.coordinator, "--meta", cc.dsn, "--bucket", cc.bucket}, args...)...)
	if !ok {
		t.Fatalf("weir meta did not start: %s", addr)
	}
	c, err := remote.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.CreateTable(ctx, kvTable, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := insertKV(ctx, c, 0, rows, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	return cmd, c
}

// runWeirProcess runs weir args in a child process to its end and returns what it printed.
func runWeirProcess(t testing.TB, args ...string) (string, error) {
	t.Helper()
	a, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(a))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A view on a dedicated backfill node across processes: weir meta gives compute
// node 2 the role backfill (--node-roles ,backfill), and compute 2 registers with
// it. A view created with MVOptions.BackfillOn "backfill" backfills there, then
// moves onto the regular node in one Update barrier, and equals its table.
func TestComputeBackfillRole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cc := newComputeCluster(t, "compute-role")
	cc.compute(t, 1, "")
	cc.compute(t, 2, "backfill")
	_, c := cc.meta(t, ctx, 20_000, "--compute", "2", "--node-roles", ",backfill")
	// The meta's own node (role "meta") runs only the DML inputs: no view backfills
	// on it, and it has no store of its own that every commit would be applied to.
	if err := c.CreateMV(ctx, "on_meta", engine.Scan("kv"), engine.MVOptions{BackfillOn: "meta"}); err == nil || !strings.Contains(err.Error(), `backfill on role "meta": no node has it`) {
		t.Fatalf("a view backfilled on the meta's node: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cc.dir, "meta", storage.NodeStoresDirName, "node-0")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the meta's node has a store of its own: %v", err)
	}
	limit := int64(5000)
	if err := c.CreateMV(ctx, "copy", engine.Scan("kv"), engine.MVOptions{Parallelism: 2, Background: true, RateLimit: &limit, BackfillOn: "backfill"}); err != nil {
		t.Fatal(err)
	}
	seenOn := false
	for {
		ps, err := c.Progress(ctx)
		if err != nil || len(ps) != 1 {
			t.Fatalf("progress: %v %v", ps, err)
		}
		seenOn = seenOn || ps[0].BackfillOn == "backfill"
		if ps[0].Done {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !seenOn {
		t.Fatal("the view's backfill was never seen on the backfill node")
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil { // moves the job off the backfill node
		t.Fatal(err)
	}
	ps, err := c.Progress(ctx)
	if err != nil || len(ps) != 1 || ps[0].BackfillOn != "" {
		t.Fatalf("after the backfill the view runs on %q, want the regular nodes (%v)", ps[0].BackfillOn, err)
	}
	if err := insertKV(ctx, c, 20_000, 21_000, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if kv, cp := scanTwo(t, ctx, c, "kv"), scanTwo(t, ctx, c, "copy"); len(kv) != 21_000 || !slices.Equal(kv, cp) {
		t.Fatalf("copy holds %d rows, kv %d (want 21000)", len(cp), len(kv))
	}
}
