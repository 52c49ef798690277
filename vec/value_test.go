package vec_test

import (
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// handTable is the table of TestValueEncodingByHand: a fixed, a variable, a one-byte
// and a variable NOT NULL column.
func handTable(t testing.TB) *schema.Table {
	return table(t, "hand", []schema.Column{
		col("a", schema.Int32, false),
		col("b", schema.Varchar, true),
		col("c", schema.Boolean, true),
		col("d", schema.Bytea, false),
	}, schema.KeyColumn{Column: 0})
}

func TestValueLayout(t *testing.T) {
	l := vec.NewLayout(handTable(t))
	want := &vec.Layout{
		NumColumns: 4,
		NullBytes:  1,
		Slot:       []int{2, 6, 10, 11},
		PrevVar:    []int{-1, -1, -1, 6},
		IsVar:      []bool{false, true, false, true},
		NotNull:    []byte{0b1001},
		VarStart:   15,
		VarSlots:   []int{6, 11},
	}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("layout %+v, want %+v", l, want)
	}
	// Nine columns take two null bytes.
	cols := make([]schema.Column, 9)
	for i := range cols {
		cols[i] = col(fmt.Sprintf("c%d", i), schema.Int64, i != 8)
	}
	l = vec.NewLayout(table(t, "nine", cols, schema.KeyColumn{Column: 0}))
	if l.NullBytes != 2 || l.Slot[0] != 3 || l.VarStart != 3+9*8 || l.NotNull[1] != 1 || l.NotNull[0] != 0 {
		t.Errorf("nine columns: %+v", l)
	}
}

// TestValueEncodingByHand pins the row value format with values worked out by hand
// from the package doc.
func TestValueEncodingByHand(t *testing.T) {
	mem := checkedMem(t)
	tab := handTable(t)
	bs := vectest.BuildersFor(mem, tab, vectest.AllColumns(tab))
	bs[0].(*array.Int32Builder).AppendValues([]int32{1, -1}, nil)
	bs[1].(*array.StringBuilder).Append("hi")
	bs[1].AppendNull()
	bs[2].AppendNull()
	bs[2].(*array.BooleanBuilder).Append(true)
	bs[3].(*array.BinaryBuilder).Append([]byte{0, 0xff})
	bs[3].(*array.BinaryBuilder).Append([]byte{})
	rec := vectest.FinishRecord(tab, vectest.AllColumns(tab), bs, 2)
	defer rec.Release()
	c := vectest.ChunkOf(mem, rec, []vec.Op{vec.Insert, vec.Delete}, nil)
	defer c.Release()
	var vals vec.Bytes
	vec.NewGeneric(tab).EncodeValues(c, &vals)
	for i, want := range []string{
		// version | nulls (c) | a=1 | b ends at 2 | c NULL | d ends at 4 | "hi" 00 ff
		"01 04 01000000 02000000 00 04000000 6869 00ff",
		// version | nulls (b) | a=-1 | b NULL, ends at 0 | c true | d ends at 0
		"01 02 ffffffff 00000000 01 00000000",
	} {
		want = strings.ReplaceAll(want, " ", "")
		if got := hex.EncodeToString(vals.At(i)); got != want {
			t.Errorf("row %d: value %s, want %s", i, got, want)
		}
	}
}

// batchSizes are the value batch sizes of the round trip: the extremes, then random.
func batchSizes(rng interface{ IntN(int) int }, n int) []int {
	out := []int{1, 4096}
	for len(out) < n {
		out = append(out, 1+rng.IntN(4096))
	}
	return out
}

// TestValueRoundTrip encodes random chunks of random tables and decodes them with random
// projections (empty, partial, every column; random order): the decoded columns equal
// the chunk's.
func TestValueRoundTrip(t *testing.T) {
	mem := checkedMem(t)
	rng, seed := vectest.Rand(t)
	var vals vec.Bytes
	for it, n := range batchSizes(rng, 60) {
		tab := vectest.RandomTable(rng, "t")
		g := vec.NewGeneric(tab)
		c := vectest.RandomChunk(rng, mem, tab, n, rng.Float64())
		vals.Reset()
		g.EncodeValues(c, &vals)
		if vals.Len() != n {
			t.Fatalf("seed=%d iteration %d: %d values for %d rows", seed, it, vals.Len(), n)
		}
		for p := 0; p < 4; p++ {
			proj := vectest.RandomProjection(rng, len(tab.Columns))
			if p == 0 {
				proj = vec.Projection(vectest.AllColumns(tab))
			}
			dec, err := decodeValues(mem, g, &vals, proj)
			if err != nil {
				c.Release()
				t.Fatalf("seed=%d iteration %d projection %v: %v", seed, it, proj, err)
			}
			want := vectest.Project(tab, c.Record(), proj)
			err = vectest.RecordsEqual(want, dec)
			want.Release()
			dec.Release()
			if err != nil {
				c.Release()
				t.Fatalf("seed=%d iteration %d rows %d projection %v: %v\n%s", seed, it, n, proj, err, tab.Canonical())
			}
		}
		c.Release()
	}
}

