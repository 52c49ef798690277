package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
)

// kvKeys is a record of t's pk column alone.
func kvKeys(mem memory.Allocator, keys ...int64) arrow.RecordBatch {
	b := array.NewInt64Builder(mem)
	defer b.Release()
	b.AppendValues(keys, nil)
	a := b.NewArray()
	defer a.Release()
	return array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64}}, nil), []arrow.Array{a}, int64(len(keys)))
}

// TestDeleteByPK: Delete takes a record of the pk columns alone (t's v is NOT NULL
// and is not in it); the rows go from the table and from every view over it, and
// the other writes still want every column.
func TestDeleteByPK(t *testing.T) {
	ctx := context.Background()
	e, mem := kvEngine(t)
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv2", mv2Plan(), engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	writeT(t, e, mem, e.Insert, biKVRows(0, 40)...)
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	keys := kvKeys(mem, 3, 11, 12, 25, 39, 1000) // 1000 is not there: ignored
	defer keys.Release()
	if err := e.Delete(ctx, "t", keys); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	rows := readRowsNow(t, e, "t")
	if len(rows) != 35 {
		t.Fatalf("t has %d rows after deleting 5 of 40", len(rows))
	}
	for _, k := range []int64{3, 11, 12, 25, 39} {
		if _, ok := rows[k]; ok {
			t.Errorf("row %d is still in t", k)
		}
	}
	checkViews(t, e, "after the deletes by pk")
	for _, write := range []func(context.Context, string, arrow.RecordBatch) error{e.Insert, e.Update, e.Upsert} {
		if err := write(ctx, "t", keys); err == nil || !strings.Contains(err.Error(), "table t: column v: missing") {
			t.Errorf("a write of the pk columns alone: %v, want column v missing", err)
		}
	}
}
