package vnode

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

const goldenPath = "testdata/golden.txt"

// goldenCounts are the vnode counts every golden line pins.
var goldenCounts = []int{1, 8, 256, 32768}

func TestCountsMatchSchema(t *testing.T) {
	if DefaultCount != schema.DefaultVnodeCount || MaxCount != schema.MaxVnodeCount {
		t.Fatalf("DefaultCount %d MaxCount %d, schema says %d and %d", DefaultCount, MaxCount, schema.DefaultVnodeCount, schema.MaxVnodeCount)
	}
	if MaxCount-1 > math.MaxUint16 {
		t.Fatalf("vnode %d does not fit a Vnode", MaxCount-1)
	}
	for _, c := range []int{1, DefaultCount, MaxCount} {
		if err := CheckCount(c); err != nil {
			t.Errorf("CheckCount(%d): %v", c, err)
		}
	}
	for _, c := range []int{-1, 0, MaxCount + 1, 1 << 16} {
		if err := CheckCount(c); err == nil {
			t.Errorf("CheckCount(%d) = nil, want an error", c)
		}
	}
}

// TestGolden recomputes every line of testdata/golden.txt: the canonical encoding of the
// key and its vnode at each count. A difference means the encoding or the hash moved,
// which would misplace every persisted row: fix the code, do not rewrite the file.
func TestGolden(t *testing.T) {
	f, err := os.Open(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	lines, cases := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			out.WriteString(line + "\n")
			continue
		}
		cases++
		keyText, want, _ := strings.Cut(trimmed, " => ")
		keyText = strings.TrimSpace(keyText)
		canonical, err := parseKey(keyText)
		if err != nil {
			t.Fatalf("%s:%d: %v", goldenPath, lines, err)
		}
		got := goldenResult(canonical)
		fmt.Fprintf(&out, "%s => %s\n", keyText, got)
		if *rewrite {
			continue
		}
		if err := compareGolden(want, canonical); err != nil {
			t.Errorf("%s:%d: %s: %v\n  want %s\n  got  %s", goldenPath, lines, keyText, err, want, got)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cases == 0 {
		t.Fatalf("%s holds no cases", goldenPath)
	}
	if *rewrite {
		if err := os.WriteFile(goldenPath, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s (%d cases)", goldenPath, cases)
	}
}

func goldenResult(canonical []byte) string {
	var b strings.Builder
	b.WriteString(hex.EncodeToString(canonical))
	b.WriteString(" |")
	for _, c := range goldenCounts {
		fmt.Fprintf(&b, " %d:%d", c, OfKey(canonical, c))
	}
	return b.String()
}

// compareGolden checks an expectation "HEX | count:vnode ..." against a canonical key.
func compareGolden(want string, canonical []byte) error {
	hexPart, vnodes, ok := strings.Cut(want, " | ")
	if !ok {
		return fmt.Errorf("expectation %q is not \"hex | count:vnode ...\"", want)
	}
	if got := hex.EncodeToString(canonical); got != strings.TrimSpace(hexPart) {
		return fmt.Errorf("canonical encoding changed")
	}
	seen := map[int]bool{}
	for _, f := range strings.Fields(vnodes) {
		cs, vs, ok := strings.Cut(f, ":")
		c, err1 := strconv.Atoi(cs)
		v, err2 := strconv.Atoi(vs)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("bad count:vnode %q", f)
		}
		if err := CheckCount(c); err != nil {
			return err
		}
		if got := OfKey(canonical, c); int(got) != v {
			return fmt.Errorf("vnode at count %d is %d, golden %d: the hash changed", c, got, v)
		}
		seen[c] = true
	}
	for _, c := range goldenCounts {
		if !seen[c] {
			return fmt.Errorf("no golden vnode for count %d", c)
		}
	}
	return nil
}

// parseKey builds the canonical distribution-key encoding (every column ASC NULLS
// FIRST) of a key written as comma-separated columns: null, bool(true), int16(7),
// int32(-1), int64(42), float32(1.5), float64(NaN), decimal(<unscaled integer>),
// string("<Go quoted>"), bytes(<hex>), date(2024-02-29), timestamp(<RFC 3339>).
func parseKey(s string) ([]byte, error) {
	var dst []byte
	rest := strings.TrimSpace(s)
	for {
		if rest == "" {
			return nil, fmt.Errorf("key %q: missing column", s)
		}
		var err error
		dst, rest, err = parseColumn(dst, rest)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", s, err)
		}
		rest = strings.TrimSpace(rest)
		if rest == "" {
			return dst, nil
		}
		if rest[0] != ',' {
			return nil, fmt.Errorf("key %q: want ',' before %q", s, rest)
		}
		rest = strings.TrimSpace(rest[1:])
	}
}

