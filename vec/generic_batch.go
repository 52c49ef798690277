package vec

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/seed04fbb902/weir/schema"
)

// The generic kernels' batch encoders work a column at a time: they size every row of
// the batch, lay the rows out in the output arena, then fill it column by column, each
// column's type resolved once per batch and its values read from the typed Arrow
// array in one loop. The row functions (AppendKey, AppendDistKey, ValueWriter) resolve
// the type per value; the batch encoders write the same bytes (generic_batch_test.go).

// keyPart is one column of a memcomparable key: the chunk column, its type and order.
type keyPart struct {
	col              int
	typ              schema.Type
	desc, nullsFirst bool
}

// pkParts and distParts are the key parts of a table's pk and of its distribution key
// (ascending, NULLs first: the canonical encoding VnodeOf hashes).
func pkParts(t *schema.Table) []keyPart {
	ps := make([]keyPart, len(t.PK))
	for i, k := range t.PK {
		ps[i] = keyPart{col: k.Column, typ: t.Columns[k.Column].Type, desc: k.Desc, nullsFirst: k.NullsFirst}
	}
	return ps
}

func distParts(t *schema.Table) []keyPart {
	ps := make([]keyPart, len(t.DistKey))
	for i, c := range t.DistKey {
		ps[i] = keyPart{col: c, typ: t.Columns[c].Type, nullsFirst: true}
	}
	return ps
}

// KeyWidth is the encoded width of a non-NULL key value of type typ, marker included,
// or 0 for a variable-width type.
func KeyWidth(typ schema.Type) int {
	switch typ.Kind {
	case schema.Boolean:
		return 2
	case schema.Int16:
		return 3
	case schema.Int32, schema.Date, schema.Float32:
		return 5
	case schema.Int64, schema.Timestamp, schema.Timestamptz, schema.Float64:
		return 9
	case schema.Decimal:
		return 17
	}
	return 0
}

// groupsWidth is the encoded width of a non-NULL varchar or bytea key value of n
// bytes: the marker, then n/8+1 groups of 8 bytes and a group byte (appendKeyGroups).
func groupsWidth(n int) int32 { return 1 + 9*int32(n/8+1) }

// cursors is scratch of one int32 per row of a batch; cursorPool keeps them, so that
// the encoders, which many actors call at once on one shared Generic, allocate
// nothing in steady state.
type cursors struct{ at []int32 }

var cursorPool = sync.Pool{New: func() any { return new(cursors) }}

// getCursors returns n cursors, all zero.
func getCursors(n int) *cursors {
	c := cursorPool.Get().(*cursors)
	c.at = slices.Grow(c.at[:0], n)[:n]
	clear(c.at)
	return c
}

// layOut appends n strings to out whose sizes are size[i] + fixed, zeroed when zero is
// set (values leave NULL slots and the null bitmap as zeros; keys write every byte),
// and leaves in size[i] where string i starts in out.Data. It returns out.Data.
func layOut(out *Bytes, size []int32, fixed int32, zero bool) []byte {
	if len(out.Offsets) == 0 {
		out.Offsets = append(out.Offsets, 0)
	}
	at := int32(len(out.Data))
	out.Offsets = slices.Grow(out.Offsets, len(size))
	for i, s := range size {
		size[i] = at
		at += s + fixed
		out.Offsets = append(out.Offsets, at)
	}
	start := len(out.Data)
	out.Data = slices.Grow(out.Data, int(at)-start)[:at]
	if zero {
		clear(out.Data[start:])
	}
	return out.Data
}

// encodeKeys appends to out the key of each of the n rows of rec made of parts.
func encodeKeys(rec arrow.RecordBatch, n int, parts []keyPart, out *Bytes) {
	cur := getCursors(n)
	defer cursorPool.Put(cur)
	fixed := int32(0)
	for _, p := range parts {
		arr := rec.Column(p.col)
		w := int32(KeyWidth(p.typ))
		if w > 0 && arr.NullN() == 0 {
			fixed += w
			continue
		}
		addKeySizes(cur.at, arr, p.typ, w)
	}
	d := layOut(out, cur.at, fixed, false)
	for _, p := range parts {
		putKeys(d, cur.at, rec.Column(p.col), p)
	}
}

