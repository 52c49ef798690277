package vectest

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// AllColumns returns 0, 1, ..., len(t.Columns)-1.
func AllColumns(t *schema.Table) []int {
	out := make([]int, len(t.Columns))
	for i := range out {
		out[i] = i
	}
	return out
}

// BuildersFor returns one concrete Arrow builder (e.g. *array.Int64Builder,
// *array.StringBuilder) per column in cols, for the columns' Arrow types (see
// schema.Type.ArrowType), in the order of cols. An empty cols gives no builders. The
// caller releases them (FinishRecord does, or ReleaseBuilders).
func BuildersFor(mem memory.Allocator, t *schema.Table, cols []int) []array.Builder {
	out := make([]array.Builder, len(cols))
	for i, c := range cols {
		out[i] = array.NewBuilder(mem, t.Columns[c].Type.ArrowType())
	}
	return out
}

// ValueBuildersFor is BuildersFor for Kernels.DecodeValues: vec.NewBuilder's builder
// per column in cols (a *vec.VarBuilder for varchar and bytea).
func ValueBuildersFor(mem memory.Allocator, t *schema.Table, cols []int) []vec.Builder {
	out := make([]vec.Builder, len(cols))
	for i, c := range cols {
		out[i] = vec.NewBuilder(mem, t.Columns[c].Type.ArrowType())
	}
	return out
}

// ReleaseBuilders releases every builder.
func ReleaseBuilders[B vec.Builder](bs []B) {
	for _, b := range bs {
		b.Release()
	}
}

// ProjectedSchema is the Arrow schema of t's columns cols, in that order; unlike
// schema.Table.ProjectedArrowSchema an empty cols (nil included) has no fields.
func ProjectedSchema(t *schema.Table, cols []int) *arrow.Schema {
	if len(cols) == 0 {
		return arrow.NewSchema(nil, nil)
	}
	return t.ProjectedArrowSchema(cols)
}

// FinishRecord turns builders (from BuildersFor or ValueBuildersFor(mem, t, cols)) into
// a record of nrows rows with the schema of t's columns cols, and releases the
// builders. It panics when a builder does not hold nrows values. The caller releases
// the record.
func FinishRecord[B vec.Builder](t *schema.Table, cols []int, bs []B, nrows int) arrow.RecordBatch {
	if len(bs) != len(cols) {
		panic(fmt.Sprintf("vectest: FinishRecord with %d builders for %d columns", len(bs), len(cols)))
	}
	arrs := make([]arrow.Array, len(bs))
	for i, b := range bs {
		arrs[i] = b.NewArray()
		b.Release()
	}
	defer func() {
		for _, a := range arrs {
			a.Release()
		}
	}()
	for i, a := range arrs {
		if a.Len() != nrows {
			panic(fmt.Sprintf("vectest: FinishRecord: column %s has %d values, want %d", t.Columns[cols[i]].Name, a.Len(), nrows))
		}
	}
	return array.NewRecordBatch(ProjectedSchema(t, cols), arrs, int64(nrows))
}

// Project returns a record of rec's columns cols, in that order, sharing rec's arrays
// (rec holds every column of t). The caller releases it.
func Project(t *schema.Table, rec arrow.RecordBatch, cols []int) arrow.RecordBatch {
	arrs := make([]arrow.Array, len(cols))
	for i, c := range cols {
		arrs[i] = rec.Column(c)
	}
	return array.NewRecordBatch(ProjectedSchema(t, cols), arrs, rec.NumRows())
}
