package exchange

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// kv is the engine tests' table: k int64 (the pk), g varchar, n int64.
var kv = &schema.Table{
	Name: "kv",
	Columns: []schema.Column{
		{Name: "k", Type: schema.Type{Kind: schema.Int64}},
		{Name: "g", Type: schema.Type{Kind: schema.Varchar}},
		{Name: "n", Type: schema.Type{Kind: schema.Int64}},
	},
	PK: []schema.KeyColumn{{Column: 0}},
}

// views are the views the engine tests build over kv: a filter and projection, an
// aggregate (a shuffle by g), and a self-join on g (two shuffles into one actor).
var views = []struct {
	name string
	plan engine.Plan
	p    int
}{
	{"big", engine.Project(engine.Filter(engine.Scan("kv"), engine.Call("greater", engine.Column("n"), engine.Int(50))),
		engine.As(engine.Column("g"), "g"), engine.As(engine.Column("n"), "n")), 3},
	{"by_g", engine.Aggregate(engine.Scan("kv"), []string{"g"}, engine.Agg("count_star", "", "c"), engine.Agg("sum", "n", "s")), 2},
	{"pairs", engine.Aggregate(engine.Join(
		engine.Project(engine.Scan("kv"), engine.As(engine.Column("k"), "lk"), engine.As(engine.Column("g"), "lg"), engine.As(engine.Column("n"), "ln")),
		engine.Project(engine.Scan("kv"), engine.As(engine.Column("k"), "rk"), engine.As(engine.Column("g"), "rg"), engine.As(engine.Column("n"), "rn")),
		[]string{"lg"}, []string{"rg"}, nil), []string{"lg"}, engine.Agg("count_star", "", "c")), 3},
}

// meshEngine opens an engine of 3 nodes in dir whose cross-node edges go through mesh
// (nil: channels), barrier by barrier, leak-checked when the test ends.
func meshEngine(t *testing.T, dir string, mesh *Mesh, mem memory.Allocator) *engine.Engine {
	t.Helper()
	opts := engine.Options{BarrierInterval: -1, Nodes: 3, Mem: mem}
	if mesh != nil {
		opts.Exchange = mesh
	}
	e, err := engine.Open(testCtx(t), dir, opts)
	if err != nil {
		t.Fatalf("open engine in %s: %v", dir, err)
	}
	return e
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newMesh(t *testing.T, mem memory.Allocator) *Mesh {
	t.Helper()
	m, err := NewMesh(3, testWindow, mem)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close mesh: %v", err)
		}
	})
	return m
}

// writeKV applies op to rows of kv.
func writeKV(ctx context.Context, e *engine.Engine, op func(context.Context, string, arrow.RecordBatch) error, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	b := vec.NewChunkBuilder(memory.DefaultAllocator, kv)
	defer b.Release()
	for _, r := range rows {
		if err := b.AppendRow(vec.Insert, r...); err != nil {
			return err
		}
	}
	chunk, err := b.Build()
	if err != nil {
		return err
	}
	defer chunk.Release()
	return op(ctx, "kv", chunk.Record())
}

// scanRows is every row of name, as text, sorted.
func scanRows(t *testing.T, e *engine.Engine, name string) []string {
	t.Helper()
	r, err := e.Scan(testCtx(t), name)
	if err != nil {
		t.Fatalf("scan %s: %v", name, err)
	}
	defer r.Release()
	var out []string
	for r.Next() {
		rec := r.RecordBatch()
		for i := range int(rec.NumRows()) {
			var row []string
			for c := range int(rec.NumCols()) {
				row = append(row, rec.Column(c).ValueStr(i))
			}
			out = append(out, strings.Join(row, " "))
		}
	}
	if err := r.Err(); err != nil {
		t.Fatalf("scan %s: %v", name, err)
	}
	slices.Sort(out)
	return out
}

// batch is one round of the seeded writer: inserts of new keys, updates and deletes
// of live ones.
func batch(rng *rand.Rand, live map[int64]bool) (ins, upd, del [][]any) {
	for range 30 + rng.IntN(60) {
		k := int64(rng.IntN(400))
		row := []any{k, fmt.Sprint("g", rng.IntN(9)), int64(rng.IntN(100))}
		switch {
		case !live[k]:
			ins, live[k] = append(ins, row), true
		case rng.IntN(3) == 0:
			del, live[k] = append(del, row), false
		default:
			upd = append(upd, row)
		}
	}
	return ins, upd, del
}

