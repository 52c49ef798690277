package vec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/seed04fbb902/weir/schema"
)

// Generic implements Kernels for any table from its run-time schema. Its batch
// kernels (EncodeKeys, EncodeValues, Vnodes) dispatch on each column's type once per
// batch (generic_batch.go); its row functions and decoders per value. It is correct for
// every schema and the reference that generated kernels are tested against.
type Generic struct {
	t      *schema.Table
	layout *Layout
	// The key parts of the pk and of the distribution key, and the variable-width
	// columns, for the batch kernels.
	pk, dist []keyPart
	varCols  []int
}

// NewGeneric returns the generic kernels of a validated table.
func NewGeneric(t *schema.Table) *Generic {
	return &Generic{t: t, layout: NewLayout(t), pk: pkParts(t), dist: distParts(t), varCols: varColumns(t)}
}

var _ Kernels = (*Generic)(nil)

// Table implements Kernels.
func (g *Generic) Table() *schema.Table { return g.t }

// Generated implements Kernels.
func (g *Generic) Generated() bool { return false }

// Layout is the table's value layout.
func (g *Generic) Layout() *Layout { return g.layout }

// AppendKeyColumn appends the key encoding of row i of arr, a column of type typ.
func AppendKeyColumn(dst []byte, arr arrow.Array, i int, typ schema.Type, desc, nullsFirst bool) []byte {
	if arr.IsNull(i) {
		return AppendKeyNull(dst, nullsFirst)
	}
	switch typ.Kind {
	case schema.Boolean:
		return AppendKeyBool(dst, arr.(*array.Boolean).Value(i), desc)
	case schema.Int16:
		return AppendKeyInt16(dst, arr.(*array.Int16).Value(i), desc)
	case schema.Int32:
		return AppendKeyInt32(dst, arr.(*array.Int32).Value(i), desc)
	case schema.Date:
		return AppendKeyInt32(dst, int32(arr.(*array.Date32).Value(i)), desc)
	case schema.Int64:
		return AppendKeyInt64(dst, arr.(*array.Int64).Value(i), desc)
	case schema.Timestamp, schema.Timestamptz:
		return AppendKeyInt64(dst, int64(arr.(*array.Timestamp).Value(i)), desc)
	case schema.Float32:
		return AppendKeyFloat32(dst, arr.(*array.Float32).Value(i), desc)
	case schema.Float64:
		return AppendKeyFloat64(dst, arr.(*array.Float64).Value(i), desc)
	case schema.Decimal:
		return AppendKeyDecimal(dst, arr.(*array.Decimal128).Value(i), desc)
	case schema.Varchar:
		return AppendKeyString(dst, arr.(*array.String).Value(i), desc)
	case schema.Bytea:
		return AppendKeyBytes(dst, arr.(*array.Binary).Value(i), desc)
	}
	panic(fmt.Sprintf("vec: key of unsupported type %s", typ))
}

// AppendKey appends the memcomparable pk of row i of c.
func (g *Generic) AppendKey(dst []byte, c *Chunk, i int) []byte {
	rec := c.Record()
	for _, k := range g.t.PK {
		dst = AppendKeyColumn(dst, rec.Column(k.Column), i, g.t.Columns[k.Column].Type, k.Desc, k.NullsFirst)
	}
	return dst
}

// EncodeKeys implements Kernels.
func (g *Generic) EncodeKeys(c *Chunk, out *Bytes) {
	encodeKeys(c.Record(), c.NumRows(), g.pk, out)
}

