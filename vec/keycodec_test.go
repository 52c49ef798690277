package vec_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// TestKeyEncodingByHand checks encodings worked out by hand from the package doc.
func TestKeyEncodingByHand(t *testing.T) {
	d := func(s string) decimal128.Num {
		n, err := decimal128.FromString(s, 38, 0)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"null first", vec.AppendKeyNull(nil, true), "00"},
		{"null last", vec.AppendKeyNull(nil, false), "02"},
		{"bool false", vec.AppendKeyBool(nil, false, false), "01 00"},
		{"bool true", vec.AppendKeyBool(nil, true, false), "01 01"},
		{"bool true desc", vec.AppendKeyBool(nil, true, true), "01 fe"},
		{"int16 1", vec.AppendKeyInt16(nil, 1, false), "01 8001"},
		{"int16 -1", vec.AppendKeyInt16(nil, -1, false), "01 7fff"},
		{"int16 min", vec.AppendKeyInt16(nil, math.MinInt16, false), "01 0000"},
		{"int16 1 desc", vec.AppendKeyInt16(nil, 1, true), "01 7ffe"},
		{"int32 0", vec.AppendKeyInt32(nil, 0, false), "01 80000000"},
		{"int32 -2 desc", vec.AppendKeyInt32(nil, -2, true), "01 80000001"},
		{"int64 max", vec.AppendKeyInt64(nil, math.MaxInt64, false), "01 ffffffffffffffff"},
		{"int64 min desc", vec.AppendKeyInt64(nil, math.MinInt64, true), "01 ffffffffffffffff"},
		{"float64 1", vec.AppendKeyFloat64(nil, 1, false), "01 bff0000000000000"},
		{"float64 -1", vec.AppendKeyFloat64(nil, -1, false), "01 400fffffffffffff"},
		{"float64 0", vec.AppendKeyFloat64(nil, 0, false), "01 8000000000000000"},
		{"float64 -0", vec.AppendKeyFloat64(nil, negZero, false), "01 8000000000000000"},
		{"float64 +inf", vec.AppendKeyFloat64(nil, math.Inf(1), false), "01 fff0000000000000"},
		{"float64 -inf", vec.AppendKeyFloat64(nil, math.Inf(-1), false), "01 000fffffffffffff"},
		{"float64 1 desc", vec.AppendKeyFloat64(nil, 1, true), "01 400fffffffffffff"},
		{"float32 1", vec.AppendKeyFloat32(nil, 1, false), "01 bf800000"},
		{"float32 -0", vec.AppendKeyFloat32(nil, float32(negZero), false), "01 80000000"},
		{"decimal 0", vec.AppendKeyDecimal(nil, d("0"), false), "01 8000000000000000 0000000000000000"},
		{"decimal -1", vec.AppendKeyDecimal(nil, d("-1"), false), "01 7fffffffffffffff ffffffffffffffff"},
		{"decimal 1 desc", vec.AppendKeyDecimal(nil, d("1"), true), "01 7fffffffffffffff fffffffffffffffe"},
		{"string empty", vec.AppendKeyString(nil, "", false), "01 0000000000000000 f7"},
		{"string a", vec.AppendKeyString(nil, "a", false), "01 6100000000000000 f8"},
		{"string 8", vec.AppendKeyString(nil, "abcdefgh", false), "01 6162636465666768 ff 0000000000000000 f7"},
		{"string 9", vec.AppendKeyString(nil, "abcdefghi", false), "01 6162636465666768 ff 6900000000000000 f8"},
		{"string a desc", vec.AppendKeyString(nil, "a", true), "01 9effffffffffffff 07"},
		{"bytes 00", vec.AppendKeyBytes(nil, []byte{0}, false), "01 0000000000000000 f8"},
		{"bytes 7", vec.AppendKeyBytes(nil, []byte("1234567"), false), "01 3132333435363700 fe"},
	} {
		want := strings.ReplaceAll(tc.want, " ", "")
		if got := hex.EncodeToString(tc.got); got != want {
			t.Errorf("%s: got %s, want %s", tc.name, got, want)
		}
	}
	// NaN: every NaN encodes as the canonical one, above +Inf.
	canon := vec.AppendKeyFloat64(nil, math.NaN(), false)
	for _, bits := range []uint64{0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000001, 0xffffffffffffffff} {
		if got := vec.AppendKeyFloat64(nil, math.Float64frombits(bits), false); !bytes.Equal(got, canon) {
			t.Errorf("NaN %016x encodes as %x, canonical NaN as %x", bits, got, canon)
		}
	}
	if inf := vec.AppendKeyFloat64(nil, math.Inf(1), false); bytes.Compare(canon, inf) <= 0 {
		t.Errorf("NaN %x does not sort above +Inf %x", canon, inf)
	}
	canon32 := vec.AppendKeyFloat32(nil, float32(math.NaN()), false)
	if got := vec.AppendKeyFloat32(nil, math.Float32frombits(0xffc00001), false); !bytes.Equal(got, canon32) {
		t.Errorf("float32 NaN encodes as %x, canonical as %x", got, canon32)
	}
}

