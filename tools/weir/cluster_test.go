package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/seed04fbb902/weir/storage"
)

// weir cluster up starts PostgreSQL, a leader and a replica that serve a client;
// weir cluster down stops exactly those processes and the server, by pid and by
// directory; a second up in the same directory is refused.
func TestClusterUpDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "cluster")
	run := runRoot
	out, err := run("cluster", "up", "--dir", dir, "--replicas", "1", "--exchange", "flight", "--control", "grpc", "--node-stores", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st clusterState
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	down := func() {
		t.Helper()
		if out, err := run("cluster", "down", "--dir", dir); err != nil {
			t.Fatalf("cluster down: %v\n%s", err, out)
		} else {
			t.Logf("cluster down:\n%s", out)
		}
	}
	stopped := false
	defer func() {
		if !stopped {
			down()
		}
	}()
	if len(st.Processes) != 2 || st.Postgres == nil {
		t.Fatalf("cluster state %+v", st)
	}
	if _, err := run("cluster", "up", "--dir", dir); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("a second cluster up in %s: %v", dir, err)
	}
	leader, err := remote.Dial(ctx, st.Processes[0].Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	replica, err := remote.Dial(ctx, st.Processes[1].Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	if err := leader.CreateTable(ctx, kvTable, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := insertKV(ctx, leader, 0, 100, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := replica.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if got := scanTwo(t, ctx, replica, "kv"); len(got) != 100 {
		t.Fatalf("the replica has %d rows, want 100", len(got))
	}
	// The leader's nodes have stores of their own (--node-stores).
	if _, err := os.Stat(filepath.Join(st.Processes[0].Dir, storage.NodeStoresDirName, "node-0", "LOCK")); err != nil {
		t.Fatalf("the leader has no store of node 0: %v", err)
	}

	down()
	stopped = true
	for _, p := range st.Processes {
		if running(p.PID) {
			t.Fatalf("%s (pid %d) still runs after cluster down", p.Role, p.PID)
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if conn, err := pgx.Connect(cctx, st.Meta); err == nil {
		conn.Close(ctx)
		t.Fatalf("PostgreSQL at %s still answers after cluster down", st.Meta)
	}
	if _, err := run("cluster", "down", "--dir", dir); err == nil {
		t.Fatal("a second cluster down succeeded")
	}
}

// weir cluster up --nodes 2 starts two compute processes under a weir meta leader:
// a view's actors run in them, a client of the leader reads what they committed,
// and cluster down stops the leader before the compute processes, then PostgreSQL.
func TestClusterUpNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "cluster")
	run := runRoot
	if _, err := run("cluster", "up", "--dir", dir, "--nodes", "2", "--exchange", "flight"); err == nil || !strings.Contains(err.Error(), "drop --exchange") {
		t.Fatalf("cluster up --nodes with --exchange: %v", err)
	}
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "left-over"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run("cluster", "up", "--dir", dir, "--nodes", "2", "--bucket", "file://"+full); err == nil || !strings.Contains(err.Error(), "is not empty (it holds left-over)") {
		t.Fatalf("cluster up on a bucket that holds an object: %v", err)
	}
	out, err := run("cluster", "up", "--dir", dir, "--nodes", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st clusterState
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = run("cluster", "down", "--dir", dir)
		}
	}()
	var roles []string
	for _, p := range st.Processes {
		roles = append(roles, p.Role)
	}
	if strings.Join(roles, ",") != "compute-1,compute-2,leader" {
		t.Fatalf("cluster up --nodes 2 started %v", roles)
	}
	c, err := remote.Dial(ctx, st.Processes[2].Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTable(ctx, kvTable, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateMV(ctx, "by_g", byG, engine.MVOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := insertKV(ctx, c, 0, 300, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(scanTwo(t, ctx, c, "by_g"), ","); got != "g0 100,g1 100,g2 100" {
		t.Fatalf("by_g holds %s", got)
	}
	// weir status and weir export read the cluster through its meta's address.
	status, err := run("status", "--meta", st.Processes[2].Addr)
	if err != nil || !strings.Contains(status, "by_g") {
		t.Fatalf("status --meta: %v\n%s", err, status)
	}
	csv, err := run("export", "--meta", st.Processes[2].Addr, "--table", "by_g")
	if err != nil {
		t.Fatalf("export --meta: %v\n%s", err, csv)
	}
	if lines := strings.Split(strings.TrimSpace(csv), "\n"); len(lines) != 4 || !slices.Contains(lines, "g1,100") {
		t.Fatalf("export --meta of by_g:\n%s", csv)
	}
	// Each compute node keeps its store in its own directory.
	for _, p := range st.Processes[:2] {
		if _, err := os.Stat(filepath.Join(p.Dir, "LOCK")); err != nil {
			t.Fatalf("%s has no store: %v", p.Role, err)
		}
	}
	if out, err := run("cluster", "down", "--dir", dir); err != nil {
		t.Fatalf("cluster down: %v\n%s", err, out)
	} else if !strings.Contains(out, "stopped leader") || strings.Index(out, "stopped leader") > strings.Index(out, "stopped compute-1") {
		t.Fatalf("cluster down did not stop the leader before the compute processes:\n%s", out)
	}
	stopped = true
	for _, p := range st.Processes {
		if running(p.PID) {
			t.Fatalf("%s (pid %d) still runs after cluster down", p.Role, p.PID)
		}
	}
}

// runRoot runs weir args in this process and returns what it printed on stdout.
func runRoot(args ...string) (string, error) {
	root := newRoot()
	var out, errw bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errw)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}