// addKeySizes adds to size[i] the width of row i's key value in arr, a column of type
// typ whose non-NULL width is w (0: variable).
func addKeySizes(size []int32, arr arrow.Array, typ schema.Type, w int32) {
	nulls := arr.NullN() > 0
	var valueLen func(int) int
	if w == 0 {
		valueLen = varValueLen(arr, typ)
	}
	for i := range size {
		switch {
		case nulls && arr.IsNull(i):
			size[i]++
		case w > 0:
			size[i] += w
		default:
			size[i] += groupsWidth(valueLen(i))
		}
	}
}

// varValueLen is the length of a value of arr, a varchar or bytea column of type typ,
// with the array's type resolved once.
func varValueLen(arr arrow.Array, typ schema.Type) func(int) int {
	if typ.Kind == schema.Varchar {
		return arr.(*array.String).ValueLen
	}
	return arr.(*array.Binary).ValueLen
}

// putKeys writes the key value of every row i of arr at d[at[i]:], a part of
// KeyWidth's width (or groupsWidth's), and advances at[i] past it. The space was laid
// out by layOut: the encoders append in place.
func putKeys(d []byte, at []int32, arr arrow.Array, p keyPart) {
	nulls := arr.NullN() > 0
	null := KeyNullMarker(p.nullsFirst)
	desc := p.desc
	switch p.typ.Kind {
	case schema.Boolean:
		a := arr.(*array.Boolean)
		keyLoop(d, at, arr, nulls, null, func(dst []byte, i int) []byte { return AppendKeyBool(dst, a.Value(i), desc) })
	case schema.Int16:
		vs := arr.(*array.Int16).Int16Values()
		keyLoop(d, at, arr, nulls, null, func(dst []byte, i int) []byte { return AppendKeyInt16(dst, vs[i], desc) })
	case schema.Int32:
		putIntKeys(d, at, arr, nulls, null, arr.(*array.Int32).Int32Values(), desc)
	case schema.Date:
		putIntKeys(d, at, arr, nulls, null, arr.(*array.Date32).Date32Values(), desc)
	case schema.Int64:
		putIntKeys(d, at, arr, nulls, null, arr.(*array.Int64).Int64Values(), desc)
	case schema.Timestamp, schema.Timestamptz:
		putIntKeys(d, at, arr, nulls, null, arr.(*array.Timestamp).TimestampValues(), desc)
	case schema.Float32:
		vs := arr.(*array.Float32).Float32Values()
		keyLoop(d, at, arr, nulls, null, func(dst []byte, i int) []byte { return AppendKeyFloat32(dst, vs[i], desc) })
	case schema.Float64:
		vs := arr.(*array.Float64).Float64Values()
		keyLoop(d, at, arr, nulls, null, func(dst []byte, i int) []byte { return AppendKeyFloat64(dst, vs[i], desc) })
	case schema.Decimal:
		vs := arr.(*array.Decimal128).Values()
		keyLoop(d, at, arr, nulls, null, func(dst []byte, i int) []byte { return AppendKeyDecimal(dst, vs[i], desc) })
	case schema.Varchar:
		a := arr.(*array.String)
		keyLoop(d, at, arr, nulls, null, func(dst []byte, i int) []byte { return AppendKeyString(dst, a.Value(i), desc) })
	case schema.Bytea:
		a := arr.(*array.Binary)
		keyLoop(d, at, arr, nulls, null, func(dst []byte, i int) []byte { return AppendKeyBytes(dst, a.Value(i), desc) })
	default:
		panic("vec: key of unsupported type " + p.typ.String())
	}
}

