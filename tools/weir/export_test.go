package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/csv"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
)

// exportedRow is one row of an export: k and a second int64 column (v of t, v2 of
// mv) and s (nil: null).
type exportedRow struct {
	k, v int64
	s    *string
}

// wantRows are the rows of t (view false) or mv (view true), by k.
func wantRows(view bool) map[int64]exportedRow {
	out := map[int64]exportedRow{}
	for i := range int64(testRows) {
		r := exportedRow{k: i, v: 10 * i}
		if view {
			if r.v <= 100 {
				continue
			}
			r.v *= 2
		}
		if s, ok := testS(i); ok {
			r.s = &s
		}
		out[i] = r
	}
	return out
}

func checkRows(t *testing.T, what string, got []exportedRow, view bool) {
	t.Helper()
	want := wantRows(view)
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	seen := map[int64]bool{}
	for _, r := range got {
		w, ok := want[r.k]
		if !ok || seen[r.k] || r.v != w.v || (r.s == nil) != (w.s == nil) || (r.s != nil && *r.s != *w.s) {
			t.Errorf("%s: row %s, want %s", what, fmtRow(r), fmtRow(w))
		}
		seen[r.k] = true
	}
}

func fmtRow(r exportedRow) string {
	s := "null"
	if r.s != nil {
		s = *r.s
	}
	return fmt.Sprintf("{k=%d v=%d s=%s}", r.k, r.v, s)
}

// colIndex finds the columns k, v (named vName) and s among cols.
func colIndex(t *testing.T, cols []string, vName string) (k, v, s int) {
	t.Helper()
	k, v, s = -1, -1, -1
	for i, c := range cols {
		switch c {
		case "k":
			k = i
		case vName:
			v = i
		case "s":
			s = i
		}
	}
	if len(cols) != 3 || k < 0 || v < 0 || s < 0 {
		t.Fatalf("columns %v, want k, %s and s", cols, vName)
	}
	return k, v, s
}

// recordRows collects the rows of Arrow records of k int64, v int64 (named vName)
// and s string, in any order.
func recordRows(t *testing.T, recs []arrow.RecordBatch, vName string) []exportedRow {
	t.Helper()
	var out []exportedRow
	for _, rec := range recs {
		var names []string
		for _, f := range rec.Schema().Fields() {
			names = append(names, f.Name)
		}
		ki, vi, si := colIndex(t, names, vName)
		k, v, s := rec.Column(ki).(*array.Int64), rec.Column(vi).(*array.Int64), rec.Column(si).(*array.String)
		for i := range int(rec.NumRows()) {
			r := exportedRow{k: k.Value(i), v: v.Value(i)}
			if s.IsValid(i) {
				x := s.Value(i)
				r.s = &x
			}
			out = append(out, r)
		}
	}
	return out
}

func readCSV(t *testing.T, data []byte, vName string) []exportedRow {
	t.Helper()
	header, _, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		t.Fatalf("csv without a header line: %q", data)
	}
	cols := strings.Split(string(header), ",")
	_, _, si := colIndex(t, cols, vName)
	var fields []arrow.Field
	for i, c := range cols {
		f := arrow.Field{Name: c, Type: arrow.PrimitiveTypes.Int64}
		if i == si {
			f = arrow.Field{Name: c, Type: arrow.BinaryTypes.String, Nullable: true}
		}
		fields = append(fields, f)
	}
	sc := arrow.NewSchema(fields, nil)
	r := csv.NewReader(bytes.NewReader(data), sc, csv.WithHeader(true), csv.WithNullReader(true, ""))
	defer r.Release()
	var recs []arrow.RecordBatch
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		recs = append(recs, rec)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, rec := range recs {
			rec.Release()
		}
	}()
	return recordRows(t, recs, vName)
}

func readArrowFile(t *testing.T, path, vName string) []exportedRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := ipc.NewFileReader(f, ipc.WithAllocator(memory.DefaultAllocator))
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
	return recordRows(t, recs, vName)
}

func readParquetFile(t *testing.T, path, vName string) []exportedRow {
	t.Helper()
	r, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sc := r.MetaData().Schema
	var names []string
	for i := range sc.NumColumns() {
		names = append(names, sc.Column(i).Name())
	}
	ki, vi, si := colIndex(t, names, vName)
	if lt := sc.Column(si).LogicalType().String(); lt != "String" {
		t.Errorf("parquet s logical type %s", lt)
	}
	var out []exportedRow
	for g := range r.NumRowGroups() {
		rg := r.RowGroup(g)
		n := int(rg.NumRows())
		ks, vs := make([]int64, n), make([]int64, n)
		for c, dst := range map[int][]int64{ki: ks, vi: vs} {
			cr, err := rg.Column(c)
			if err != nil {
				t.Fatal(err)
			}
			total, _, err := cr.(*file.Int64ColumnChunkReader).ReadBatch(int64(n), dst, nil, nil)
			if err != nil || total != int64(n) {
				t.Fatalf("column %d: %d of %d values, %v", c, total, n, err)
			}
		}
		cr, err := rg.Column(si)
		if err != nil {
			t.Fatal(err)
		}
		ss, def := make([]parquet.ByteArray, n), make([]int16, n)
		total, nv, err := cr.(*file.ByteArrayColumnChunkReader).ReadBatch(int64(n), ss, def, nil)
		if err != nil || total != int64(n) {
			t.Fatalf("column s: %d of %d levels, %v", total, n, err)
		}
		j := 0
		for i := range n {
			row := exportedRow{k: ks[i], v: vs[i]}
			if def[i] == 1 {
				x := string(ss[j])
				row.s = &x
				j++
			}
			out = append(out, row)
		}
		if j != nv {
			t.Fatalf("column s: %d values for %d defined levels", nv, j)
		}
	}
	return out
}

