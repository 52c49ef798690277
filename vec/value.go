package vec

import (
	"encoding/binary"
	"fmt"

	"github.com/seed04fbb902/weir/schema"
)

// ValueVersion is the first byte of every row value in the current format.
const ValueVersion byte = 1

// Layout is where each column of a table lives inside a row value. Every offset is a
// constant of the schema, so the generator emits them as literals and the generic path
// computes them once per table.
type Layout struct {
	NumColumns int
	NullBytes  int   // length of the null bitmap
	Slot       []int // byte offset of column i's slot from the start of the value
	PrevVar    []int // for a var column, the slot offset of the previous var column, or -1
	IsVar      []bool
	NotNull    []byte // bit i set: column i is NOT NULL (its null bit must be clear)
	VarStart   int    // offset of the variable-width area (= end of the fixed slots)
	VarSlots   []int  // slot offsets of the variable-width columns, in column order
}

// NewLayout computes the value layout of a table.
func NewLayout(t *schema.Table) *Layout {
	n := len(t.Columns)
	l := &Layout{NumColumns: n, NullBytes: (n + 7) / 8, Slot: make([]int, n), PrevVar: make([]int, n), IsVar: make([]bool, n)}
	l.NotNull = make([]byte, l.NullBytes)
	off := 1 + l.NullBytes
	prev := -1
	for i, c := range t.Columns {
		l.Slot[i] = off
		if !c.Nullable {
			l.NotNull[i>>3] |= 1 << (i & 7)
		}
		l.PrevVar[i] = -1
		if c.Type.VarLen() {
			l.PrevVar[i] = prev
			l.IsVar[i] = true
			prev = off
			l.VarSlots = append(l.VarSlots, off)
			off += 4
		} else {
			off += c.Type.Width()
		}
	}
	l.VarStart = off
	return l
}

// CheckValue validates the frame of a row value: version, length, and that the
// variable-width end offsets are non-decreasing and end exactly at the value's end. A
// value that passes can be decoded column by column without bounds failures.
func (l *Layout) CheckValue(v []byte) error {
	if len(v) < l.VarStart {
		return fmt.Errorf("value of %d bytes is shorter than the %d-byte fixed part", len(v), l.VarStart)
	}
	if v[0] != ValueVersion {
		return fmt.Errorf("unknown value format version %d (want %d)", v[0], ValueVersion)
	}
	if extra := l.NumColumns & 7; extra != 0 {
		if v[l.NullBytes]>>extra != 0 {
			return fmt.Errorf("null bitmap has bits set past column %d", l.NumColumns)
		}
	}
	for i, m := range l.NotNull {
		if v[1+i]&m != 0 {
			return fmt.Errorf("null bitmap marks a NOT NULL column NULL")
		}
	}
	end := uint32(0)
	for _, s := range l.VarSlots {
		e := binary.LittleEndian.Uint32(v[s:])
		if e < end {
			return fmt.Errorf("variable-width offsets go backwards (%d after %d)", e, end)
		}
		end = e
	}
	if int(end) != len(v)-l.VarStart {
		return fmt.Errorf("variable-width data is %d bytes, offsets say %d", len(v)-l.VarStart, end)
	}
	return nil
}

// ValueIsNull reports whether column col of the value is NULL.
func ValueIsNull(v []byte, col int) bool {
	return v[1+col>>3]&(1<<(col&7)) != 0
}

// ValueVar returns the bytes of a variable-width column whose slot is at slot and whose
// previous variable column's slot is at prev (-1 for the first). The value must have
// passed CheckValue.
func ValueVar(v []byte, varStart, prev, slot int) []byte {
	start := uint32(0)
	if prev >= 0 {
		start = binary.LittleEndian.Uint32(v[prev:])
	}
	end := binary.LittleEndian.Uint32(v[slot:])
	return v[varStart+int(start) : varStart+int(end)]
}

// ValueWriter assembles one row value. Reset it, set each column once in column order
// (Put* or PutNull), then Finish. It keeps its buffers between rows.
type ValueWriter struct {
	l    *Layout
	buf  []byte
	vars []byte
}

// NewValueWriter returns a writer for values of the layout.
func NewValueWriter(l *Layout) *ValueWriter { return &ValueWriter{l: l} }

// Reset starts a new value.
func (w *ValueWriter) Reset() {
	w.buf = w.buf[:0]
	w.buf = append(w.buf, ValueVersion)
	for i := 1; i < w.l.VarStart; i++ {
		w.buf = append(w.buf, 0)
	}
	w.vars = w.vars[:0]
}

// PutNull marks column col NULL (its slot stays zero; a var column stays empty).
func (w *ValueWriter) PutNull(col int) {
	w.buf[1+col>>3] |= 1 << (col & 7)
	if w.l.IsVar[col] {
		binary.LittleEndian.PutUint32(w.buf[w.l.Slot[col]:], uint32(len(w.vars)))
	}
}

// Slot returns the fixed slot of column col for the caller to fill.
func (w *ValueWriter) Slot(col int) []byte { return w.buf[w.l.Slot[col]:] }

// PutVar appends a variable-width column's bytes.
func (w *ValueWriter) PutVar(col int, b []byte) {
	w.vars = append(w.vars, b...)
	binary.LittleEndian.PutUint32(w.buf[w.l.Slot[col]:], uint32(len(w.vars)))
}

// PutVarString is PutVar for a string.
func (w *ValueWriter) PutVarString(col int, s string) {
	w.vars = append(w.vars, s...)
	binary.LittleEndian.PutUint32(w.buf[w.l.Slot[col]:], uint32(len(w.vars)))
}

// Finish appends the finished value to dst.
func (w *ValueWriter) Finish(dst []byte) []byte {
	dst = append(dst, w.buf...)
	return append(dst, w.vars...)
}
