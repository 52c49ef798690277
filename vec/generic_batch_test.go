package vec_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/seed04fbb902/weir/internal/invariants"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// rowValue is the reference encoding of row i's value: the ValueWriter, one value at
// a time, as the generic kernels encoded values before they worked by column.
func rowValue(t *schema.Table, w *vec.ValueWriter, c *vec.Chunk, i int) []byte {
	w.Reset()
	rec := c.Record()
	for col, cd := range t.Columns {
		arr := rec.Column(col)
		if arr.IsNull(i) {
			w.PutNull(col)
			continue
		}
		s := w.Slot(col)
		switch cd.Type.Kind {
		case schema.Boolean:
			if arr.(*array.Boolean).Value(i) {
				s[0] = 1
			}
		case schema.Int16:
			binary.LittleEndian.PutUint16(s, uint16(arr.(*array.Int16).Value(i)))
		case schema.Int32:
			binary.LittleEndian.PutUint32(s, uint32(arr.(*array.Int32).Value(i)))
		case schema.Date:
			binary.LittleEndian.PutUint32(s, uint32(arr.(*array.Date32).Value(i)))
		case schema.Int64:
			binary.LittleEndian.PutUint64(s, uint64(arr.(*array.Int64).Value(i)))
		case schema.Timestamp, schema.Timestamptz:
			binary.LittleEndian.PutUint64(s, uint64(arr.(*array.Timestamp).Value(i)))
		case schema.Float32:
			binary.LittleEndian.PutUint32(s, math.Float32bits(arr.(*array.Float32).Value(i)))
		case schema.Float64:
			binary.LittleEndian.PutUint64(s, math.Float64bits(arr.(*array.Float64).Value(i)))
		case schema.Decimal:
			v := arr.(*array.Decimal128).Value(i)
			binary.LittleEndian.PutUint64(s, v.LowBits())
			binary.LittleEndian.PutUint64(s[8:], uint64(v.HighBits()))
		case schema.Varchar:
			w.PutVarString(col, arr.(*array.String).Value(i))
		case schema.Bytea:
			w.PutVar(col, arr.(*array.Binary).Value(i))
		}
	}
	return w.Finish(nil)
}

// TestGenericBatchEncoders checks the column-at-a-time kernels of Generic against the
// row functions, byte for byte: EncodeKeys against AppendKey, EncodeValues against the
// ValueWriter, Vnodes against AppendDistKey and VnodeOf. Random tables of every type,
// nullability, order and nulls order; chunks with and without NULLs, and slices of
// them (arrays with an offset); output appended after what the arena already holds.
func TestGenericBatchEncoders(t *testing.T) {
	mem := checkedMem(t)
	rng, seed := vectest.Rand(t)
	for it := 0; it < 300; it++ {
		tab := vectest.RandomTable(rng, "t")
		g := vec.NewGeneric(tab)
		w := vec.NewValueWriter(g.Layout())
		nulls := []float64{0, 0.3, 1}[rng.IntN(3)]
		full := vectest.RandomChunk(rng, mem, tab, 1+rng.IntN(200), nulls)
		n := full.NumRows()
		lo := rng.IntN(n)
		hi := lo + rng.IntN(n-lo+1)
		sliced := full.Record().NewSlice(int64(lo), int64(hi))
		part := vectest.ChunkOf(mem, sliced, make([]vec.Op, hi-lo), nil)
		sliced.Release()
		for _, c := range []*vec.Chunk{full, part} {
			var keys, vals vec.Bytes
			keys.Reset()
			vals.Reset()
			// Something already in the arenas: the batch goes after it.
			keys.Append([]byte("before"))
			vals.Append([]byte("before"))
			g.EncodeKeys(c, &keys)
			g.EncodeValues(c, &vals)
			vn := make([]uint16, c.NumRows())
			g.Vnodes(c, vn)
			if keys.Len() != c.NumRows()+1 || vals.Len() != c.NumRows()+1 {
				t.Fatalf("seed=%d iteration %d: %d keys and %d values for %d rows (and one before)", seed, it, keys.Len()-1, vals.Len()-1, c.NumRows())
			}
			for i := 0; i < c.NumRows(); i++ {
				if want := g.AppendKey(nil, c, i); !bytes.Equal(keys.At(i+1), want) {
					t.Fatalf("seed=%d iteration %d table %v row %d: key %x, want %x", seed, it, tab.PK, i, keys.At(i+1), want)
				}
				if want := rowValue(tab, w, c, i); !bytes.Equal(vals.At(i+1), want) {
					t.Fatalf("seed=%d iteration %d row %d: value %x, want %x", seed, it, i, vals.At(i+1), want)
				}
				if err := g.Layout().CheckValue(vals.At(i + 1)); err != nil {
					t.Fatalf("seed=%d iteration %d row %d: %v", seed, it, i, err)
				}
				if want := vec.VnodeOf(g.AppendDistKey(nil, c, i), tab.VnodeCount); vn[i] != want {
					t.Fatalf("seed=%d iteration %d row %d: vnode %d, want %d", seed, it, i, vn[i], want)
				}
			}
		}
		part.Release()
		full.Release()
	}
}