// keyLoop is putKeys for the less common types: enc appends row i's non-NULL value.
func keyLoop(d []byte, at []int32, arr arrow.Array, nulls bool, null byte, enc func(dst []byte, i int) []byte) {
	for i, o := range at {
		if nulls && arr.IsNull(i) {
			d[o] = null
			at[i] = o + 1
			continue
		}
		at[i] = o + int32(len(enc(d[o:o], i)))
	}
}

// putIntKeys is putKeys for a 32- or 64-bit integer column (a date or timestamp
// too): AppendKeyInt32's and AppendKeyInt64's encoding, in place.
func putIntKeys[T ~int32 | ~int64](d []byte, at []int32, arr arrow.Array, nulls bool, null byte, vs []T, desc bool) {
	var zero T
	w := int32(unsafe.Sizeof(zero))
	flip := uint64(1<<63) ^ descMask64(desc)
	if w == 4 {
		flip = uint64(uint32(1<<31) ^ uint32(descMask64(desc)))
	}
	for i, o := range at {
		if nulls && arr.IsNull(i) {
			d[o] = null
			at[i] = o + 1
			continue
		}
		k := d[o : o+1+w]
		k[0] = KeyValue
		if w == 8 {
			binary.BigEndian.PutUint64(k[1:], uint64(vs[i])^flip)
		} else {
			binary.BigEndian.PutUint32(k[1:], uint32(vs[i])^uint32(flip))
		}
		at[i] = o + 1 + w
	}
}

// varColumns are the indexes of a table's variable-width columns, in column order.
func varColumns(t *schema.Table) []int {
	var cols []int
	for i, c := range t.Columns {
		if c.Type.VarLen() {
			cols = append(cols, i)
		}
	}
	return cols
}

// encodeValues appends to out the row value of each of the n rows of rec, a chunk of
// table t whose value layout is l and whose variable-width columns are varCols.
func encodeValues(t *schema.Table, l *Layout, varCols []int, rec arrow.RecordBatch, n int, out *Bytes) {
	cur := getCursors(n)
	defer cursorPool.Put(cur)
	for _, col := range varCols {
		arr := rec.Column(col)
		nulls := arr.NullN() > 0
		valueLen := varValueLen(arr, t.Columns[col].Type)
		for i := range cur.at {
			if !nulls || !arr.IsNull(i) {
				cur.at[i] += int32(valueLen(i))
			}
		}
	}
	d := layOut(out, cur.at, int32(l.VarStart), true)
	// cur.at[i] is where row i starts; row i's variable-width bytes so far go in vars.
	vars := getCursors(n)
	defer cursorPool.Put(vars)
	for _, o := range cur.at {
		d[o] = ValueVersion
	}
	for col, cd := range t.Columns {
		putValues(d, cur.at, vars.at, rec.Column(col), cd.Type, col, l)
	}
}

