package storage_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// replaceColumn returns a chunk like c (all inserts, all visible) with column col
// replaced by arr under field f.
func replaceColumn(mem memory.Allocator, c *vec.Chunk, col int, f arrow.Field, arr arrow.Array) *vec.Chunk {
	rec := c.Record()
	fields := append([]arrow.Field(nil), rec.Schema().Fields()...)
	cols := append([]arrow.Array(nil), rec.Columns()...)
	fields[col], cols[col] = f, arr
	out := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
	defer out.Release()
	return vectest.ChunkOf(mem, out, append([]vec.Op(nil), c.Ops()...), nil)
}

// badChunks are chunks of the wrong shape for a table with columns cols of the bid
// table (every column, or an S2 projection): each with the words its error must hold.
func badChunks(t *testing.T, mem memory.Allocator, ids []int64, cols []int) []struct {
	name string
	c    *vec.Chunk
	want []string
} {
	good := bidChunk(mem, inserts(ids, bidVal{Price: 9, Channel: "bad"}))
	defer good.Release()
	proj := vectest.Project(bidT, good.Record(), cols)
	defer proj.Release()
	base := good.WithRecord(proj)
	defer base.Release()
	n := len(ids)
	pos := -1 // position of price in cols
	for i, c := range cols {
		if c == tables.BidColPrice {
			pos = i
		}
	}
	if pos < 0 {
		t.Fatal("cols must include price")
	}

	fb := array.NewFloat64Builder(mem)
	for i := 0; i < n; i++ {
		fb.Append(1.5)
	}
	floats := fb.NewArray()
	fb.Release()
	defer floats.Release()
	ib := array.NewInt64Builder(mem)
	ib.Append(1)
	for i := 1; i < n; i++ {
		ib.AppendNull()
	}
	nulls := ib.NewArray()
	ib.Release()
	defer nulls.Release()

	kv := kvTable(256)
	return []struct {
		name string
		c    *vec.Chunk
		want []string
	}{
		{"other table", kvChunk(mem, kv, ids), []string{"bid", "4 columns"}},
		{"wrong type", replaceColumn(mem, base, pos, arrow.Field{Name: "price", Type: arrow.PrimitiveTypes.Float64}, floats), []string{"bid", "price", "float64"}},
		{"null in not null", replaceColumn(mem, base, pos, arrow.Field{Name: "price", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, nulls), []string{"bid", "price", "NULL"}},
	}
}

// splitIDs returns ids in own and ids outside it.
func splitIDs(p *bidPlacer, own *vnode.Bitmap, n int) (in, out []int64) {
	for id := int64(0); len(in) < n || len(out) < n; id++ {
		v, _ := p.place(id)
		if own.Contains(v) {
			if len(in) < n {
				in = append(in, id)
			}
		} else if len(out) < n {
			out = append(out, id)
		}
	}
	return in, out
}

// halfOwnedBids opens a store on a memory file system with one node, and on it a
// state table of bid that owns the lower half of the vnodes.
func halfOwnedBids(t *testing.T) (*storage.Store, *storage.Node, *storage.StateTable, *vnode.Bitmap) {
	t.Helper()
	s := openStore(t, vfs.NewMem())
	n := s.AddNode()
	own := vnode.FromRange(bidT.VnodeCount, 0, bidT.VnodeCount/2)
	w, err := storage.NewStateTable(n, bidTableID, bidT, own)
	if err != nil {
		t.Fatal(err)
	}
	return s, n, w, own
}

// TestStateTableWriteErrors: a chunk of the wrong shape, or with a row in a vnode the
// actor does not own, is an error naming the table and the column or vnode, and
// nothing of it is written, not even its valid rows.
func TestStateTableWriteErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s, n, w, own := halfOwnedBids(t)
	p := newBidPlacer()
	in, out := splitIDs(p, own, 5)
	ops := inserts(in[:3], bidVal{Price: 1, Channel: "ok"})
	writeBids(t, mem, w, ops)
	want := bidState{}
	want.apply(ops)
	unsealed := w.UnsealedBytes()
	read := func(what string) {
		t.Helper()
		got, _ := readBidsAt(t, s, n, w, p)
		expectState(t, what, want, got)
		if w.UnsealedBytes() != unsealed {
			t.Fatalf("%s: unsealed bytes %d, want %d", what, w.UnsealedBytes(), unsealed)
		}
	}

	for _, c := range badChunks(t, mem, in[3:], vectest.AllColumns(bidT)) {
		err := w.Write(c.c)
		c.c.Release()
		if err == nil {
			t.Fatalf("%s: written", c.name)
		}
		for _, word := range c.want {
			if !strings.Contains(err.Error(), word) {
				t.Errorf("%s: error %q does not name %q", c.name, err, word)
			}
		}
		read(c.name)
	}

	// Owned rows first, then one outside: the whole chunk is refused.
	mixed := append(inserts(in[3:], bidVal{Price: 2}), bidOp{Op: vec.Insert, ID: out[0], V: bidVal{Price: 2}})
	c := bidChunk(mem, mixed)
	err := w.Write(c)
	c.Release()
	v, _ := p.place(out[0])
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("vnode %d", v)) || !strings.Contains(err.Error(), "bid") {
		t.Fatalf("row in unowned vnode %d: %v", v, err)
	}
	read("unowned vnode")

	// The same row invisible does not exist: the chunk is fine.
	c = bidChunk(mem, mixed)
	vis := make([]bool, len(mixed))
	for i := range vis {
		vis[i] = i < len(mixed)-1
	}
	c2 := vectest.ChunkOf(mem, c.Record(), c.Ops(), vis)
	c.Release()
	if err := w.Write(c2); err != nil {
		t.Fatalf("invisible row outside the vnodes: %v", err)
	}
	c2.Release()
	want.apply(mixed[:len(mixed)-1])
	unsealed = w.UnsealedBytes()
	read("invisible stray row")

	w.Seal(ep(1))
	mustCheckpoint(t, s, ep(1))
	got, _ := readBidsAt(t, s, nil, w, p)
	expectState(t, "committed", want, got)
	checkRowCounts(t, s, bidTableID, p.counts(want), bidT.VnodeCount)
}