// corruptTable has fixed and variable, nullable and NOT NULL columns, and more than 8
// columns, so that every check of CheckValue has something to check.
func corruptTable(t testing.TB) *schema.Table {
	cols := []schema.Column{
		col("id", schema.Int64, false),
		col("name", schema.Varchar, false),
		col("note", schema.Varchar, true),
		col("blob", schema.Bytea, true),
	}
	for i := 0; i < 6; i++ {
		cols = append(cols, col(fmt.Sprintf("x%d", i), schema.Int16, true))
	}
	return table(t, "bids", cols, schema.KeyColumn{Column: 0})
}

func TestValueCorrupt(t *testing.T) {
	mem := checkedMem(t)
	tab := corruptTable(t)
	g := vec.NewGeneric(tab)
	l := g.Layout()
	rng, seed := vectest.Rand(t)
	var good vec.Bytes
	for {
		c := vectest.RandomChunk(rng, mem, tab, 1, 0.2)
		good.Reset()
		g.EncodeValues(c, &good)
		c.Release()
		v := good.At(0)
		// Want a value with non-empty variable data in two columns.
		if vec.ValueIsNull(v, 2) || vec.ValueIsNull(v, 3) || len(vec.ValueVar(v, l.VarStart, l.PrevVar[1], l.Slot[1])) == 0 ||
			len(vec.ValueVar(v, l.VarStart, l.PrevVar[3], l.Slot[3])) == 0 {
			continue
		}
		break
	}
	v := append([]byte(nil), good.At(0)...)
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), v...)) }
	put32 := func(b []byte, off int, x uint32) {
		b[off], b[off+1], b[off+2], b[off+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
	}
	cases := []struct {
		name string
		val  []byte
		want string
	}{
		{"empty", nil, "shorter than"},
		{"fixed part cut", v[:l.VarStart-1], "shorter than"},
		{"version 0", mutate(func(b []byte) []byte { b[0] = 0; return b }), "unknown value format version 0"},
		{"version 2", mutate(func(b []byte) []byte { b[0] = 2; return b }), "unknown value format version 2"},
		{"NULL in NOT NULL", mutate(func(b []byte) []byte { b[1] |= 2; return b }), "NOT NULL"},
		{"null bit past the columns", mutate(func(b []byte) []byte { b[2] |= 0x80; return b }), "past column 10"},
		{"variable data cut", v[:len(v)-1], "variable-width data"},
		{"trailing byte", append(append([]byte(nil), v...), 0), "variable-width data"},
		{"offsets backwards", mutate(func(b []byte) []byte { put32(b, l.Slot[2], 0); return b }), "backwards"},
		{"offset past the end", mutate(func(b []byte) []byte { put32(b, l.Slot[1], 1<<31); return b }), ""},
		{"last offset short", mutate(func(b []byte) []byte { put32(b, l.Slot[3], uint32(len(v)-l.VarStart-1)); return b }), "offsets say"},
	}
	for p := 1; p < len(v); p++ {
		cases = append(cases, struct {
			name string
			val  []byte
			want string
		}{fmt.Sprintf("truncated to %d", p), v[:p], ""})
	}
	for _, tc := range cases {
		var vals vec.Bytes
		vals.Append(v)
		vals.Append(tc.val)
		for _, proj := range []vec.Projection{vectest.AllColumns(tab), {}, {4, 0}} {
			rec, err := decodeValues(mem, g, &vals, proj)
			if err == nil {
				rec.Release()
				t.Errorf("seed=%d %s: value %x decodes", seed, tc.name, tc.val)
				continue
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "table bids: value 1: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("seed=%d %s: error %q, want \"table bids: value 1: ...%s...\"", seed, tc.name, msg, tc.want)
			}
		}
	}
}

