package bench

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// q0 is Nexmark q0's projection of bid: auction, bidder, price, date_time.
var q0 = vec.Projection{tables.BidColAuction, tables.BidColBidder, tables.BidColPrice, tables.BidColDateTime}

const batch = 1024

// bidChunk is BidChunk's first n rows (Nexmark-shaped bid rows, ~100 byte values).
func bidChunk(mem memory.Allocator, n int, seed uint64) *vec.Chunk {
	return BidChunk(mem, 0, n, seed)
}

func encodedValues(c *vec.Chunk) *vec.Bytes {
	var vals vec.Bytes
	vals.Reset()
	tables.BidKernels().EncodeValues(c, &vals)
	return &vals
}

func q0Builders(mem memory.Allocator) []vec.Builder {
	return vectest.ValueBuildersFor(mem, tables.BidTable(), q0)
}

// alternate runs first and second one after the other n times and returns the time
// each took in all: two variants timed in one run, under the same machine load.
func alternate(n int, first, second func()) (t1, t2 time.Duration) {
	for range n {
		t0 := time.Now()
		first()
		t := time.Now()
		second()
		t2 += time.Since(t)
		t1 += t.Sub(t0)
	}
	return t1, t2
}

// drain turns the builders' contents into arrays and releases them, as a consumer
// of each decoded batch would: the buffers go back to the (pooled) allocator.
func drain[B vec.Builder](bs []B) {
	for _, b := range bs {
		b.NewArray().Release()
	}
}

