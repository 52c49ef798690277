package executors

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// DMLKind is what a user's DML statement does with each row of its record. The
// semantics come from the table's Materialize, which resolves every row by pk.
type DMLKind uint8

// The DML kinds.
const (
	// DMLInsert inserts each row; a row whose pk exists replaces the stored one.
	DMLInsert DMLKind = iota
	// DMLDelete deletes the row with each row's pk; a missing pk does nothing. Only
	// the pk columns matter: the record has every column, or only the pk columns.
	DMLDelete
	// DMLUpdate replaces the columns of the row with each row's pk; a missing pk does
	// nothing.
	DMLUpdate
	// DMLUpsert is DMLInsert.
	DMLUpsert
)

var dmlKindNames = [...]string{DMLInsert: "insert", DMLDelete: "delete", DMLUpdate: "update", DMLUpsert: "upsert"}

func (k DMLKind) String() string {
	if int(k) < len(dmlKindNames) {
		return dmlKindNames[k]
	}
	return fmt.Sprintf("DMLKind(%d)", uint8(k))
}

// ParseDMLKind parses a kind's name (insert, delete, update, upsert), in any case.
func ParseDMLKind(s string) (DMLKind, error) {
	for k, name := range dmlKindNames {
		if strings.EqualFold(s, name) {
			return DMLKind(k), nil
		}
	}
	return 0, fmt.Errorf("unknown DML kind %q (want insert, delete, update or upsert)", s)
}

// DMLChunk turns a user's record into a chunk for table t's DML path (its
// Materialize): every row an Insert (DMLInsert, DMLUpsert) or a Delete (DMLDelete),
// or, for DMLUpdate, an UpdateDelete+UpdateInsert pair of the same row (Materialize
// finds the stored row by pk and emits it as the old one).
//
// The record must have the table's columns: the same count, the same names in the
// same order, each of the column's Arrow type and of the record's length, and no NULL
// in a NOT NULL column. A DMLDelete's record may instead hold exactly the pk columns
// (by name, in any order); the other columns of its chunk hold empty values, which the
// table's Materialize does not read. A record that breaks these rules, or a nil
// one, is refused with an error naming the table (and the column, when one is at
// fault), and nothing is produced. The chunk has the table's Arrow schema, shares the record's arrays (for
// DMLUpdate it holds copies from mem) and belongs to the caller.
func DMLChunk(t *schema.Table, kind DMLKind, rec arrow.RecordBatch, mem memory.Allocator) (*vec.Chunk, error) {
	if kind > DMLUpsert {
		return nil, fmt.Errorf("table %s: unknown DML kind %d", t.Name, uint8(kind))
	}
	if rec == nil {
		return nil, fmt.Errorf("table %s: nil record", t.Name)
	}
	if kind == DMLDelete && int(rec.NumCols()) == len(t.PK) && len(t.PK) < len(t.Columns) {
		return pkDeleteChunk(t, rec, mem)
	}
	if err := checkDMLRecord(t, rec); err != nil {
		return nil, err
	}
	n := int(rec.NumRows())
	if kind != DMLUpdate {
		op := vec.Insert
		if kind == DMLDelete {
			op = vec.Delete
		}
		out := array.NewRecordBatch(t.ArrowSchema(), rec.Columns(), int64(n))
		defer out.Release()
		ops := vec.NewOps(mem, n, op)
		defer ops.Release()
		return vec.NewChunk(out, ops, nil), nil
	}

	// Update: rows 0, 0, 1, 1, ... with ops U-, U+, U-, U+, ...
	ib := array.NewInt64Builder(mem)
	ib.Reserve(2 * n)
	for i := 0; i < n; i++ {
		ib.UnsafeAppend(int64(i))
		ib.UnsafeAppend(int64(i))
	}
	idx := ib.NewArray()
	ib.Release()
	defer idx.Release()
	ctx := compute.WithAllocator(context.Background(), mem)
	cols := make([]arrow.Array, len(t.Columns))
	defer func() {
		for _, a := range cols {
			if a != nil {
				a.Release()
			}
		}
	}()
	for i, col := range t.Columns {
		a, err := compute.TakeArray(ctx, rec.Column(i), idx)
		if err != nil {
			return nil, fmt.Errorf("table %s: column %s: %w", t.Name, col.Name, err)
		}
		cols[i] = a
	}
	out := array.NewRecordBatch(t.ArrowSchema(), cols, int64(2*n))
	defer out.Release()
	ops := vec.NewOps(mem, 2*n, vec.UpdateInsert)
	defer ops.Release()
	o := vec.OpsOf(ops.Bytes())
	for i := 0; i < 2*n; i += 2 {
		o[i] = vec.UpdateDelete
	}
	return vec.NewChunk(out, ops, nil), nil
}

