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
	"github.com/seed04fbb902/weir/storage"
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

// remoteEngine is an engine whose nodes 1 to n are hosts, as compute processes run
// them, on a cluster's log: node 0 (role meta) keeps the DML actors.
type remoteEngine struct {
	c     *cluster
	ctl   *control.Local
	mesh  *exchange.Mesh
	dir   string
	hosts []*host // by node; hosts[0] is nil
	e     *engine.Engine
	log   *commitlog.Log // the engine's
}

// newRemoteEngine opens an engine of n hosts over ctl's remote nodes 1 to n
// (cfg.Remote is set here), barriers every interval (negative: on demand), its
// Arrow buffers from mem (nil: the default), with table kv at parallelism p (0: the
// default); the test's end closes everything.
func newRemoteEngine(t *testing.T, n int, cfg control.ClusterConfig, interval time.Duration, mem memory.Allocator, p int) *remoteEngine {
	t.Helper()
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	r := &remoteEngine{c: newCluster(t), dir: t.TempDir(), hosts: []*host{nil}}
	l := r.c.open(t, 1)
	r.log = l
	var err error
	if r.mesh, err = exchange.NewMesh(n+1, 0, mem); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.mesh.Close() })
	remote := make([]int, n)
	for i := range remote {
		remote[i] = i + 1
	}
	cfg.Remote = remote
	if r.ctl, err = control.NewCluster(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.ctl.Close() })
	for i := 1; i <= n; i++ {
		r.hosts = append(r.hosts, r.start(t, i, 1))
	}
	r.e, err = engine.Open(testContext(t), filepath.Join(r.dir, "meta"), engine.Options{
		BarrierInterval: interval, Nodes: n + 1, NodeRoles: []string{"meta"}, RemoteNodes: remote,
		NodeStores: true, CommitLog: l, Control: r.ctl, Exchange: r.mesh, Mem: mem,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.e.Close() })
	if err := r.e.CreateTable(testContext(t), kv, engine.TableOptions{Parallelism: p}); err != nil {
		t.Fatal(err)
	}
	return r
}

// start starts node i's host on its directory as incarnation inc.
func (r *remoteEngine) start(t *testing.T, i int, inc uint64) *host {
	return startHost(t, r.c, r.ctl, r.mesh, i, filepath.Join(r.dir, fmt.Sprint("node-", i)), inc)
}

// restart stops node i's host, as its process dies, and starts it again on its
// directory as incarnation inc.
func (r *remoteEngine) restart(t *testing.T, i int, inc uint64) {
	r.hosts[i].stop()
	r.hosts[i] = r.start(t, i, inc)
}

// kvRows are keys from to to of kv, k's v being g<k mod 7> and its n k.
func kvRows(from, to int) [][]any {
	var out [][]any
	for k := from; k < to; k++ {
		out = append(out, []any{k, fmt.Sprint("g", k%7), k})
	}
	return out
}

// written inserts rows into kv until a checkpoint commits them: a round that a
// node's loss fails is tried again, within a minute (an insert replaces a row whose
// key exists).
func (r *remoteEngine) written(t *testing.T, rows [][]any) {
	t.Helper()
	e := r.e
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		write(t, e, func(ctx context.Context, name string, rec arrow.RecordBatch) error {
			err = e.Insert(ctx, name, rec)
			return nil
		}, rows...)
		if err == nil {
			if _, err = e.WaitCheckpoint(testContext(t)); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows: no checkpoint within a minute: %v", len(rows), err)
		}
		t.Logf("while writing %d rows: %v", len(rows), err)
	}
}

// checkCopy checks that kv holds want rows and view copy equals it.
func (r *remoteEngine) checkCopy(t *testing.T, when string, want int) {
	t.Helper()
	got := scan(t, r.e, "kv")
	if len(got) != want {
		t.Fatalf("%s: kv holds %d rows, want %d", when, len(got), want)
	}
	if view := scan(t, r.e, "copy"); !slices.Equal(view, got) {
		t.Fatalf("%s: copy holds %d rows, kv %d", when, len(view), len(got))
	}
}

