package executors_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// checkChangelog fails when c's visible rows are not a valid changelog.
func checkChangelog(t *testing.T, c *vec.Chunk) {
	t.Helper()
	if err := vectest.ChangelogError(c); err != nil {
		t.Fatal(err)
	}
}

func randomBids(t *testing.T, mem memory.Allocator, chunks int) ([]executors.Message, []*vec.Chunk) {
	rng := vectest.NewRand(vectest.Seed(t))
	var msgs []executors.Message
	var keep []*vec.Chunk
	for i := 0; i < chunks; i++ {
		c := vectest.RandomChunk(rng, mem, tables.BidTable(), 1+rng.IntN(500), 0)
		c.Retain() // one reference for the oracle
		keep = append(keep, c)
		msgs = append(msgs, executors.ChunkMessage(c))
		if i%3 == 2 {
			msgs = append(msgs, executors.BarrierMessage(&executors.Barrier{Prev: executors.Epoch(i), Curr: executors.Epoch(i + 1)}))
		}
	}
	return msgs, keep
}

func TestFilter(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	msgs, inputs := randomBids(t, mem, 30)
	defer func() {
		for _, c := range inputs {
			c.Release()
		}
	}()
	src := executors.NewValues(tables.BidTable().ArrowSchema(), msgs)
	const limit = int64(0)
	f, err := executors.NewFilter(src, executors.Call("greater", executors.Col(tables.BidColPrice), executors.Lit(limit)), mem)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	next := 0 // index of the next input chunk with a visible row kept
	barriers := 0
	for {
		m, err := f.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Barrier != nil {
			barriers++
			continue
		}
		out := m.Chunk
		// Find the input this came from: the next one with a kept row.
		var in *vec.Chunk
		for ; next < len(inputs); next++ {
			c := inputs[next]
			price := c.Record().Column(tables.BidColPrice).(*array.Int64)
			any := false
			for i := 0; i < c.NumRows(); i++ {
				if c.Visible(i) && price.Value(i) > limit {
					any = true
				}
			}
			if any {
				in = c
				next++
				break
			}
		}
		if in == nil {
			t.Fatal("filter emitted more chunks than inputs with kept rows")
		}
		price := in.Record().Column(tables.BidColPrice).(*array.Int64)
		for i := 0; i < in.NumRows(); i++ {
			want := in.Visible(i) && price.Value(i) > limit
			if out.Visible(i) != want {
				t.Fatalf("row %d: visible %v, want %v", i, out.Visible(i), want)
			}
			if want && in.Ops()[i] != out.Ops()[i] {
				// Only split update pairs may change, into Delete or Insert.
				if !((in.Ops()[i] == vec.UpdateDelete && out.Ops()[i] == vec.Delete) || (in.Ops()[i] == vec.UpdateInsert && out.Ops()[i] == vec.Insert)) {
					t.Fatalf("row %d: op %v became %v", i, in.Ops()[i], out.Ops()[i])
				}
			}
		}
		checkChangelog(t, out)
		out.Release()
	}
	if barriers != 10 {
		t.Fatalf("%d barriers passed, want 10", barriers)
	}
	if _, err := executors.NewFilter(executors.NewValues(tables.BidTable().ArrowSchema(), nil), executors.Col(0), mem); err == nil {
		t.Fatal("a non-boolean predicate was accepted")
	}
}

func TestProject(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	msgs, inputs := randomBids(t, mem, 10)
	defer func() {
		for _, c := range inputs {
			c.Release()
		}
	}()
	src := executors.NewValues(tables.BidTable().ArrowSchema(), msgs)
	p, err := executors.NewProject(src, []executors.Expr{
		executors.Col(tables.BidColAuction),
		executors.Call("multiply_unchecked", executors.Col(tables.BidColPrice), executors.Lit(int64(2))),
	}, []string{"auction", "double_price"}, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Schema().NumFields() != 2 || p.Schema().Field(1).Name != "double_price" {
		t.Fatalf("schema %v", p.Schema())
	}
	i := 0
	for {
		m, err := p.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Chunk == nil {
			continue
		}
		in, out := inputs[i], m.Chunk
		i++
		auction := in.Record().Column(tables.BidColAuction).(*array.Int64)
		price := in.Record().Column(tables.BidColPrice).(*array.Int64)
		a := out.Record().Column(0).(*array.Int64)
		d := out.Record().Column(1).(*array.Int64)
		for r := 0; r < in.NumRows(); r++ {
			if a.Value(r) != auction.Value(r) || d.Value(r) != price.Value(r)*2 {
				t.Fatalf("row %d: (%d, %d), want (%d, %d)", r, a.Value(r), d.Value(r), auction.Value(r), price.Value(r)*2)
			}
			if out.Ops()[r] != in.Ops()[r] || out.Visible(r) != in.Visible(r) {
				t.Fatalf("row %d: op or visibility changed", r)
			}
		}
		out.Release()
	}
	if i != len(inputs) {
		t.Fatalf("%d chunks out, %d in", i, len(inputs))
	}
	if _, err := executors.NewProject(executors.NewValues(tables.BidTable().ArrowSchema(), nil),
		[]executors.Expr{executors.Col(42)}, []string{"x"}, mem); err == nil {
		t.Fatal("a column out of range was accepted")
	}
}