// BenchmarkDecodeProjected decodes batches of bid row values into Arrow builders for
// q0's four columns, with the generated and the generic kernels.
func BenchmarkDecodeProjected(b *testing.B) {
	pool := vec.NewPoolAllocator()
	c := bidChunk(pool, batch, 1)
	defer c.Release()
	vals := encodedValues(c)
	for _, k := range []vec.Kernels{tables.BidKernels(), vec.NewGeneric(tables.BidTable())} {
		name := "generic"
		if k.Generated() {
			name = "generated"
		}
		b.Run(name, func(b *testing.B) {
			bs := q0Builders(pool)
			b.SetBytes(int64(len(vals.Data)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := k.DecodeValues(vals, q0, bs); err != nil {
					b.Fatal(err)
				}
				drain(bs)
			}
			b.ReportMetric(float64(batch)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkDecodeRatio times the generated and the generic decode of the same batch
// alternately in one run and reports generated rows/s ÷ generic rows/s (target ≥ 3)
// and the generated path's allocations per row.
func BenchmarkDecodeRatio(b *testing.B) {
	pool := vec.NewPoolAllocator()
	c := bidChunk(pool, batch, 1)
	defer c.Release()
	vals := encodedValues(c)
	gk, rk := tables.BidKernels(), vec.NewGeneric(tables.BidTable())
	gb, rb := q0Builders(pool), q0Builders(pool)
	tg, tr := alternate(b.N, func() {
		if err := gk.DecodeValues(vals, q0, gb); err != nil {
			b.Fatal(err)
		}
		drain(gb)
	}, func() {
		if err := rk.DecodeValues(vals, q0, rb); err != nil {
			b.Fatal(err)
		}
		drain(rb)
	})
	b.ReportMetric(tr.Seconds()/tg.Seconds(), "generated/generic")
	b.ReportMetric(float64(batch*b.N)/tg.Seconds(), "generated-rows/s")
	b.ReportMetric(float64(batch*b.N)/tr.Seconds(), "generic-rows/s")
	// Allocations come from Arrow's array headers when a batch is handed on (NewArray),
	// once per batch: the same count for 1024 and 4096 rows, none per row.
	small := decodeAllocs(pool, batch)
	large := decodeAllocs(pool, 4*batch)
	b.ReportMetric(small, "allocs/batch@1024")
	b.ReportMetric(large, "allocs/batch@4096")
	b.ReportMetric((large-small)/float64(3*batch), "allocs/extra-row")
}

// decodeAllocs counts the Go allocations of decoding and handing on one batch of n
// rows with the generated kernel, in steady state.
func decodeAllocs(pool memory.Allocator, n int) float64 {
	c := bidChunk(pool, n, 5)
	defer c.Release()
	vals := encodedValues(c)
	bs := q0Builders(pool)
	k := tables.BidKernels()
	return testing.AllocsPerRun(50, func() {
		_ = k.DecodeValues(vals, q0, bs)
		drain(bs)
	})
}

// markCase prepares positions over bid's vnodes: every vnode InProgress at a random
// row's key (the worst case: a typed compare per row), or a mix of all three states.
func markPositions(c *vec.Chunk, mixed bool) *vec.Positions {
	t := tables.BidTable()
	var keys vec.Bytes
	keys.Reset()
	tables.BidKernels().EncodeKeys(c, &keys)
	p := vec.NewPositions(t.VnodeCount)
	rng := rand.New(rand.NewPCG(7, 7))
	for v := range p.State {
		p.State[v] = vec.InProgress
		if mixed {
			p.State[v] = vec.BackfillState(rng.IntN(3))
		}
		p.Pos[v] = keys.At(rng.IntN(keys.Len()))
	}
	return p
}

// rowBytes is the bytes a chunk's rows occupy in its Arrow buffers (values and
// offsets, not validity bitmaps): what "the same bytes" means for the memcpy baseline.
func rowBytes(c *vec.Chunk) int {
	n := 0
	for _, col := range c.Record().Columns() {
		for i, buf := range col.Data().Buffers() {
			if i == 0 || buf == nil {
				continue
			}
			n += buf.Len()
		}
	}
	return n
}

// BenchmarkMark runs the generated mark kernel over a batch of bid rows and, in the
// same run, copies the batch's row bytes; it reports both per row and their ratio
// (target: mark ≤ 1× memcpy).
func BenchmarkMark(b *testing.B) {
	pool := vec.NewPoolAllocator()
	c := bidChunk(pool, batch, 2)
	defer c.Release()
	k := tables.BidKernels()
	vnodes := make([]uint16, batch)
	k.Vnodes(c, vnodes)
	out := make([]byte, (batch+7)/8)
	src := make([]byte, rowBytes(c))
	dst := make([]byte, len(src))
	for _, mixed := range []bool{false, true} {
		for _, kind := range []string{"generated", "generic"} {
			name := fmt.Sprintf("%s/inprogress", kind)
			if mixed {
				name = fmt.Sprintf("%s/mixed", kind)
			}
			kern := vec.Kernels(k)
			if kind == "generic" {
				kern = vec.NewGeneric(tables.BidTable())
			}
			m, err := kern.NewMarker(markPositions(c, mixed))
			if err != nil {
				b.Fatal(err)
			}
			b.Run(name, func(b *testing.B) {
				tm, tc := alternate(b.N, func() { m.Mark(c, vnodes, out) }, func() { copy(dst, src) })
				allocs := testing.AllocsPerRun(20, func() { m.Mark(c, vnodes, out) })
				b.ReportMetric(float64(tm.Nanoseconds())/float64(batch*b.N), "mark-ns/row")
				b.ReportMetric(float64(tc.Nanoseconds())/float64(batch*b.N), "memcpy-ns/row")
				b.ReportMetric(tm.Seconds()/tc.Seconds(), "mark/memcpy")
				b.ReportMetric(allocs/batch, "allocs/row")
				b.ReportMetric(float64(len(src))/batch, "bytes/row")
			})
		}
	}
}

// BenchmarkVnodes hashes the distribution key of a batch of bid rows.
func BenchmarkVnodes(b *testing.B) {
	pool := vec.NewPoolAllocator()
	c := bidChunk(pool, batch, 3)
	defer c.Release()
	out := make([]uint16, batch)
	for _, k := range []vec.Kernels{tables.BidKernels(), vec.NewGeneric(tables.BidTable())} {
		name := "generic"
		if k.Generated() {
			name = "generated"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				k.Vnodes(c, out)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(batch*b.N), "ns/row")
		})
	}
}

// bidStrings is bid's three string columns: channel, url, extra.
var bidStrings = vec.Projection{tables.BidColChannel, tables.BidColURL, tables.BidColExtra}

// BenchmarkDecodeStrings decodes bid's string columns from 4096-row batches of row
// values, alternating in one run between the generated decode into vec.VarBuilders
// and what the generated code did before them: Arrow's StringBuilder, reserved for
// the batch, with one UnsafeAppend per value. It reports both in ns/row and their
// ratio (arrow/varbuilder; above 1 means VarBuilder is faster).
func BenchmarkDecodeStrings(b *testing.B) {
	const rows = 4 * batch
	pool := vec.NewPoolAllocator()
	c := bidChunk(pool, rows, 3)
	defer c.Release()
	vals := encodedValues(c)
	k := tables.BidKernels()
	vb := vectest.ValueBuildersFor(pool, tables.BidTable(), bidStrings)
	ab := make([]*array.StringBuilder, len(bidStrings))
	for i := range ab {
		ab[i] = array.NewStringBuilder(pool)
	}
	l := vec.NewLayout(tables.BidTable())
	arrowDecode := func() {
		data, offs := vals.Data, vals.Offsets
		for j, col := range bidStrings {
			prev, slot := l.PrevVar[col], l.Slot[col]
			sb := ab[j]
			sb.Reserve(rows)
			total := 0
			for i := 0; i < rows; i++ {
				total += len(vec.ValueVar(data[offs[i]:offs[i+1]], l.VarStart, prev, slot))
			}
			sb.ReserveData(total)
			for i := 0; i < rows; i++ {
				sb.BinaryBuilder.UnsafeAppend(vec.ValueVar(data[offs[i]:offs[i+1]], l.VarStart, prev, slot))
			}
		}
	}
	// Both paths give the same arrays.
	if err := k.DecodeValues(vals, bidStrings, vb); err != nil {
		b.Fatal(err)
	}
	arrowDecode()
	for j := range bidStrings {
		got, want := vb[j].NewArray(), ab[j].NewArray()
		if !array.Equal(got, want) {
			b.Fatalf("column %d: VarBuilder's array differs from Arrow's builder's", bidStrings[j])
		}
		got.Release()
		want.Release()
	}
	tv, ta := alternate(b.N, func() {
		if err := k.DecodeValues(vals, bidStrings, vb); err != nil {
			b.Fatal(err)
		}
		drain(vb)
	}, func() {
		arrowDecode()
		drain(ab)
	})
	n := float64(rows) * float64(b.N)
	b.ReportMetric(float64(tv.Nanoseconds())/n, "varbuilder-ns/row")
	b.ReportMetric(float64(ta.Nanoseconds())/n, "arrow-ns/row")
	b.ReportMetric(ta.Seconds()/tv.Seconds(), "arrow/varbuilder")
}

// BenchmarkBidBuilder appends 4096 bid rows a batch through the generated
// tables.BidBuilder (its string columns go into vec.VarBuilders) and, alternating in
// the same run, appends the same rows' strings into Arrow's StringBuilder, as the
// generated builder did before, with its integer columns as the generated builder
// appends them. It reports both in ns/row and their ratio (above 1: the generated
// builder is faster).
func BenchmarkBidBuilder(b *testing.B) {
	const rows = 4 * batch
	pool := vec.NewPoolAllocator()
	c := bidChunk(pool, rows, 9)
	defer c.Release()
	v, err := tables.NewBidView(c)
	if err != nil {
		b.Fatal(err)
	}
	rs := make([]tables.Bid, rows)
	for i := range rs {
		rs[i] = v.Row(i)
	}
	gb := tables.NewBidBuilder(pool)
	defer gb.Release()
	ints := make([]*array.Int64Builder, 3)
	for i := range ints {
		ints[i] = array.NewInt64Builder(pool)
	}
	ts := array.NewTimestampBuilder(pool, tables.BidTable().ArrowSchema().Field(tables.BidColDateTime).Type.(*arrow.TimestampType))
	strs := make([]*array.StringBuilder, 3)
	for i := range strs {
		strs[i] = array.NewStringBuilder(pool)
	}
	arrowAppend := func() {
		for _, x := range ints {
			x.Reserve(rows)
		}
		ts.Reserve(rows)
		for _, x := range strs {
			x.Reserve(rows)
		}
		for i := range rs {
			r := &rs[i]
			ints[0].UnsafeAppend(r.Auction)
			ints[1].UnsafeAppend(r.Bidder)
			ints[2].UnsafeAppend(r.Price)
			strs[0].Append(r.Channel)
			strs[1].Append(r.URL)
			ts.UnsafeAppend(r.DateTime)
			strs[2].Append(r.Extra)
		}
		for _, x := range ints {
			x.NewArray().Release()
		}
		ts.NewArray().Release()
		for _, x := range strs {
			x.NewArray().Release()
		}
	}
	tg, ta := alternate(b.N, func() {
		gb.Reserve(rows)
		for j := range rs {
			gb.Append(vec.Insert, &rs[j])
		}
		gb.Build().Release()
	}, arrowAppend)
	n := float64(rows) * float64(b.N)
	b.ReportMetric(float64(tg.Nanoseconds())/n, "generated-ns/row")
	b.ReportMetric(float64(ta.Nanoseconds())/n, "arrow-ns/row")
	b.ReportMetric(ta.Seconds()/tg.Seconds(), "arrow/generated")
}

// BenchmarkRowDecode decodes 4096 bid rows of every column the two ways a snapshot
// worker can, alternating in one run: copy each value into an arena and decode the
// batch with DecodeValues (the path of kernels without a row decoder), or decode
// each value at once with the generated vec.RowDecoder (the path of generated
// kernels, which skips the copy). It reports both in ns/row and their ratio
// (arena/row; above 1: the row decoder is faster). The values come from a slice in
// the cache here; a storage read's come from pebble's blocks.
func BenchmarkRowDecode(b *testing.B) {
	const rows = 4 * batch
	pool := vec.NewPoolAllocator()
	c := bidChunk(pool, rows, 5)
	defer c.Release()
	vals := encodedValues(c)
	k := tables.BidKernels()
	all := vectest.AllColumns(tables.BidTable())
	ab := vectest.ValueBuildersFor(pool, tables.BidTable(), all)
	rb := vectest.ValueBuildersFor(pool, tables.BidTable(), all)
	rd, err := k.(vec.RowDecoders).NewRowDecoder(all, rb)
	if err != nil {
		b.Fatal(err)
	}
	var arena vec.Bytes
	arenaDecode := func() {
		arena.Reset()
		for i := 0; i < rows; i++ {
			arena.Append(vals.At(i))
		}
		for _, x := range ab {
			x.Reserve(rows)
		}
		if err := k.DecodeValues(&arena, all, ab); err != nil {
			b.Fatal(err)
		}
	}
	rowDecode := func() {
		rd.Begin(rows)
		for i := 0; i < rows; i++ {
			if err := rd.Append(vals.At(i)); err != nil {
				b.Fatal(err)
			}
		}
		if err := rd.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	// Both paths give the same arrays (twice: the second batch is sized from the first).
	for range 2 {
		arenaDecode()
		rowDecode()
		for j := range all {
			got, want := rb[j].NewArray(), ab[j].NewArray()
			if !array.Equal(got, want) {
				b.Fatalf("column %d: the row decoder's array differs from DecodeValues'", all[j])
			}
			got.Release()
			want.Release()
		}
	}
	ta, tr := alternate(b.N, func() {
		arenaDecode()
		drain(ab)
	}, func() {
		rowDecode()
		drain(rb)
	})
	n := float64(rows) * float64(b.N)
	b.ReportMetric(float64(ta.Nanoseconds())/n, "arena-ns/row")
	b.ReportMetric(float64(tr.Nanoseconds())/n, "row-ns/row")
	b.ReportMetric(ta.Seconds()/tr.Seconds(), "arena/row")
	b.ReportMetric(testing.AllocsPerRun(20, func() { rowDecode(); drain(rb) })/rows, "row-allocs/row")
}
