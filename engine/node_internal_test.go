package engine

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
)

// failingControl is a Control of plain calls whose node fail refuses every build spec
// that builds actors of a view while armed.
type failingControl struct {
	fail  int
	armed bool
}

func (c *failingControl) Open(_ context.Context, _ uint64, _ int, node ControlNode) (ControlGraph, error) {
	return &failingGraph{recordingGraph{c: &recordingControl{}, node: node}, c}, nil
}

type failingGraph struct {
	recordingGraph
	c *failingControl
}

func (g *failingGraph) Build(ctx context.Context, node int, spec []byte) error {
	if g.c.armed && node == g.c.fail && bytes.Contains(spec, []byte(`"role":"view"`)) {
		return fmt.Errorf("node %d: refused for the test", node)
	}
	return g.recordingGraph.Build(ctx, node, spec)
}

// threeNodes opens an engine of 3 nodes with opts (in memory, barriers on demand),
// closed when the test ends, and creates table t (k, g) of parallelism 3 in it.
func threeNodes(t *testing.T, opts Options) *Engine {
	t.Helper()
	opts.FS, opts.BarrierInterval, opts.VnodeCount, opts.Nodes = vfs.NewMem(), -1, 16, 3
	e, err := Open(context.Background(), "db", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	tbl := &schema.Table{Name: "t", Columns: []schema.Column{
		{Name: "k", Type: schema.Type{Kind: schema.Int64}},
		{Name: "g", Type: schema.Type{Kind: schema.Int64}},
	}, PK: []schema.KeyColumn{{Column: 0}}, VnodeCount: 8}
	if err := e.CreateTable(context.Background(), tbl, TableOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	return e
}

// nodeSides checks that every actor a node's side holds is one the coordinator
// placed on that node, that every edge a node holds leads into a placed actor, and
// returns how many actors the sides hold.
func nodeSides(t *testing.T, g *graph) int {
	t.Helper()
	n := 0
	for _, side := range g.nodes {
		side.mu.Lock()
		for id := range side.actors {
			n++
			if a := g.actors[id]; a == nil || a.node != side.node {
				t.Errorf("node %d holds actor %d, which the coordinator did not place there", side.node, id)
			}
		}
		side.mu.Unlock()
	}
	for _, side := range g.nodes {
		side.lmu.Lock()
		for k, l := range side.links {
			if _, ok := g.actors[k.to]; !ok && l.out == nil {
				t.Errorf("node %d: edge %d -> %d into an actor not placed", side.node, k.from, k.to)
			}
		}
		side.lmu.Unlock()
	}
	return n
}

// A view whose build node 1 refuses, after node 0 built its part, leaves nothing on
// any node: node 0 drops what it built, the coordinator forgets the actors and their
// edges, and the same view is then created whole. Every running actor is its node's,
// placed there, before and after a rescale.
func TestNodesDropAFailedBuild(t *testing.T) {
	ctx := context.Background()
	c := &failingControl{fail: 1}
	e := threeNodes(t, Options{Control: c})
	tableActors := nodeSides(t, e.g)
	if tableActors != 4 {
		t.Fatalf("%d actors on the nodes for a table of parallelism 3, want 4 (its DML actor too)", tableActors)
	}
	c.armed = true
	view := Aggregate(Scan("t"), []string{"g"}, Agg("count_star", "", "n"))
	err := e.CreateMV(ctx, "v", view, MVOptions{Parallelism: 3})
	if err == nil || !strings.Contains(err.Error(), "refused for the test") {
		t.Fatalf("create v with node 1 refusing: %v, want the refusal", err)
	}
	if n := nodeSides(t, e.g); n != tableActors {
		t.Fatalf("%d actors on the nodes after a failed build, want the table's %d", n, tableActors)
	}
	c.armed = false
	if err := e.CreateMV(ctx, "v", view, MVOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	if err := e.RescheduleMV(ctx, "v", 2); err != nil {
		t.Fatal(err)
	}
	if n := nodeSides(t, e.g); n != len(e.g.actors) {
		t.Fatalf("%d actors on the nodes, %d placed", n, len(e.g.actors))
	}
}

// A spec applies all of it or nothing: a start of an actor the node lacks refuses
// the whole spec, and the actors it would have built are not there after.
func TestNodeSpecAllOrNothing(t *testing.T) {
	specs, e := recordedSpecs(t)
	defer e.Close()
	var spec *buildSpec
	for _, data := range specs {
		s, _, _, err := decodeBuildSpec(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Actors) > 0 && s.Actors[0].Role == roleView {
			spec = s
			break
		}
	}
	// A new graph's node, with nothing built: the spec's actors and a start of an
	// actor it does not build.
	g := newGraph(e)
	defer g.teardown()
	for _, a := range spec.Actors {
		g.actors[a.ID] = &actor{id: a.ID, node: spec.Node}
		for _, in := range a.Inputs {
			for _, u := range in {
				g.actors[u.Actor] = &actor{id: u.Actor, node: spec.Node}
			}
		}
		for _, d := range a.Dispatchers {
			for _, o := range d.Outputs {
				g.actors[o.Actor] = &actor{id: o.Actor, node: spec.Node}
			}
		}
	}
	spec.Start = []executors.ActorID{spec.Actors[0].ID, 1 << 30}
	data, err := encodeBuildSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	err = g.buildAt(context.Background(), spec.Node, data)
	if err == nil || !strings.Contains(err.Error(), "no such actor") {
		t.Fatalf("a spec starting an actor the node lacks: %v, want it refused", err)
	}
	if n := len(g.nodes[spec.Node].actors); n != 0 {
		t.Fatalf("node %d holds %d actors after a refused spec", spec.Node, n)
	}
	// Torn down, a node applies no spec.
	g.teardown()
	spec.Start = nil
	data, _ = encodeBuildSpec(spec)
	if err := g.buildAt(context.Background(), spec.Node, data); err == nil || !strings.Contains(err.Error(), "torn down") {
		t.Fatalf("a spec after teardown: %v, want it refused", err)
	}
}

// chanExchange is an Exchange of plain channels: each edge's two sides, opened
// apart, meet at one channel.
type chanExchange struct {
	mu sync.Mutex
	c  map[edge]chan executors.Message
}

func (x *chanExchange) ch(e ExchangeEdge) chan executors.Message {
	x.mu.Lock()
	defer x.mu.Unlock()
	k := edge{e.From, e.To}
	if x.c[k] == nil {
		x.c[k] = make(chan executors.Message, e.Capacity)
	}
	return x.c[k]
}

func (x *chanExchange) OpenSend(_ context.Context, e ExchangeEdge) (Output, error) {
	return &ChanOutput{ID: e.To, C: x.ch(e)}, nil
}

func (x *chanExchange) OpenRecv(_ context.Context, e ExchangeEdge) (Inbound, error) {
	return chanInbound{x.ch(e)}, nil
}

type chanInbound struct{ c chan executors.Message }

func (i chanInbound) C() <-chan executors.Message { return i.c }
func (i chanInbound) Err() error                  { return nil }
func (i chanInbound) Discard()                    { drainNow(i.c) }

// After rescales, a node holds the sending sides of exchange edges only into actors
// that run: those into the actors an Update stopped go once the dispatcher closed
// them, not when the sending actor stops.
func TestNodesForgetRemovedOutputs(t *testing.T) {
	ctx := context.Background()
	e := threeNodes(t, Options{Exchange: &chanExchange{c: map[edge]chan executors.Message{}}})
	if err := e.CreateMV(ctx, "v", Aggregate(Scan("t"), []string{"g"}, Agg("count_star", "", "n")), MVOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{2, 3, 1, 3} {
		if err := e.RescheduleMV(ctx, "v", p); err != nil {
			t.Fatal(err)
		}
	}
	outs := 0
	for _, side := range e.g.nodes {
		side.lmu.Lock()
		for k, l := range side.links {
			if l.out == nil {
				continue
			}
			outs++
			if _, ok := e.g.actors[k.to]; !ok {
				t.Errorf("node %d holds the sending side of edge %d -> %d, into an actor that no longer runs", side.node, k.from, k.to)
			}
		}
		side.lmu.Unlock()
	}
	if outs == 0 {
		t.Fatal("no sending side of an exchange edge on any node")
	}
}
