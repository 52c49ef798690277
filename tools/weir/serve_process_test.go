package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/seed04fbb902/weir/internal/s3test"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// childEnv makes a re-executed test binary run weir with the JSON list of arguments
// it holds.
const childEnv = "WEIR_TOOLS_CHILD"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		root := newRoot()
		root.SetArgs(a)
		if err := root.Execute(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	// weir cluster up starts its servers as this binary re-executed, their arguments
	// also on the command line (after --), where cluster down looks for them.
	weirCommand = func(args ...string) (*exec.Cmd, error) {
		a, err := json.Marshal(args)
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
		cmd.Env = append(os.Environ(), childEnv+"="+string(a))
		return cmd, nil
	}
	os.Exit(m.Run())
}

// startWeir runs weir args in a child process and returns it once it printed
// "serving ADDR", with that address; ok false when it exited first, and addr is then
// its stderr.
func startWeir(t testing.TB, args ...string) (cmd *exec.Cmd, addr string, ok bool) {
	t.Helper()
	return startWeirSaying(t, "serving ", args...)
}

// startWeirSaying is startWeir for a first line that starts with prefix (such as
// "serving " or "computing node 1 at "), whose rest is the address.
func startWeirSaying(t testing.TB, prefix string, args ...string) (cmd *exec.Cmd, addr string, ok bool) {
	t.Helper()
	a, _ := json.Marshal(args)
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(a))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill() // this test's child, by pid
			_ = cmd.Wait()
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Wait()
		return cmd, stderr.String(), false
	}
	addr, found := strings.CutPrefix(strings.TrimSpace(line), prefix)
	if !found {
		t.Fatalf("weir %v said %q", args, line)
	}
	return cmd, addr, true
}

// kvTable is the served engines' table: k int64 (the pk), g varchar.
var kvTable = &schema.Table{Name: "kv", Columns: []schema.Column{
	{Name: "k", Type: schema.Type{Kind: schema.Int64}},
	{Name: "g", Type: schema.Type{Kind: schema.Varchar}},
}, PK: []schema.KeyColumn{{Column: 0}}}

// byG is the served engines' view: the rows of kv per g.
var byG = engine.Aggregate(engine.Scan("kv"), []string{"g"}, engine.Agg("count_star", "", "n"))

// insertKV inserts keys from up to to into kv through db, k's g being k mod groups.
func insertKV(ctx context.Context, db engine.DB, from, to, groups int) error {
	b := vec.NewChunkBuilder(memory.DefaultAllocator, kvTable)
	defer b.Release()
	for k := from; k < to; k++ {
		if err := b.AppendRow(vec.Insert, k, fmt.Sprint("g", k%groups)); err != nil {
			return err
		}
	}
	ch, err := b.Build()
	if err != nil {
		return err
	}
	defer ch.Release()
	return db.Insert(ctx, "kv", ch.Record())
}