func TestExport(t *testing.T) {
	dir := makeEngineDir(t)
	ctx := context.Background()
	outDir := t.TempDir()
	for _, tc := range []struct {
		table, vName string
		view         bool
	}{{"t", "v", false}, {"mv", "v2", true}} {
		for _, format := range []string{"csv", "parquet", "arrow"} {
			what := tc.table + "." + format
			out := filepath.Join(outDir, what)
			stdout, stderr, err := runWeir(ctx, "export", "--dir", dir, "--table", tc.table, "--format", format, "--out", out)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if stdout != "" || !strings.Contains(stderr, fmt.Sprintf("exported %d rows of %s to %s", len(wantRows(tc.view)), tc.table, out)) {
				t.Errorf("%s: stdout %q, stderr %q", what, stdout, stderr)
			}
			switch format {
			case "csv":
				data, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				checkRows(t, what, readCSV(t, data, tc.vName), tc.view)
			case "parquet":
				checkRows(t, what, readParquetFile(t, out, tc.vName), tc.view)
			case "arrow":
				checkRows(t, what, readArrowFile(t, out, tc.vName), tc.view)
			}
		}
		// CSV to stdout.
		stdout, _, err := runWeir(ctx, "export", "--dir", dir, "--table", tc.table)
		if err != nil {
			t.Fatal(err)
		}
		checkRows(t, tc.table+" csv on stdout", readCSV(t, []byte(stdout), tc.vName), tc.view)
		// Parquet and Arrow to stdout too.
		for _, format := range []string{"parquet", "arrow"} {
			stdout, _, err := runWeir(ctx, "export", "--dir", dir, "--table", tc.table, "--format", format)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "stdout."+format)
			if err := os.WriteFile(path, []byte(stdout), 0o644); err != nil {
				t.Fatal(err)
			}
			if format == "parquet" {
				checkRows(t, tc.table+" parquet on stdout", readParquetFile(t, path, tc.vName), tc.view)
			} else {
				checkRows(t, tc.table+" arrow on stdout", readArrowFile(t, path, tc.vName), tc.view)
			}
		}
	}
	// Only the exports are left: no temporary files.
	ents, err := os.ReadDir(outDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 6 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("files in the output directory: %v", names)
	}
	// Export leaves the engine as it was.
	out, _, err := runWeir(ctx, "status", "--dir", dir)
	if err != nil || !strings.Contains(out, "100.0%") {
		t.Errorf("status after export: %v\n%s", err, out)
	}
}

func TestExportBadInput(t *testing.T) {
	dir := makeEngineDir(t)
	ctx := context.Background()
	outDir := t.TempDir()
	out := filepath.Join(outDir, "x.out")
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"missing dir", []string{"--dir", missing, "--table", "t"}, []string{missing, "does not exist"}},
		{"not an engine", []string{"--dir", outDir, "--table", "t"}, []string{outDir, "does not hold a weir engine"}},
		{"unknown table", []string{"--dir", dir, "--table", "nosuch"}, []string{dir, `no table or materialized view "nosuch"`}},
		{"bad format", []string{"--dir", dir, "--table", "t", "--format", "xlsx"}, []string{`--format "xlsx"`, "csv, parquet or arrow"}},
		{"no table", []string{"--dir", dir}, []string{"--table is required"}},
		{"no dir", []string{"--table", "t"}, []string{"one of --dir, --addr and --meta is required"}},
		{"dir and addr", []string{"--dir", "d", "--addr", "127.0.0.1:1", "--table", "t"}, []string{"one of --dir, --addr and --meta is required"}},
		{"addr and meta", []string{"--addr", "127.0.0.1:1", "--meta", "127.0.0.1:2", "--table", "t"}, []string{"one of --dir, --addr and --meta is required"}},
		{"meta DSN", []string{"--meta", "postgres://u@127.0.0.1:5432/weir", "--table", "t"}, []string{"--meta postgres://u@127.0.0.1:5432/weir looks like a PostgreSQL DSN", "weir meta's serving address"}},
		{"out dir missing", []string{"--dir", dir, "--table", "t", "--out", filepath.Join(missing, "x.csv")}, []string{missing, "does not exist"}},
	} {
		args := append([]string{"export"}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "--out") {
			args = append(args, "--out", out)
		}
		stdout, _, err := runWeir(ctx, args...)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
		if stdout != "" {
			t.Errorf("%s: wrote %q", tc.name, stdout)
		}
		if ents, _ := os.ReadDir(outDir); len(ents) != 0 {
			t.Errorf("%s: left %v in the output directory", tc.name, ents)
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Errorf("%s: created %s", tc.name, missing)
		}
	}
	// Unknown table to stdout: nothing written either.
	stdout, _, err := runWeir(ctx, "export", "--dir", dir, "--table", "nosuch")
	if err == nil || stdout != "" {
		t.Errorf("unknown table to stdout: %v, wrote %q", err, stdout)
	}
}
