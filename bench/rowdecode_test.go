package bench

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// TestRowDecoderBatchSizing runs bid's generated row decoder through batches whose
// reservations go wrong if sized naively: a batch of one 1 MiB value followed by a
// 4096-row Begin (its bytes per value would ask for 4.5 GiB), and a Begin of 2^40
// rows. Neither may panic or reserve without bound, a short batch must not pin a large
// reservation, and every batch must decode its rows exactly.
func TestRowDecoderBatchSizing(t *testing.T) {
	mem := memory.NewCheckedAllocator(vec.NewPoolAllocator())
	defer mem.AssertSize(t, 0)
	tbl := tables.BidTable()
	all := vectest.AllColumns(tbl)
	bs := vectest.ValueBuildersFor(mem, tbl, all)
	defer vectest.ReleaseBuilders(bs)
	rd, err := tables.BidKernels().(vec.RowDecoders).NewRowDecoder(all, bs)
	if err != nil {
		t.Fatal(err)
	}
	row := func(i int, extra string) tables.Bid {
		return tables.Bid{Auction: int64(i), Bidder: 7, Price: int64(100 + i), Channel: "apple", URL: "https://example.com/" + strings.Repeat("u", i%50),
			DateTime: arrow.Timestamp(i), Extra: extra}
	}
	batch := func(begin int, rows []tables.Bid) {
		t.Helper()
		b := tables.NewBidBuilder(mem)
		for i := range rows {
			b.Append(vec.Insert, &rows[i])
		}
		c := b.Build()
		b.Release()
		defer c.Release()
		var vals vec.Bytes
		vals.Reset()
		tables.BidKernels().EncodeValues(c, &vals)
		rd.Begin(begin)
		for i := range rows {
			if err := rd.Append(vals.At(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := rd.Flush(); err != nil {
			t.Fatal(err)
		}
		cols := make([]arrow.Array, len(bs))
		for j, b := range bs {
			cols[j] = b.NewArray()
		}
		got := array.NewRecordBatch(c.Record().Schema(), cols, int64(len(rows)))
		for _, a := range cols {
			a.Release()
		}
		defer got.Release()
		if err := vectest.RecordsEqual(got, c.Record()); err != nil {
			t.Fatalf("Begin(%d), %d rows: %v", begin, len(rows), err)
		}
		// The batch holds about its own bytes, not the reservation: the chunk it came
		// from and the decoded record, each well under 2 MiB here.
		if held := mem.CurrentAlloc(); held > 8<<20 {
			t.Fatalf("Begin(%d), %d rows: %d bytes held while the batch lives", begin, len(rows), held)
		}
	}
	batch(1, []tables.Bid{row(0, strings.Repeat("x", 1<<20))})
	var small []tables.Bid
	for i := 0; i < 100; i++ {
		small = append(small, row(i, "e"))
	}
	batch(4096, small)
	batch(1<<40, small[:3])
	batch(4096, small)
}