// DecodeKeyColumn decodes one key column from src and appends it to b.
func DecodeKeyColumn(src []byte, b array.Builder, typ schema.Type, desc, nullsFirst bool) ([]byte, error) {
	null, src, err := DecodeKeyMarker(src, nullsFirst)
	if err != nil {
		return nil, err
	}
	if null {
		b.AppendNull()
		return src, nil
	}
	switch typ.Kind {
	case schema.Boolean:
		var v bool
		v, src, err = DecodeKeyBool(src, desc)
		if err == nil {
			b.(*array.BooleanBuilder).Append(v)
		}
	case schema.Int16:
		var v int16
		v, src, err = DecodeKeyInt16(src, desc)
		if err == nil {
			b.(*array.Int16Builder).Append(v)
		}
	case schema.Int32, schema.Date:
		var v int32
		v, src, err = DecodeKeyInt32(src, desc)
		if err == nil {
			if typ.Kind == schema.Date {
				b.(*array.Date32Builder).Append(arrow.Date32(v))
			} else {
				b.(*array.Int32Builder).Append(v)
			}
		}
	case schema.Int64, schema.Timestamp, schema.Timestamptz:
		var v int64
		v, src, err = DecodeKeyInt64(src, desc)
		if err == nil {
			if typ.Kind == schema.Int64 {
				b.(*array.Int64Builder).Append(v)
			} else {
				b.(*array.TimestampBuilder).Append(arrow.Timestamp(v))
			}
		}
	case schema.Float32:
		var v float32
		v, src, err = DecodeKeyFloat32(src, desc)
		if err == nil {
			b.(*array.Float32Builder).Append(v)
		}
	case schema.Float64:
		var v float64
		v, src, err = DecodeKeyFloat64(src, desc)
		if err == nil {
			b.(*array.Float64Builder).Append(v)
		}
	case schema.Decimal:
		var v decimal128.Num
		v, src, err = DecodeKeyDecimal(src, desc)
		if err == nil {
			b.(*array.Decimal128Builder).Append(v)
		}
	case schema.Varchar, schema.Bytea:
		var v []byte
		v, src, err = DecodeKeyBytes(nil, src, desc)
		if err == nil {
			b.(*array.BinaryBuilder).Append(v)
		}
	default:
		return nil, fmt.Errorf("unsupported key type %s", typ)
	}
	return src, err
}

// DecodeKeys implements Kernels: a column at a time (decodeKeyColumns). When a key
// does not decode, a key at a time again finds the first such key for the error.
func (g *Generic) DecodeKeys(keys *Bytes, out []array.Builder) error {
	err := g.decodeKeyColumns(keys, out)
	if err == nil {
		return nil
	}
	if rerr := g.decodeKeyRows(keys, out); rerr != nil {
		return rerr
	}
	return err
}

// decodeKeyRows is DecodeKeys a key at a time, each key's columns in turn.
func (g *Generic) decodeKeyRows(keys *Bytes, out []array.Builder) error {
	for i, n := 0, keys.Len(); i < n; i++ {
		src := keys.At(i)
		var err error
		for j, k := range g.t.PK {
			col := g.t.Columns[k.Column]
			if err = checkKeyNotNull(src, col, k); err == nil {
				src, err = DecodeKeyColumn(src, binaryBuilderOf(out[j]), col.Type, k.Desc, k.NullsFirst)
			}
			if err != nil {
				return fmt.Errorf("table %s: key %d: column %s: %w", g.t.Name, i, col.Name, err)
			}
		}
		if len(src) != 0 {
			return fmt.Errorf("table %s: key %d: %d bytes left after the last pk column", g.t.Name, i, len(src))
		}
	}
	return nil
}

// binaryBuilderOf lets a StringBuilder be used where a BinaryBuilder is expected (it
// embeds one); other builders pass through.
func binaryBuilderOf(b array.Builder) array.Builder {
	if s, ok := b.(*array.StringBuilder); ok {
		return s.BinaryBuilder
	}
	return b
}

// EncodeValues implements Kernels.
func (g *Generic) EncodeValues(c *Chunk, out *Bytes) {
	encodeValues(g.t, g.layout, g.varCols, c.Record(), c.NumRows(), out)
}