// TestKeyRoundTripEveryType round-trips random values of every type in every direction
// and nulls order: Decode(Encode(x)) == x with -0 and NaN canonicalised.
func TestKeyRoundTripEveryType(t *testing.T) {
	mem := checkedMem(t)
	rng, seed := vectest.Rand(t)
	for _, k := range schema.Kinds {
		for _, desc := range []bool{false, true} {
			for _, nf := range []bool{false, true} {
				typ := schema.Type{Kind: k}
				if k == schema.Decimal {
					typ = vectest.RandomType(rng)
					for typ.Kind != schema.Decimal {
						typ = vectest.RandomType(rng)
					}
				}
				tab := oneColumnTable(t, typ, desc, nf)
				what := fmt.Sprintf("seed=%d %s desc=%v nullsFirst=%v", seed, typ, desc, nf)
				checkKeyRoundTrip(t, mem, what, tab, vectest.RandomChunk(rng, mem, tab, 300, 0.1))
			}
		}
	}
}

// TestKeyRoundTripRandomTables does the same for random multi-column pks.
func TestKeyRoundTripRandomTables(t *testing.T) {
	mem := checkedMem(t)
	rng, seed := vectest.Rand(t)
	for it := 0; it < 200; it++ {
		tab := vectest.RandomTable(rng, "t")
		c := vectest.RandomChunk(rng, mem, tab, rng.IntN(200), rng.Float64()/2)
		checkKeyRoundTrip(t, mem, fmt.Sprintf("seed=%d iteration %d\n%s", seed, it, tab.Canonical()), tab, c)
	}
}

// checkKeyRoundTrip encodes c's keys, decodes them and compares; it releases c.
func checkKeyRoundTrip(t *testing.T, mem memory.Allocator, what string, tab *schema.Table, c *vec.Chunk) {
	t.Helper()
	defer c.Release()
	g := vec.NewGeneric(tab)
	var keys vec.Bytes
	keys.Reset()
	g.EncodeKeys(c, &keys)
	if keys.Len() != c.NumRows() {
		t.Fatalf("%s: %d keys for %d rows", what, keys.Len(), c.NumRows())
	}
	// Each key is the concatenation of its columns' encodings.
	for i := 0; i < c.NumRows(); i++ {
		var want []byte
		for _, k := range tab.PK {
			want = vec.AppendKeyColumn(want, c.Record().Column(k.Column), i, tab.Columns[k.Column].Type, k.Desc, k.NullsFirst)
		}
		if !bytes.Equal(want, keys.At(i)) {
			t.Fatalf("%s: row %d: key %x, columns concatenate to %x", what, i, keys.At(i), want)
		}
	}
	dec, err := decodeKeys(mem, g, &keys)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer dec.Release()
	want := canonicalPK(mem, tab, c.Record())
	defer want.Release()
	if err := vectest.RecordsEqual(want, dec); err != nil {
		t.Fatalf("%s: decode(encode(pk)) differs: %v", what, err)
	}
}

// TestKeyOrder is the order property: for random tables and chunks, bytes.Compare of
// two rows' keys equals the typed comparison of their pks (vectest.ComparePK, written
// without the codec), for every pair of rows.
func TestKeyOrder(t *testing.T) {
	mem := checkedMem(t)
	rng, seed := vectest.Rand(t)
	var keys vec.Bytes
	counts := [3]int{}
	for it := 0; it < 150; it++ {
		tab := vectest.RandomTable(rng, "t")
		c := vectest.RandomChunk(rng, mem, tab, 1+rng.IntN(80), rng.Float64()/2)
		keys.Reset()
		vec.NewGeneric(tab).EncodeKeys(c, &keys)
		pk := vectest.PKArrays(tab, c.Record())
		for i := 0; i < c.NumRows(); i++ {
			for j := 0; j < c.NumRows(); j++ {
				want := vectest.ComparePK(tab, pk, i, pk, j)
				got := sign(bytes.Compare(keys.At(i), keys.At(j)))
				if i != j {
					counts[want+1]++
				}
				if got != want {
					t.Fatalf("seed=%d iteration %d: rows %d %s and %d %s: keys compare %d, values %d\nkeys %x\n     %x\n%s",
						seed, it, i, vectest.FormatRow(c.Record(), i), j, vectest.FormatRow(c.Record(), j), got, want,
						keys.At(i), keys.At(j), tab.Canonical())
				}
			}
		}
		c.Release()
	}
	// Equal keys of different rows must come up, or the property is half tested.
	if counts[1] == 0 || counts[0] == 0 || counts[2] == 0 {
		t.Fatalf("seed=%d: comparisons less/equal/greater = %v: too few equal pairs", seed, counts)
	}
}