// TestGenericDecodeKeys checks the column-at-a-time DecodeKeys: keys encoded from
// random chunks decode to the chunk's pk columns; and keys with random damage are
// refused by the batch exactly when one of them is refused alone, the error naming the
// first such key, as a key at a time would.
func TestGenericDecodeKeys(t *testing.T) {
	mem := checkedMem(t)
	rng, seed := vectest.Rand(t)
	for it := 0; it < 300; it++ {
		tab := vectest.RandomTable(rng, "t")
		g := vec.NewGeneric(tab)
		c := vectest.RandomChunk(rng, mem, tab, 1+rng.IntN(100), []float64{0, 0.3}[rng.IntN(2)])
		var keys vec.Bytes
		keys.Reset()
		g.EncodeKeys(c, &keys)
		rec, err := decodeKeys(mem, g, &keys)
		if err != nil {
			t.Fatalf("seed=%d iteration %d: %v", seed, it, err)
		}
		// The decoded columns encode to the same keys (a float key is canonical: -0
		// decodes as 0).
		for i := 0; i < c.NumRows(); i++ {
			var again []byte
			for j, kc := range tab.PK {
				again = vec.AppendKeyColumn(again, rec.Column(j), i, tab.Columns[kc.Column].Type, kc.Desc, kc.NullsFirst)
			}
			if !bytes.Equal(again, keys.At(i)) {
				t.Fatalf("seed=%d iteration %d: key %x decodes to a row that encodes to %x", seed, it, keys.At(i), again)
			}
		}
		rec.Release()
		// Damage some keys: a byte changed, the key cut short or made longer.
		var bad vec.Bytes
		bad.Reset()
		for i := 0; i < keys.Len(); i++ {
			k := append([]byte(nil), keys.At(i)...)
			switch rng.IntN(8) {
			case 0:
				if len(k) > 0 {
					k[rng.IntN(len(k))] = byte(rng.IntN(256))
				}
			case 1:
				k = k[:rng.IntN(len(k)+1)]
			case 2:
				k = append(k, byte(rng.IntN(256)))
			}
			bad.Append(k)
		}
		first := -1
		for i := 0; i < bad.Len() && first < 0; i++ {
			var one vec.Bytes
			one.Append(bad.At(i))
			if r, err := decodeKeys(mem, g, &one); err != nil {
				first = i
			} else {
				r.Release()
			}
		}
		r, err := decodeKeys(mem, g, &bad)
		switch {
		case first < 0 && err != nil:
			t.Fatalf("seed=%d iteration %d: every key decodes alone, the batch fails: %v", seed, it, err)
		case first >= 0 && err == nil:
			r.Release()
			t.Fatalf("seed=%d iteration %d: key %d fails alone, the batch decodes", seed, it, first)
		case first >= 0 && !strings.HasPrefix(err.Error(), fmt.Sprintf("table t: key %d: ", first)):
			t.Fatalf("seed=%d iteration %d: error %q does not name key %d first", seed, it, err, first)
		case err == nil:
			r.Release()
		}
		c.Release()
	}
}