// putValues writes column col (arr, of type typ) of every row i of a batch whose row
// value starts at d[at[i]] and whose variable-width bytes so far are vars[i] long.
func putValues(d []byte, at, vars []int32, arr arrow.Array, typ schema.Type, col int, l *Layout) {
	nulls := arr.NullN() > 0
	slot := int32(l.Slot[col])
	nb, bit := int32(1+col>>3), byte(1)<<(col&7)
	switch typ.Kind {
	case schema.Boolean:
		a := arr.(*array.Boolean)
		fixedLoop(d, at, arr, nulls, nb, bit, func(s []byte, i int) {
			if a.Value(i) {
				s[0] = 1
			}
		}, slot)
	case schema.Int16:
		vs := arr.(*array.Int16).Int16Values()
		fixedLoop(d, at, arr, nulls, nb, bit, func(s []byte, i int) { binary.LittleEndian.PutUint16(s, uint16(vs[i])) }, slot)
	case schema.Int32:
		putIntValues(d, at, arr, nulls, nb, bit, slot, arr.(*array.Int32).Int32Values())
	case schema.Date:
		putIntValues(d, at, arr, nulls, nb, bit, slot, arr.(*array.Date32).Date32Values())
	case schema.Int64:
		putIntValues(d, at, arr, nulls, nb, bit, slot, arr.(*array.Int64).Int64Values())
	case schema.Timestamp, schema.Timestamptz:
		putIntValues(d, at, arr, nulls, nb, bit, slot, arr.(*array.Timestamp).TimestampValues())
	case schema.Float32:
		vs := arr.(*array.Float32).Float32Values()
		fixedLoop(d, at, arr, nulls, nb, bit, func(s []byte, i int) { binary.LittleEndian.PutUint32(s, math.Float32bits(vs[i])) }, slot)
	case schema.Float64:
		vs := arr.(*array.Float64).Float64Values()
		fixedLoop(d, at, arr, nulls, nb, bit, func(s []byte, i int) { binary.LittleEndian.PutUint64(s, math.Float64bits(vs[i])) }, slot)
	case schema.Decimal:
		vs := arr.(*array.Decimal128).Values()
		fixedLoop(d, at, arr, nulls, nb, bit, func(s []byte, i int) { putDecimal(s, vs[i]) }, slot)
	case schema.Varchar:
		a := arr.(*array.String)
		varLoop(d, at, vars, arr, nulls, nb, bit, slot, int32(l.VarStart), func(dst []byte, i int) int { return copy(dst, a.Value(i)) })
	case schema.Bytea:
		a := arr.(*array.Binary)
		varLoop(d, at, vars, arr, nulls, nb, bit, slot, int32(l.VarStart), func(dst []byte, i int) int { return copy(dst, a.Value(i)) })
	default:
		panic("vec: value of unsupported type " + typ.String())
	}
}

// putDecimal writes a decimal's slot: low then high 64 bits, little-endian.
func putDecimal(s []byte, v decimal128.Num) {
	binary.LittleEndian.PutUint64(s, v.LowBits())
	binary.LittleEndian.PutUint64(s[8:], uint64(v.HighBits()))
}

// fixedLoop is putValues for the less common fixed-width types: put fills row i's
// slot (zeroed) with its non-NULL value. A NULL sets the row's null bit (the byte at
// nb, bit) and leaves the slot zero.
func fixedLoop(d []byte, at []int32, arr arrow.Array, nulls bool, nb int32, bit byte, put func(s []byte, i int), slot int32) {
	for i, o := range at {
		if nulls && arr.IsNull(i) {
			d[o+nb] |= bit
			continue
		}
		put(d[o+slot:], i)
	}
}

// putIntValues is putValues for a 32- or 64-bit integer column (a date or timestamp
// too): the value little-endian in its slot.
func putIntValues[T ~int32 | ~int64](d []byte, at []int32, arr arrow.Array, nulls bool, nb int32, bit byte, slot int32, vs []T) {
	var zero T
	w := int32(unsafe.Sizeof(zero))
	for i, o := range at {
		if nulls && arr.IsNull(i) {
			d[o+nb] |= bit
			continue
		}
		if s := d[o+slot : o+slot+w]; w == 8 {
			binary.LittleEndian.PutUint64(s, uint64(vs[i]))
		} else {
			binary.LittleEndian.PutUint32(s, uint32(vs[i]))
		}
	}
}

// varLoop is putValues for a variable-width column: put copies row i's non-NULL bytes
// to dst and returns their length. Each row's slot holds the end of its bytes within
// the row's variable-width area (for a NULL, the end of the previous column's).
func varLoop(d []byte, at, vars []int32, arr arrow.Array, nulls bool, nb int32, bit byte, slot, varStart int32, put func(dst []byte, i int) int) {
	for i, o := range at {
		if nulls && arr.IsNull(i) {
			d[o+nb] |= bit
		} else {
			vars[i] += int32(put(d[o+varStart+vars[i]:], i))
		}
		binary.LittleEndian.PutUint32(d[o+slot:o+slot+4], uint32(vars[i]))
	}
}