// TestCompareFloat checks vec's float comparison against the key order.
func TestCompareFloat(t *testing.T) {
	vals := []float64{math.Inf(-1), -1, negZero, 0, 1, math.Inf(1), math.NaN(), math.Float64frombits(0xfff8000000000001)}
	for _, a := range vals {
		for _, b := range vals {
			ka, kb := vec.AppendKeyFloat64(nil, a, false), vec.AppendKeyFloat64(nil, b, false)
			if got, want := vec.CompareFloat64(a, b), sign(bytes.Compare(ka, kb)); got != want {
				t.Errorf("CompareFloat64(%v, %v) = %d, keys compare %d", a, b, got, want)
			}
			if got, want := vec.CompareFloat32(float32(a), float32(b)), sign(bytes.Compare(ka, kb)); got != want {
				t.Errorf("CompareFloat32(%v, %v) = %d, keys compare %d", a, b, got, want)
			}
		}
	}
	if vec.CompareBool(false, true) != -1 || vec.CompareBool(true, false) != 1 || vec.CompareBool(true, true) != 0 {
		t.Error("CompareBool")
	}
}

// TestDecodeKeyErrors feeds keys that must not decode and checks the error names the
// table, the key and the column.
func TestDecodeKeyErrors(t *testing.T) {
	mem := checkedMem(t)
	tab := table(t, "orders", []schema.Column{
		col("id", schema.Int64, false),
		col("name", schema.Varchar, true),
		col("flag", schema.Boolean, false),
		col("f", schema.Float64, false),
	}, schema.KeyColumn{Column: 0}, schema.KeyColumn{Column: 1}, schema.KeyColumn{Column: 2, Desc: true}, schema.KeyColumn{Column: 3})
	g := vec.NewGeneric(tab)
	good := vec.AppendKeyInt64(nil, 7, false)
	good = vec.AppendKeyString(good, "hello", false)
	good = vec.AppendKeyBool(good, true, true)
	good = vec.AppendKeyFloat64(good, 1.5, false)
	{
		var keys vec.Bytes
		keys.Append(good)
		rec, err := decodeKeys(mem, g, &keys)
		if err != nil {
			t.Fatalf("good key: %v", err)
		}
		rec.Release()
	}
	withInt := func(rest ...[]byte) []byte {
		k := vec.AppendKeyInt64(nil, 7, false)
		for _, r := range rest {
			k = append(k, r...)
		}
		return k
	}
	str := vec.AppendKeyString(nil, "hello", false)
	boolean := vec.AppendKeyBool(nil, true, true)
	f := vec.AppendKeyFloat64(nil, 1.5, false)
	negZeroKey := append([]byte{vec.KeyValue}, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	otherNaN := append([]byte{vec.KeyValue}, 0xff, 0xf8, 0, 0, 0, 0, 0, 0)
	for _, tc := range []struct {
		name string
		key  []byte
		want string
	}{
		{"empty", nil, "column id: key truncated"},
		{"truncated int", good[:5], "column id: key truncated"},
		{"NULL in a NOT NULL column", append([]byte{vec.KeyNullLast}, good[9:]...), "column id: NULL"},
		{"bad marker", append([]byte{0x07}, good[1:]...), "column id: bad key marker 0x07"},
		{"null marker of the other order", withInt([]byte{vec.KeyNullFirst}, boolean, f), "column name: bad key marker 0x00"},
		{"truncated string", withInt(str[:5]), "column name: key truncated"},
		{"bad group marker", withInt(append(append([]byte{}, str[:9]...), 0x10), boolean, f), "column name: bad string key group marker 0x10"},
		{"bad padding", withInt([]byte{1, 'a', 0, 0, 0, 0, 0, 0, 1, 0xf8}, boolean, f), "column name: bad string key padding"},
		{"bad boolean", withInt(str, []byte{1, 0x05}, f), "column flag: bad boolean key byte 0x05"},
		{"missing column", withInt(str, boolean), "column f: key truncated"},
		{"non-canonical -0", withInt(str, boolean, negZeroKey), "column f: non-canonical"},
		{"non-canonical NaN", withInt(str, boolean, otherNaN), "column f: non-canonical"},
		{"trailing bytes", append(append([]byte{}, good...), 0), "1 bytes left after the last pk column"},
	} {
		var keys vec.Bytes
		keys.Append(good)
		keys.Append(tc.key)
		rec, err := decodeKeys(mem, g, &keys)
		if err == nil {
			rec.Release()
			t.Errorf("%s: key %x decodes", tc.name, tc.key)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "table orders: key 1: ") || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: error %q, want it to start with \"table orders: key 1: \" and hold %q", tc.name, msg, tc.want)
		}
	}
}
