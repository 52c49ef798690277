package testschemas_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	nexmark "github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/internal/testschemas"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// The generated mark folds each vnode's state into a threshold on the first pk column
// (the type's extreme values for Completed and NotStarted): rows holding those extreme
// values, and rows equal to a position's first column, take the rare path. Check them
// against the generic marker for bid (ASC int64 first) and p2 (DESC timestamptz first).
func TestMarkExtremeValues(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(vectest.Seed(t))
	extremes := []int64{math.MinInt64, math.MinInt64 + 1, -1, 0, 1, math.MaxInt64 - 1, math.MaxInt64}

	bb := nexmark.NewBidBuilder(mem)
	defer bb.Release()
	pb := testschemas.NewP2Builder(mem)
	defer pb.Release()
	for i := 0; i < 2000; i++ {
		x := extremes[rng.IntN(len(extremes))]
		y := extremes[rng.IntN(len(extremes))]
		bb.Append(vec.Insert, &nexmark.Bid{Auction: x, Bidder: y, DateTime: arrow.Timestamp(extremes[rng.IntN(len(extremes))])})
		pb.Append(vec.Insert, &testschemas.P2{DateTime: arrow.Timestamp(x), OpCol: int32(y >> 32)})
	}
	var chunks []*vec.Chunk
	for _, c := range []*vec.Chunk{bb.Build(), pb.Build()} {
		// Each chunk is checked all visible and with every third row hidden, which
		// runs the marker's two loops.
		vis := vec.NewBitmap(mem, c.NumRows())
		for i := 0; i < c.NumRows(); i++ {
			if i%3 != 0 {
				vis.Bytes()[i>>3] |= 1 << (i & 7)
			}
		}
		chunks = append(chunks, c, c.WithVisibility(vis))
		vis.Release()
	}
	for _, c := range chunks {
		func() {
			defer c.Release()
			gk, ok := vec.Lookup(tableOf(c))
			if !ok {
				t.Fatal("no generated kernels")
			}
			rk := vec.NewGeneric(gk.Table())
			n := c.NumRows()
			vn := make([]uint16, n)
			gk.Vnodes(c, vn)
			var keys vec.Bytes
			keys.Reset()
			rk.EncodeKeys(c, &keys)
			for round := 0; round < 50; round++ {
				pos := vec.NewPositions(gk.Table().VnodeCount)
				for v := range pos.State {
					pos.State[v] = vec.BackfillState(rng.IntN(3))
					pos.Pos[v] = keys.At(rng.IntN(n))
				}
				gm, err := gk.NewMarker(pos)
				if err != nil {
					t.Fatal(err)
				}
				rm, err := rk.NewMarker(pos)
				if err != nil {
					t.Fatal(err)
				}
				g, r := make([]byte, (n+7)/8), make([]byte, (n+7)/8)
				gm.Mark(c, vn, g)
				rm.Mark(c, vn, r)
				if !bytes.Equal(g, r) {
					t.Fatalf("table %s round %d: generated and generic marks differ", gk.Table().Name, round)
				}
			}
		}()
	}
}

func tableOf(c *vec.Chunk) *schema.Table {
	if c.Record().NumCols() == int64(len(nexmark.BidTable().Columns)) {
		return nexmark.BidTable()
	}
	return testschemas.P2Table()
}