// decodeKeyColumns decodes keys into out a pk column at a time: each column's values of
// every key, cursors marking where each key's next column starts, the column's type
// resolved once (a typed loop for the 32- and 64-bit integer kinds). It accepts
// exactly the keys decodeKeyRows accepts; its error names the first bad value of a
// column, which need not be the first bad key.
func (g *Generic) decodeKeyColumns(keys *Bytes, out []array.Builder) error {
	n := keys.Len()
	if n == 0 {
		return nil
	}
	cur := getCursors(n)
	defer cursorPool.Put(cur)
	copy(cur.at, keys.Offsets[:n])
	for j, k := range g.t.PK {
		col := g.t.Columns[k.Column]
		b := binaryBuilderOf(out[j])
		b.Reserve(n)
		var err error
		switch col.Type.Kind {
		case schema.Int64:
			err = decodeIntKeys(keys, cur.at, col, k, b, b.(*array.Int64Builder).Append)
		case schema.Timestamp, schema.Timestamptz:
			tb := b.(*array.TimestampBuilder)
			err = decodeIntKeys(keys, cur.at, col, k, b, func(v int64) { tb.Append(arrow.Timestamp(v)) })
		case schema.Int32:
			err = decodeIntKeys(keys, cur.at, col, k, b, b.(*array.Int32Builder).Append)
		case schema.Date:
			db := b.(*array.Date32Builder)
			err = decodeIntKeys(keys, cur.at, col, k, b, func(v int32) { db.Append(arrow.Date32(v)) })
		default:
			for i, o := range cur.at {
				src := keys.Data[o:keys.Offsets[i+1]]
				if err = checkKeyNotNull(src, col, k); err == nil {
					src, err = DecodeKeyColumn(src, b, col.Type, k.Desc, k.NullsFirst)
				}
				if err != nil {
					err = fmt.Errorf("key %d: %w", i, err)
					break
				}
				cur.at[i] = keys.Offsets[i+1] - int32(len(src))
			}
		}
		if err != nil {
			return fmt.Errorf("table %s: column %s: %w", g.t.Name, col.Name, err)
		}
	}
	for i, o := range cur.at {
		if left := keys.Offsets[i+1] - o; left != 0 {
			return fmt.Errorf("table %s: key %d: %d bytes left after the last pk column", g.t.Name, i, left)
		}
	}
	return nil
}

// keyMarker checks the marker of the key column value at src (of a column col with
// key order k): it reports a NULL, or the error a key at a time would give.
func keyMarker(src []byte, col schema.Column, k schema.KeyColumn) (null bool, err error) {
	if err := checkKeyNotNull(src, col, k); err != nil {
		return false, err
	}
	null, _, err = DecodeKeyMarker(src, k.NullsFirst)
	return null, err
}

// decodeIntKeys decodes a 32- or 64-bit integer key column (a date or timestamp too)
// of every key at the cursors at into b, app appending a value, and advances the
// cursors; it checks what DecodeKeyColumn checks.
func decodeIntKeys[T int32 | int64](keys *Bytes, at []int32, col schema.Column, k schema.KeyColumn, b array.Builder, app func(T)) error {
	var zero T
	w := int32(unsafe.Sizeof(zero))
	flip := descMask64(k.Desc) ^ (1 << 63)
	if w == 4 {
		flip = uint64(uint32(flip) ^ (1 << 31))
	}
	for i, o := range at {
		src := keys.Data[o:keys.Offsets[i+1]]
		if len(src) > int(w) && src[0] == KeyValue {
			if w == 8 {
				app(T(int64(binary.BigEndian.Uint64(src[1:]) ^ flip)))
			} else {
				app(T(int32(binary.BigEndian.Uint32(src[1:]) ^ uint32(flip))))
			}
			at[i] = o + 1 + w
			continue
		}
		null, err := keyMarker(src, col, k)
		if err == nil && !null {
			err = ErrKeyTruncated // a value's marker, too few bytes after it
		}
		if err != nil {
			return fmt.Errorf("key %d: %w", i, err)
		}
		b.AppendNull()
		at[i] = o + 1
	}
	return nil
}
