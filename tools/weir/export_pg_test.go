package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"
)

// pgDSNEnv names a PostgreSQL server (a DSN, as scripts/pg.sh start prints) for
// TestExportCSVPostgres; without it the test starts a private one.
const pgDSNEnv = "WEIR_TEST_POSTGRES_DSN"

// TestExportCSVPostgres: PostgreSQL's COPY ... (FORMAT csv, HEADER) reads the CSV
// export back to the values written: NULL as NULL, "" as the empty string, every
// column type to its value. It runs against the server in $WEIR_TEST_POSTGRES_DSN, or
// a private one (in temporary tables only).
func TestExportCSVPostgres(t *testing.T) {
	dsn := os.Getenv(pgDSNEnv)
	if dsn == "" {
		dsn = startPostgres(t).DSN
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	copyIn := func(table, cols string, data []byte) {
		t.Helper()
		sql := "COPY " + table + " (" + cols + ") FROM STDIN WITH (FORMAT csv, HEADER true)"
		if _, err := conn.PgConn().CopyFrom(ctx, bytes.NewReader(data), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec("SET TimeZone = 'UTC'")

	// Table n, exported by weir export.
	dir := makeNullDir(t)
	out := filepath.Join(t.TempDir(), "n.csv")
	if _, _, err := runWeir(ctx, "export", "--dir", dir, "--table", "n", "--out", out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	exec("CREATE TEMP TABLE weir_export_n (k bigint PRIMARY KEY, s text, v bigint)")
	copyIn("weir_export_n", "k, s, v", data)
	rows, err := conn.Query(ctx, "SELECT k, s, v FROM weir_export_n ORDER BY k")
	if err != nil {
		t.Fatal(err)
	}
	var got []nullRow
	for rows.Next() {
		var r nullRow
		if err := rows.Scan(&r.k, &r.s, &r.v); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, nullRows, func(a, b nullRow) bool {
		return a.k == b.k && fmtCell(a.s) == fmtCell(b.s) && fmtPtr(a.v) == fmtPtr(b.v)
	}) {
		t.Errorf("PostgreSQL read back %v, want %v", fmtRows(got), fmtRows(nullRows))
	}

	// Every column type, written by writeRecords, read back as PostgreSQL's text.
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	rec := typesRecord(mem)
	defer rec.Release()
	rr, err := array.NewRecordReader(rec.Schema(), []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	var buf bytes.Buffer
	if _, err := writeRecords(&buf, "csv", rr); err != nil {
		t.Fatal(err)
	}
	exec(`CREATE TEMP TABLE weir_export_types (ord serial, b boolean, i16 smallint, i32 integer, i64 bigint,
		f32 real, f64 double precision, d numeric(38,2), s text, by bytea, day date, ts timestamp, tz timestamptz)`)
	copyIn("weir_export_types", "b, i16, i32, i64, f32, f64, d, s, by, day, ts, tz", buf.Bytes())
	trows, err := conn.Query(ctx, `SELECT b::text, i16::text, i32::text, i64::text, f32::text, f64::text, d::text, s,
		encode(by, 'hex'), day::text, ts::text, tz::text FROM weir_export_types ORDER BY ord`)
	if err != nil {
		t.Fatal(err)
	}
	var texts [][]*string
	for trows.Next() {
		r := make([]*string, 12)
		ptrs := make([]any, len(r))
		for i := range r {
			ptrs[i] = &r[i]
		}
		if err := trows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		texts = append(texts, r)
	}
	if err := trows.Err(); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"true", "-7", "42", "-1", "0.1", "0.1", "12.34", "plain", "00ff1a", "2024-02-29", "2024-02-29 13:04:05.123456", "2024-02-29 13:04:05.123456+00"},
		nil, // every column NULL
		{"false", "-32768", "-2147483648", "-9223372036854775808", "-Infinity", "NaN", "-0.05", "two\nlines, \"quoted\"", "", "1969-12-31", "1969-12-31 23:59:59.999999", "1970-01-01 00:00:00.000001+00"},
		{"true", "32767", "0", "9223372036854775807", "3e+38", "Infinity", "-123456789012345678901234567.89", "\tété", "612c62", "1970-01-01", "1970-01-01 00:00:00", "1970-01-01 00:00:00+00"},
	}
	if len(texts) != len(want) {
		t.Fatalf("PostgreSQL read %d rows, want %d", len(texts), len(want))
	}
	for i, w := range want {
		for j, c := range texts[i] {
			if w == nil {
				if c != nil {
					t.Errorf("row %d column %d: %s, want NULL", i, j, fmtCell(c))
				}
				continue
			}
			if c == nil || *c != w[j] {
				t.Errorf("row %d column %d: %s, want %q", i, j, fmtCell(c), w[j])
			}
		}
	}
}

func fmtPtr(v *int64) string {
	if v == nil {
		return "NULL"
	}
	return fmtInt(*v)
}

func fmtRows(rs []nullRow) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, "{"+fmtInt(r.k)+" "+fmtCell(r.s)+" "+fmtPtr(r.v)+"}")
	}
	return strings.Join(parts, " ")
}