// scanTwo is every row of name (kv or by_g) through db as "col0 col1", sorted.
func scanTwo(t testing.TB, ctx context.Context, db engine.DB, name string) []string {
	t.Helper()
	r, err := db.Scan(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var out []string
	for r.Next() {
		rec := r.RecordBatch()
		for i := range int(rec.NumRows()) {
			out = append(out, rec.Column(0).ValueStr(i)+" "+rec.Column(1).ValueStr(i))
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// clusterBucket is a new bucket for one test: on a private versitygw under make
// test-s3, else file:// in a temporary directory.
func clusterBucket(t testing.TB, prefix string) string {
	t.Helper()
	s3, err := s3test.FromEnv("weir-" + prefix)
	if err != nil {
		t.Fatal(err)
	}
	if s3 == nil {
		return "file://" + filepath.ToSlash(t.TempDir())
	}
	t.Cleanup(func() {
		if err := s3.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s3test.BucketURL(t, s3, prefix)
}

// weir serve over a commit log, in a process of its own: a client creates a table
// and a view and writes through it; a second server (node 2) on the same meta store is
// refused, naming node 1, the lease's holder. SIGKILLed, node 1 is restarted on an
// EMPTY directory (taking its lease anew), rebuilds its copy from PostgreSQL and the
// bucket, and serves exactly what the last acknowledged checkpoint committed; SIGTERM
// then closes it cleanly.
func TestServeKilledOverCommitLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg := startPostgres(t)
	dsn := pg.NewDatabase(t, "serve")
	bucket := clusterBucket(t, "serve")
	args := func(dir string, node int) []string {
		return []string{"serve", "--dir", dir, "--addr", "127.0.0.1:0", "--meta", dsn, "--bucket", bucket, "--node", fmt.Sprint(node), "--exchange", "flight"}
	}
	cmd, addr, ok := startWeir(t, args(filepath.Join(t.TempDir(), "first"), 1)...)
	if !ok {
		t.Fatalf("the first server did not start: %s", addr)
	}
	if _, stderr, ok := startWeir(t, args(filepath.Join(t.TempDir(), "other"), 2)...); ok || !strings.Contains(stderr, `"node-1"`) {
		t.Fatalf("a second server on the same meta store: started %v, said %s; want it refused naming node-1", ok, stderr)
	} else {
		t.Logf("the second server: %s", strings.TrimSpace(stderr))
	}
	c, err := remote.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTable(ctx, kvTable, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateMV(ctx, "by_g", byG, engine.MVOptions{}); err != nil {
		t.Fatal(err)
	}
	write := func(c *remote.Client, from, to int) {
		t.Helper()
		if err := insertKV(ctx, c, from, to, 4); err != nil {
			t.Fatal(err)
		}
	}
	write(c, 0, 1000)
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	read := func(c *remote.Client) map[string][]string {
		t.Helper()
		return map[string][]string{"kv": scanTwo(t, ctx, c, "kv"), "by_g": scanTwo(t, ctx, c, "by_g")}
	}
	want := read(c)
	if len(want["kv"]) != 1000 || len(want["by_g"]) != 4 {
		t.Fatalf("before the kill: %d rows of kv, %d of by_g", len(want["kv"]), len(want["by_g"]))
	}
	c.Close()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// Node 1 again, on an empty directory: it rebuilds from the log.
	cmd, addr, ok = startWeir(t, args(filepath.Join(t.TempDir(), "second"), 1)...)
	if !ok {
		t.Fatalf("the restarted server did not start: %s", addr)
	}
	c, err = remote.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := read(c); !slices.Equal(got["kv"], want["kv"]) || !slices.Equal(got["by_g"], want["by_g"]) {
		t.Fatalf("after the restart on an empty directory: by_g %v, want %v (%d rows of kv, want %d)", got["by_g"], want["by_g"], len(got["kv"]), len(want["kv"]))
	}
	write(c, 1000, 1200)
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(c); len(got["kv"]) != 1200 {
		t.Fatalf("%d rows of kv after writing 200 more, want 1200", len(got["kv"]))
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the server after SIGTERM: %v", err)
	}
}

// weir serve --replica in a process of its own follows a weir serve's commit log:
// after each of the leader's checkpoints the replica's WaitCheckpoint reaches the
// epoch and its scans equal the leader's; a write to it is refused as read-only;
// with the leader SIGKILLed it goes on serving the committed rows, and once the
// leader is back it follows the new commits.
func TestServeReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg := startPostgres(t)
	dsn := pg.NewDatabase(t, "replica")
	bucket := clusterBucket(t, "replica")
	common := []string{"--addr", "127.0.0.1:0", "--meta", dsn, "--bucket", bucket}
	leaderDir := filepath.Join(t.TempDir(), "leader")
	leaderCmd, leaderAddr, ok := startWeir(t, append([]string{"serve", "--dir", leaderDir}, common...)...)
	if !ok {
		t.Fatalf("leader: %s", leaderAddr)
	}
	_, replicaAddr, ok := startWeir(t, append([]string{"serve", "--replica", "--dir", filepath.Join(t.TempDir(), "replica")}, common...)...)
	if !ok {
		t.Fatalf("replica: %s", replicaAddr)
	}
	leader, err := remote.Dial(ctx, leaderAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	replica, err := remote.Dial(ctx, replicaAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	insert := func(c *remote.Client, from, to int) error { return insertKV(ctx, c, from, to, 5) }
	rows := func(c *remote.Client, name string) []string { t.Helper(); return scanTwo(t, ctx, c, name) }
	follow := func(when string) {
		t.Helper()
		epoch, err := leader.WaitCheckpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := replica.WaitCheckpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got < epoch {
			t.Fatalf("%s: the replica at epoch %d, the leader committed %d", when, got, epoch)
		}
		for _, name := range []string{"kv", "by_g"} {
			if a, b := rows(leader, name), rows(replica, name); !slices.Equal(a, b) {
				t.Fatalf("%s: %s: the replica has %d rows, the leader %d", when, name, len(b), len(a))
			}
		}
	}
	if err := leader.CreateTable(ctx, kvTable, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := insert(leader, 0, 500); err != nil {
		t.Fatal(err)
	}
	if err := leader.CreateMV(ctx, "by_g", byG, engine.MVOptions{}); err != nil {
		t.Fatal(err)
	}
	follow("after the first writes")
	if err := insert(leader, 500, 800); err != nil {
		t.Fatal(err)
	}
	follow("after more writes")
	if err := insert(replica, 900, 901); !errors.Is(err, engine.ErrReadOnly) {
		t.Fatalf("a write to the replica: %v, want ErrReadOnly", err)
	}

	want := rows(replica, "kv")
	leader.Close()
	if err := leaderCmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = leaderCmd.Wait()
	if _, err := replica.WaitCheckpoint(ctx); err != nil {
		t.Fatalf("the replica's catch-up with the leader dead: %v", err)
	}
	if got := rows(replica, "kv"); !slices.Equal(got, want) {
		t.Fatalf("with the leader dead the replica has %d rows, want %d", len(got), len(want))
	}

	_, leaderAddr, ok = startWeir(t, append([]string{"serve", "--dir", leaderDir}, common...)...)
	if !ok {
		t.Fatalf("the leader's restart: %s", leaderAddr)
	}
	if leader, err = remote.Dial(ctx, leaderAddr, nil); err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	if err := insert(leader, 800, 1000); err != nil {
		t.Fatal(err)
	}
	follow("after the leader's restart")
	if got := rows(replica, "kv"); len(got) != 1000 {
		t.Fatalf("the replica has %d rows of kv, want 1000", len(got))
	}
}