// An engine whose cross-node edges are Flight streams holds, after the same seeded
// writes, view creations, a rescale and a crash, exactly what the embedded engine
// holds, and releases every buffer it took.
func TestMeshEngineEquivalence(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 0xe9c4))
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			mesh := newMesh(t, mem)
			dirs := []string{filepath.Join(t.TempDir(), "mesh"), filepath.Join(t.TempDir(), "chan")}
			open := func() []*engine.Engine {
				return []*engine.Engine{meshEngine(t, dirs[0], mesh, mem), meshEngine(t, dirs[1], nil, nil)}
			}
			es := open()
			both := func(what string, f func(e *engine.Engine) error) {
				t.Helper()
				for i, e := range es {
					if err := f(e); err != nil {
						t.Fatalf("%s (engine %d): %v", what, i, err)
					}
				}
			}
			ctx := testCtx(t)
			both("create kv", func(e *engine.Engine) error { return e.CreateTable(ctx, kv, engine.TableOptions{Parallelism: 3}) })
			live := map[int64]bool{}
			created := []string{"kv"}
			for round := 1; round <= 12; round++ {
				ins, upd, del := batch(rng, live)
				both("write", func(e *engine.Engine) error {
					if err := writeKV(ctx, e, e.Insert, ins); err != nil {
						return err
					}
					if err := writeKV(ctx, e, e.Update, upd); err != nil {
						return err
					}
					return writeKV(ctx, e, e.Delete, del)
				})
				if round <= len(views) {
					v := views[round-1]
					both("create "+v.name, func(e *engine.Engine) error {
						return e.CreateMV(ctx, v.name, v.plan, engine.MVOptions{Parallelism: v.p})
					})
					created = append(created, v.name)
				}
				switch round {
				case 6:
					both("rescale by_g", func(e *engine.Engine) error { return e.RescheduleMV(ctx, "by_g", 3) })
				case 8:
					both("rescale pairs", func(e *engine.Engine) error { return e.RescheduleMV(ctx, "pairs", 2) })
				case 9:
					both("crash", func(e *engine.Engine) error { return e.Crash() })
					es = open()
				}
				both("checkpoint", func(e *engine.Engine) error { _, err := e.WaitCheckpoint(ctx); return err })
				for _, name := range created {
					got, want := scanRows(t, es[0], name), scanRows(t, es[1], name)
					if !slices.Equal(got, want) {
						t.Fatalf("round %d: %s over the mesh has %d rows, over channels %d\nmesh: %v\nchannels: %v", round, name, len(got), len(want), got, want)
					}
				}
			}
			opened := mesh.Opened()
			if opened == 0 {
				t.Fatal("no edge went through the mesh")
			}
			t.Logf("%d edges went through the mesh", opened)
			both("close", func(e *engine.Engine) error { return e.Close() })
			mem.AssertSize(t, 0)
		})
	}
}

// A broken edge fails the round it is in, naming the edge; the engine recovers from
// the last checkpoint onto new streams, sends the round's writes again, and holds
// after it what the embedded engine holds.
func TestBrokenEdgeFailsRound(t *testing.T) {
	const seed = 7
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0xb4e4))
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	mesh := newMesh(t, mem)
	es := []*engine.Engine{meshEngine(t, t.TempDir(), mesh, mem), meshEngine(t, t.TempDir(), nil, nil)}
	ctx := testCtx(t)
	write := func(e *engine.Engine, ins, upd, del [][]any) {
		t.Helper()
		for _, w := range []struct {
			op   func(context.Context, string, arrow.RecordBatch) error
			rows [][]any
		}{{e.Insert, ins}, {e.Update, upd}, {e.Delete, del}} {
			if err := writeKV(ctx, e, w.op, w.rows); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, e := range es {
		if err := e.CreateTable(ctx, kv, engine.TableOptions{Parallelism: 3}); err != nil {
			t.Fatal(err)
		}
		if err := e.CreateMV(ctx, views[1].name, views[1].plan, engine.MVOptions{Parallelism: 3}); err != nil {
			t.Fatal(err)
		}
	}
	live := map[int64]bool{}
	compare := func(when string) {
		t.Helper()
		for _, name := range []string{"kv", "by_g"} {
			if got, want := scanRows(t, es[0], name), scanRows(t, es[1], name); !slices.Equal(got, want) {
				t.Fatalf("%s: %s over the mesh: %v\nover channels: %v", when, name, got, want)
			}
		}
	}
	for round := range 3 {
		ins, upd, del := batch(rng, live)
		for _, e := range es {
			write(e, ins, upd, del)
			if _, err := e.WaitCheckpoint(ctx); err != nil {
				t.Fatal(err)
			}
		}
		compare(fmt.Sprintf("round %d", round))
	}
	committed, recoveries := es[0].CommittedEpoch(), es[0].Recoveries()

	// Writes the break's round holds (not yet checkpointed), then the break: the
	// recovery sends them again, so the engine over channels gets them too.
	ins, upd, del := batch(rng, live)
	for _, e := range es {
		write(e, ins, upd, del)
	}
	if err := mesh.Break(1); err != nil {
		t.Fatal(err)
	}
	_, err := es[0].WaitCheckpoint(ctx)
	if err == nil || !strings.Contains(err.Error(), "exchange: edge") {
		t.Fatalf("checkpoint after the break = %v, want an error naming an exchange edge", err)
	}
	t.Logf("checkpoint after the break: %v", err)
	if got := es[0].Recoveries(); got != recoveries+1 {
		t.Fatalf("%d recoveries after the break, want %d", got, recoveries+1)
	}
	if got := es[0].CommittedEpoch(); got != committed {
		t.Fatalf("committed epoch %d after the break, want %d", got, committed)
	}
	compare("after the recovery")
	// The new graph is generation 2: a stream of generation 1, a late sender of the
	// old graph, is refused and feeds nothing.
	client, err := Dial(mesh.Addr(1), testWindow)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := NewSender(ctx, client, Edge{Up: 1, Down: 2, Generation: 1}, nil, mem); err == nil || !strings.Contains(err.Error(), "not expected") {
		t.Fatalf("a sender of the old generation: %v, want it refused", err)
	}
	for round := range 3 {
		ins, upd, del := batch(rng, live)
		for _, e := range es {
			write(e, ins, upd, del)
			if _, err := e.WaitCheckpoint(ctx); err != nil {
				t.Fatalf("round %d after the recovery: %v", round, err)
			}
		}
		compare(fmt.Sprintf("round %d after the recovery", round))
	}
	for _, e := range es {
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	mem.AssertSize(t, 0)
}