// TestGenericBatchAllocs checks that the batch kernels allocate nothing in steady
// state with reused outputs, on a table with every kind of column and NULLs.
func TestGenericBatchAllocs(t *testing.T) {
	if invariants.RaceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector (sync.Pool drops items at random)")
	}
	mem := checkedMem(t)
	rng, _ := vectest.Rand(t)
	var cols []schema.Column
	var pk []schema.KeyColumn
	for i, k := range schema.Kinds {
		typ := schema.Type{Kind: k}
		if k == schema.Decimal {
			typ = schema.Type{Kind: k, Precision: 20, Scale: 2}
		}
		cols = append(cols, schema.Column{Name: k.String(), Type: typ, Nullable: i%2 == 0})
		pk = append(pk, schema.KeyColumn{Column: i, Desc: i%3 == 0, NullsFirst: i%2 == 1})
	}
	tab := &schema.Table{Name: "kinds", Columns: cols, PK: pk, DistKey: []int{0, 1}, VnodeCount: 256}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	c := vectest.RandomChunk(rng, mem, tab, 1024, 0.2)
	defer c.Release()
	g := vec.NewGeneric(tab)
	var keys, vals vec.Bytes
	vn := make([]uint16, c.NumRows())
	run := func() {
		keys.Reset()
		vals.Reset()
		g.EncodeKeys(c, &keys)
		g.EncodeValues(c, &vals)
		g.Vnodes(c, vn)
	}
	run()
	if n := testing.AllocsPerRun(20, run); n != 0 {
		t.Errorf("EncodeKeys, EncodeValues and Vnodes into reused outputs: %v allocations per run, want 0", n)
	}
}

// BenchmarkGenericBatch times the generic batch kernels on 1,024-row chunks of two
// tables: q4's join rows (seven 64-bit columns, a two-column pk) and one with a
// nullable varchar among its columns. ns/row is per kernel call's row.
func BenchmarkGenericBatch(b *testing.B) {
	mem := checkedMem(b)
	rng := vectest.NewRand(1)
	i64, ts := schema.Type{Kind: schema.Int64}, schema.Type{Kind: schema.Timestamp}
	tables := map[string]*schema.Table{
		"fixed": {Name: "fixed", Columns: []schema.Column{{Name: "id", Type: i64}, {Name: "category", Type: i64},
			{Name: "a_date_time", Type: ts}, {Name: "expires", Type: ts}, {Name: "auction", Type: i64},
			{Name: "price", Type: i64}, {Name: "date_time", Type: ts}},
			PK: []schema.KeyColumn{{Column: 0}, {Column: 4}}, DistKey: []int{0}, VnodeCount: 256},
		"varchar": {Name: "varchar", Columns: []schema.Column{{Name: "id", Type: i64}, {Name: "name", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
			{Name: "at", Type: ts}},
			PK: []schema.KeyColumn{{Column: 1}, {Column: 0}}, DistKey: []int{0}, VnodeCount: 256},
	}
	for _, name := range []string{"fixed", "varchar"} {
		tab := tables[name]
		if err := tab.Validate(); err != nil {
			b.Fatal(err)
		}
		c := vectest.RandomChunk(rng, mem, tab, 1024, 0.1)
		g := vec.NewGeneric(tab)
		var out, keys vec.Bytes
		keys.Reset()
		g.EncodeKeys(c, &keys)
		bs := vectest.BuildersFor(mem, tab, tab.PKColumns())
		vn := make([]uint16, c.NumRows())
		for _, k := range []struct {
			name string
			run  func()
		}{
			{"keys", func() { out.Reset(); g.EncodeKeys(c, &out) }},
			{"values", func() { out.Reset(); g.EncodeValues(c, &out) }},
			{"vnodes", func() { g.Vnodes(c, vn) }},
			{"decode-keys", func() {
				if err := g.DecodeKeys(&keys, bs); err != nil {
					b.Fatal(err)
				}
				for _, bl := range bs {
					bl.NewArray().Release()
				}
			}},
		} {
			b.Run(name+"/"+k.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					k.run()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.NumRows()), "ns/row")
			})
		}
		vectest.ReleaseBuilders(bs)
		vectest.ReleaseBuilders(bs)
		c.Release()
	}
}
