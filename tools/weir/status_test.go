package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
	"github.com/spf13/cobra"
)

// testRows rows are inserted into table t: k = i, v = 10*i, s = "s<i>" (null when i
// is a multiple of 7). View mv is k, v2 = 2*v, s where v > 100.
const testRows = 100

func testTable() *schema.Table {
	return &schema.Table{
		Name: "t",
		Columns: []schema.Column{
			{Name: "k", Type: schema.Type{Kind: schema.Int64}},
			{Name: "v", Type: schema.Type{Kind: schema.Int64}},
			{Name: "s", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
		},
		PK:         []schema.KeyColumn{{Column: 0}},
		VnodeCount: 16,
	}
}

func testS(i int64) (string, bool) {
	if i%7 == 0 {
		return "", false
	}
	return fmt.Sprintf("s%d", i), true
}

// makeEngineDir builds an engine directory with table t and view mv (backfilled).
func makeEngineDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	e, err := engine.Open(ctx, dir, engine.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tab := testTable()
	if err := e.CreateTable(ctx, tab, engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	mem := memory.DefaultAllocator
	kb, vb, sb := array.NewInt64Builder(mem), array.NewInt64Builder(mem), array.NewStringBuilder(mem)
	defer kb.Release()
	defer vb.Release()
	defer sb.Release()
	for i := range int64(testRows) {
		kb.Append(i)
		vb.Append(10 * i)
		if s, ok := testS(i); ok {
			sb.Append(s)
		} else {
			sb.AppendNull()
		}
	}
	cols := []arrow.Array{kb.NewArray(), vb.NewArray(), sb.NewArray()}
	rec := array.NewRecordBatch(tab.ArrowSchema(), cols, testRows)
	for _, c := range cols {
		c.Release()
	}
	defer rec.Release()
	if err := e.Insert(ctx, "t", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	plan := engine.Project(engine.Filter(engine.Scan("t"), engine.Call("greater", engine.Column("v"), engine.Int(100))),
		engine.As(engine.Call("multiply", engine.Column("v"), engine.Int(2)), "v2"), engine.As(engine.Column("s"), "s"))
	if err := e.CreateMV(ctx, "mv", plan, engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runWeir runs a root command holding status and export.
func runWeir(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	root := &cobra.Command{Use: "weir", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newStatus(), newExport())
	var o, e bytes.Buffer
	root.SetOut(&o)
	root.SetErr(&e)
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	return o.String(), e.String(), err
}

func TestStatus(t *testing.T) {
	dir := makeEngineDir(t)
	ctx := context.Background()

	out, _, err := runWeir(ctx, "status", "--dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("plain status: %d lines:\n%s", len(lines), out)
	}
	for _, want := range []string{"view", "upstreams", "backfill", "percent"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header %q lacks %q", lines[0], want)
		}
	}
	f := strings.Fields(lines[1])
	if f[0] != "mv" || f[1] != "t" || f[2] != "arrangement" || f[3] != "2" || f[4] != "unlimited" || f[len(f)-1] != "yes" || f[len(f)-2] != "100.0%" {
		t.Errorf("plain status row %q", lines[1])
	}
	if !strings.Contains(lines[1], fmt.Sprintf("/%d", testRows)) || !strings.Contains(lines[1], "16/16") {
		t.Errorf("plain status row %q: want upstream rows %d and vnodes 16/16", lines[1], testRows)
	}
	if f[len(f)-3] != "0,1" {
		t.Errorf("plain status row %q: want the view on nodes 0,1", lines[1])
	}

	out, _, err = runWeir(ctx, "status", "--dir", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(r.Jobs) != 1 || len(r.Vnodes) != 0 {
		t.Fatalf("json status %+v", r)
	}
	j := r.Jobs[0]
	if j.Name != "mv" || len(j.Upstreams) != 1 || j.Upstreams[0] != "t" || j.Backfill != "arrangement" || j.Parallelism != 2 ||
		j.RateLimit != nil || !j.Paused || !j.Done || j.Percent != 100 || j.UpstreamRows != testRows ||
		j.RowsConsumed != testRows || j.VnodesCompleted != 16 || j.VnodesTotal != 16 {
		t.Errorf("json job %+v", j)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil || raw["jobs"] == nil || raw["vnodes"] == nil {
		t.Errorf("json keys of %s: %v", out, err)
	}

	out, _, err = runWeir(ctx, "status", "--dir", dir, "--json", "--per-vnode")
	if err != nil {
		t.Fatal(err)
	}
	r = statusReport{}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	vs := r.Vnodes["mv"]
	if len(vs) != 16 {
		t.Fatalf("per-vnode: %d vnodes of mv: %s", len(vs), out)
	}
	var rows int64
	for i, v := range vs {
		rows += v.Rows
		if v.Vnode != uint16(i) || v.Upstream != "t" || v.Scan != 0 || v.State != "Completed" || v.Actor == 0 {
			t.Errorf("vnode %d: %+v", i, v)
		}
	}
	if rows != testRows {
		t.Errorf("per-vnode rows sum to %d, want %d", rows, testRows)
	}

	out, _, err = runWeir(ctx, "status", "--dir", dir, "--per-vnode")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "mv: per upstream vnode") || strings.Count(out, "Completed") != 16 {
		t.Errorf("plain per-vnode status:\n%s", out)
	}

	// Opening for status does not create or change the catalog: a second run agrees.
	out2, _, err := runWeir(ctx, "status", "--dir", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	r2 := statusReport{}
	if err := json.Unmarshal([]byte(out2), &r2); err != nil || len(r2.Jobs) != 1 || fmt.Sprint(r2.Jobs[0]) != fmt.Sprint(j) {
		t.Errorf("second status %+v (%v), want %+v", r2, err, j)
	}
}

func TestStatusEmptyEngine(t *testing.T) {
	dir := t.TempDir()
	e, err := engine.Open(context.Background(), dir, engine.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	out, _, err := runWeir(context.Background(), "status", "--dir", dir)
	if err != nil || !strings.Contains(out, "no materialized views") {
		t.Errorf("status of an empty engine: %q, %v", out, err)
	}
	out, _, err = runWeir(context.Background(), "status", "--dir", dir, "--json")
	if err != nil || strings.TrimSpace(out) != `{"jobs":[],"vnodes":{}}` {
		t.Errorf("json status of an empty engine: %q, %v", out, err)
	}
}

func TestStatusBadDir(t *testing.T) {
	ctx := context.Background()
	missing := filepath.Join(t.TempDir(), "nope")
	_, _, err := runWeir(ctx, "status", "--dir", missing)
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing dir: %v", err)
	}
	if _, serr := os.Stat(missing); !os.IsNotExist(serr) {
		t.Errorf("status created %s", missing)
	}

	empty := t.TempDir()
	_, _, err = runWeir(ctx, "status", "--dir", empty)
	if err == nil || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "does not hold a weir engine") {
		t.Errorf("empty dir: %v", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("status wrote into %s: %v", empty, ents)
	}

	notDir := filepath.Join(empty, "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = runWeir(ctx, "status", "--dir", notDir)
	if err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("file as dir: %v", err)
	}

	_, _, err = runWeir(ctx, "status")
	if err == nil || !strings.Contains(err.Error(), "one of --dir, --addr and --meta is required") {
		t.Errorf("no --dir: %v", err)
	}
	_, _, err = runWeir(ctx, "status", "--dir", empty, "--addr", "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "one of --dir, --addr and --meta is required") {
		t.Errorf("--dir and --addr: %v", err)
	}
	_, _, err = runWeir(ctx, "status", "--meta", "host=127.0.0.1 dbname=weir")
	if err == nil || !strings.Contains(err.Error(), "looks like a PostgreSQL DSN") {
		t.Errorf("--meta with a DSN: %v", err)
	}
	_, _, err = runWeir(ctx, "status", "--dir", empty, "--watch", "--interval", "0s")
	if err == nil || !strings.Contains(err.Error(), "--interval") {
		t.Errorf("--interval 0: %v", err)
	}
}

func TestStatusInUse(t *testing.T) {
	dir := makeEngineDir(t)
	ctx := context.Background()
	e, err := engine.Open(ctx, dir, engine.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = runWeir(ctx, "status", "--dir", dir)
	want := "engine directory " + dir + " is in use by another engine (locked: "
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("status of an open engine: %v, want %q", err, want)
	}
	out := filepath.Join(t.TempDir(), "t.csv")
	_, _, err = runWeir(ctx, "export", "--dir", dir, "--table", "t", "--out", out)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("export of an open engine: %v, want %q", err, want)
	}
	if _, serr := os.Stat(out); !os.IsNotExist(serr) {
		t.Errorf("export created %s", out)
	}

	// --watch reports it each round and goes on.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	got, _, err := runWeir(wctx, "status", "--dir", dir, "--watch", "--interval", "50ms")
	if err != nil || strings.Count(got, "is in use by another engine") < 2 {
		t.Errorf("watch of an open engine: %v\n%s", err, got)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStatusWatch(t *testing.T) {
	dir := makeEngineDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	out, _, err := runWeir(ctx, "status", "--dir", dir, "--watch", "--interval", "100ms", "--json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		t.Fatalf("watch printed %d reports:\n%s", len(lines), out)
	}
	for _, l := range lines {
		var r statusReport
		if err := json.Unmarshal([]byte(l), &r); err != nil || len(r.Jobs) != 1 || !r.Jobs[0].Done {
			t.Errorf("watch report %s: %v", l, err)
		}
	}
}

// TestStatusHelperHold is the child process of TestStatusInUseOtherProcess: it holds
// the engine in $WEIR_STATUS_HOLD open until its stdin closes.
func TestStatusHelperHold(t *testing.T) {
	dir := os.Getenv("WEIR_STATUS_HOLD")
	if dir == "" {
		t.Skip("the child process of TestStatusInUseOtherProcess")
	}
	e, err := engine.Open(context.Background(), dir, engine.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStatusInUseOtherProcess(t *testing.T) {
	dir := makeEngineDir(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestStatusHelperHold$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WEIR_STATUS_HOLD="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v", err)
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	_, _, err = runWeir(context.Background(), "status", "--dir", dir)
	want := "engine directory " + dir + " is in use by another engine (locked: "
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("status of an engine another process holds: %v, want %q", err, want)
	}
	t.Logf("status of an engine another process holds: %v", err)
}
