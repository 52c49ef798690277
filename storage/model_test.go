package storage_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// The reference model of the randomized tests: rows are kept as a pointer to the
// Arrow record they were written from, so that the expected value of any column is
// read from the original data, independently of the value codec.

// rowRef is a row written to a table: row i of rec, which holds every column of the
// table. keep, when set, marks the columns the write kept (a replicated write keeps
// S2 only; the others read back as NULL, or as an unspecified zero when NOT NULL).
type rowRef struct {
	rec  arrow.RecordBatch
	i    int
	keep []bool
}

// rows is a layer of writes of one table: vnode -> memcomparable pk -> row, where a
// nil row is a delete.
type rows map[uint16]map[string]*rowRef

func (r rows) put(v uint16, pk string, row *rowRef) {
	m := r[v]
	if m == nil {
		m = map[string]*rowRef{}
		r[v] = m
	}
	m[pk] = row
}

// applyTo applies the layer onto base, dropping deletes.
func (r rows) applyTo(base rows) {
	for v, m := range r {
		for pk, row := range m {
			if row == nil {
				if b := base[v]; b != nil {
					delete(b, pk)
				}
				continue
			}
			base.put(v, pk, row)
		}
	}
}

func (r rows) empty() bool {
	for _, m := range r {
		if len(m) > 0 {
			return false
		}
	}
	return true
}

// liveKV is one expected row of an iteration.
type liveKV struct {
	pk  string
	row *rowRef
}

// visible merges layers (oldest first, the base without deletes) for vnode v: the live
// rows in pk order.
func visible(layers []rows, v uint16) []liveKV {
	merged := map[string]*rowRef{}
	for _, l := range layers {
		for pk, row := range l[v] {
			if row == nil {
				delete(merged, pk)
			} else {
				merged[pk] = row
			}
		}
	}
	out := make([]liveKV, 0, len(merged))
	for pk, row := range merged {
		out = append(out, liveKV{pk, row})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pk < out[j].pk })
	return out
}

// lookup finds one key through the layers, newest first.
func lookup(layers []rows, v uint16, pk string) (*rowRef, bool) {
	for i := len(layers) - 1; i >= 0; i-- {
		if row, ok := layers[i][v][pk]; ok {
			return row, row != nil
		}
	}
	return nil, false
}

// deleted reports whether the newest layer that mentions the key deletes it.
func deleted(layers []rows, v uint16, pk string) bool {
	for i := len(layers) - 1; i >= 0; i-- {
		if row, ok := layers[i][v][pk]; ok {
			return row == nil
		}
	}
	return false
}