// pkDeleteChunk is the Delete chunk of a record of t's pk columns only: the pk
// columns are the record's, the others hold empty values (zeros, empty strings: not
// NULL, which a NOT NULL column refuses), which nothing reads: the table's
// Materialize deletes by pk and emits the stored row.
func pkDeleteChunk(t *schema.Table, rec arrow.RecordBatch, mem memory.Allocator) (*vec.Chunk, error) {
	n := rec.NumRows()
	if n < 0 {
		return nil, fmt.Errorf("table %s: record has %d rows", t.Name, n)
	}
	cols := make([]arrow.Array, len(t.Columns))
	defer func() {
		for _, a := range cols {
			if a != nil {
				a.Release()
			}
		}
	}()
	sch := rec.Schema()
	if sch == nil || sch.NumFields() != int(rec.NumCols()) {
		return nil, fmt.Errorf("table %s: the record's schema does not describe its %d columns", t.Name, rec.NumCols())
	}
	for i := 0; i < int(rec.NumCols()); i++ {
		name := sch.Field(i).Name
		ci, ok := t.ColumnIndex(name)
		if !ok || !t.IsPK(ci) {
			return nil, fmt.Errorf("table %s: column %q: a delete's record has every column of the table or only its pk columns (%s)", t.Name, name, pkNames(t))
		}
		if cols[ci] != nil {
			return nil, fmt.Errorf("table %s: column %s: twice in the record", t.Name, name)
		}
		if err := checkDMLColumn(t, ci, rec.Column(i), n); err != nil {
			return nil, err
		}
		a := rec.Column(i)
		a.Retain()
		cols[ci] = a
	}
	for i, c := range t.Columns {
		if cols[i] == nil {
			b := array.NewBuilder(mem, c.Type.ArrowType())
			b.AppendEmptyValues(int(n))
			cols[i] = b.NewArray()
			b.Release()
		}
	}
	out := array.NewRecordBatch(t.ArrowSchema(), cols, n)
	defer out.Release()
	ops := vec.NewOps(mem, int(n), vec.Delete)
	defer ops.Release()
	return vec.NewChunk(out, ops, nil), nil
}

func pkNames(t *schema.Table) string {
	names := make([]string, len(t.PK))
	for i, k := range t.PK {
		names[i] = t.Columns[k.Column].Name
	}
	return strings.Join(names, ", ")
}

// checkDMLColumn checks column i of t against arr, a column of a record of n rows:
// present, of the column's Arrow type and of n values, and without NULLs in a NOT
// NULL column.
func checkDMLColumn(t *schema.Table, i int, arr arrow.Array, n int64) error {
	col := t.Columns[i]
	if arr == nil {
		return fmt.Errorf("table %s: column %s: the record's column is nil", t.Name, col.Name)
	}
	if got, want := arr.DataType(), col.Type.ArrowType(); !arrow.TypeEqual(got, want) {
		return fmt.Errorf("table %s: column %s: record has type %s, want %s", t.Name, col.Name, got, want)
	}
	if int64(arr.Len()) != n {
		return fmt.Errorf("table %s: column %s: %d values in a record of %d rows", t.Name, col.Name, arr.Len(), n)
	}
	if !col.Nullable && arr.NullN() > 0 {
		return fmt.Errorf("table %s: column %s: record has %d NULLs in a NOT NULL column", t.Name, col.Name, arr.NullN())
	}
	return nil
}

// checkDMLRecord checks that rec has t's columns: count, names, Arrow types, lengths,
// and no NULL in a NOT NULL column.
func checkDMLRecord(t *schema.Table, rec arrow.RecordBatch) error {
	if rec.NumRows() < 0 {
		return fmt.Errorf("table %s: record has %d rows", t.Name, rec.NumRows())
	}
	if sch := rec.Schema(); sch == nil || sch.NumFields() != int(rec.NumCols()) {
		return fmt.Errorf("table %s: the record's schema does not describe its %d columns", t.Name, rec.NumCols())
	}
	if n := int(rec.NumCols()); n != len(t.Columns) {
		// Name the first column of the table the record lacks, or else the first of
		// the record's that the table lacks.
		names := map[string]bool{}
		for i := range n {
			names[rec.ColumnName(i)] = true
		}
		for _, col := range t.Columns {
			if !names[col.Name] {
				return fmt.Errorf("table %s: column %s: missing (the record has %d columns, the table %d)", t.Name, col.Name, n, len(t.Columns))
			}
		}
		for i := range n {
			if _, ok := t.ColumnIndex(rec.ColumnName(i)); !ok {
				return fmt.Errorf("table %s: column %q: not in the table (the record has %d columns, the table %d)", t.Name, rec.ColumnName(i), n, len(t.Columns))
			}
		}
		return fmt.Errorf("table %s: the record has %d columns, the table %d (some twice)", t.Name, n, len(t.Columns))
	}
	for i, col := range t.Columns {
		if name := rec.ColumnName(i); name != col.Name {
			return fmt.Errorf("table %s: column %s: record has column %q in its place (position %d)", t.Name, col.Name, name, i)
		}
		if err := checkDMLColumn(t, i, rec.Column(i), rec.NumRows()); err != nil {
			return err
		}
	}
	return nil
}
