package queries

import (
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

func TestCanon(t *testing.T) {
	mem := checkedMem(t)
	ts := func(u arrow.TimeUnit) arrow.DataType { return &arrow.TimestampType{Unit: u} }
	fields := []arrow.Field{
		{Name: "i8", Type: arrow.PrimitiveTypes.Int8},
		{Name: "i16", Type: arrow.PrimitiveTypes.Int16},
		{Name: "i32", Type: arrow.PrimitiveTypes.Int32},
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64},
		{Name: "u8", Type: arrow.PrimitiveTypes.Uint8},
		{Name: "u16", Type: arrow.PrimitiveTypes.Uint16},
		{Name: "u32", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "u64", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "f32", Type: arrow.PrimitiveTypes.Float32},
		{Name: "f64", Type: arrow.PrimitiveTypes.Float64},
		{Name: "s", Type: arrow.BinaryTypes.String},
		{Name: "ls", Type: arrow.BinaryTypes.LargeString},
		{Name: "sv", Type: arrow.BinaryTypes.StringView},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean},
		{Name: "ts_s", Type: ts(arrow.Second)},
		{Name: "ts_ms", Type: ts(arrow.Millisecond)},
		{Name: "ts_us", Type: ts(arrow.Microsecond)},
		{Name: "ts_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
		{Name: "d32", Type: arrow.FixedWidthTypes.Date32},
		{Name: "d64", Type: arrow.FixedWidthTypes.Date64},
		{Name: "dec", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}},
	}
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	// Row 0: values; row 1: NULLs.
	b.Field(0).(*array.Int8Builder).Append(-8)
	b.Field(1).(*array.Int16Builder).Append(-16)
	b.Field(2).(*array.Int32Builder).Append(-32)
	b.Field(3).(*array.Int64Builder).Append(-64)
	b.Field(4).(*array.Uint8Builder).Append(8)
	b.Field(5).(*array.Uint16Builder).Append(16)
	b.Field(6).(*array.Uint32Builder).Append(32)
	b.Field(7).(*array.Uint64Builder).Append(64)
	b.Field(8).(*array.Float32Builder).Append(1.5)
	b.Field(9).(*array.Float64Builder).Append(2.25)
	b.Field(10).(*array.StringBuilder).Append("s")
	b.Field(11).(*array.LargeStringBuilder).Append("ls")
	b.Field(12).(*array.StringViewBuilder).Append("a string view longer than twelve bytes")
	b.Field(13).(*array.BooleanBuilder).Append(true)
	b.Field(14).(*array.TimestampBuilder).Append(2)
	b.Field(15).(*array.TimestampBuilder).Append(3)
	b.Field(16).(*array.TimestampBuilder).Append(4)
	b.Field(17).(*array.TimestampBuilder).Append(-1500) // floors to -2 µs
	b.Field(18).(*array.Date32Builder).Append(20090)    // 2025-01-02
	b.Field(19).(*array.Date64Builder).Append(-86_400_000 + 1)
	b.Field(20).(*array.Decimal128Builder).Append(decimal128.FromI64(12345))
	for i := range fields {
		b.Field(i).AppendNull()
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Name
	}
	empty := rec.NewSlice(0, 0)
	defer empty.Release()
	got, err := Canon([]arrow.RecordBatch{rec, empty}, names)
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{int64(-8), int64(-16), int64(-32), int64(-64), int64(8), int64(16), int64(32), int64(64),
			1.5, 2.25, "s", "ls", "a string view longer than twelve bytes", true,
			int64(2_000_000), int64(3_000), int64(4), int64(-2), "2025-01-02", "1969-12-31", 123.45},
		make(Row, len(fields)),
	}
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("row %d: %v", i, got[i])
		}
		for k := range want[i] {
			if got[i][k] != want[i][k] {
				t.Errorf("row %d column %s: got %#v, want %#v", i, names[k], got[i][k], want[i][k])
			}
		}
	}
	// Column order follows cols, not the schema.
	got, err = Canon([]arrow.RecordBatch{rec}, []string{"s", "i64"})
	if err != nil || formatRow(got[0]) != `("s", -64)` {
		t.Fatalf("reordered: %v, %v", got, err)
	}
	if _, err := Canon([]arrow.RecordBatch{rec}, []string{"nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("missing column: %v", err)
	}
}

