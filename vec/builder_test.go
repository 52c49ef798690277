package vec_test

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// The generic builder and the generated one build identical chunks.
func TestChunkBuilderMatchesGenerated(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(vectest.Seed(t))
	gb := tables.NewBidBuilder(mem)
	defer gb.Release()
	rb := vec.NewChunkBuilder(mem, tables.BidTable())
	defer rb.Release()
	ops := vectest.RandomOps(rng, 300)
	for i, op := range ops {
		r := tables.Bid{
			Auction: rng.Int64N(100), Bidder: rng.Int64N(1000), Price: rng.Int64(),
			Channel: vectest.RandomString(rng), URL: vectest.RandomString(rng),
			DateTime: arrow.Timestamp(int64(i) * 1000), Extra: vectest.RandomString(rng),
		}
		gb.Append(op, &r)
		if err := rb.AppendRow(op, r.Auction, r.Bidder, r.Price, r.Channel, r.URL, r.DateTime, r.Extra); err != nil {
			t.Fatal(err)
		}
	}
	g := gb.Build()
	defer g.Release()
	r, err := rb.Build()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if err := vectest.ChunksEqual(g, r); err != nil {
		t.Fatal(err)
	}
}

func TestChunkBuilderErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := vec.NewChunkBuilder(mem, tables.BidTable())
	defer b.Release()
	if err := b.AppendRow(vec.Insert, int64(1), int64(2), int64(3), "c", "u", arrow.Timestamp(4), "e"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		values []any
		want   string
	}{
		{[]any{int64(1)}, "row has 1 values"},
		{[]any{int64(1), "x", int64(3), "c", "u", arrow.Timestamp(4), "e"}, "column bidder: value of Go type string for a int64 column"},
		{[]any{int64(1), int64(2), int64(3), nil, "u", arrow.Timestamp(4), "e"}, "column channel: NULL in a NOT NULL column"},
	}
	for _, c := range cases {
		err := b.AppendRow(vec.Insert, c.values...)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "table bid") {
			t.Errorf("AppendRow(%v) = %v, want an error containing %q", c.values, err, c.want)
		}
	}
	// Failed rows left nothing behind.
	ch, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Release()
	if ch.NumRows() != 1 {
		t.Fatalf("%d rows, want 1", ch.NumRows())
	}
}