// DecodeValues implements Kernels.
func (g *Generic) DecodeValues(vals *Bytes, proj Projection, out []Builder) error {
	if len(out) < len(proj) {
		return fmt.Errorf("table %s: DecodeValues needs %d builders, got %d", g.t.Name, len(proj), len(out))
	}
	for j, col := range proj {
		if col < 0 || col >= len(g.t.Columns) {
			return fmt.Errorf("table %s: projection names column %d, the table has %d", g.t.Name, col, len(g.t.Columns))
		}
		if c := g.t.Columns[col]; !builderFits(out[j], c.Type.ArrowType()) {
			return fmt.Errorf("table %s: column %s: builder is %T, want NewBuilder's for %s", g.t.Name, c.Name, out[j], c.Type.ArrowType())
		}
	}
	l := g.layout
	for i, n := 0, vals.Len(); i < n; i++ {
		v := vals.At(i)
		if err := l.CheckValue(v); err != nil {
			return fmt.Errorf("table %s: value %d: %w", g.t.Name, i, err)
		}
		for j, col := range proj {
			b := out[j]
			if ValueIsNull(v, col) {
				b.AppendNull()
				continue
			}
			s := v[l.Slot[col]:]
			switch g.t.Columns[col].Type.Kind {
			case schema.Boolean:
				b.(*array.BooleanBuilder).Append(s[0] != 0)
			case schema.Int16:
				b.(*array.Int16Builder).Append(int16(binary.LittleEndian.Uint16(s)))
			case schema.Int32:
				b.(*array.Int32Builder).Append(int32(binary.LittleEndian.Uint32(s)))
			case schema.Date:
				b.(*array.Date32Builder).Append(arrow.Date32(binary.LittleEndian.Uint32(s)))
			case schema.Int64:
				b.(*array.Int64Builder).Append(int64(binary.LittleEndian.Uint64(s)))
			case schema.Timestamp, schema.Timestamptz:
				b.(*array.TimestampBuilder).Append(arrow.Timestamp(binary.LittleEndian.Uint64(s)))
			case schema.Float32:
				b.(*array.Float32Builder).Append(math.Float32frombits(binary.LittleEndian.Uint32(s)))
			case schema.Float64:
				b.(*array.Float64Builder).Append(math.Float64frombits(binary.LittleEndian.Uint64(s)))
			case schema.Decimal:
				b.(*array.Decimal128Builder).Append(decimal128.New(int64(binary.LittleEndian.Uint64(s[8:])), binary.LittleEndian.Uint64(s)))
			case schema.Varchar, schema.Bytea:
				b.(*VarBuilder).Append(ValueVar(v, l.VarStart, l.PrevVar[col], l.Slot[col]))
			}
		}
	}
	return nil
}

// builderFits reports whether b is NewBuilder's builder for type want: a *VarBuilder
// for utf8 and binary, else an Arrow builder of that type.
func builderFits(b Builder, want arrow.DataType) bool {
	if _, isVar := b.(*VarBuilder); isVar != (want.ID() == arrow.STRING || want.ID() == arrow.BINARY) {
		return false
	}
	t, ok := b.(interface{ Type() arrow.DataType })
	return ok && arrow.TypeEqual(t.Type(), want)
}

// AppendDistKey appends the canonical encoding of row i's distribution key (see
// VnodeOf).
func (g *Generic) AppendDistKey(dst []byte, c *Chunk, i int) []byte {
	rec := c.Record()
	for _, col := range g.t.DistKey {
		dst = AppendKeyColumn(dst, rec.Column(col), i, g.t.Columns[col].Type, false, true)
	}
	return dst
}

// Vnodes implements Kernels: the distribution keys of the batch are encoded into
// pooled scratch, then hashed.
func (g *Generic) Vnodes(c *Chunk, out []uint16) {
	keys := distKeyPool.Get().(*Bytes)
	defer distKeyPool.Put(keys)
	keys.Reset()
	n := c.NumRows()
	encodeKeys(c.Record(), n, g.dist, keys)
	for i := range n {
		out[i] = VnodeOf(keys.At(i), g.t.VnodeCount)
	}
}

// distKeyPool keeps the scratch of Vnodes.
var distKeyPool = sync.Pool{New: func() any { return new(Bytes) }}