func parseColumn(dst []byte, s string) ([]byte, string, error) {
	if rest, ok := strings.CutPrefix(s, "null"); ok {
		return vec.AppendKeyNull(dst, true), rest, nil
	}
	kind, rest, ok := strings.Cut(s, "(")
	if !ok {
		return nil, "", fmt.Errorf("column %q: want type(value) or null", s)
	}
	var arg string
	if kind == "string" {
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return nil, "", fmt.Errorf("string column %q: %w", rest, err)
		}
		arg, _ = strconv.Unquote(q)
		rest = rest[len(q):]
		if !strings.HasPrefix(rest, ")") {
			return nil, "", fmt.Errorf("string column: want ')' after %s", q)
		}
		rest = rest[1:]
	} else {
		arg, rest, ok = strings.Cut(rest, ")")
		if !ok {
			return nil, "", fmt.Errorf("%s column: missing ')'", kind)
		}
	}
	var err error
	switch kind {
	case "bool":
		var b bool
		if b, err = strconv.ParseBool(arg); err == nil {
			dst = vec.AppendKeyBool(dst, b, false)
		}
	case "int16", "int32", "int64":
		bitSize, _ := strconv.Atoi(strings.TrimPrefix(kind, "int"))
		var v int64
		if v, err = strconv.ParseInt(arg, 10, bitSize); err == nil {
			switch bitSize {
			case 16:
				dst = vec.AppendKeyInt16(dst, int16(v), false)
			case 32:
				dst = vec.AppendKeyInt32(dst, int32(v), false)
			default:
				dst = vec.AppendKeyInt64(dst, v, false)
			}
		}
	case "float32":
		var v float64
		if v, err = strconv.ParseFloat(arg, 32); err == nil {
			dst = vec.AppendKeyFloat32(dst, float32(v), false)
		}
	case "float64":
		var v float64
		if v, err = strconv.ParseFloat(arg, 64); err == nil {
			dst = vec.AppendKeyFloat64(dst, v, false)
		}
	case "decimal":
		v, ok := new(big.Int).SetString(arg, 10)
		if !ok || v.BitLen() > 127 {
			err = fmt.Errorf("not a 128-bit integer")
		} else {
			dst = vec.AppendKeyDecimal(dst, decimal128.FromBigInt(v), false)
		}
	case "string":
		dst = vec.AppendKeyString(dst, arg, false)
	case "bytes":
		var b []byte
		if b, err = hex.DecodeString(arg); err == nil {
			dst = vec.AppendKeyBytes(dst, b, false)
		}
	case "date":
		var d time.Time
		if d, err = time.Parse(time.DateOnly, arg); err == nil {
			dst = vec.AppendKeyInt32(dst, int32(d.Unix()/86400), false)
		}
	case "timestamp":
		var ts time.Time
		if ts, err = time.Parse(time.RFC3339Nano, arg); err == nil {
			dst = vec.AppendKeyInt64(dst, ts.UnixMicro(), false)
		}
	default:
		err = fmt.Errorf("unknown type")
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s(%s): %w", kind, arg, err)
	}
	return dst, rest, nil
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want []byte
	}{
		{"int64(1)", vec.AppendKeyInt64(nil, 1, false)},
		{"null, string(\"a,b)\")", vec.AppendKeyString(vec.AppendKeyNull(nil, true), "a,b)", false)},
		{"date(1970-01-02)", vec.AppendKeyInt32(nil, 1, false)},
		{"date(1969-12-31)", vec.AppendKeyInt32(nil, -1, false)},
		{"timestamp(1970-01-01T00:00:00.000001Z)", vec.AppendKeyInt64(nil, 1, false)},
		{"decimal(-1)", vec.AppendKeyDecimal(nil, decimal128.FromI64(-1), false)},
	} {
		got, err := parseKey(tc.key)
		if err != nil || string(got) != string(tc.want) {
			t.Errorf("parseKey(%s) = %x, %v; want %x", tc.key, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "int64(1),", "int8(1)", "int16(70000)", "string(\"a)", "bytes(zz)", "int64(1) int64(2)"} {
		if _, err := parseKey(bad); err == nil {
			t.Errorf("parseKey(%q) succeeded, want an error", bad)
		}
	}
}

// row is one row of the kernel test table.
type row struct {
	id     int64
	region *string
	amount *int64 // unscaled decimal
	at     int64  // microseconds
	note   string
}

func ptr[T any](v T) *T { return &v }

// kernelTable has a distribution key in another order than its pk, with nullable and
// DESC pk columns, so the test shows the canonical encoding ignores the pk's order.
func kernelTable(t *testing.T, count int) *schema.Table {
	tab := &schema.Table{
		Name: "orders",
		Columns: []schema.Column{
			{Name: "id", Type: schema.Type{Kind: schema.Int64}},
			{Name: "region", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
			{Name: "amount", Type: schema.Type{Kind: schema.Decimal, Precision: 12, Scale: 2}, Nullable: true},
			{Name: "at", Type: schema.Type{Kind: schema.Timestamp}},
			{Name: "note", Type: schema.Type{Kind: schema.Varchar}},
		},
		PK: []schema.KeyColumn{
			{Column: 1, Desc: true},
			{Column: 0},
			{Column: 3, Desc: true, NullsFirst: true},
			{Column: 2, NullsFirst: true},
		},
		DistKey:    []int{3, 1, 2},
		VnodeCount: count,
	}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	return tab
}

func buildChunk(t *testing.T, mem memory.Allocator, tab *schema.Table, rows []row) *vec.Chunk {
	b := array.NewRecordBuilder(mem, tab.ArrowSchema())
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		if r.region == nil {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(*r.region)
		}
		if r.amount == nil {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Decimal128Builder).Append(decimal128.FromI64(*r.amount))
		}
		b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(r.at))
		b.Field(4).(*array.StringBuilder).Append(r.note)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	ops := vec.NewOps(mem, len(rows), vec.Insert)
	defer ops.Release()
	return vec.NewChunk(rec, ops, nil)
}

