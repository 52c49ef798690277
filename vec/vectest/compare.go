package vectest

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// ChunksEqual reports how a and b differ, or nil when they have the same rows with the
// same ops, visibility and values (see RecordsEqual for values). Invisible rows are
// compared too, and a nil visibility equals a bitmap with every row set.
func ChunksEqual(a, b *vec.Chunk) error {
	if a.NumRows() != b.NumRows() {
		return fmt.Errorf("chunks have %d and %d rows", a.NumRows(), b.NumRows())
	}
	aops, bops := a.Ops(), b.Ops()
	for i := range aops {
		if aops[i] != bops[i] {
			return fmt.Errorf("row %d: op %v != %v", i, aops[i], bops[i])
		}
		if av, bv := a.Visible(i), b.Visible(i); av != bv {
			return fmt.Errorf("row %d: visible %v != %v", i, av, bv)
		}
	}
	return RecordsEqual(a.Record(), b.Record())
}

// RecordsEqual reports the first difference between a and b (shape, a column's name or
// type, or a value, naming column and row), or nil when they are equal. Values are
// compared exactly, with two exceptions: any NaN equals any NaN, and NULLs compare by
// position only. -0 and +0 differ.
func RecordsEqual(a, b arrow.RecordBatch) error {
	if a.NumCols() != b.NumCols() {
		return fmt.Errorf("records have %d and %d columns", a.NumCols(), b.NumCols())
	}
	if a.NumRows() != b.NumRows() {
		return fmt.Errorf("records have %d and %d rows", a.NumRows(), b.NumRows())
	}
	for c := 0; c < int(a.NumCols()); c++ {
		an, bn := a.ColumnName(c), b.ColumnName(c)
		if an != bn {
			return fmt.Errorf("column %d: name %q != %q", c, an, bn)
		}
		ac, bc := a.Column(c), b.Column(c)
		if !arrow.TypeEqual(ac.DataType(), bc.DataType()) {
			return fmt.Errorf("column %d (%s): type %s != %s", c, an, ac.DataType(), bc.DataType())
		}
		for i := 0; i < int(a.NumRows()); i++ {
			if !ValuesEqual(ac, i, bc, i) {
				return fmt.Errorf("column %d (%s) row %d: %s != %s", c, an, i, FormatValue(ac, i), FormatValue(bc, i))
			}
		}
	}
	return nil
}

// ValuesEqual reports whether a[i] and b[j] (arrays of the same type) are equal, as
// RecordsEqual compares them.
func ValuesEqual(a arrow.Array, i int, b arrow.Array, j int) bool {
	an, bn := a.IsNull(i), b.IsNull(j)
	if an || bn {
		return an == bn
	}
	switch a := a.(type) {
	case *array.Boolean:
		return a.Value(i) == b.(*array.Boolean).Value(j)
	case *array.Int16:
		return a.Value(i) == b.(*array.Int16).Value(j)
	case *array.Int32:
		return a.Value(i) == b.(*array.Int32).Value(j)
	case *array.Int64:
		return a.Value(i) == b.(*array.Int64).Value(j)
	case *array.Date32:
		return a.Value(i) == b.(*array.Date32).Value(j)
	case *array.Timestamp:
		return a.Value(i) == b.(*array.Timestamp).Value(j)
	case *array.Float32:
		return floatsEqual(float64(a.Value(i)), float64(b.(*array.Float32).Value(j)))
	case *array.Float64:
		return floatsEqual(a.Value(i), b.(*array.Float64).Value(j))
	case *array.Decimal128:
		return a.Value(i) == b.(*array.Decimal128).Value(j)
	case *array.String:
		return a.Value(i) == b.(*array.String).Value(j)
	case *array.Binary:
		return bytes.Equal(a.Value(i), b.(*array.Binary).Value(j))
	}
	return a.ValueStr(i) == b.ValueStr(j)
}

func floatsEqual(x, y float64) bool {
	if x != x || y != y {
		return x != x && y != y
	}
	return x == y && math.Signbit(x) == math.Signbit(y)
}

// FormatValue renders a[i] for messages: NULL, numbers (with -0 and NaN spelled out),
// decimals with their scale, quoted strings and bytes.
func FormatValue(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return "NULL"
	}
	switch a := a.(type) {
	case *array.Float32:
		return formatFloat(float64(a.Value(i)), 32)
	case *array.Float64:
		return formatFloat(a.Value(i), 64)
	case *array.Decimal128:
		return a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale)
	case *array.String:
		return strconv.Quote(a.Value(i))
	case *array.Binary:
		return fmt.Sprintf("%q", a.Value(i))
	case *array.Date32:
		return strconv.Itoa(int(a.Value(i)))
	case *array.Timestamp:
		return strconv.FormatInt(int64(a.Value(i)), 10)
	}
	return a.ValueStr(i)
}

func formatFloat(v float64, bits int) string {
	if v != v {
		if bits == 32 {
			return fmt.Sprintf("NaN(0x%08x)", math.Float32bits(float32(v)))
		}
		return fmt.Sprintf("NaN(0x%016x)", math.Float64bits(v))
	}
	if v == 0 && math.Signbit(v) {
		return "-0"
	}
	return strconv.FormatFloat(v, 'g', -1, bits)
}