// CheckPositions checks that positions cover exactly the table's vnodes. NewMarker
// then checks each vnode's state and decodes its position, naming table and vnode.
func CheckPositions(k Kernels, p *Positions) error {
	t := k.Table()
	if len(p.State) != t.VnodeCount || len(p.Pos) != t.VnodeCount {
		return fmt.Errorf("table %s: positions for %d vnodes, table has %d", t.Name, len(p.State), t.VnodeCount)
	}
	return nil
}

type genericMarker struct {
	g     *Generic
	state []BackfillState
	pos   [][]byte
	keys  Bytes
}

// NewMarker implements Kernels.
func (g *Generic) NewMarker(p *Positions) (Marker, error) {
	if err := CheckPositions(g, p); err != nil {
		return nil, err
	}
	m := &genericMarker{g: g, state: p.State, pos: p.Pos}
	for v, s := range p.State {
		switch s {
		case NotStarted, Completed:
		case InProgress:
			if err := g.checkKey(p.Pos[v]); err != nil {
				return nil, fmt.Errorf("table %s vnode %d: position: %w", g.t.Name, v, err)
			}
		default:
			return nil, fmt.Errorf("table %s vnode %d: bad backfill state %d", g.t.Name, v, s)
		}
	}
	return m, nil
}

// checkKey reports whether key decodes as exactly one pk.
func (g *Generic) checkKey(key []byte) error {
	src := key
	var err error
	for _, k := range g.t.PK {
		col := g.t.Columns[k.Column]
		if err = checkKeyNotNull(src, col, k); err == nil {
			src, err = skipKeyColumn(src, col.Type, k.Desc, k.NullsFirst)
		}
		if err != nil {
			return fmt.Errorf("column %s: %w", col.Name, err)
		}
	}
	if len(src) != 0 {
		return fmt.Errorf("%d bytes left after the last pk column", len(src))
	}
	return nil
}

// checkKeyNotNull rejects a NULL marker in a NOT NULL key column (the encoder never
// writes one; the value codec rejects the same corruption).
func checkKeyNotNull(src []byte, col schema.Column, k schema.KeyColumn) error {
	if !col.Nullable && len(src) > 0 && src[0] == KeyNullMarker(k.NullsFirst) {
		return fmt.Errorf("NULL in a NOT NULL column")
	}
	return nil
}

func skipKeyColumn(src []byte, typ schema.Type, desc, nullsFirst bool) ([]byte, error) {
	null, src, err := DecodeKeyMarker(src, nullsFirst)
	if err != nil || null {
		return src, err
	}
	if typ.VarLen() {
		_, src, err = DecodeKeyBytes(nil, src, desc)
		return src, err
	}
	switch typ.Kind {
	case schema.Boolean:
		_, src, err = DecodeKeyBool(src, desc)
		return src, err
	case schema.Float32:
		_, src, err = DecodeKeyFloat32(src, desc)
		return src, err
	case schema.Float64:
		_, src, err = DecodeKeyFloat64(src, desc)
		return src, err
	}
	if w := typ.Width(); len(src) >= w {
		return src[w:], nil
	}
	return nil, ErrKeyTruncated
}

func (m *genericMarker) Mark(c *Chunk, vnodes []uint16, out []byte) {
	n := c.NumRows()
	clear(out[:(n+7)/8])
	m.keys.Reset()
	m.g.EncodeKeys(c, &m.keys)
	for i := 0; i < n; i++ {
		if !c.Visible(i) {
			continue
		}
		v := vnodes[i]
		keep := false
		switch m.state[v] {
		case Completed:
			keep = true
		case InProgress:
			keep = bytes.Compare(m.keys.At(i), m.pos[v]) <= 0
		}
		if keep {
			out[i>>3] |= 1 << (i & 7)
		}
	}
}

// Split implements Kernels.
func (g *Generic) Split(c *Chunk, mapping []uint16, vnodes []uint16, outs []SplitOutput) {
	g.Vnodes(c, vnodes)
	SplitByDest(c, vnodes, mapping, outs)
}
