package control

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

var localKV = &schema.Table{
	Name: "kv",
	Columns: []schema.Column{
		{Name: "k", Type: schema.Type{Kind: schema.Int64}},
		{Name: "g", Type: schema.Type{Kind: schema.Varchar}},
	},
	PK: []schema.KeyColumn{{Column: 0}},
}

func localCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newLocal(t *testing.T) *Local {
	t.Helper()
	l, err := NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func localEngine(t *testing.T, dir string, ctl engine.Control) *engine.Engine {
	t.Helper()
	opts := engine.Options{BarrierInterval: -1, Nodes: 3}
	if ctl != nil {
		opts.Control = ctl
	}
	e, err := engine.Open(localCtx(t), dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func localWrite(ctx context.Context, op func(context.Context, string, arrow.RecordBatch) error, from, to int) error {
	b := vec.NewChunkBuilder(memory.DefaultAllocator, localKV)
	defer b.Release()
	for k := from; k < to; k++ {
		if err := b.AppendRow(vec.Insert, k, fmt.Sprint("g", k%7)); err != nil {
			return err
		}
	}
	c, err := b.Build()
	if err != nil {
		return err
	}
	defer c.Release()
	return op(ctx, "kv", c.Record())
}

func localScan(t *testing.T, e *engine.Engine, name string) []string {
	t.Helper()
	r, err := e.Scan(localCtx(t), name)
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

// An engine whose barriers are injected and whose actors report over control streams
// holds, after writes, a view, a rescale and a crash, what the engine of channels
// holds; a lost stream
// fails the round it is in, naming the node, and the engine recovers onto new
// streams, to match again.
func TestLocalEngine(t *testing.T) {
	ctx := localCtx(t)
	l := newLocal(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	es := []*engine.Engine{localEngine(t, dirs[0], l), localEngine(t, dirs[1], nil)}
	both := func(what string, f func(e *engine.Engine) error) {
		t.Helper()
		for i, e := range es {
			if err := f(e); err != nil {
				t.Fatalf("%s (engine %d): %v", what, i, err)
			}
		}
	}
	check := func(when string) {
		t.Helper()
		for _, name := range []string{"kv", "by_g"} {
			if a, b := localScan(t, es[0], name), localScan(t, es[1], name); !slices.Equal(a, b) {
				t.Fatalf("%s: %s over control streams: %d rows, over channels %d", when, name, len(a), len(b))
			}
		}
	}
	if n := l.Built(); n != 0 {
		t.Fatalf("%d builds before any table", n)
	}
	both("create kv", func(e *engine.Engine) error { return e.CreateTable(ctx, localKV, engine.TableOptions{Parallelism: 3}) })
	// Each of the 3 nodes built its actor of kv from its spec (node 0 the DML
	// actor too), then started it from another, once all 3 had built theirs.
	if n := l.Built(); n != 6 {
		t.Fatalf("%d specs over the streams for a table on 3 nodes, want 3 builds and 3 starts", n)
	}
	both("write", func(e *engine.Engine) error { return localWrite(ctx, e.Insert, 0, 300) })
	agg := engine.Aggregate(engine.Scan("kv"), []string{"g"}, engine.Agg("count_star", "", "n"))
	both("create by_g", func(e *engine.Engine) error { return e.CreateMV(ctx, "by_g", agg, engine.MVOptions{Parallelism: 2}) })
	// The coordinator knows a backfill's progress, and that it is done, from the
	// actors' reports: over the streams as over channels, the done job's reported
	// rows are those its committed progress rows count.
	both("backfill", func(e *engine.Engine) error { return e.WaitBackfill(ctx, "by_g") })
	both("checkpoint", func(e *engine.Engine) error { _, err := e.WaitCheckpoint(ctx); return err })
	for i, e := range es {
		var p engine.JobProgress
		for _, j := range e.Progress() {
			if j.Name == "by_g" {
				p = j
			}
		}
		vps, err := e.VnodeProgress("by_g")
		if err != nil {
			t.Fatal(err)
		}
		var rows int64
		for _, vp := range vps {
			rows += vp.Rows
		}
		if !p.Done || p.VnodesTotal == 0 || p.VnodesCompleted != p.VnodesTotal || len(p.Actors) != 2 || p.RowsConsumed != rows {
			t.Fatalf("engine %d: by_g's reported progress %+v, its committed progress rows %d", i, p, rows)
		}
	}
	for round := range 6 {
		both("write", func(e *engine.Engine) error { return localWrite(ctx, e.Insert, 300+round*50, 350+round*50) })
		switch round {
		case 2:
			both("rescale", func(e *engine.Engine) error { return e.RescheduleMV(ctx, "by_g", 3) })
		case 4:
			both("crash", func(e *engine.Engine) error { return e.Crash() })
			es = []*engine.Engine{localEngine(t, dirs[0], l), localEngine(t, dirs[1], nil)}
		}
		both("checkpoint", func(e *engine.Engine) error { _, err := e.WaitCheckpoint(ctx); return err })
		check(fmt.Sprintf("round %d", round))
	}

	// Every recovery (the crash's reopen, below the losses') builds every node's
	// actors over the new streams.
	builtBefore := l.Built()

	// A lost stream mid-run.
	committed := es[0].CommittedEpoch()
	// Written to both: the recovery sends them again into the new graph.
	both("write", func(e *engine.Engine) error { return localWrite(ctx, e.Insert, 10_000, 10_050) })
	if err := l.Lose(1); err != nil {
		t.Fatal(err)
	}
	_, err := es[0].WaitCheckpoint(ctx)
	if err == nil || !strings.Contains(err.Error(), "node-1") {
		t.Fatalf("checkpoint after node 1 lost its stream: %v, want an error naming node-1", err)
	}
	t.Logf("checkpoint after the loss: %v", err)
	if got := es[0].CommittedEpoch(); got != committed {
		t.Fatalf("committed epoch %d after the loss, want %d", got, committed)
	}
	if l.Lost() == 0 {
		t.Fatal("no lost stream was delivered")
	}
	check("after the recovery")
	if got := es[0].ResentWrites(); got != 50 {
		t.Fatalf("%d rows of writes sent again after the loss, want the round's 50", got)
	}
	if l.Built() < builtBefore+3 {
		t.Fatalf("%d builds over the streams after the recovery, want at least one per node (%d before)", l.Built(), builtBefore)
	}

	// The barriers travel over the streams: a lost stream of the node that holds
	// the sources fails the next round's injection (or its collection), naming
	// the node; the engine recovers and injects over the new streams.
	if n := l.Injected(); n < 8 {
		t.Fatalf("%d barriers injected over the streams, want one per round (at least 8)", n)
	}
	if err := l.Lose(0); err != nil {
		t.Fatal(err)
	}
	if _, err := es[0].WaitCheckpoint(ctx); err == nil || !strings.Contains(err.Error(), "node-0") {
		t.Fatalf("checkpoint after node 0 lost its stream: %v, want an error naming node-0", err)
	}
	before := l.Injected()
	both("write", func(e *engine.Engine) error { return localWrite(ctx, e.Insert, 15_000, 15_050) })
	both("checkpoint", func(e *engine.Engine) error { _, err := e.WaitCheckpoint(ctx); return err })
	if l.Injected() == before {
		t.Fatal("no barrier injected over the streams after the recovery")
	}
	check("after node 0's recovery")
	both("write", func(e *engine.Engine) error { return localWrite(ctx, e.Insert, 20_000, 20_100) })
	both("checkpoint", func(e *engine.Engine) error { _, err := e.WaitCheckpoint(ctx); return err })
	check("after the recovery and more writes")
	both("close", func(e *engine.Engine) error { return e.Close() })
}

// corruptControl is a Local whose build number n (counted from 1 over every graph)
// carries a spec of an unknown version, which its node refuses.
type corruptControl struct {
	*Local
	n, calls int
}

func (c *corruptControl) Open(ctx context.Context, gen uint64, nodes int, side engine.ControlNode) (engine.ControlGraph, error) {
	g, err := c.Local.Open(ctx, gen, nodes, side)
	if err != nil {
		return nil, err
	}
	return corruptGraph{g, c}, nil
}

type corruptGraph struct {
	engine.ControlGraph
	c *corruptControl
}

func (g corruptGraph) Build(ctx context.Context, node int, spec []byte) error {
	if g.c.calls++; g.c.calls == g.c.n {
		spec = bytes.Replace(spec, fmt.Appendf(nil, `"version":%d`, engine.BuildSpecVersion), []byte(`"version":9`), 1)
	}
	return g.ControlGraph.Build(ctx, node, spec)
}

// A view whose build fails on one node (after another node built its actors) is not
// created, and leaves nothing behind: the engine goes on, and the view created again
// holds what it should.
func TestLocalBuildFails(t *testing.T) {
	ctx := localCtx(t)
	c := &corruptControl{Local: newLocal(t)}
	e := localEngine(t, t.TempDir(), c)
	defer e.Close()
	if err := e.CreateTable(ctx, localKV, engine.TableOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	if err := localWrite(ctx, e.Insert, 0, 500); err != nil {
		t.Fatal(err)
	}
	// The view's actors span all 3 nodes: its second node's build is refused.
	c.n = c.calls + 2
	agg := engine.Aggregate(engine.Scan("kv"), []string{"g"}, engine.Agg("count_star", "", "n"))
	err := e.CreateMV(ctx, "by_g", agg, engine.MVOptions{Parallelism: 3})
	if err == nil || !strings.Contains(err.Error(), "by_g") || !strings.Contains(err.Error(), "node 1") || !strings.Contains(err.Error(), "version 9") {
		t.Fatalf("create by_g with a refused build: %v, want an error naming by_g, node 1 and the version", err)
	}
	t.Logf("refused build: %v", err)
	if _, err := e.Table("by_g"); err == nil {
		t.Fatal("by_g exists after its build failed")
	}
	if err := localWrite(ctx, e.Insert, 500, 600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatalf("checkpoint after the failed build: %v", err)
	}
	if err := e.CreateMV(ctx, "by_g", agg, engine.MVOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	got := localScan(t, e, "by_g")
	want := map[string]int{}
	for k := range 600 {
		want[fmt.Sprint("g", k%7)]++
	}
	if len(got) != len(want) {
		t.Fatalf("by_g has %d groups, want %d: %v", len(got), len(want), got)
	}
	for _, row := range got {
		g, n, _ := strings.Cut(row, " ")
		if fmt.Sprint(want[g]) != n {
			t.Fatalf("by_g row %q, want %s %d", row, g, want[g])
		}
	}
}

// A backfill that has read its whole snapshot says so over its node's stream (a
// Finishing frame), and the coordinator injects the barrier that makes it done at
// once: with barriers an hour apart, a view's creation (which waits for its
// backfill) returns in moments, and its rows are there.
func TestLocalFinishing(t *testing.T) {
	ctx := localCtx(t)
	l := newLocal(t)
	e, err := engine.Open(ctx, t.TempDir(), engine.Options{BarrierInterval: time.Hour, Nodes: 3, Control: l})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.CreateTable(ctx, localKV, engine.TableOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	if err := localWrite(ctx, e.Insert, 0, 500); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	agg := engine.Aggregate(engine.Scan("kv"), []string{"g"}, engine.Agg("count_star", "", "n"))
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.CreateMV(cctx, "by_g", agg, engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatalf("create a view with barriers an hour apart: %v", err)
	}
	if n := l.Finishings(); n != 2 {
		t.Fatalf("%d Finishing frames reached the coordinator, want one per backfill actor (2)", n)
	}
	if got := localScan(t, e, "by_g"); len(got) != 7 {
		t.Fatalf("by_g has %d groups, want 7", len(got))
	}
}

// callSide is a node side of plain builds and injections whose Call answers "part
// of node N: " and the request, fails a request "fail", and holds a request "hold"
// until it takes a token from release or its ctx ends (held is sent its node as it
// starts).
type callSide struct {
	reports chan engine.ControlReport
	held    chan int
	release chan struct{}
	ended   chan error // a held call's ctx error, when its ctx ended first
}

func newCallSide() *callSide {
	return &callSide{reports: make(chan engine.ControlReport, 64), held: make(chan int, 4), release: make(chan struct{}), ended: make(chan error, 4)}
}

func (s *callSide) node() engine.ControlNode {
	return engine.ControlNode{
		Deliver: func(r engine.ControlReport) { s.reports <- r },
		Build:   func(context.Context, int, []byte) error { return nil },
		Inject:  func(context.Context, int, *executors.Barrier) error { return nil },
		Call: func(ctx context.Context, node int, req []byte) ([]byte, error) {
			switch string(req) {
			case "fail":
				return nil, fmt.Errorf("node %d: no part of epoch 9 in the store", node)
			case "hold":
				s.held <- node
				select {
				case <-s.release:
				case <-ctx.Done():
					s.ended <- ctx.Err()
					return nil, ctx.Err()
				}
			}
			return append(fmt.Appendf(nil, "part of node %d: ", node), req...), nil
		},
	}
}

// openCall opens a graph of 3 nodes over l with side s.
func openCall(t *testing.T, l *Local, gen uint64, s *callSide) engine.ControlGraph {
	t.Helper()
	g, err := l.Open(localCtx(t), gen, 3, s.node())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// A call reaches its node's side with its payload and returns the node's answer, or
// its error; a call the node takes its time over holds neither the frames behind it
// on the node's stream (a build) nor the calls of other nodes.
func TestLocalCall(t *testing.T) {
	ctx := localCtx(t)
	l := newLocal(t)
	s := newCallSide()
	g := openCall(t, l, 1, s)
	for node := range 3 {
		got, err := g.Call(ctx, node, []byte{'r', 0, 0xff, byte(node)})
		if want := fmt.Sprintf("part of node %d: r\x00\xff%c", node, byte(node)); err != nil || string(got) != want {
			t.Fatalf("call at node %d: %q, %v; want %q", node, got, err, want)
		}
	}
	if got, err := g.Call(ctx, 2, nil); err != nil || string(got) != "part of node 2: " {
		t.Fatalf("call of no payload at node 2: %q, %v", got, err)
	}
	_, err := g.Call(ctx, 1, []byte("fail"))
	if err == nil || !strings.Contains(err.Error(), "node 1: no part of epoch 9 in the store") || errors.Is(err, engine.ErrNodeLost) {
		t.Fatalf("call that node 1 fails: %v, want its error, not a lost node", err)
	}
	if _, err := g.Call(ctx, 3, nil); err == nil || !strings.Contains(err.Error(), "nodes 0 to 2") {
		t.Fatalf("call at node 3 of 3: %v", err)
	}

	// Node 0 holds a call: a build and calls behind it go through.
	held := make(chan error, 1)
	go func() {
		got, err := g.Call(ctx, 0, []byte("hold"))
		if err == nil && string(got) != "part of node 0: hold" {
			err = fmt.Errorf("answered %q", got)
		}
		held <- err
	}()
	if n := <-s.held; n != 0 {
		t.Fatalf("node %d holds the call, want node 0", n)
	}
	behind, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := g.Build(behind, 0, nil); err != nil {
		t.Fatalf("build at node 0 behind a held call: %v", err)
	}
	if got, err := g.Call(behind, 0, []byte("next")); err != nil || string(got) != "part of node 0: next" {
		t.Fatalf("call at node 0 behind a held call: %q, %v", got, err)
	}
	if got, err := g.Call(behind, 1, []byte("other")); err != nil || string(got) != "part of node 1: other" {
		t.Fatalf("call at node 1 while node 0 holds one: %q, %v", got, err)
	}
	select {
	case err := <-held:
		t.Fatalf("the held call returned before its release: %v", err)
	default:
	}
	s.release <- struct{}{}
	if err := <-held; err != nil {
		t.Fatalf("held call: %v", err)
	}
	if n := l.Calls(); n != 8 {
		t.Fatalf("%d calls answered over the streams, want 8", n)
	}
	if n := l.Refusals(); n != 0 {
		t.Fatalf("%d frames refused", n)
	}
}

// A call whose node's stream is lost while the node serves it fails with an error
// that names the node and wraps engine.ErrNodeLost, as do the loss's report, the
// node's side of the call (its ctx ends) and every build, injection and call at the
// node after it; the other nodes are answered still.
func TestLocalCallLost(t *testing.T) {
	ctx := localCtx(t)
	l := newLocal(t)
	s := newCallSide()
	g := openCall(t, l, 1, s)
	done := make(chan error, 1)
	go func() {
		_, err := g.Call(ctx, 1, []byte("hold"))
		done <- err
	}()
	if n := <-s.held; n != 1 {
		t.Fatalf("node %d holds the call, want node 1", n)
	}
	if err := l.Lose(1); err != nil {
		t.Fatal(err)
	}
	lost := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, engine.ErrNodeLost) || !strings.Contains(err.Error(), "node-1") {
			t.Fatalf("%s: %v, want an error naming node-1 that wraps engine.ErrNodeLost", what, err)
		}
	}
	select {
	case err := <-done:
		lost("call at node 1 as its stream is lost", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the call at node 1 did not return within 30s of its stream's loss")
	}
	r := <-s.reports
	lost("the loss's report", r.Err)
	if err := <-s.ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("node 1's side of the call ended with %v, want its ctx canceled", err)
	}
	_, err := g.Call(ctx, 1, []byte("again"))
	lost("call at node 1 after its loss", err)
	lost("build at node 1 after its loss", g.Build(ctx, 1, nil))
	lost("inject at node 1 after its loss", g.Inject(ctx, 1, &executors.Barrier{Prev: 1, Curr: 2}))
	if got, err := g.Call(ctx, 2, []byte("x")); err != nil || string(got) != "part of node 2: x" {
		t.Fatalf("call at node 2 after node 1's loss: %q, %v", got, err)
	}
}

// A call whose ctx ends returns its error at once, though its node serves it still;
// the node's late answer is dropped, and the next call gets its own.
func TestLocalCallCtx(t *testing.T) {
	ctx := localCtx(t)
	l := newLocal(t)
	s := newCallSide()
	g := openCall(t, l, 1, s)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := g.Call(cctx, 2, []byte("hold"))
		done <- err
	}()
	<-s.held
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || errors.Is(err, engine.ErrNodeLost) || !strings.Contains(err.Error(), "node-2") {
			t.Fatalf("call whose ctx ended: %v, want context.Canceled naming node-2", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not return within 30s of its ctx's end")
	}
	if _, err := g.Call(cctx, 2, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("call with an ended ctx: %v", err)
	}
	s.release <- struct{}{} // the held call answers now, to no one
	for range 3 {
		if got, err := g.Call(ctx, 2, []byte("after")); err != nil || string(got) != "part of node 2: after" {
			t.Fatalf("call after a dropped one: %q, %v", got, err)
		}
	}
	// A call pending as the graph's control closes returns.
	go func() {
		_, err := g.Call(ctx, 0, []byte("hold"))
		done <- err
	}()
	<-s.held
	g.Close()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("call pending as the control closed: %v", err)
	}
}

// A remote node must connect with the role the engine gives it: the first graph
// fails to open naming both roles; with the right role it opens, and a later graph
// leaves a node that came back with another role down instead of failing.
func TestClusterRoles(t *testing.T) {
	ctx := localCtx(t)
	l, err := NewCluster(ClusterConfig{Remote: []int{1}, Roles: []string{"meta", "backfill"}, Wait: 5 * time.Second, Grace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	join := func(role string, inc uint64) *Node {
		t.Helper()
		n, err := Connect(ctx, l.Addr(), Hello{Stamp: Stamp{Incarnation: inc}, Node: ComputeName(1), Role: role})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := join("", 1)
	s := newCallSide()
	if _, err := l.Open(ctx, 1, 2, s.node()); err == nil || !strings.Contains(err.Error(), `role ""`) || !strings.Contains(err.Error(), `role "backfill"`) {
		t.Fatalf("open over compute-1 of role \"\" for a node of role backfill: %v, want an error naming both", err)
	}
	n.Close()
	n = join("backfill", 2)
	g, err := l.Open(ctx, 2, 2, s.node())
	if err != nil {
		t.Fatalf("open over compute-1 of role backfill: %v", err)
	}
	if d := g.(engine.ControlDown).Down(); len(d) != 0 {
		t.Fatalf("nodes %v down with every node of its role", d)
	}
	n.Close()
	n = join("other", 3)
	defer n.Close()
	g, err = l.Open(ctx, 3, 2, s.node())
	if err != nil {
		t.Fatalf("a later graph over a node of the wrong role: %v, want it down", err)
	}
	defer g.Close()
	if d := g.(engine.ControlDown).Down(); !slices.Equal(d, []int{1}) {
		t.Fatalf("nodes %v down, want node 1 (its role is other)", d)
	}
}

// A late reply (SendLate: a Failed report stamped with the generation before the
// node's, or an incarnation below its own) is refused and reaches no graph; the same
// report stamped as the node's current one is delivered.
func TestLocalLateReplyRefused(t *testing.T) {
	ctx := localCtx(t)
	l := newLocal(t)
	s := newCallSide()
	openCall(t, l, 4, s).Close()
	openCall(t, l, 5, s)
	for i, stale := range []string{"generation", "incarnation"} {
		what, err := l.SendLate(1+i, stale)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(what, stale+" below its own") {
			t.Fatalf("sent %s, want a stale %s", what, stale)
		}
	}
	if n := l.Refusals(); n != 2 {
		t.Fatalf("%d frames refused, want the 2 late replies", n)
	}
	if _, err := l.SendLate(3, "generation"); err == nil {
		t.Fatal("a late reply of node 3 of a graph of 3 nodes was sent")
	}
	l.mu.Lock()
	n := l.graph.nodes[1]
	l.mu.Unlock()
	if err := n.SendAt(ctx, 5, Failed{Actor: 1, Err: "a timely reply"}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-s.reports:
		if r.Err == nil || !strings.Contains(r.Err.Error(), "a timely reply") {
			t.Fatalf("delivered %+v, want the timely reply (the late ones refused)", r)
		}
	case <-ctx.Done():
		t.Fatal("the timely reply was not delivered")
	}
}

// A control (a rate limit, a view's pause or resume) whose round meets a node's lost
// stream is applied again once the engine has recovered, instead of failing: the
// caller asked for a state, and the node's crash is the engine's to absorb. Each
// control below follows the loss of a different node's stream.
func TestLocalControlAfterLoss(t *testing.T) {
	ctx := localCtx(t)
	l := newLocal(t)
	e := localEngine(t, t.TempDir(), l)
	defer e.Close()
	if err := e.CreateTable(ctx, localKV, engine.TableOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	if err := localWrite(ctx, e.Insert, 0, 600); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	agg := engine.Aggregate(engine.Scan("kv"), []string{"g"}, engine.Agg("count_star", "", "n"))
	if err := e.CreateMV(ctx, "by_g", agg, engine.MVOptions{Parallelism: 3, Background: true, RateLimit: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	progress := func() engine.JobProgress {
		t.Helper()
		for _, p := range e.Progress() {
			if p.Name == "by_g" {
				return p
			}
		}
		t.Fatal("no progress of by_g")
		return engine.JobProgress{}
	}
	controls := []struct {
		name string
		node int
		do   func() error
		want func(engine.JobProgress) bool
	}{
		{"lift the rate limit", 1, func() error { return e.SetRateLimit(ctx, "by_g", nil) },
			func(p engine.JobProgress) bool { return p.RateLimit == nil && !p.Paused }},
		{"pause the view", 2, func() error { return e.PauseMV(ctx, "by_g") },
			func(p engine.JobProgress) bool { return p.Paused }},
		{"resume the view", 0, func() error { return e.ResumeMV(ctx, "by_g") },
			func(p engine.JobProgress) bool { return !p.Paused && p.RateLimit == nil }},
	}
	for i, c := range controls {
		recoveries := e.Recoveries()
		if err := l.Lose(c.node); err != nil {
			t.Fatal(err)
		}
		if err := c.do(); err != nil {
			t.Fatalf("%s after node %d lost its stream: %v", c.name, c.node, err)
		}
		if got := e.ControlRetries(); got != i+1 {
			t.Fatalf("%s: %d controls applied again, want %d", c.name, got, i+1)
		}
		if e.Recoveries() <= recoveries {
			t.Fatalf("%s: no recovery after node %d's loss", c.name, c.node)
		}
		if p := progress(); !c.want(p) {
			t.Fatalf("%s: the view's progress is %+v", c.name, p)
		}
	}
	for i := 0; !progress().Done; i++ {
		if i == 100 {
			t.Fatalf("by_g not done after %d checkpoints: %+v", i, progress())
		}
		if _, err := e.WaitCheckpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := localScan(t, e, "by_g")
	if len(got) != 7 {
		t.Fatalf("by_g has %d groups, want 7: %v", len(got), got)
	}
	for _, row := range got {
		g, n, _ := strings.Cut(row, " ")
		k := int(g[1] - '0')
		if want := fmt.Sprint((600 - k + 6) / 7); n != want {
			t.Fatalf("by_g row %q, want %s %s", row, g, want)
		}
	}
}