// TestReplicatedTableErrors covers the constructor's checks and refused chunks: the
// wrong S2 shape (column count, type, NULL in a NOT NULL column) and rows outside the
// actor's vnodes are errors naming the table and column or vnode, and write nothing.
func TestReplicatedTableErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	own := vnode.FromRange(bidT.VnodeCount, 100, 200)
	s2 := []int{tables.BidColPrice, tables.BidColDateTime, tables.BidColBidder, tables.BidColAuction}

	for _, c := range []struct {
		name string
		id   uint32
		s2   []int
		b    *vnode.Bitmap
		want string
	}{
		{"vnode count", bidTableID, s2, vnode.Full(8), "bid"},
		{"column out of range", bidTableID, []int{0, 1, 5, 9}, own, "9"},
		{"column twice", bidTableID, []int{0, 1, 5, 1}, own, "bidder"},
		{"missing pk column", bidTableID, []int{0, 1, 2}, own, "date_time"},
		{"metadata table id", storage.MetaTable, s2, own, "reserved"},
	} {
		if _, err := storage.NewReplicatedTable(s, c.id, bidT, c.s2, c.b, mem); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}

	r, err := storage.NewReplicatedTable(s, bidTableID, bidT, s2, own, mem)
	if err != nil {
		t.Fatal(err)
	}
	p := newBidPlacer()
	in, out := splitIDs(p, own, 4)
	ok := bidChunk(mem, inserts(in[:2], bidVal{Price: 3}))
	okS2 := project(&tableSpec{t: bidT}, ok, s2)
	ok.Release()
	if err := r.WriteChunk(okS2); err != nil {
		t.Fatal(err)
	}
	okS2.Release()
	r.Seal(ep(1))
	private := r.PrivateBytes()
	count := func(what string) {
		t.Helper()
		if r.PrivateBytes() != private {
			t.Fatalf("%s: private bytes %d, want %d", what, r.PrivateBytes(), private)
		}
		view, err := r.View()
		if err != nil {
			t.Fatal(err)
		}
		defer view.Release()
		rows := 0
		own.Iterate(func(v vnode.Vnode) bool {
			it, err := r.Iter(view, v, nil)
			if err != nil {
				t.Fatal(err)
			}
			for it.Next() {
				rows++
			}
			it.Close()
			return true
		})
		if rows != 2 {
			t.Fatalf("%s: %d rows, want 2", what, rows)
		}
	}
	count("good chunk")

	wrongCount := bidChunk(mem, inserts(in[2:], bidVal{}))
	err = r.WriteChunk(wrongCount)
	wrongCount.Release()
	if err == nil || !strings.Contains(err.Error(), "bid") || !strings.Contains(err.Error(), "S2") {
		t.Errorf("S1 chunk into S2: %v", err)
	}
	count("S1 chunk")
	bad := badChunks(t, mem, in[2:], s2)
	bad[0].c.Release() // a whole chunk of another table: covered by the S1 chunk above
	for _, c := range bad[1:] {
		err := r.WriteChunk(c.c)
		c.c.Release()
		if err == nil {
			t.Fatalf("%s: written", c.name)
		}
		for _, word := range c.want {
			if !strings.Contains(err.Error(), word) {
				t.Errorf("%s: error %q does not name %q", c.name, err, word)
			}
		}
		count(c.name)
	}
	stray := bidChunk(mem, append(inserts(in[2:], bidVal{}), bidOp{Op: vec.Delete, ID: out[0]}))
	strayS2 := project(&tableSpec{t: bidT}, stray, s2)
	stray.Release()
	err = r.WriteChunk(strayS2)
	strayS2.Release()
	v, _ := p.place(out[0])
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("vnode %d", v)) {
		t.Errorf("row in unowned vnode %d: %v", v, err)
	}
	count("stray row")
}

