package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	pqschema "github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/seed04fbb902/weir/schema"
	"github.com/spf13/cobra"
)

func newExport() *cobra.Command {
	var dir, addr, metaAddr, table, format, out string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write a table or materialized view of an engine directory as CSV, Parquet or Arrow",
		Long: `export opens the engine in --dir (it must exist and hold an engine; it is never
created) with every job paused, reads table or materialized view --table at the
committed epoch (the last checkpoint; a view whose backfill is not done has the rows
it has so far) and writes it as --format:

  csv      CSV with a header row, in PostgreSQL's CSV convention (what COPY ...
           WITH (FORMAT csv, HEADER) reads back): NULL is an empty unquoted
           field and the empty string is "" (a quoted empty field); a value that
           holds a comma, a double quote or a line break, starts with a space or
           a tab, or is \., is quoted, its double quotes doubled. Booleans are
           true and false, floats the shortest decimal that reads back (NaN,
           Infinity, -Infinity), decimals exact, bytea PostgreSQL's hex
           (\x0a1b...), dates 2006-01-02, timestamps 2006-01-02 15:04:05.999999
           (timestamptz in UTC, with Z)
  parquet  a Parquet file (snappy-compressed, one row group per 128Ki rows)
  arrow    an Arrow IPC file (the random-access file format)

to --out, or to stdout without --out. The file is written next to --out under a
temporary name and renamed at the end, so on an error (or an interrupt) nothing is
left. Like status, export cannot read a directory that another process has open
(pebble locks it); --addr instead of --dir reads the engine weir serve serves there,
while it runs, and --meta the engine of a cluster's weir meta (its --addr).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch format {
			case "csv", "parquet", "arrow":
			default:
				return fmt.Errorf("export: --format %q: want csv, parquet or arrow", format)
			}
			addr, err := servedAddr("export", dir, addr, metaAddr)
			if err != nil {
				return err
			}
			if table == "" {
				return errors.New("export: --table is required")
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			// An interrupt ends the scan, so the temporary file is removed.
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			n, err := runExport(ctx, dir, addr, table, format, out, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if out != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "exported %d rows of %s to %s (%s)\n", n, table, out, format)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "engine directory (must exist and hold an engine)")
	f.StringVar(&addr, "addr", "", "address of a served engine (weir serve), instead of --dir")
	f.StringVar(&metaAddr, "meta", "", "address of a cluster's weir meta (its --addr), instead of --dir")
	f.StringVar(&table, "table", "", "table or materialized view to export")
	f.StringVar(&format, "format", "csv", "csv, parquet or arrow (Arrow IPC file)")
	f.StringVar(&out, "out", "", "file to write (default: stdout)")
	return cmd
}

// runExport writes table of the engine in dir to out (stdout when empty) and returns
// the number of rows written.
func runExport(ctx context.Context, dir, addr, table, format, out string, stdout io.Writer) (rows int64, err error) {
	if out != "" {
		if st, err := os.Stat(filepath.Dir(out)); err != nil || !st.IsDir() {
			return 0, fmt.Errorf("export: --out %s: its directory %s does not exist", out, filepath.Dir(out))
		}
		if st, err := os.Stat(out); err == nil && st.IsDir() {
			return 0, fmt.Errorf("export: --out %s is a directory", out)
		}
	}
	rr, done, err := openExportScan(ctx, dir, addr, table)
	if err != nil {
		return 0, err
	}
	w, tmp := stdout, (*os.File)(nil)
	if out != "" {
		tmp, err = os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
		if err != nil {
			done()
			return 0, fmt.Errorf("export: %w", err)
		}
		if err := tmp.Chmod(0o644); err != nil { // CreateTemp's 0600 is for secrets
			tmp.Close()
			os.Remove(tmp.Name())
			done()
			return 0, fmt.Errorf("export: %w", err)
		}
		// Hide Close: the Parquet writer closes a sink that has it, and the file is
		// synced, closed and renamed here.
		w = struct{ io.Writer }{tmp}
	}
	rows, err = writeRecords(w, format, rr)
	if err != nil {
		err = fmt.Errorf("export %s as %s: %w", table, format, err)
	}
	if cerr := done(); cerr != nil && err == nil {
		err = cerr
	}
	if tmp == nil {
		return rows, err
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), out)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return 0, err
	}
	return rows, nil
}

// openExportScan opens the scan of table at the committed epoch: of the engine in dir
// (opened paused) or, with addr, of the engine served there. done releases the scan
// and closes what it opened.
func openExportScan(ctx context.Context, dir, addr, table string) (rr array.RecordReader, done func() error, err error) {
	if addr != "" {
		c, err := remote.Dial(ctx, addr, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("export: %w", err)
		}
		rr, err := c.Scan(ctx, table)
		if err != nil {
			c.Close()
			return nil, nil, fmt.Errorf("export: %w", err)
		}
		return rr, func() error { rr.Release(); return c.Close() }, nil
	}
	e, err := openEngineDir(ctx, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("export: %w", err)
	}
	if _, err := e.Table(table); err != nil {
		e.Close()
		return nil, nil, fmt.Errorf("export: %s has no table or materialized view %q", dir, table)
	}
	snap, err := e.Snapshot()
	if err != nil {
		e.Close()
		return nil, nil, fmt.Errorf("export %s: %w", table, err)
	}
	rr, err = snap.Scan(ctx, table)
	if err != nil {
		snap.Release()
		e.Close()
		return nil, nil, fmt.Errorf("export %s: %w", table, err)
	}
	return rr, func() error {
		rr.Release()
		snap.Release()
		if err := e.Close(); err != nil {
			return fmt.Errorf("export: close %s: %w", dir, err)
		}
		return nil
	}, nil
}

// writeRecords writes every record of rr to w in format.
func writeRecords(w io.Writer, format string, rr array.RecordReader) (int64, error) {
	sc := rr.Schema()
	var rows int64
	switch format {
	case "csv":
		cw, err := newCSVWriter(w, sc)
		if err != nil {
			return 0, err
		}
		for rr.Next() {
			rec := rr.RecordBatch()
			if err := cw.write(rec); err != nil {
				return rows, err
			}
			rows += rec.NumRows()
		}
		if err := rr.Err(); err != nil {
			return rows, err
		}
		return rows, cw.flush()
	case "arrow":
		fw, err := ipc.NewFileWriter(w, ipc.WithSchema(sc))
		if err != nil {
			return 0, err
		}
		for rr.Next() {
			rec := rr.RecordBatch()
			if err := fw.Write(rec); err != nil {
				fw.Close()
				return rows, err
			}
			rows += rec.NumRows()
		}
		if err := rr.Err(); err != nil {
			fw.Close()
			return rows, err
		}
		return rows, fw.Close()
	case "parquet":
		return writeParquet(w, rr)
	}
	return 0, fmt.Errorf("unknown format %q", format)
}

// parquetRowGroup is the most rows per Parquet row group.
const parquetRowGroup = 128 << 10

// writeParquet writes rr as a Parquet file with parquet/file's column writers (the
// column types of Weir's tables map one to one to Parquet's).
func writeParquet(w io.Writer, rr array.RecordReader) (rows int64, err error) {
	sc := rr.Schema()
	root, err := parquetSchema(sc)
	if err != nil {
		return 0, err
	}
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy))
	pw, err := file.NewParquetWriterWithError(w, root, file.WithWriterProps(props))
	if err != nil {
		return 0, err
	}
	var pending []arrow.RecordBatch
	var pendingRows int64
	release := func() {
		for _, r := range pending {
			r.Release()
		}
		pending, pendingRows = pending[:0], 0
	}
	defer release()
	flush := func() error {
		if pendingRows == 0 {
			return nil
		}
		rg, err := pw.AppendRowGroupChecked()
		if err != nil {
			return err
		}
		for c := range sc.NumFields() {
			cw, err := rg.NextColumn()
			if err != nil {
				return err
			}
			for _, rec := range pending {
				if err := writeParquetColumn(cw, sc.Field(c).Nullable, rec.Column(c)); err != nil {
					return fmt.Errorf("column %s: %w", sc.Field(c).Name, err)
				}
			}
			if err := cw.Close(); err != nil {
				return err
			}
		}
		if err := rg.Close(); err != nil {
			return err
		}
		rows += pendingRows
		release()
		return nil
	}
	for rr.Next() {
		rec := rr.RecordBatch()
		rec.Retain()
		pending = append(pending, rec)
		pendingRows += rec.NumRows()
		if pendingRows >= parquetRowGroup {
			if err := flush(); err != nil {
				pw.Close()
				return rows, err
			}
		}
	}
	if err := rr.Err(); err != nil {
		pw.Close()
		return rows, err
	}
	if err := flush(); err != nil {
		pw.Close()
		return rows, err
	}
	return rows, pw.Close()
}

// parquetSchema maps an Arrow schema of Weir's column types to a Parquet one.
func parquetSchema(sc *arrow.Schema) (*pqschema.GroupNode, error) {
	var fields pqschema.FieldList
	for _, f := range sc.Fields() {
		rep := parquet.Repetitions.Required
		if f.Nullable {
			rep = parquet.Repetitions.Optional
		}
		var (
			lt   pqschema.LogicalType = pqschema.NoLogicalType{}
			pt   parquet.Type
			tlen = -1
		)
		typ, err := schema.TypeOfArrow(f.Type)
		if err != nil {
			if t, ok := f.Type.(*arrow.TimestampType); ok && t.Unit != arrow.Microsecond {
				return nil, fmt.Errorf("column %s: timestamp unit %s, want microseconds", f.Name, t.Unit)
			}
			return nil, fmt.Errorf("column %s: type %s has no Parquet mapping here", f.Name, f.Type)
		}
		switch typ.Kind {
		case schema.Boolean:
			pt = parquet.Types.Boolean
		case schema.Int16:
			pt, lt = parquet.Types.Int32, pqschema.NewIntLogicalType(16, true)
		case schema.Int32:
			pt = parquet.Types.Int32
		case schema.Int64:
			pt = parquet.Types.Int64
		case schema.Float32:
			pt = parquet.Types.Float
		case schema.Float64:
			pt = parquet.Types.Double
		case schema.Decimal:
			pt, lt, tlen = parquet.Types.FixedLenByteArray, pqschema.NewDecimalLogicalType(typ.Precision, typ.Scale), 16
		case schema.Varchar:
			pt, lt = parquet.Types.ByteArray, pqschema.StringLogicalType{}
		case schema.Bytea:
			pt = parquet.Types.ByteArray
		case schema.Date:
			pt, lt = parquet.Types.Int32, pqschema.DateLogicalType{}
		case schema.Timestamp, schema.Timestamptz:
			pt, lt = parquet.Types.Int64, pqschema.NewTimestampLogicalType(typ.Kind == schema.Timestamptz, pqschema.TimeUnitMicros)
		}
		n, err := pqschema.NewPrimitiveNodeLogical(f.Name, rep, lt, pt, tlen, -1)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", f.Name, err)
		}
		fields = append(fields, n)
	}
	return pqschema.NewGroupNode("schema", parquet.Repetitions.Required, fields, -1)
}

// writeParquetColumn writes one Arrow column: the definition levels (when nullable)
// and the non-null values.
func writeParquetColumn(cw file.ColumnChunkWriter, nullable bool, col arrow.Array) error {
	n := col.Len()
	var def []int16
	if nullable {
		def = make([]int16, n)
		for i := range n {
			if col.IsValid(i) {
				def[i] = 1
			}
		}
	}
	var err error
	switch a := col.(type) {
	case *array.Boolean:
		_, err = cw.(*file.BooleanColumnChunkWriter).WriteBatch(valid(a, a.Value), def, nil)
	case *array.Int16:
		_, err = cw.(*file.Int32ColumnChunkWriter).WriteBatch(valid(a, func(i int) int32 { return int32(a.Value(i)) }), def, nil)
	case *array.Int32:
		_, err = cw.(*file.Int32ColumnChunkWriter).WriteBatch(valid(a, a.Value), def, nil)
	case *array.Date32:
		_, err = cw.(*file.Int32ColumnChunkWriter).WriteBatch(valid(a, func(i int) int32 { return int32(a.Value(i)) }), def, nil)
	case *array.Int64:
		_, err = cw.(*file.Int64ColumnChunkWriter).WriteBatch(valid(a, a.Value), def, nil)
	case *array.Timestamp:
		_, err = cw.(*file.Int64ColumnChunkWriter).WriteBatch(valid(a, func(i int) int64 { return int64(a.Value(i)) }), def, nil)
	case *array.Float32:
		_, err = cw.(*file.Float32ColumnChunkWriter).WriteBatch(valid(a, a.Value), def, nil)
	case *array.Float64:
		_, err = cw.(*file.Float64ColumnChunkWriter).WriteBatch(valid(a, a.Value), def, nil)
	case *array.String:
		_, err = cw.(*file.ByteArrayColumnChunkWriter).WriteBatch(valid(a, func(i int) parquet.ByteArray { return parquet.ByteArray(a.Value(i)) }), def, nil)
	case *array.Binary:
		_, err = cw.(*file.ByteArrayColumnChunkWriter).WriteBatch(valid(a, func(i int) parquet.ByteArray { return a.Value(i) }), def, nil)
	case *array.Decimal128:
		_, err = cw.(*file.FixedLenByteArrayColumnChunkWriter).WriteBatch(valid(a, func(i int) parquet.FixedLenByteArray {
			v := a.Value(i)
			b := make([]byte, 16)
			binary.BigEndian.PutUint64(b[:8], uint64(v.HighBits()))
			binary.BigEndian.PutUint64(b[8:], v.LowBits())
			return b
		}), def, nil)
	default:
		return fmt.Errorf("arrow array %T has no Parquet mapping here", col)
	}
	return err
}

// valid returns value(i) of every valid row of a.
func valid[T any](a arrow.Array, value func(int) T) []T {
	out := make([]T, 0, a.Len()-a.NullN())
	for i := range a.Len() {
		if a.IsValid(i) {
			out = append(out, value(i))
		}
	}
	return out
}