// TestValueMutations decodes random corruptions of valid values (bytes flipped, cut,
// added, offsets rewritten): decoding returns an error or a row, never panics, and a
// row it returns re-encodes to a value that decodes to the same row.
func TestValueMutations(t *testing.T) {
	mem := checkedMem(t)
	rng, seed := vectest.Rand(t)
	var vals, one vec.Bytes
	decoded := 0
	for it := 0; it < 300; it++ {
		tab := vectest.RandomTable(rng, "t")
		g := vec.NewGeneric(tab)
		c := vectest.RandomChunk(rng, mem, tab, 20, 0.3)
		vals.Reset()
		g.EncodeValues(c, &vals)
		c.Release()
		for i := 0; i < vals.Len(); i++ {
			v := mutateBytes(rng, vals.At(i))
			one.Reset()
			one.Append(v)
			ok, err := decodeReencode(mem, g, &one)
			if err != nil {
				t.Fatalf("seed=%d iteration %d value %x: %v", seed, it, v, err)
			}
			if ok {
				decoded++
			}
		}
	}
	t.Logf("%d of 6000 mutated values decoded", decoded)
}

// mutateBytes returns a random corruption of v (a new slice).
func mutateBytes(rng interface {
	IntN(int) int
	Uint32() uint32
}, v []byte) []byte {
	b := append([]byte(nil), v...)
	for k := 1 + rng.IntN(3); k > 0; k-- {
		switch rng.IntN(5) {
		case 0:
			if len(b) > 0 {
				b[rng.IntN(len(b))] ^= byte(1 << rng.IntN(8))
			}
		case 1:
			if len(b) > 0 {
				b[rng.IntN(len(b))] = byte(rng.Uint32())
			}
		case 2:
			b = b[:rng.IntN(len(b)+1)]
		case 3:
			b = append(b, byte(rng.Uint32()))
		case 4:
			if len(b) > 4 {
				i := rng.IntN(len(b) - 3)
				b[i], b[i+1], b[i+2], b[i+3] = byte(rng.Uint32()), byte(rng.IntN(2)), 0, 0
			}
		}
	}
	return b
}

// decodeReencode decodes the single value in one with the full projection; if it
// decodes, it re-encodes the row and decodes it again and reports a difference as an
// error. ok reports whether the value decoded.
func decodeReencode(mem memory.Allocator, g *vec.Generic, one *vec.Bytes) (ok bool, err error) {
	tab := g.Table()
	all := vectest.AllColumns(tab)
	rec, derr := decodeValues(mem, g, one, all)
	if derr != nil {
		if !strings.HasPrefix(derr.Error(), "table "+tab.Name+": ") {
			return false, fmt.Errorf("error %q does not name the table", derr)
		}
		return false, nil
	}
	defer rec.Release()
	c := vectest.ChunkOf(mem, rec, []vec.Op{vec.Insert}, nil)
	defer c.Release()
	var again vec.Bytes
	g.EncodeValues(c, &again)
	rec2, derr := decodeValues(mem, g, &again, all)
	if derr != nil {
		return true, fmt.Errorf("re-encoded value %x does not decode: %v", again.At(0), derr)
	}
	defer rec2.Release()
	if err := vectest.RecordsEqual(rec, rec2); err != nil {
		return true, fmt.Errorf("re-encoded row differs: %v", err)
	}
	return true, nil
}

// TestValueWriterReuse checks that one writer builds many values without leftovers.
func TestValueWriterReuse(t *testing.T) {
	tab := handTable(t)
	l := vec.NewLayout(tab)
	w := vec.NewValueWriter(l)
	w.Reset()
	w.Slot(0)[0] = 7
	w.PutVarString(1, "long string")
	w.PutNull(2)
	w.PutVar(3, []byte("xyz"))
	first := w.Finish(nil)
	w.Reset()
	w.Slot(0)[0] = 7
	w.PutNull(1)
	w.PutNull(2)
	w.PutVar(3, nil)
	second := w.Finish(nil)
	if err := l.CheckValue(first); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckValue(second); err != nil {
		t.Fatal(err)
	}
	if want := "01" + "06" + "07000000" + "00000000" + "00" + "00000000"; hex.EncodeToString(second) != want {
		t.Fatalf("second value %x, want %s", second, want)
	}
}