// TestStateTableWriteEncoded: rows written as the kernels encoded them (the
// materialize's path) leave the table as Write of the same chunk does, in order (a
// later row of a pk wins), only the rows named by index; a length mismatch, an index
// out of range or a row in a vnode the actor does not own is an error naming the
// table, and writes nothing.
func TestStateTableWriteEncoded(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s, n, w, own := halfOwnedBids(t)
	p := newBidPlacer()
	in, out := splitIDs(p, own, 6)
	want := bidState{}
	first := inserts(in[:5], bidVal{Price: 1, Channel: "a"})
	writeBids(t, mem, w, first)
	want.apply(first)
	w.Seal(ep(1))
	mustCheckpoint(t, s, ep(1))

	// A chunk of exact ops over the committed rows: an update pair, a delete, a new
	// pk inserted, deleted and inserted again (the last wins), another update pair and
	// a delete. The UpdateDelete of row 5 is not named, so it is not written: the
	// UpdateInsert of row 6 still replaces an existing row.
	ops := []bidOp{
		{Op: vec.UpdateDelete, ID: in[0], V: bidVal{Price: 1, Channel: "a"}},
		{Op: vec.UpdateInsert, ID: in[0], V: bidVal{Price: 2, Channel: "b"}},
		{Op: vec.Delete, ID: in[1]},
		{Op: vec.Insert, ID: in[5], V: bidVal{Price: 3}},
		{Op: vec.Delete, ID: in[5]},
		{Op: vec.UpdateDelete, ID: in[3], V: bidVal{Price: 1, Channel: "a"}},
		{Op: vec.UpdateInsert, ID: in[3], V: bidVal{Price: 5}},
		{Op: vec.Insert, ID: in[5], V: bidVal{Price: 4}},
		{Op: vec.Delete, ID: in[4]},
	}
	c := bidChunk(mem, ops)
	defer c.Release()
	k := vec.For(bidT)
	var keys, vals vec.Bytes
	k.EncodeKeys(c, &keys)
	k.EncodeValues(c, &vals)
	vn := make([]uint16, c.NumRows())
	k.Vnodes(c, vn)
	at := []int32{0, 1, 2, 3, 4, 6, 7, 8}
	var rowOps []vec.Op
	var named []bidOp
	for _, i := range at {
		rowOps = append(rowOps, c.Ops()[i])
		named = append(named, ops[i])
	}
	unsealed := w.UnsealedBytes()
	outVn := slices.Clone(vn)
	outVn[0] = func() uint16 { v, _ := p.place(out[0]); return v }()
	for _, bad := range []struct {
		name  string
		ops   []vec.Op
		at    []int32
		vn    []uint16
		words []string
	}{
		{"fewer indexes than ops", rowOps, at[:5], vn, []string{"bid", "8 ops, 5 pk indexes"}},
		{"index out of range", rowOps, []int32{0, 1, 2, 3, 4, 6, 7, 9}, vn, []string{"bid", "pk index 9"}},
		{"negative index", rowOps, []int32{0, 1, 2, 3, 4, 6, 7, -1}, vn, []string{"bid", "pk index -1"}},
		{"unowned vnode", rowOps, at, outVn, []string{"bid", fmt.Sprintf("vnode %d", outVn[0])}},
	} {
		var v vec.Bytes
		for r := range bad.ops {
			v.Append(vals.At(min(r, vals.Len()-1)))
		}
		err := w.WriteEncoded(bad.ops, bad.at, bad.vn, &keys, &v)
		if err == nil {
			t.Fatalf("%s: written", bad.name)
		}
		for _, word := range bad.words {
			if !strings.Contains(err.Error(), word) {
				t.Errorf("%s: error %q does not name %q", bad.name, err, word)
			}
		}
		if w.UnsealedBytes() != unsealed {
			t.Fatalf("%s: unsealed bytes %d, want %d", bad.name, w.UnsealedBytes(), unsealed)
		}
	}

	var v vec.Bytes
	for _, i := range at {
		v.Append(vals.At(int(i)))
	}
	if err := w.WriteEncoded(rowOps, at, vn, &keys, &v); err != nil {
		t.Fatal(err)
	}
	want.apply(named)
	got, _ := readBidsAt(t, s, n, w, p)
	expectState(t, "encoded writes", want, got)
	w.Seal(ep(2))
	mustCheckpoint(t, s, ep(2))
	got, _ = readBidsAt(t, s, nil, w, p)
	expectState(t, "committed", want, got)
	checkRowCounts(t, s, bidTableID, p.counts(want), bidT.VnodeCount)
}