// vnodesOf lists the vnodes with any write in the layers that own accepts.
func vnodesOf(layers []rows, own *vnode.Bitmap) []uint16 {
	set := map[uint16]bool{}
	for _, l := range layers {
		for v, m := range l {
			if len(m) > 0 && own.Contains(v) {
				set[v] = true
			}
		}
	}
	out := make([]uint16, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// pickVnode picks a vnode to check: usually one with data, sometimes any owned one.
func pickVnode(rng *rand.Rand, layers []rows, own *vnode.Bitmap) (uint16, bool) {
	if own.Len() == 0 {
		return 0, false
	}
	if vs := vnodesOf(layers, own); len(vs) > 0 && rng.IntN(4) != 0 {
		return vs[rng.IntN(len(vs))], true
	}
	owned := own.ToSlice()
	return owned[rng.IntN(len(owned))], true
}

// tableSpec is one table of a randomized test.
type tableSpec struct {
	id  uint32
	t   *schema.Table
	k   vec.Kernels
	all []*rowRef // every row ever written (for replays and probe keys)
	pks map[uint16][]string
}

func newTableSpec(rng *rand.Rand, id uint32) *tableSpec {
	var t *schema.Table
	if rng.IntN(3) == 0 {
		t = bidT
	} else {
		t = vectest.RandomTable(rng, fmt.Sprintf("t%d", id))
	}
	return &tableSpec{id: id, t: t, k: vec.For(t), pks: map[uint16][]string{}}
}

// recorder keeps every record a test wrote, to release them at the end.
type recorder struct {
	mem  memory.Allocator
	recs []arrow.RecordBatch
}

func (r *recorder) keep(rec arrow.RecordBatch) {
	rec.Retain()
	r.recs = append(r.recs, rec)
}

func (r *recorder) release() {
	for _, rec := range r.recs {
		rec.Release()
	}
	r.recs = nil
}

// randomChunk returns a chunk of ts's table restricted (by visibility) to the vnodes of
// own: fresh random rows, or a replay of an earlier record with new ops (which
// deletes, updates and re-inserts keys written before). The record is kept.
func randomChunk(rng *rand.Rand, rc *recorder, ts *tableSpec, own *vnode.Bitmap) *vec.Chunk {
	var c *vec.Chunk
	if len(rc.recs) > 0 && len(ts.all) > 0 && rng.IntN(3) == 0 {
		rec := ts.all[rng.IntN(len(ts.all))].rec
		ops := vectest.RandomOps(rng, int(rec.NumRows()))
		c = vectest.ChunkOf(rc.mem, rec, ops, vectest.RandomVisibility(rng, ops))
	} else {
		c = vectest.RandomChunk(rng, rc.mem, ts.t, rng.IntN(25), rng.Float64()*0.3)
	}
	defer c.Release()
	rc.keep(c.Record())
	return restrict(rc.mem, ts, c, own)
}

// restrict returns c with every row outside own made invisible; an update pair stays
// visible only when both halves are owned.
func restrict(mem memory.Allocator, ts *tableSpec, c *vec.Chunk, own *vnode.Bitmap) *vec.Chunk {
	n := c.NumRows()
	vn := make([]uint16, n)
	ts.k.Vnodes(c, vn)
	ops := c.Ops()
	vis := make([]bool, n)
	for i := 0; i < n; i++ {
		if ops[i] == vec.UpdateDelete && i+1 < n && ops[i+1] == vec.UpdateInsert {
			ok := c.Visible(i) && own.Contains(vn[i]) && own.Contains(vn[i+1])
			vis[i], vis[i+1] = ok, ok
			i++
			continue
		}
		vis[i] = c.Visible(i) && own.Contains(vn[i])
	}
	return vectest.ChunkOf(mem, c.Record(), append([]vec.Op(nil), ops...), vis)
}

// applyChunk records the visible rows of c (in order) into layer, as Write applies
// them. keep marks the columns the write keeps (nil: all).
func applyChunk(ts *tableSpec, layer rows, c *vec.Chunk, keep []bool) {
	n := c.NumRows()
	vn := make([]uint16, n)
	ts.k.Vnodes(c, vn)
	var keys vec.Bytes
	ts.k.EncodeKeys(c, &keys)
	ops := c.Ops()
	for i := 0; i < n; i++ {
		if !c.Visible(i) {
			continue
		}
		pk := string(keys.At(i))
		ts.pks[vn[i]] = append(ts.pks[vn[i]], pk)
		if ops[i].IsInsert() {
			row := &rowRef{rec: c.Record(), i: i, keep: keep}
			layer.put(vn[i], pk, row)
			ts.all = append(ts.all, row)
		} else {
			layer.put(vn[i], pk, nil)
		}
	}
}

// probeKey picks a pk to probe in vnode v: a live one, one ever written there (maybe
// deleted since), or one from another vnode or table shape (absent).
func probeKey(rng *rand.Rand, ts *tableSpec, live []liveKV, v uint16) []byte {
	switch r := rng.IntN(10); {
	case r < 4 && len(live) > 0:
		return []byte(live[rng.IntN(len(live))].pk)
	case r < 8 && len(ts.pks[v]) > 0:
		return []byte(ts.pks[v][rng.IntN(len(ts.pks[v]))])
	case r < 9:
		return []byte{byte(rng.IntN(256))}
	}
	for _, ks := range ts.pks {
		if len(ks) > 0 {
			return []byte(ks[rng.IntN(len(ks))])
		}
	}
	return nil
}

// randomBounds picks iteration bounds for vnode v.
func randomBounds(rng *rand.Rand, ts *tableSpec, live []liveKV, v uint16) storage.IterBounds {
	var b storage.IterBounds
	if rng.IntN(5) < 2 {
		b.After = probeKey(rng, ts, live, v)
	}
	if rng.IntN(5) < 2 {
		b.Before = probeKey(rng, ts, live, v)
	}
	return b
}

func inBounds(pk string, b storage.IterBounds) bool {
	if b.After != nil && bytes.Compare([]byte(pk), b.After) <= 0 {
		return false
	}
	if b.Before != nil && bytes.Compare([]byte(pk), b.Before) >= 0 {
		return false
	}
	return true
}

// checkValues decodes vals with a random projection (with the registered or the
// generic kernels, at random) and compares every projected column with the rows the
// values were written from.
func checkValues(t testing.TB, rng *rand.Rand, mem memory.Allocator, ts *tableSpec, vals *vec.Bytes, want []*rowRef, what func() string) {
	t.Helper()
	if vals.Len() != len(want) {
		t.Fatalf("%s: %d values for %d rows", what(), vals.Len(), len(want))
	}
	proj := vectest.RandomProjection(rng, len(ts.t.Columns))
	k := ts.k
	if rng.IntN(2) == 0 {
		k = vec.NewGeneric(ts.t)
	}
	bs := vectest.ValueBuildersFor(mem, ts.t, proj)
	defer vectest.ReleaseBuilders(bs)
	if err := k.DecodeValues(vals, proj, bs); err != nil {
		t.Fatalf("%s: decode: %v", what(), err)
	}
	for j, c := range proj {
		got := bs[j].NewArray()
		col := ts.t.Columns[c]
		for r, row := range want {
			if row.keep != nil && !row.keep[c] {
				if col.Nullable && !got.IsNull(r) {
					got.Release()
					t.Fatalf("%s: row %d column %s (not replicated) is %s, want NULL", what(), r, col.Name, vectest.FormatValue(got, r))
				}
				continue
			}
			exp := row.rec.Column(c)
			if !vectest.ValuesEqual(got, r, exp, row.i) {
				msg := fmt.Sprintf("%s: row %d column %s: got %s, want %s", what(), r, col.Name, vectest.FormatValue(got, r), vectest.FormatValue(exp, row.i))
				got.Release()
				t.Fatal(msg)
			}
		}
		got.Release()
	}
}

// checkIter compares an iteration with the expected rows (already cut to its bounds).
func checkIter(t testing.TB, rng *rand.Rand, mem memory.Allocator, ts *tableSpec, it *storage.Iter, want []liveKV, what func() string) {
	t.Helper()
	checkIterRows(t, rng, mem, ts, it, want, what)
	if err := it.Close(); err != nil {
		t.Fatalf("%s: %v", what(), err)
	}
}

// checkIterRows checks the rows of it against want, leaving it open.
func checkIterRows(t testing.TB, rng *rand.Rand, mem memory.Allocator, ts *tableSpec, it *storage.Iter, want []liveKV, what func() string) {
	t.Helper()
	var vals vec.Bytes
	vals.Reset()
	var rowsWant []*rowRef
	n := 0
	for it.Next() {
		if n >= len(want) {
			it.Close()
			t.Fatalf("%s: extra row %x after %d rows", what(), it.PK(), n)
		}
		if pk := it.PK(); string(pk) != want[n].pk {
			it.Close()
			t.Fatalf("%s: row %d has pk %x, want %x", what(), n, pk, want[n].pk)
		}
		tbl, _, _, err := storage.SplitKey(it.Key())
		if err != nil || tbl != ts.id {
			it.Close()
			t.Fatalf("%s: key %x of table %d (%v)", what(), it.Key(), tbl, err)
		}
		vals.Append(it.Value())
		rowsWant = append(rowsWant, want[n].row)
		n++
	}
	if err := it.Error(); err != nil {
		t.Fatalf("%s: %v", what(), err)
	}
	if n != len(want) {
		t.Fatalf("%s: %d rows, want %d (first missing pk %x)", what(), n, len(want), want[n].pk)
	}
	checkValues(t, rng, mem, ts, &vals, rowsWant, what)
}

func describeBounds(b storage.IterBounds) string {
	var parts []string
	if b.After != nil {
		parts = append(parts, fmt.Sprintf("after %x", b.After))
	}
	if b.Before != nil {
		parts = append(parts, fmt.Sprintf("before %x", b.Before))
	}
	if len(parts) == 0 {
		return "unbounded"
	}
	return strings.Join(parts, ", ")
}

// bytesOf puts values in a vec.Bytes.
func bytesOf(vals ...[]byte) *vec.Bytes {
	var b vec.Bytes
	b.Reset()
	for _, v := range vals {
		b.Append(v)
	}
	return &b
}