// handCanonical is the distribution key (at, region, amount) of r, encoded by hand.
func handCanonical(r row) []byte {
	dst := vec.AppendKeyInt64(nil, r.at, false)
	if r.region == nil {
		dst = vec.AppendKeyNull(dst, true)
	} else {
		dst = vec.AppendKeyString(dst, *r.region, false)
	}
	if r.amount == nil {
		return vec.AppendKeyNull(dst, true)
	}
	return vec.AppendKeyDecimal(dst, decimal128.FromI64(*r.amount), false)
}

// TestGenericKernelAgrees checks that the generic kernel's vnodes (the reference that
// generated kernels are tested against) are OfKey of the canonical key built by hand.
func TestGenericKernelAgrees(t *testing.T) {
	rng, seed := testRand(t)
	rows := []row{
		{id: 1, region: ptr("eu"), amount: ptr(int64(12345)), at: 1_700_000_000_000_000, note: "x"},
		{id: 2, region: nil, amount: ptr(int64(-1)), at: 0, note: "null region"},
		{id: 3, region: ptr(""), amount: nil, at: -1, note: "null amount"},
		{id: 4, region: nil, amount: nil, at: math.MinInt64, note: "all null"},
		{id: 5, region: ptr("a region name longer than eight bytes"), amount: ptr(int64(math.MaxInt64)), at: math.MaxInt64},
	}
	for i := range 200 {
		r := row{id: int64(100 + i), at: rng.Int64() >> rng.IntN(64), note: "r"}
		if rng.IntN(4) != 0 {
			r.region = ptr(strconv.Itoa(rng.IntN(1000)))
		}
		if rng.IntN(4) != 0 {
			r.amount = ptr(rng.Int64N(2_000_000) - 1_000_000)
		}
		rows = append(rows, r)
	}
	for _, count := range goldenCounts {
		t.Run(strconv.Itoa(count), func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			tab := kernelTable(t, count)
			c := buildChunk(t, mem, tab, rows)
			defer c.Release()
			out := make([]uint16, c.NumRows())
			vec.NewGeneric(tab).Vnodes(c, out)
			hist := map[uint16]int{}
			for i, r := range rows {
				want := OfKey(handCanonical(r), count)
				if out[i] != want {
					t.Fatalf("seed %d: count %d row %d %+v: kernel vnode %d, hand-built %d", seed, count, i, r, out[i], want)
				}
				if int(want) >= count {
					t.Fatalf("seed %d: vnode %d out of range for count %d", seed, want, count)
				}
				hist[want]++
			}
			// A sanity check that the hash spreads: 205 rows over 8+ vnodes use several.
			if count >= 8 && len(hist) < 4 {
				t.Errorf("seed %d: %d rows landed in only %d vnodes of %d", seed, len(rows), len(hist), count)
			}
		})
	}
}

// TestHashSpread checks the vnodes of sequential int64 keys are close to uniform, which
// a broken hash or modulus would not be.
func TestHashSpread(t *testing.T) {
	const count, n = 256, 256 * 200
	hist := make([]int, count)
	var key []byte
	for i := range n {
		key = vec.AppendKeyInt64(key[:0], int64(i), false)
		hist[OfKey(key, count)]++
	}
	for v, h := range hist {
		if h < 120 || h > 280 {
			t.Errorf("vnode %d holds %d of %d sequential keys, want about %d", v, h, n, n/count)
		}
	}
}
