package vec_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
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

// keysGolden is the data-driven golden file of single-column key encodings. Each line is
//
//	<type> <asc|desc> <nulls_first|nulls_last> <value> => <hex>
//
// where value is NULL, true/false, an integer, a float (NaN, +Inf, -Inf, -0 spelled
// so), a decimal with its scale, or a Go-quoted string. Within one type and order the
// lines list values in ascending key order, and the test checks that the encodings do
// too. The file pins the encoding: never edit an existing line's hex; -rewrite only
// fills in new lines (written with "=> ?").
const keysGolden = "testdata/keys.txt"

type goldenLine struct {
	lineNo                   int
	typ                      string
	dir, nulls, value, hexed string
}

func (l goldenLine) String() string {
	return fmt.Sprintf("%s %s %s %s => %s", l.typ, l.dir, l.nulls, l.value, l.hexed)
}

func readGolden(t *testing.T) (header []string, lines []goldenLine) {
	f, err := os.Open(keysGolden)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		text := sc.Text()
		if strings.HasPrefix(text, "#") || strings.TrimSpace(text) == "" {
			if lines == nil {
				header = append(header, text)
			}
			continue
		}
		left, right, ok := strings.Cut(text, " => ")
		parts := strings.SplitN(left, " ", 4)
		if !ok || len(parts) != 4 {
			t.Fatalf("%s:%d: want \"type dir nulls value => hex\", got %q", keysGolden, n, text)
		}
		lines = append(lines, goldenLine{lineNo: n, typ: parts[0], dir: parts[1], nulls: parts[2], value: parts[3], hexed: right})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return header, lines
}

// appendText appends a golden file value to b, a builder of typ's Arrow type.
func appendText(b array.Builder, typ schema.Type, s string) error {
	if s == "NULL" {
		b.AppendNull()
		return nil
	}
	var err error
	switch typ.Kind {
	case schema.Boolean:
		var v bool
		if v, err = strconv.ParseBool(s); err == nil {
			b.(*array.BooleanBuilder).Append(v)
		}
	case schema.Int16, schema.Int32, schema.Int64, schema.Date, schema.Timestamp, schema.Timestamptz:
		var v int64
		if v, err = strconv.ParseInt(s, 10, typ.Width()*8); err == nil {
			switch bb := b.(type) {
			case *array.Int16Builder:
				bb.Append(int16(v))
			case *array.Int32Builder:
				bb.Append(int32(v))
			case *array.Int64Builder:
				bb.Append(v)
			case *array.Date32Builder:
				bb.Append(arrow.Date32(v))
			case *array.TimestampBuilder:
				bb.Append(arrow.Timestamp(v))
			}
		}
	case schema.Float32, schema.Float64:
		var v float64
		switch s {
		case "NaN":
			v = math.NaN()
		case "-0":
			v = negZero
		default:
			v, err = strconv.ParseFloat(s, typ.Width()*8)
		}
		if err == nil {
			if bb, ok := b.(*array.Float32Builder); ok {
				bb.Append(float32(v))
			} else {
				b.(*array.Float64Builder).Append(v)
			}
		}
	case schema.Decimal:
		var v decimal128.Num
		if v, err = decimal128.FromString(s, typ.Precision, typ.Scale); err == nil {
			if v.ToString(typ.Scale) != s {
				return fmt.Errorf("decimal %q is not written as %q", s, v.ToString(typ.Scale))
			}
			b.(*array.Decimal128Builder).Append(v)
		}
	case schema.Varchar:
		var v string
		if v, err = strconv.Unquote(s); err == nil {
			b.(*array.StringBuilder).Append(v)
		}
	case schema.Bytea:
		var v string
		if v, err = strconv.Unquote(s); err == nil {
			b.(*array.BinaryBuilder).Append([]byte(v))
		}
	}
	return err
}

