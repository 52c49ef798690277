package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
)

// recordingControl is a Control of plain calls that keeps every build spec it carries.
type recordingControl struct {
	mu    sync.Mutex
	specs [][]byte
}

func (c *recordingControl) Open(_ context.Context, _ uint64, _ int, node ControlNode) (ControlGraph, error) {
	return &recordingGraph{c: c, node: node}, nil
}

type recordingGraph struct {
	c    *recordingControl
	node ControlNode
}

func (g *recordingGraph) Build(ctx context.Context, node int, spec []byte) error {
	g.c.mu.Lock()
	g.c.specs = append(g.c.specs, bytes.Clone(spec))
	g.c.mu.Unlock()
	return g.node.Build(ctx, node, spec)
}

func (g *recordingGraph) Inject(ctx context.Context, node int, b *executors.Barrier) error {
	return g.node.Inject(ctx, node, b)
}

func (g *recordingGraph) Report(_ context.Context, _ int, r ControlReport) error {
	g.node.Deliver(r)
	return nil
}

func (g *recordingGraph) Call(ctx context.Context, node int, req []byte) ([]byte, error) {
	return g.node.Call(ctx, node, req)
}

func (g *recordingGraph) Close() {}

// recordedSpecs returns the build specs of an engine of 3 nodes that creates a table,
// a filter over it, an aggregate over a join of the two, rescales the aggregate and
// reopens (the recovery builds everything, feeding the upstreams' actors built
// before), and the engine, open.
func recordedSpecs(tb testing.TB) ([][]byte, *Engine) {
	ctx := context.Background()
	c := &recordingControl{}
	fs := vfs.NewMem()
	opts := Options{FS: fs, BarrierInterval: -1, VnodeCount: 16, Nodes: 3, Control: c}
	e, err := Open(ctx, "db", opts)
	if err != nil {
		tb.Fatal(err)
	}
	t := &schema.Table{Name: "t", Columns: []schema.Column{
		{Name: "k", Type: schema.Type{Kind: schema.Int64}},
		{Name: "v", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
	}, PK: []schema.KeyColumn{{Column: 0}}, VnodeCount: 8}
	if err := e.CreateTable(ctx, t, TableOptions{Parallelism: 3}); err != nil {
		tb.Fatal(err)
	}
	if err := e.CreateMV(ctx, "f", Filter(Scan("t"), Call("greater", Column("k"), Int(3))), MVOptions{}); err != nil {
		tb.Fatal(err)
	}
	f2 := Project(Scan("f"), As(Column("k"), "k2"), As(Column("v"), "v2"))
	j := Aggregate(Join(Scan("t"), f2, []string{"k"}, []string{"k2"}, nil), []string{"v"}, Agg("count_star", "", "n"))
	if err := e.CreateMV(ctx, "a", j, MVOptions{Parallelism: 2}); err != nil {
		tb.Fatal(err)
	}
	if err := e.RescheduleMV(ctx, "a", 3); err != nil {
		tb.Fatal(err)
	}
	if err := e.Close(); err != nil {
		tb.Fatal(err)
	}
	e, err = Open(ctx, "db", opts)
	if err != nil {
		tb.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.specs, e
}

// Every build travels as a spec: each decodes to what it encodes, carries the
// objects its actors run, gives vnodes to exactly its table and view actors, and the
// roles of a table, a view, a rescale and a recovery all occur. A spec sent again to
// the running graph, or to another node, is refused.
func TestBuildSpecRecorded(t *testing.T) {
	specs, e := recordedSpecs(t)
	defer e.Close()
	roles := map[string]int{}
	for i, data := range specs {
		s, objs, vnodes, err := decodeBuildSpec(data)
		if err != nil {
			t.Fatalf("spec %d: %v", i, err)
		}
		again, err := encodeBuildSpec(s)
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("spec %d re-encoded as %s (%v), want %s", i, again, err, data)
		}
		for k, a := range s.Actors {
			roles[a.Role]++
			if objs[a.Object] == nil {
				t.Fatalf("spec %d: actor %d of %s, which it does not carry", i, a.ID, a.Object)
			}
			if (a.Role == roleView || a.Role == roleTable) != (vnodes[k] != nil) {
				t.Fatalf("spec %d: actor %d (%s) vnodes %v", i, a.ID, a.Role, vnodes[k])
			}
		}
	}
	for _, r := range []string{roleDML, roleTable, roleView, roleFeed} {
		if roles[r] == 0 {
			t.Errorf("no actor of role %s in %d specs", r, len(specs))
		}
	}
	// Every actor built is started, by a spec of its own node, after every node
	// built its part.
	built, started := map[executors.ActorID]int{}, map[executors.ActorID]int{}
	var last []byte // the last spec that builds actors
	for _, data := range specs {
		s, _, _, _ := decodeBuildSpec(data)
		for _, a := range s.Actors {
			if a.Role != roleFeed {
				built[a.ID] = s.Node
			}
		}
		for _, id := range s.Start {
			n, ok := built[id]
			if !ok || n != s.Node {
				t.Fatalf("actor %d started on node %d, built on %d (%v)", id, s.Node, n, ok)
			}
			started[id]++
		}
		if len(s.Actors) > 0 {
			last = data
		}
	}
	if len(started) == 0 {
		t.Fatal("no start spec")
	}
	// Sent again, a spec of the running graph is refused: its actors run (those of
	// the last recovery's specs).
	s, _, _, _ := decodeBuildSpec(last)
	if err := e.g.buildAt(context.Background(), s.Node, last); err == nil || !strings.Contains(err.Error(), "runs already") {
		t.Fatalf("a spec built twice: %v, want it refused", err)
	}
	if err := e.g.buildAt(context.Background(), (s.Node+1)%3, last); err == nil || !strings.Contains(err.Error(), "for node") {
		t.Fatalf("a spec built on another node: %v, want it refused", err)
	}
}

func TestDecodeBuildSpecRefuses(t *testing.T) {
	specs, e := recordedSpecs(t)
	e.Close()
	var view []byte // a spec of view actors
	for _, data := range specs {
		if bytes.Contains(data, []byte(`"role":"view"`)) {
			view = data
			break
		}
	}
	edit := func(f func(s *buildSpec)) []byte {
		var s buildSpec
		if err := json.Unmarshal(view, &s); err != nil {
			t.Fatal(err)
		}
		f(&s)
		out, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"not json", []byte("{"), "build spec: unexpected end"},
		{"version", edit(func(s *buildSpec) { s.Version = 2 }), "version 2, want 3"},
		{"node", edit(func(s *buildSpec) { s.Node = -1 }), "node -1"},
		{"start 0", edit(func(s *buildSpec) { s.Start = []executors.ActorID{0} }), "actor id 0 to start"},
		{"drop 0", edit(func(s *buildSpec) { s.Drop = []executors.ActorID{3, 0} }), "actor id 0 to start or drop"},
		{"too many to start", edit(func(s *buildSpec) { s.Start = make([]executors.ActorID, maxSpecActors+1) }), "more than"},
		{"drop and build", edit(func(s *buildSpec) { s.Drop = []executors.ActorID{3} }), "a spec that drops does nothing else"},
		{"object", edit(func(s *buildSpec) { s.Objects[0] = json.RawMessage(`{"name":"x"}`) }), "build spec object 0"},
		{"object twice", edit(func(s *buildSpec) { s.Objects = append(s.Objects, s.Objects[0]) }), "twice"},
		{"id 0", edit(func(s *buildSpec) { s.Actors[0].ID = 0 }), "actor id 0"},
		{"actor twice", edit(func(s *buildSpec) { s.Actors = append(s.Actors, s.Actors[0]) }), "built twice"},
		{"no object", edit(func(s *buildSpec) { s.Actors[0].Object = "nope" }), "no object nope"},
		{"role", edit(func(s *buildSpec) { s.Actors[0].Role = "boss" }), "unknown role"},
		{"role of kind", edit(func(s *buildSpec) { s.Actors[0].Role = roleTable }), "is a mv"},
		{"vnodes", edit(func(s *buildSpec) { s.Actors[0].Vnodes = []byte{1, 2} }), "vnodes"},
		{"too many", edit(func(s *buildSpec) { s.Actors = make([]actorSpec, maxSpecActors+1) }), "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, _, err := decodeBuildSpec(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decode: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// FuzzDecodeBuildSpec: a build spec either decodes into one that encodes and decodes
// again to the same spec, or is an error; it never panics.
func FuzzDecodeBuildSpec(f *testing.F) {
	specs, e := recordedSpecs(f)
	e.Close()
	for _, s := range specs {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, _, _, err := decodeBuildSpec(data)
		if err != nil {
			return
		}
		enc, err := encodeBuildSpec(s)
		if err != nil {
			t.Fatalf("encode a decoded spec: %v", err)
		}
		s2, _, _, err := decodeBuildSpec(enc)
		if err != nil {
			t.Fatalf("decode a re-encoded spec: %v", err)
		}
		enc2, err := encodeBuildSpec(s2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("spec re-encoded as %s (%v), then %s", enc, err, enc2)
		}
	})
}