// FormatRow renders row i of rec as (v0, v1, ...) for messages.
func FormatRow(rec arrow.RecordBatch, i int) string {
	parts := make([]string, rec.NumCols())
	for c := range parts {
		parts[c] = FormatValue(rec.Column(c), i)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// PKArrays returns the pk columns of a record holding every column of t, in pk order.
func PKArrays(t *schema.Table, rec arrow.RecordBatch) []arrow.Array {
	out := make([]arrow.Array, len(t.PK))
	for k, kc := range t.PK {
		out[k] = rec.Column(kc.Column)
	}
	return out
}

// ComparePK compares the pk of row i of a with the pk of row j of b, where a and b hold
// t's pk columns in pk order (see PKArrays; a decoded key record already is). It is
// written from the typed values, independently of the key codec, and orders as the
// memcomparable key promises: column by column; NULL before or after every value as
// the column's nulls order says, whatever its direction; values ascending, reversed for
// DESC; false before true; floats numerically with -0 equal to +0 and NaN equal to NaN
// and above +Inf; decimals by unscaled value; strings and bytes bytewise (a prefix
// first).
func ComparePK(t *schema.Table, a []arrow.Array, i int, b []arrow.Array, j int) int {
	for k, kc := range t.PK {
		if c := CompareKeyColumn(kc, a[k], i, b[k], j); c != 0 {
			return c
		}
	}
	return 0
}

// CompareKeyColumn compares a[i] and b[j] as one column of a key with kc's order (see
// ComparePK).
func CompareKeyColumn(kc schema.KeyColumn, a arrow.Array, i int, b arrow.Array, j int) int {
	an, bn := a.IsNull(i), b.IsNull(j)
	switch {
	case an && bn:
		return 0
	case an || bn:
		c := 1
		if an == kc.NullsFirst {
			c = -1
		}
		return c
	}
	c := CompareValues(a, i, b, j)
	if kc.Desc {
		c = -c
	}
	return c
}

// CompareValues compares two non-null values of arrays of the same type in ascending
// key order (see ComparePK).
func CompareValues(a arrow.Array, i int, b arrow.Array, j int) int {
	switch a := a.(type) {
	case *array.Boolean:
		x, y := a.Value(i), b.(*array.Boolean).Value(j)
		switch {
		case x == y:
			return 0
		case y:
			return -1
		}
		return 1
	case *array.Int16:
		return cmp.Compare(a.Value(i), b.(*array.Int16).Value(j))
	case *array.Int32:
		return cmp.Compare(a.Value(i), b.(*array.Int32).Value(j))
	case *array.Int64:
		return cmp.Compare(a.Value(i), b.(*array.Int64).Value(j))
	case *array.Date32:
		return cmp.Compare(a.Value(i), b.(*array.Date32).Value(j))
	case *array.Timestamp:
		return cmp.Compare(a.Value(i), b.(*array.Timestamp).Value(j))
	case *array.Float32:
		return compareFloat(float64(a.Value(i)), float64(b.(*array.Float32).Value(j)))
	case *array.Float64:
		return compareFloat(a.Value(i), b.(*array.Float64).Value(j))
	case *array.Decimal128:
		return a.Value(i).Cmp(b.(*array.Decimal128).Value(j))
	case *array.String:
		return strings.Compare(a.Value(i), b.(*array.String).Value(j))
	case *array.Binary:
		return bytes.Compare(a.Value(i), b.(*array.Binary).Value(j))
	}
	panic(fmt.Sprintf("vectest: CompareValues of unsupported type %s", a.DataType()))
}

// compareFloat orders NaN above everything else and equal to itself; otherwise
// numerically (so -0 == +0).
func compareFloat(x, y float64) int {
	xn, yn := math.IsNaN(x), math.IsNaN(y)
	switch {
	case xn || yn:
		switch {
		case xn && yn:
			return 0
		case xn:
			return 1
		}
		return -1
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// ChangelogError reports the first place where c's visible rows are not a valid
// changelog: an UpdateDelete not directly followed (among visible rows) by its
// UpdateInsert, or an UpdateInsert without its UpdateDelete. nil when valid.
func ChangelogError(c *vec.Chunk) error {
	ops := c.Ops()
	pending := -1 // row of an UpdateDelete waiting for its UpdateInsert
	for i := 0; i < c.NumRows(); i++ {
		if !c.Visible(i) {
			continue
		}
		if pending >= 0 && ops[i] != vec.UpdateInsert {
			return fmt.Errorf("row %d: UpdateDelete followed by %v, not its UpdateInsert", pending, ops[i])
		}
		switch ops[i] {
		case vec.UpdateDelete:
			pending = i
		case vec.UpdateInsert:
			if pending < 0 {
				return fmt.Errorf("row %d: UpdateInsert without its UpdateDelete", i)
			}
			pending = -1
		}
	}
	if pending >= 0 {
		return fmt.Errorf("row %d: the chunk ends with an unpaired UpdateDelete", pending)
	}
	return nil
}