func TestCanonErrors(t *testing.T) {
	mem := checkedMem(t)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "bin", Type: arrow.BinaryTypes.Binary},
		{Name: "u64", Type: arrow.PrimitiveTypes.Uint64},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	b.Field(0).(*array.BinaryBuilder).Append([]byte("x"))
	b.Field(1).(*array.Uint64Builder).Append(math.MaxUint64)
	rec := b.NewRecordBatch()
	defer rec.Release()
	if _, err := Canon([]arrow.RecordBatch{rec}, []string{"bin"}); err == nil ||
		!strings.Contains(err.Error(), `"bin"`) || !strings.Contains(err.Error(), "binary") {
		t.Fatalf("unsupported type: %v", err)
	}
	if _, err := Canon([]arrow.RecordBatch{rec}, []string{"u64"}); err == nil || !strings.Contains(err.Error(), "overflow") {
		t.Fatalf("overflow: %v", err)
	}
}

func TestDiff(t *testing.T) {
	r := func(v ...any) Row { return Row(v) }
	cases := []struct {
		name             string
		want, got        []Row
		relTol           float64
		missingN, extraN int
	}{
		{name: "equal in another order",
			want: []Row{r(int64(1), "a"), r(int64(2), nil), r(true, 1.0)},
			got:  []Row{r(true, 1.0), r(int64(2), nil), r(int64(1), "a")}},
		{name: "both empty"},
		{name: "floats within tolerance",
			want: []Row{r(int64(10), 400.0), r(int64(11), 0.0)},
			got:  []Row{r(int64(11), 0.0), r(int64(10), 400.0000000001)}, relTol: 1e-9},
		{name: "floats beyond tolerance",
			want: []Row{r(int64(10), 400.0)},
			got:  []Row{r(int64(10), 400.001)}, relTol: 1e-9, missingN: 1, extraN: 1},
		{name: "zero is exact",
			want: []Row{r(0.0)}, got: []Row{r(1e-300)}, relTol: 1e-9, missingN: 1, extraN: 1},
		{name: "no tolerance",
			want: []Row{r(1.0)}, got: []Row{r(math.Nextafter(1, 2))}, missingN: 1, extraN: 1},
		{name: "NaN equals NaN",
			want: []Row{r(math.NaN())}, got: []Row{r(math.NaN())}},
		{name: "duplicates count",
			want:     []Row{r(int64(1)), r(int64(1)), r(int64(1)), r(int64(2))},
			got:      []Row{r(int64(1)), r(int64(2)), r(int64(2)), r(int64(3))},
			missingN: 2, extraN: 2},
		{name: "types differ",
			want: []Row{r(int64(1)), r(nil)}, got: []Row{r(1.0), r("")}, missingN: 2, extraN: 2},
		{name: "lengths differ",
			want: []Row{r(int64(1))}, got: []Row{r(int64(1), nil)}, missingN: 1, extraN: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantCopy := append([]Row(nil), c.want...)
			d := Diff(c.want, c.got, c.relTol)
			if d.MissingN != c.missingN || d.ExtraN != c.extraN {
				t.Fatalf("Diff = %s; want %d missing, %d extra", d, c.missingN, c.extraN)
			}
			if d.OK() != (c.missingN+c.extraN == 0) || d.Mismatches() != c.missingN+c.extraN {
				t.Fatalf("OK %v Mismatches %d", d.OK(), d.Mismatches())
			}
			if len(d.Missing) != c.missingN || len(d.Extra) != c.extraN {
				t.Fatalf("examples: %v %v", d.Missing, d.Extra)
			}
			for i := range wantCopy {
				if formatRow(wantCopy[i]) != formatRow(c.want[i]) {
					t.Fatal("Diff reordered its input")
				}
			}
		})
	}
}

func TestDiffExamplesBounded(t *testing.T) {
	var want []Row
	for i := range 25 {
		want = append(want, Row{int64(i), "x"})
	}
	d := Diff(want, nil, 0)
	if d.MissingN != 25 || len(d.Missing) != maxExamples || d.ExtraN != 0 {
		t.Fatalf("%+v", d)
	}
	s := d.String()
	if !strings.Contains(s, "25 missing, 0 extra") || !strings.Contains(s, `missing (0, "x")`) || !strings.Contains(s, "15 more missing") {
		t.Fatalf("String() = %s", s)
	}
	if Diff(want, want, 0).String() != "equal" {
		t.Fatal("equal rows not equal")
	}
}
