package vec_test

import (
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// rewrite is -rewrite (registered by datadriven, read by TestMain): rewrite the golden
// files and seed corpora under testdata/ instead of comparing with them.
var rewrite = new(bool)

func checkedMem(t testing.TB) *memory.CheckedAllocator {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}

// table builds and validates a table from columns "name type [null]" (nullable when
// the third word is given) with the given pk.
func table(t testing.TB, name string, cols []schema.Column, pk ...schema.KeyColumn) *schema.Table {
	t.Helper()
	tab := &schema.Table{Name: name, Columns: cols, PK: pk}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	return tab
}

func col(name string, kind schema.Kind, nullable bool) schema.Column {
	return schema.Column{Name: name, Type: schema.Type{Kind: kind}, Nullable: nullable}
}

// oneColumnTable is a table whose only column, of type typ, is its pk.
func oneColumnTable(t testing.TB, typ schema.Type, desc, nullsFirst bool) *schema.Table {
	return table(t, "one", []schema.Column{{Name: "k", Type: typ, Nullable: true}},
		schema.KeyColumn{Column: 0, Desc: desc, NullsFirst: nullsFirst})
}

// canonicalPK returns the pk columns of rec (every column of tab) in pk order, with
// float keys canonicalised as the key codec does (-0 to +0, NaN to the canonical NaN).
func canonicalPK(mem memory.Allocator, tab *schema.Table, rec arrow.RecordBatch) arrow.RecordBatch {
	cols := tab.PKColumns()
	arrs := make([]arrow.Array, len(cols))
	for i, c := range cols {
		a := rec.Column(c)
		switch a := a.(type) {
		case *array.Float64:
			b := array.NewFloat64Builder(mem)
			for r := 0; r < a.Len(); r++ {
				if a.IsNull(r) {
					b.AppendNull()
				} else {
					b.Append(vec.CanonicalFloat64(a.Value(r)))
				}
			}
			arrs[i] = b.NewArray()
			b.Release()
		case *array.Float32:
			b := array.NewFloat32Builder(mem)
			for r := 0; r < a.Len(); r++ {
				if a.IsNull(r) {
					b.AppendNull()
				} else {
					b.Append(vec.CanonicalFloat32(a.Value(r)))
				}
			}
			arrs[i] = b.NewArray()
			b.Release()
		default:
			a.Retain()
			arrs[i] = a
		}
	}
	defer func() {
		for _, a := range arrs {
			a.Release()
		}
	}()
	return array.NewRecordBatch(vectest.ProjectedSchema(tab, cols), arrs, rec.NumRows())
}

// decodeKeys decodes keys with tab's generic kernels into a record of the pk columns.
func decodeKeys(mem memory.Allocator, g *vec.Generic, keys *vec.Bytes) (arrow.RecordBatch, error) {
	tab := g.Table()
	cols := tab.PKColumns()
	bs := vectest.BuildersFor(mem, tab, cols)
	if err := g.DecodeKeys(keys, bs); err != nil {
		vectest.ReleaseBuilders(bs)
		return nil, err
	}
	return vectest.FinishRecord(tab, cols, bs, keys.Len()), nil
}

// decodeValues decodes vals with tab's generic kernels into a record of the projection.
func decodeValues(mem memory.Allocator, g *vec.Generic, vals *vec.Bytes, proj vec.Projection) (arrow.RecordBatch, error) {
	bs := vectest.ValueBuildersFor(mem, g.Table(), proj)
	if err := g.DecodeValues(vals, proj, bs); err != nil {
		vectest.ReleaseBuilders(bs)
		return nil, err
	}
	return vectest.FinishRecord(g.Table(), proj, bs, vals.Len()), nil
}

func sign(c int) int {
	switch {
	case c < 0:
		return -1
	case c > 0:
		return 1
	}
	return 0
}

var negZero = math.Copysign(0, -1)