// Two of an engine's three nodes are hosts, as compute processes run them: every
// table's and view's actors run there, their edges cross the exchange, their
// builds, barriers, reports and checkpoint parts travel over the hosts' own control
// streams, and their stores are caught up from the log. A host that goes away and
// comes back on its directory (a new incarnation) takes up its actors again after
// the engine's recovery, and every view still equals its query.
func TestRemoteHosts(t *testing.T) {
	ctx := testContext(t)
	r := newRemoteEngine(t, 2, control.ClusterConfig{Wait: 30 * time.Second}, -1, memory.NewCheckedAllocator(memory.DefaultAllocator), 0)
	e := r.e
	write(t, e, e.Insert, kvRows(0, 200)...)
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
		r.checkCopy(t, when, want)
		if groups := scan(t, e, "by_v"); len(groups) != 7 {
			t.Fatalf("%s: by_v holds %d groups, want 7: %v", when, len(groups), groups)
		}
	}
	check("after the views' backfill", 200)
	for i := 1; i <= 2; i++ {
		if r.hosts[i].h.Running() == 0 {
			t.Fatalf("host of node %d runs no actor", i)
		}
	}
	// Each host's store holds the committed state of the vnodes its actors read.
	hostStores := func() map[int]*storage.Store {
		return map[int]*storage.Store{1: r.hosts[1].h.Store(), 2: r.hosts[2].h.Store()}
	}
	if held, all := checkHolds(t, r.log, hostStores(), filepath.Join(t.TempDir(), "whole")); held >= all {
		t.Fatalf("the hosts' stores hold every vnode (%d of %d) of the tables they hold", held, all)
	}

	// Node 2's process dies and comes back on its directory.
	r.restart(t, 2, 2)
	r.written(t, kvRows(200, 300))
	check("after node 2 came back", 300)
	if r.ctl.Lost() == 0 {
		t.Fatal("no control stream was lost")
	}
	if r.hosts[2].h.Running() == 0 {
		t.Fatal("the host of node 2 runs no actor after it came back")
	}
	checkpoint(t, e)
	checkHolds(t, r.log, hostStores(), filepath.Join(t.TempDir(), "whole"))
}

// A host takes each message with its graph's term and generation: a newer
// generation tears the older graph down, an older one is refused, and so is one of a
// generation torn down by a Teardown; a new leader's term starts the generations
// anew, and a message of an older term is refused.
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
	at := func(term, gen uint64) engine.GraphAt { return engine.GraphAt{Term: term, Generation: gen} }
	if err := h.Build(ctx, at(1, 5), nil); err == nil {
		t.Fatal("an empty build spec was built")
	}
	if h.Generation() != 5 {
		t.Fatalf("generation %d after a build of generation 5", h.Generation())
	}
	if err := h.Build(ctx, at(1, 4), nil); err == nil || !strings.Contains(err.Error(), "generation 4: the node is at generation 5") {
		t.Fatalf("build of generation 4 at 5: %v", err)
	}
	h.Teardown(at(1, 6))
	for _, gen := range []uint64{5, 6} {
		if _, err := h.Call(ctx, at(1, gen), nil); err == nil || !strings.Contains(err.Error(), "torn down") && !strings.Contains(err.Error(), "the node is at generation 6") {
			t.Fatalf("call of generation %d after the teardown of 6: %v", gen, err)
		}
	}
	// A recovery's request of a newer generation is served.
	if _, err := h.Call(ctx, at(1, 7), nil); err == nil || strings.Contains(err.Error(), "generation") {
		t.Fatalf("call of generation 7 with an empty request: %v, want the node server's refusal of the request", err)
	}
	if h.Generation() != 7 {
		t.Fatalf("generation %d after a call of generation 7", h.Generation())
	}
	// A new leader's generations start anew: in its term, generation 3 is taken.
	if err := h.Build(ctx, at(2, 3), nil); err == nil || strings.Contains(err.Error(), "generation") {
		t.Fatalf("build of generation 3 in a new term: %v, want the spec's refusal, not the generation's", err)
	}
	if h.Term() != 2 || h.Generation() != 3 {
		t.Fatalf("term %d generation %d, want 2 and 3", h.Term(), h.Generation())
	}
	// A message of the old term still in flight (a call of the deposed leader) is
	// refused, whatever its generation, and changes nothing; so is its teardown.
	if _, err := h.Call(ctx, at(1, 9), nil); err == nil || !strings.Contains(err.Error(), "term 1, generation 9: the node follows term 2") {
		t.Fatalf("call of term 1 generation 9 in term 2: %v", err)
	}
	h.Teardown(at(1, 9))
	if h.Term() != 2 || h.Generation() != 3 {
		t.Fatalf("term %d generation %d after the old term's call and teardown, want 2 and 3", h.Term(), h.Generation())
	}
	if err := h.Build(ctx, at(2, 4), nil); err == nil || strings.Contains(err.Error(), "generation") {
		t.Fatalf("build of generation 4 in term 2 after the old term's messages: %v", err)
	}
}