// TestKeyGolden checks every line of testdata/keys.txt: the value encodes to exactly the
// hex given, the hex decodes back to the value (canonicalised), and within a group the
// keys sort as the values do. It also checks that the file covers every type in every
// direction and nulls order, with a NULL and at least two values.
func TestKeyGolden(t *testing.T) {
	mem := checkedMem(t)
	header, lines := readGolden(t)
	type group struct{ typ, dir, nulls string }
	coverage := map[group][2]int{} // nulls, values
	var prev *goldenLine
	var prevRec arrow.RecordBatch
	changed := false
	for i := range lines {
		l := &lines[i]
		where := fmt.Sprintf("%s:%d", keysGolden, l.lineNo)
		typ, err := schema.ParseType(l.typ)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if (l.dir != "asc" && l.dir != "desc") || (l.nulls != "nulls_first" && l.nulls != "nulls_last") {
			t.Fatalf("%s: bad order %q %q", where, l.dir, l.nulls)
		}
		tab := oneColumnTable(t, typ, l.dir == "desc", l.nulls == "nulls_first")
		g := vec.NewGeneric(tab)
		bs := vectest.BuildersFor(mem, tab, []int{0})
		if err := appendText(bs[0], typ, l.value); err != nil {
			vectest.ReleaseBuilders(bs)
			t.Fatalf("%s: value %s: %v", where, l.value, err)
		}
		rec := vectest.FinishRecord(tab, []int{0}, bs, 1)
		c := vectest.ChunkOf(mem, rec, []vec.Op{vec.Insert}, nil)
		var keys vec.Bytes
		g.EncodeKeys(c, &keys)
		c.Release()
		got := hex.EncodeToString(keys.At(0))
		g2 := group{l.typ, l.dir, l.nulls}
		cov := coverage[g2]
		if l.value == "NULL" {
			cov[0]++
		} else {
			cov[1]++
		}
		coverage[g2] = cov
		switch {
		case l.hexed == got:
		case *rewrite && l.hexed == "?":
			l.hexed = got
			changed = true
		default:
			t.Errorf("%s: %s %s %s %s encodes as %s, the golden file says %s (the key encoding must never change)",
				where, l.typ, l.dir, l.nulls, l.value, got, l.hexed)
		}
		// Decoding gives the value back, canonicalised.
		dec, err := decodeKeys(mem, g, &keys)
		if err != nil {
			t.Errorf("%s: decode %s: %v", where, got, err)
		} else {
			want := canonicalPK(mem, tab, rec)
			if err := vectest.RecordsEqual(want, dec); err != nil {
				t.Errorf("%s: decode %s: %v", where, got, err)
			}
			want.Release()
			dec.Release()
		}
		// Keys of one group are listed in ascending order.
		if prev != nil && prev.typ == l.typ && prev.dir == l.dir && prev.nulls == l.nulls && prev.hexed != "?" && l.hexed != "?" {
			pk, _ := hex.DecodeString(prev.hexed)
			ck, _ := hex.DecodeString(l.hexed)
			want := vectest.ComparePK(tab, []arrow.Array{prevRec.Column(0)}, 0, []arrow.Array{rec.Column(0)}, 0)
			if want > 0 {
				t.Errorf("%s: %s is listed after %s but sorts before it", where, l.value, prev.value)
			}
			if got := sign(bytes.Compare(pk, ck)); got != want {
				t.Errorf("%s: keys of %s and %s compare %d, values %d", where, prev.value, l.value, got, want)
			}
		}
		if prevRec != nil {
			prevRec.Release()
		}
		prev, prevRec = l, rec
	}
	if prevRec != nil {
		prevRec.Release()
	}
	for _, k := range schema.Kinds {
		for _, dir := range []string{"asc", "desc"} {
			for _, nulls := range []string{"nulls_first", "nulls_last"} {
				found := false
				for g, cov := range coverage {
					if strings.HasPrefix(g.typ, k.String()) && g.dir == dir && g.nulls == nulls {
						found = true
						if cov[0] < 1 || cov[1] < 2 {
							t.Errorf("%s: %s %s %s has %d NULL and %d other lines; want at least 1 and 2", keysGolden, g.typ, dir, nulls, cov[0], cov[1])
						}
					}
				}
				if !found {
					t.Errorf("%s: no lines for %s %s %s", keysGolden, k, dir, nulls)
				}
			}
		}
	}
	if changed {
		var b strings.Builder
		for _, h := range header {
			b.WriteString(h + "\n")
		}
		for i, l := range lines {
			if i > 0 && (lines[i-1].typ != l.typ || lines[i-1].dir != l.dir || lines[i-1].nulls != l.nulls) {
				b.WriteString("\n")
			}
			b.WriteString(l.String() + "\n")
		}
		if err := os.WriteFile(keysGolden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("filled in new lines of %s", keysGolden)
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
