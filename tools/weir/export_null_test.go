package main

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
)

// nullRow is a row of table n: k (the pk), s (nullable varchar) and v (nullable
// int64); nil is NULL.
type nullRow struct {
	k int64
	s *string
	v *int64
}

func ptr[T any](v T) *T { return &v }

// nullRows are the rows of table n: NULL and the empty string, and strings that
// CSV must quote.
var nullRows = []nullRow{
	{0, nil, nil},
	{1, ptr(""), ptr(int64(1))},
	{2, ptr("a,b"), nil},
	{3, ptr(`a"b`), ptr(int64(3))},
	{4, ptr(`\.`), ptr(int64(-4))},
	{5, ptr(" x"), nil},
	{6, ptr("NULL"), ptr(int64(0))},
}

// nullCSVLines are the CSV lines of nullRows after the header k,s,v.
var nullCSVLines = []string{
	`0,,`,
	`1,"",1`,
	`2,"a,b",`,
	`3,"a""b",3`,
	`4,"\.",-4`,
	`5," x",`,
	`6,NULL,0`,
}

// makeNullDir builds an engine directory with table n holding nullRows.
func makeNullDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	e, err := engine.Open(ctx, dir, engine.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tab := &schema.Table{
		Name: "n",
		Columns: []schema.Column{
			{Name: "k", Type: schema.Type{Kind: schema.Int64}},
			{Name: "s", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
			{Name: "v", Type: schema.Type{Kind: schema.Int64}, Nullable: true},
		},
		PK:         []schema.KeyColumn{{Column: 0}},
		VnodeCount: 16,
	}
	if err := e.CreateTable(ctx, tab, engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	mem := memory.DefaultAllocator
	kb, sb, vb := array.NewInt64Builder(mem), array.NewStringBuilder(mem), array.NewInt64Builder(mem)
	defer kb.Release()
	defer sb.Release()
	defer vb.Release()
	for _, r := range nullRows {
		kb.Append(r.k)
		if r.s != nil {
			sb.Append(*r.s)
		} else {
			sb.AppendNull()
		}
		if r.v != nil {
			vb.Append(*r.v)
		} else {
			vb.AppendNull()
		}
	}
	cols := []arrow.Array{kb.NewArray(), sb.NewArray(), vb.NewArray()}
	rec := array.NewRecordBatch(tab.ArrowSchema(), cols, int64(len(nullRows)))
	for _, c := range cols {
		c.Release()
	}
	defer rec.Release()
	if err := e.Insert(ctx, "n", rec); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// parsePGCSV splits data as PostgreSQL's COPY ... (FORMAT csv) reads it: fields end
// at a comma and rows at a line feed outside double quotes, "" inside them is one ",
// and a field is NULL when it is empty and no quote was seen in it. A line that is
// \. unquoted ends the data, as it does for COPY FROM STDIN. nil is NULL.
func parsePGCSV(t *testing.T, data string) [][]*string {
	t.Helper()
	var rows [][]*string
	var row []*string
	var field []byte
	quoted, inQuote, lineStart := false, false, true
	endField := func() {
		if !quoted && len(field) == 0 {
			row = append(row, nil)
		} else {
			row = append(row, ptr(string(field)))
		}
		field, quoted = field[:0], false
	}
	for i := 0; i < len(data); i++ {
		if lineStart && !inQuote && (strings.HasPrefix(data[i:], "\\.\n") || data[i:] == `\.`) {
			t.Logf("end-of-data marker at byte %d", i)
			return rows
		}
		c := data[i]
		lineStart = false
		if inQuote {
			switch {
			case c == '"' && i+1 < len(data) && data[i+1] == '"':
				field = append(field, '"')
				i++
			case c == '"':
				inQuote = false
			default:
				field = append(field, c)
			}
			continue
		}
		switch c {
		case '"':
			inQuote, quoted = true, true
		case ',':
			endField()
		case '\n':
			endField()
			rows, row, lineStart = append(rows, row), nil, true
		case '\r':
			t.Fatalf("unquoted CR at byte %d", i)
		default:
			field = append(field, c)
		}
	}
	if inQuote || row != nil || len(field) > 0 {
		t.Fatalf("the data does not end with a complete line: %q", data)
	}
	return rows
}

func fmtCell(c *string) string {
	if c == nil {
		return "NULL"
	}
	return `"` + *c + `"`
}

// TestExportCSVNulls: the CSV export tells NULL (an empty field) from the empty
// string (""), quotes what needs it, and reads back as PostgreSQL reads CSV to the
// rows written; Parquet and Arrow keep NULLs as NULLs and "" as "".
func TestExportCSVNulls(t *testing.T) {
	long := newExport().Long
	for _, w := range []string{"PostgreSQL's CSV convention", "NULL is an empty unquoted\n           field", `the empty string is "" (a quoted empty field)`} {
		if !strings.Contains(long, w) {
			t.Errorf("export's help lacks %q", w)
		}
	}
	dir := makeNullDir(t)
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "n.csv")
	if _, _, err := runWeir(ctx, "export", "--dir", dir, "--table", "n", "--format", "csv", "--out", out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// The bytes: the header, then the rows in the scan's order (by vnode).
	header, body, _ := strings.Cut(string(data), "\n")
	if header != "k,s,v" {
		t.Errorf("header %q, want k,s,v", header)
	}
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	slices.Sort(lines)
	if !strings.HasSuffix(body, "\n") || !slices.Equal(lines, nullCSVLines) {
		t.Errorf("csv rows (sorted):\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(nullCSVLines, "\n"))
	}
	// Read back as PostgreSQL would.
	rows := parsePGCSV(t, string(data))
	if len(rows) != len(nullRows)+1 {
		t.Fatalf("%d lines read back, want a header and %d rows", len(rows), len(nullRows))
	}
	got := map[string][]*string{}
	for _, r := range rows[1:] {
		if len(r) != 3 || r[0] == nil {
			t.Fatalf("row read back: %v", r)
		}
		got[*r[0]] = r[1:]
	}
	for _, w := range nullRows {
		r, ok := got[fmtInt(w.k)]
		if !ok {
			t.Errorf("row k=%d not read back", w.k)
			continue
		}
		wv := (*string)(nil)
		if w.v != nil {
			wv = ptr(fmtInt(*w.v))
		}
		if fmtCell(r[0]) != fmtCell(w.s) || fmtCell(r[1]) != fmtCell(wv) {
			t.Errorf("k=%d read back as s=%s v=%s, want s=%s v=%s", w.k, fmtCell(r[0]), fmtCell(r[1]), fmtCell(w.s), fmtCell(wv))
		}
	}

	// Parquet and Arrow: NULLs are NULLs (read back by Arrow's own readers).
	for _, format := range []string{"parquet", "arrow"} {
		out := filepath.Join(t.TempDir(), "n."+format)
		if _, _, err := runWeir(ctx, "export", "--dir", dir, "--table", "n", "--format", format, "--out", out); err != nil {
			t.Fatal(err)
		}
		tab := readArrowTable(t, format, out)
		checkNullTable(t, format, tab)
		tab.Release()
	}
}

func fmtInt(v int64) string { return strconv.FormatInt(v, 10) }

// readArrowTable reads an Arrow IPC file, or a Parquet file of columns k (required
// int64), s (optional string) and v (optional int64) with parquet/file's column
// readers, its definition levels giving the NULLs.
func readArrowTable(t *testing.T, format, path string) arrow.Table {
	t.Helper()
	mem := memory.DefaultAllocator
	if format == "parquet" {
		r, err := file.OpenParquetFile(path, false)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		b := array.NewRecordBuilder(mem, arrow.NewSchema([]arrow.Field{
			{Name: "k", Type: arrow.PrimitiveTypes.Int64},
			{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
			{Name: "v", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		}, nil))
		defer b.Release()
		for g := range r.NumRowGroups() {
			rg := r.RowGroup(g)
			n := int(rg.NumRows())
			def := make([]int16, n)
			read := func(c int, values any) int {
				cr, err := rg.Column(c)
				if err != nil {
					t.Fatal(err)
				}
				var total int64
				var nv int
				switch cr := cr.(type) {
				case *file.Int64ColumnChunkReader:
					levels := def
					if c == 0 {
						levels = nil
					}
					total, nv, err = cr.ReadBatch(int64(n), values.([]int64), levels, nil)
				case *file.ByteArrayColumnChunkReader:
					total, nv, err = cr.ReadBatch(int64(n), values.([]parquet.ByteArray), def, nil)
				default:
					t.Fatalf("column %d: reader %T", c, cr)
				}
				if err != nil || total != int64(n) {
					t.Fatalf("column %d: %d of %d rows, %v", c, total, n, err)
				}
				return nv
			}
			ks := make([]int64, n)
			read(0, ks)
			b.Field(0).(*array.Int64Builder).AppendValues(ks, nil)
			ss := make([]parquet.ByteArray, n)
			read(1, ss)
			for i, j := 0, 0; i < n; i++ {
				if def[i] == 0 {
					b.Field(1).AppendNull()
					continue
				}
				b.Field(1).(*array.StringBuilder).Append(string(ss[j]))
				j++
			}
			vs := make([]int64, n)
			read(2, vs)
			for i, j := 0, 0; i < n; i++ {
				if def[i] == 0 {
					b.Field(2).AppendNull()
					continue
				}
				b.Field(2).(*array.Int64Builder).Append(vs[j])
				j++
			}
		}
		rec := b.NewRecordBatch()
		defer rec.Release()
		return array.NewTableFromRecords(rec.Schema(), []arrow.RecordBatch{rec})
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := ipc.NewFileReader(f, ipc.WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var recs []arrow.RecordBatch
	for i := range r.NumRecords() {
		rec, err := r.RecordBatch(i)
		if err != nil {
			t.Fatal(err)
		}
		rec.Retain() // valid until the next RecordBatch call otherwise
		recs = append(recs, rec)
	}
	defer func() {
		for _, rec := range recs {
			rec.Release()
		}
	}()
	return array.NewTableFromRecords(r.Schema(), recs)
}

// checkNullTable checks that tab (k, s, v) holds nullRows, NULLs as NULLs.
func checkNullTable(t *testing.T, what string, tab arrow.Table) {
	t.Helper()
	if tab.NumCols() != 3 || tab.NumRows() != int64(len(nullRows)) {
		t.Fatalf("%s: %d columns, %d rows, want 3 and %d", what, tab.NumCols(), tab.NumRows(), len(nullRows))
	}
	for i, name := range []string{"k", "s", "v"} {
		if f := tab.Schema().Field(i); f.Name != name || (i > 0) != f.Nullable {
			t.Fatalf("%s: column %d is %s (nullable %v), want %s", what, i, f.Name, f.Nullable, name)
		}
	}
	want := map[int64]nullRow{}
	for _, r := range nullRows {
		want[r.k] = r
	}
	tr := array.NewTableReader(tab, 1000)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		k, s, v := rec.Column(0).(*array.Int64), rec.Column(1).(*array.String), rec.Column(2).(*array.Int64)
		for i := range int(rec.NumRows()) {
			w, ok := want[k.Value(i)]
			if !ok {
				t.Errorf("%s: unexpected row k=%d", what, k.Value(i))
				continue
			}
			delete(want, w.k)
			gs, gv := (*string)(nil), (*string)(nil)
			if s.IsValid(i) {
				gs = ptr(s.Value(i))
			}
			if v.IsValid(i) {
				gv = ptr(fmtInt(v.Value(i)))
			}
			wv := (*string)(nil)
			if w.v != nil {
				wv = ptr(fmtInt(*w.v))
			}
			if fmtCell(gs) != fmtCell(w.s) || fmtCell(gv) != fmtCell(wv) {
				t.Errorf("%s: k=%d is s=%s v=%s, want s=%s v=%s", what, w.k, fmtCell(gs), fmtCell(gv), fmtCell(w.s), fmtCell(wv))
			}
		}
	}
	if len(want) != 0 {
		t.Errorf("%s: rows missing: %v", what, want)
	}
}

// typesRecord is a record of every column type of the engine: row 0 ordinary values,
// row 1 all NULL, rows 2 and 3 edge values. typesCSV is its CSV, header included.
func typesRecord(mem memory.Allocator) arrow.RecordBatch {
	dec := &arrow.Decimal128Type{Precision: 38, Scale: 2}
	tsNaive := &arrow.TimestampType{Unit: arrow.Microsecond}
	tsUTC := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "i16", Type: arrow.PrimitiveTypes.Int16, Nullable: true},
		{Name: "i32", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "f64", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "d", Type: dec, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "by", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "day", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "ts", Type: tsNaive, Nullable: true},
		{Name: "tz", Type: tsUTC, Nullable: true},
	}, nil)
	t0 := time.Date(2024, 2, 29, 13, 4, 5, 123456000, time.UTC)
	big, err := decimal128.FromString("-123456789012345678901234567.89", 38, 2)
	if err != nil {
		panic(err)
	}
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	valid := []bool{true, false, true, true}
	b.Field(0).(*array.BooleanBuilder).AppendValues([]bool{true, false, false, true}, valid)
	b.Field(1).(*array.Int16Builder).AppendValues([]int16{-7, 0, math.MinInt16, math.MaxInt16}, valid)
	b.Field(2).(*array.Int32Builder).AppendValues([]int32{42, 0, math.MinInt32, 0}, valid)
	b.Field(3).(*array.Int64Builder).AppendValues([]int64{-1, 0, math.MinInt64, math.MaxInt64}, valid)
	b.Field(4).(*array.Float32Builder).AppendValues([]float32{0.1, 0, float32(math.Inf(-1)), 3e38}, valid)
	b.Field(5).(*array.Float64Builder).AppendValues([]float64{0.1, 0, math.NaN(), math.Inf(1)}, valid)
	b.Field(6).(*array.Decimal128Builder).AppendValues([]decimal128.Num{decimal128.FromI64(1234), {}, decimal128.FromI64(-5), big}, valid)
	b.Field(7).(*array.StringBuilder).AppendValues([]string{"plain", "", "two\nlines, \"quoted\"", "\tété"}, valid)
	b.Field(8).(*array.BinaryBuilder).AppendValues([][]byte{{0x00, 0xff, 0x1a}, nil, {}, []byte("a,b")}, valid)
	b.Field(9).(*array.Date32Builder).AppendValues([]arrow.Date32{arrow.Date32FromTime(t0), 0, -1, 0}, valid)
	b.Field(10).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{arrow.Timestamp(t0.UnixMicro()), 0, -1, 0}, valid)
	b.Field(11).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{arrow.Timestamp(t0.UnixMicro()), 0, 1, 0}, valid)
	return b.NewRecordBatch()
}

const typesCSV = "b,i16,i32,i64,f32,f64,d,s,by,day,ts,tz\n" +
	"true,-7,42,-1,0.1,0.1,12.34,plain,\\x00ff1a,2024-02-29,2024-02-29 13:04:05.123456,2024-02-29 13:04:05.123456Z\n" +
	",,,,,,,,,,,\n" +
	"false,-32768,-2147483648,-9223372036854775808,-Infinity,NaN,-0.05,\"two\nlines, \"\"quoted\"\"\",\\x,1969-12-31,1969-12-31 23:59:59.999999,1970-01-01 00:00:00.000001Z\n" +
	"true,32767,0,9223372036854775807,3e+38,Infinity,-123456789012345678901234567.89,\"\tété\",\\x612c62,1970-01-01,1970-01-01 00:00:00,1970-01-01 00:00:00Z\n"

// TestWriteCSVTypes: the exact CSV of every column type of the engine, with a NULL in
// every column, over two records, and the values PostgreSQL's CSV reading gives back.
func TestWriteCSVTypes(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	rec := typesRecord(mem)
	defer rec.Release()
	sc := rec.Schema()
	rr, err := array.NewRecordReader(sc, []arrow.RecordBatch{rec, rec})
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	var out bytes.Buffer
	n, err := writeRecords(&out, "csv", rr)
	if err != nil || n != 8 {
		t.Fatalf("wrote %d rows, %v", n, err)
	}
	header, rows, _ := strings.Cut(typesCSV, "\n")
	if want := header + "\n" + rows + rows; out.String() != want {
		t.Fatalf("csv:\n%s\nwant:\n%s", out.String(), want)
	}
	// What PostgreSQL reads: the row of NULLs is all NULL, every other field a value
	// (the empty bytea is \x, not NULL), the quoted string unquoted.
	got := parsePGCSV(t, out.String())
	if len(got) != 9 {
		t.Fatalf("%d rows read back, want 9", len(got))
	}
	for i, r := range got[1:] {
		for j, c := range r {
			if (c == nil) != (i%4 == 1) {
				t.Errorf("row %d column %s: %s", i, sc.Field(j).Name, fmtCell(c))
			}
		}
	}
	if s := got[3][7]; s == nil || *s != "two\nlines, \"quoted\"" {
		t.Errorf("quoted string read back as %s", fmtCell(s))
	}
	if s := got[3][8]; s == nil || *s != `\x` {
		t.Errorf("empty bytea read back as %s", fmtCell(s))
	}
}
