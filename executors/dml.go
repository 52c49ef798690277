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
	// the pk columns matter, but the record has every column.
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
// same order, each of the column's Arrow type, and no NULL in a NOT NULL column.
// Otherwise the error names the table and the column, and nothing is produced. The
// chunk has the table's Arrow schema, shares the record's arrays (for DMLUpdate it
// holds copies from mem) and belongs to the caller.
func DMLChunk(t *schema.Table, kind DMLKind, rec arrow.RecordBatch, mem memory.Allocator) (*vec.Chunk, error) {
	if kind > DMLUpsert {
		return nil, fmt.Errorf("table %s: unknown DML kind %d", t.Name, uint8(kind))
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

// checkDMLRecord checks that rec has t's columns: count, names, Arrow types, and no
// NULL in a NOT NULL column.
func checkDMLRecord(t *schema.Table, rec arrow.RecordBatch) error {
	if n := int(rec.NumCols()); n < len(t.Columns) {
		return fmt.Errorf("table %s: column %s: missing (the record has %d columns, the table %d)", t.Name, t.Columns[n].Name, n, len(t.Columns))
	} else if n > len(t.Columns) {
		return fmt.Errorf("table %s: column %q: not in the table (the record has %d columns, the table %d)", t.Name, rec.ColumnName(len(t.Columns)), n, len(t.Columns))
	}
	for i, col := range t.Columns {
		if name := rec.ColumnName(i); name != col.Name {
			return fmt.Errorf("table %s: column %s: record has column %q in its place (position %d)", t.Name, col.Name, name, i)
		}
		arr := rec.Column(i)
		if got, want := arr.DataType(), col.Type.ArrowType(); !arrow.TypeEqual(got, want) {
			return fmt.Errorf("table %s: column %s: record has type %s, want %s", t.Name, col.Name, got, want)
		}
		if !col.Nullable && arr.NullN() > 0 {
			return fmt.Errorf("table %s: column %s: record has %d NULLs in a NOT NULL column", t.Name, col.Name, arr.NullN())
		}
	}
	return nil
}
