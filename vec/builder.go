package vec

import (
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
)

// ChunkBuilder builds chunks of a table known only at run time: the generic
// counterpart of a generated <Table>Builder. Append each row's values to the column
// builders (Column(i), the concrete Arrow builder of the column's type) and then its op
// (AppendOp), or use AppendRow, which converts Go values per value. Not safe for
// concurrent use.
type ChunkBuilder struct {
	t   *schema.Table
	mem memory.Allocator
	bs  []array.Builder
	ops []Op
}

// NewChunkBuilder returns a builder of chunks of t allocated from mem.
func NewChunkBuilder(mem memory.Allocator, t *schema.Table) *ChunkBuilder {
	b := &ChunkBuilder{t: t, mem: mem, bs: make([]array.Builder, len(t.Columns))}
	for i, c := range t.Columns {
		b.bs[i] = array.NewBuilder(mem, c.Type.ArrowType())
	}
	return b
}

// Column is the builder of column i.
func (b *ChunkBuilder) Column(i int) array.Builder { return b.bs[i] }

// Reserve makes room for n more rows in every column.
func (b *ChunkBuilder) Reserve(n int) {
	for _, cb := range b.bs {
		cb.Reserve(n)
	}
}

// AppendOp ends a row whose values were appended to every column.
func (b *ChunkBuilder) AppendOp(op Op) { b.ops = append(b.ops, op) }

// Len is the number of rows ended with AppendOp since the last Build.
func (b *ChunkBuilder) Len() int { return len(b.ops) }

// AppendRow appends one row: one value per column, nil for NULL. Accepted Go values:
// bool; int16, int32, int64 (and int) for the integer types; float32, float64;
// decimal128.Num; string for varchar, []byte or string for bytea; arrow.Date32 for
// date; arrow.Timestamp (microseconds) or time.Time for timestamps. A value of another
// type, or a NULL in a NOT NULL column, is an error naming the column; the row is then
// not appended.
func (b *ChunkBuilder) AppendRow(op Op, values ...any) error {
	if len(values) != len(b.t.Columns) {
		return fmt.Errorf("table %s: row has %d values, the table %d columns", b.t.Name, len(values), len(b.t.Columns))
	}
	for i, c := range b.t.Columns {
		if err := appendValue(nil, c, values[i]); err != nil {
			return fmt.Errorf("table %s: column %s: %w", b.t.Name, c.Name, err)
		}
	}
	for i, c := range b.t.Columns {
		_ = appendValue(b.bs[i], c, values[i]) // checked above: cannot fail
	}
	b.ops = append(b.ops, op)
	return nil
}

// appendValue appends v to cb, or only checks that it could when cb is nil.
func appendValue(cb array.Builder, c schema.Column, v any) error {
	if v == nil {
		if !c.Nullable {
			return fmt.Errorf("NULL in a NOT NULL column")
		}
		if cb != nil {
			cb.AppendNull()
		}
		return nil
	}
	bad := func() error { return fmt.Errorf("value of Go type %T for a %s column", v, c.Type) }
	switch c.Type.Kind {
	case schema.Boolean:
		x, ok := v.(bool)
		if !ok {
			return bad()
		}
		if cb != nil {
			cb.(*array.BooleanBuilder).Append(x)
		}
	case schema.Int16:
		x, ok := v.(int16)
		if !ok {
			return bad()
		}
		if cb != nil {
			cb.(*array.Int16Builder).Append(x)
		}
	case schema.Int32:
		x, ok := v.(int32)
		if !ok {
			return bad()
		}
		if cb != nil {
			cb.(*array.Int32Builder).Append(x)
		}
	case schema.Int64:
		switch x := v.(type) {
		case int64:
			if cb != nil {
				cb.(*array.Int64Builder).Append(x)
			}
		case int:
			if cb != nil {
				cb.(*array.Int64Builder).Append(int64(x))
			}
		default:
			return bad()
		}
	case schema.Float32:
		x, ok := v.(float32)
		if !ok {
			return bad()
		}
		if cb != nil {
			cb.(*array.Float32Builder).Append(x)
		}
	case schema.Float64:
		x, ok := v.(float64)
		if !ok {
			return bad()
		}
		if cb != nil {
			cb.(*array.Float64Builder).Append(x)
		}
	case schema.Decimal:
		x, ok := v.(decimal128.Num)
		if !ok {
			return bad()
		}
		if cb != nil {
			cb.(*array.Decimal128Builder).Append(x)
		}
	case schema.Varchar:
		x, ok := v.(string)
		if !ok {
			return bad()
		}
		if cb != nil {
			cb.(*array.StringBuilder).Append(x)
		}
	case schema.Bytea:
		switch x := v.(type) {
		case []byte:
			if cb != nil {
				cb.(*array.BinaryBuilder).Append(x)
			}
		case string:
			if cb != nil {
				cb.(*array.BinaryBuilder).AppendString(x)
			}
		default:
			return bad()
		}
	case schema.Date:
		x, ok := v.(arrow.Date32)
		if !ok {
			return bad()
		}
		if cb != nil {
			cb.(*array.Date32Builder).Append(x)
		}
	case schema.Timestamp, schema.Timestamptz:
		switch x := v.(type) {
		case arrow.Timestamp:
			if cb != nil {
				cb.(*array.TimestampBuilder).Append(x)
			}
		case time.Time:
			if cb != nil {
				cb.(*array.TimestampBuilder).Append(arrow.Timestamp(x.UnixMicro()))
			}
		default:
			return bad()
		}
	default:
		return fmt.Errorf("unsupported type %s", c.Type)
	}
	return nil
}

// Build returns the rows appended since the last Build as a chunk (all visible) and
// resets the builder. Every column must hold one value per op: otherwise it is an error
// naming the column, and the builder is reset.
func (b *ChunkBuilder) Build() (*Chunk, error) {
	n := len(b.ops)
	cols := make([]arrow.Array, len(b.bs))
	for i, cb := range b.bs {
		cols[i] = cb.NewArray()
	}
	defer func() {
		for _, a := range cols {
			a.Release()
		}
	}()
	opsCopy := append([]Op(nil), b.ops...)
	b.ops = b.ops[:0]
	for i, a := range cols {
		if a.Len() != n {
			return nil, fmt.Errorf("table %s: column %s has %d values for %d rows", b.t.Name, b.t.Columns[i].Name, a.Len(), n)
		}
	}
	rec := array.NewRecordBatch(b.t.ArrowSchema(), cols, int64(n))
	defer rec.Release()
	ops := NewOps(b.mem, n, Insert)
	defer ops.Release()
	copy(OpsOf(ops.Bytes()), opsCopy)
	c := NewChunk(rec, ops, nil)
	if err := CheckChunk(b.t, c); err != nil {
		c.Release()
		return nil, err
	}
	return c, nil
}

// Release frees the builders' memory.
func (b *ChunkBuilder) Release() {
	for _, cb := range b.bs {
		cb.Release()
	}
}
