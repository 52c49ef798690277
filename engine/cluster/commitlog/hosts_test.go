package commitlog_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/engine/cluster/control"
	"github.com/seed04fbb902/weir/engine/cluster/exchange"
)

// host is a compute node's side as a compute process runs it: an engine.Host over a
// store of its own, serving its control stream.
type host struct {
	h    *engine.Host
	n    atomic.Pointer[control.Node]
	done chan error // Serve's end
}

// startHost opens node's host in dir and connects it to ctl's coordinator as
// incarnation inc; the test's end stops it (unless stop did).
func startHost(t *testing.T, c *cluster, ctl *control.Local, ex engine.Exchange, node int, dir string, inc uint64) *host {
	t.Helper()
	hs := &host{done: make(chan error, 1)}
	h, err := engine.OpenHost(engine.HostConfig{
		Node: node, Dir: dir, Options: engine.Options{Exchange: ex, CacheSize: 8 << 20, MemTableSize: 1 << 20},
		Server: commitlog.NewNodeServer(c.config(uint64(node + 1))),
		Report: func(ctx context.Context, gen uint64, r engine.ControlReport) error {
			n := hs.n.Load()
			if n == nil {
				return errors.New("no stream yet")
			}
			return n.Report(ctx, gen, r)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs.h = h
	n, err := control.Connect(context.Background(), ctl.Addr(), control.Hello{Stamp: control.Stamp{Incarnation: inc}, Node: control.ComputeName(node)})
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	hs.n.Store(n)
	go func() { hs.done <- control.Serve(context.Background(), n, h) }()
	t.Cleanup(hs.stop)
	return hs
}

// stop ends the host's stream and closes it, as a process that dies does.
func (hs *host) stop() {
	n := hs.n.Swap(nil)
	if n == nil {
		return
	}
	n.Close()
	<-hs.done
	hs.h.Close()
}

// Two of an engine's three nodes are hosts, as compute processes run them: every
// table's and view's actors run there, their edges cross the exchange, their
// builds, barriers, reports and checkpoint parts travel over the hosts' own control
// streams, and their stores are caught up from the log. A host that goes away and
// comes back on its directory (a new incarnation) takes up its actors again after
// the engine's recovery, and every view still equals its query.
func TestRemoteHosts(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	l := c.open(t, 1)
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	mesh, err := exchange.NewMesh(3, 0, mem)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mesh.Close() })
	ctl, err := control.NewCluster(control.ClusterConfig{Remote: []int{1, 2}, Wait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	dir := t.TempDir()
	hosts := []*host{nil,
		startHost(t, c, ctl, mesh, 1, filepath.Join(dir, "node-1"), 1),
		startHost(t, c, ctl, mesh, 2, filepath.Join(dir, "node-2"), 1)}
	e, err := engine.Open(ctx, filepath.Join(dir, "meta"), engine.Options{
		BarrierInterval: -1, Nodes: 3, NodeRoles: []string{"meta"}, RemoteNodes: []int{1, 2},
		NodeStores: true, CommitLog: l, Control: ctl, Exchange: mesh, Mem: mem,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.CreateTable(ctx, kv, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	var rows [][]any
	for k := range 200 {
		rows = append(rows, []any{k, fmt.Sprint("g", k%7), k})
	}
	write(t, e, e.Insert, rows...)
	checkpoint(t, e)
	agg := engine.Aggregate(engine.Scan("kv"), []string{"v"}, engine.Agg("count_star", "", "c"))
	if err := e.CreateMV(ctx, "by_v", agg, engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "copy", engine.Scan("kv"), engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	checkpoint(t, e)
	check := func(when string, want int) {
		t.Helper()
		got := scan(t, e, "kv")
		if len(got) != want {
			t.Fatalf("%s: kv holds %d rows, want %d", when, len(got), want)
		}
		if view := scan(t, e, "copy"); !slices.Equal(view, got) {
			t.Fatalf("%s: copy holds %d rows, kv %d", when, len(view), len(got))
		}
		if groups := scan(t, e, "by_v"); len(groups) != 7 {
			t.Fatalf("%s: by_v holds %d groups, want 7: %v", when, len(groups), groups)
		}
	}
	check("after the views' backfill", 200)
	for i := 1; i <= 2; i++ {
		if hosts[i].h.Running() == 0 {
			t.Fatalf("host of node %d runs no actor", i)
		}
	}

	// Node 2's process dies and comes back on its directory.
	hosts[2].stop()
	hosts[2] = startHost(t, c, ctl, mesh, 2, filepath.Join(dir, "node-2"), 2)
	var more [][]any
	for k := 200; k < 300; k++ {
		more = append(more, []any{k, fmt.Sprint("g", k%7), k})
	}
	deadline := time.Now().Add(time.Minute)
	for {
		// The first round after the loss fails and recovers, losing the writes
		// since the last checkpoint: write them again.
		var err error
		write(t, e, func(ctx context.Context, name string, rec arrow.RecordBatch) error {
			err = e.Insert(ctx, name, rec)
			return nil
		}, more...)
		if err == nil {
			if _, err = e.WaitCheckpoint(ctx); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint within a minute of node 2's return: %v", err)
		}
		t.Logf("while node 2 comes back: %v", err)
	}
	check("after node 2 came back", 300)
	if ctl.Lost() == 0 {
		t.Fatal("no control stream was lost")
	}
	if hosts[2].h.Running() == 0 {
		t.Fatal("the host of node 2 runs no actor after it came back")
	}
}

// A host takes each message with its graph's generation: a newer one tears the
// older graph down, an older one is refused, and so is one of a generation torn
// down by a Teardown; a new leader's term starts the generations anew.
func TestHostGenerations(t *testing.T) {
	c := newCluster(t)
	mesh, err := exchange.NewMesh(2, 0, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mesh.Close() })
	h, err := engine.OpenHost(engine.HostConfig{
		Node: 1, Dir: t.TempDir(), Options: engine.Options{Exchange: mesh, CacheSize: 1 << 20, MemTableSize: 1 << 20},
		Server: commitlog.NewNodeServer(c.config(2)),
		Report: func(context.Context, uint64, engine.ControlReport) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx := testContext(t)
	if err := h.Build(ctx, 5, nil); err == nil {
		t.Fatal("an empty build spec was built")
	}
	if h.Generation() != 5 {
		t.Fatalf("generation %d after a build of generation 5", h.Generation())
	}
	if err := h.Build(ctx, 4, nil); err == nil || !strings.Contains(err.Error(), "generation 4: the node is at generation 5") {
		t.Fatalf("build of generation 4 at 5: %v", err)
	}
	h.Teardown(6)
	for _, gen := range []uint64{5, 6} {
		if _, err := h.Call(ctx, gen, nil); err == nil || !strings.Contains(err.Error(), "torn down") && !strings.Contains(err.Error(), "the node is at generation 6") {
			t.Fatalf("call of generation %d after the teardown of 6: %v", gen, err)
		}
	}
	// A recovery's request of a newer generation is served.
	if _, err := h.Call(ctx, 7, nil); err == nil || strings.Contains(err.Error(), "generation") {
		t.Fatalf("call of generation 7 with an empty request: %v, want the node server's refusal of the request", err)
	}
	if h.Generation() != 7 {
		t.Fatalf("generation %d after a call of generation 7", h.Generation())
	}
	// A new leader's generations start anew: after its term, generation 3 is taken.
	h.NewTerm(2)
	if err := h.Build(ctx, 3, nil); err == nil || strings.Contains(err.Error(), "generation") {
		t.Fatalf("build of generation 3 in a new term: %v, want the spec's refusal, not the generation's", err)
	}
	if h.Term() != 2 || h.Generation() != 3 {
		t.Fatalf("term %d generation %d, want 2 and 3", h.Term(), h.Generation())
	}
}

// A host that goes away and does not come back in time is down in the recovery's
// graph: its actors run on the live hosts (whose stores hold every vnode's committed
// state), and every view stays equal to its query. When it comes back, the round
// fails, and the recovery that follows places actors on it again.
func TestRemoteHostDown(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	l := c.open(t, 1)
	mesh, err := exchange.NewMesh(4, 0, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mesh.Close() })
	ctl, err := control.NewCluster(control.ClusterConfig{Remote: []int{1, 2, 3}, Wait: 30 * time.Second, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	dir := t.TempDir()
	hostDir := func(i int) string { return filepath.Join(dir, fmt.Sprint("node-", i)) }
	hosts := []*host{nil}
	for i := 1; i <= 3; i++ {
		hosts = append(hosts, startHost(t, c, ctl, mesh, i, hostDir(i), 1))
	}
	e, err := engine.Open(ctx, filepath.Join(dir, "meta"), engine.Options{
		BarrierInterval: 20 * time.Millisecond, Nodes: 4, NodeRoles: []string{"meta"}, RemoteNodes: []int{1, 2, 3},
		NodeStores: true, CommitLog: l, Control: ctl, Exchange: mesh,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.CreateTable(ctx, kv, engine.TableOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "copy", engine.Scan("kv"), engine.MVOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	// written writes keys from..to until a checkpoint covers them.
	written := func(from, to int) {
		t.Helper()
		var rows [][]any
		for k := from; k < to; k++ {
			rows = append(rows, []any{k, fmt.Sprint("g", k%7), k})
		}
		deadline := time.Now().Add(time.Minute)
		for {
			var err error
			write(t, e, func(ctx context.Context, name string, rec arrow.RecordBatch) error {
				err = e.Insert(ctx, name, rec)
				return nil
			}, rows...)
			if err == nil {
				if _, err = e.WaitCheckpoint(ctx); err == nil {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("keys %d to %d: no checkpoint within a minute: %v", from, to, err)
			}
		}
	}
	check := func(when string, want int) {
		t.Helper()
		got := scan(t, e, "kv")
		if len(got) != want {
			t.Fatalf("%s: kv holds %d rows, want %d", when, len(got), want)
		}
		if view := scan(t, e, "copy"); !slices.Equal(view, got) {
			t.Fatalf("%s: copy holds %d rows, kv %d", when, len(view), len(got))
		}
	}
	written(0, 100)
	check("with every host", 100)

	hosts[2].stop()
	written(100, 200)
	check("with node 2 down", 200)
	// Every actor runs on nodes 1 and 3: between them, the table's and the view's.
	if n := hosts[1].h.Running() + hosts[3].h.Running(); n < 6 {
		t.Fatalf("the live hosts run %d actors, want at least the table's 3 and the view's 3", n)
	}

	hosts[2] = startHost(t, c, ctl, mesh, 2, hostDir(2), 2)
	deadline := time.Now().Add(time.Minute)
	for hosts[2].h.Running() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("node 2 came back and runs no actor after a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	written(200, 300)
	check("after node 2 came back", 300)
}

// Writes that returned nil survive the loss of a host before the checkpoint that
// would have committed them: the recovery sends them again into the new graph, and
// the next checkpoint commits them, with nothing written twice or lost.
func TestRemoteHostLossKeepsWrites(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	l := c.open(t, 1)
	mesh, err := exchange.NewMesh(3, 0, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mesh.Close() })
	ctl, err := control.NewCluster(control.ClusterConfig{Remote: []int{1, 2}, Wait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	dir := t.TempDir()
	hosts := []*host{nil, startHost(t, c, ctl, mesh, 1, filepath.Join(dir, "node-1"), 1), startHost(t, c, ctl, mesh, 2, filepath.Join(dir, "node-2"), 1)}
	e, err := engine.Open(ctx, filepath.Join(dir, "meta"), engine.Options{
		BarrierInterval: -1, Nodes: 3, NodeRoles: []string{"meta"}, RemoteNodes: []int{1, 2},
		NodeStores: true, CommitLog: l, Control: ctl, Exchange: mesh,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.CreateTable(ctx, kv, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "copy", engine.Scan("kv"), engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	rows := func(from, to int) [][]any {
		var out [][]any
		for k := from; k < to; k++ {
			out = append(out, []any{k, fmt.Sprint("g", k%7), k})
		}
		return out
	}
	write(t, e, e.Insert, rows(0, 100)...)
	checkpoint(t, e)
	write(t, e, e.Insert, rows(100, 150)...)
	write(t, e, e.Delete, rows(0, 10)...)
	hosts[2].stop()
	hosts[2] = startHost(t, c, ctl, mesh, 2, filepath.Join(dir, "node-2"), 2)
	if _, err := e.WaitCheckpoint(ctx); err == nil {
		t.Fatal("a checkpoint over a lost host committed")
	}
	checkpoint(t, e)
	got := scan(t, e, "kv")
	if len(got) != 140 {
		t.Fatalf("kv holds %d rows after the recovery, want 140 (100 committed, 50 inserted and 10 deleted before the loss)", len(got))
	}
	if view := scan(t, e, "copy"); !slices.Equal(view, got) {
		t.Fatalf("copy holds %d rows, kv %d", len(view), len(got))
	}
	if e.ResentWrites() != 60 || e.LostWrites() != 0 {
		t.Fatalf("%d rows of writes sent again and %d lost, want 60 and 0", e.ResentWrites(), e.LostWrites())
	}
}