// A host that goes away and does not come back in time is down in the recovery's
// graph: its actors run on the live hosts (whose stores hold every vnode's committed
// state), and every view stays equal to its query. When it comes back, the round
// fails, and the recovery that follows places actors on it again.
func TestRemoteHostDown(t *testing.T) {
	r := newRemoteEngine(t, 3, control.ClusterConfig{Wait: 30 * time.Second, Grace: 200 * time.Millisecond}, 20*time.Millisecond, nil, 3)
	if err := r.e.CreateMV(testContext(t), "copy", engine.Scan("kv"), engine.MVOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	r.written(t, kvRows(0, 100))
	r.checkCopy(t, "with every host", 100)

	r.hosts[2].stop()
	r.written(t, kvRows(100, 200))
	r.checkCopy(t, "with node 2 down", 200)
	// Every actor runs on nodes 1 and 3: between them, the table's and the view's.
	if n := r.hosts[1].h.Running() + r.hosts[3].h.Running(); n < 6 {
		t.Fatalf("the live hosts run %d actors, want at least the table's 3 and the view's 3", n)
	}

	r.hosts[2] = r.start(t, 2, 2)
	deadline := time.Now().Add(time.Minute)
	for r.hosts[2].h.Running() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("node 2 came back and runs no actor after a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.written(t, kvRows(200, 300))
	r.checkCopy(t, "after node 2 came back", 300)
}

// Writes that returned nil survive the loss of a host before the checkpoint that
// would have committed them: the recovery sends them again into the new graph, and
// the next checkpoint commits them, with nothing written twice or lost.
func TestRemoteHostLossKeepsWrites(t *testing.T) {
	ctx := testContext(t)
	r := newRemoteEngine(t, 2, control.ClusterConfig{Wait: 30 * time.Second}, -1, nil, 0)
	e := r.e
	if err := e.CreateMV(ctx, "copy", engine.Scan("kv"), engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	write(t, e, e.Insert, kvRows(0, 100)...)
	checkpoint(t, e)
	write(t, e, e.Insert, kvRows(100, 150)...)
	write(t, e, e.Delete, kvRows(0, 10)...)
	r.restart(t, 2, 2)
	if _, err := e.WaitCheckpoint(ctx); err == nil {
		t.Fatal("a checkpoint over a lost host committed")
	}
	checkpoint(t, e)
	r.checkCopy(t, "after the recovery (100 committed, 50 inserted and 10 deleted before the loss)", 140)
	if e.ResentWrites() != 60 || e.LostWrites() != 0 {
		t.Fatalf("%d rows of writes sent again and %d lost, want 60 and 0", e.ResentWrites(), e.LostWrites())
	}
}
