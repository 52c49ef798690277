package vec

import (
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Builder is one output column of Kernels.DecodeValues. NewBuilder gives the one a
// column's Arrow type takes: a *VarBuilder for utf8 and binary, Arrow's own builder of
// the type otherwise (e.g. *array.Int64Builder, which satisfies Builder as it is).
type Builder interface {
	// Len is the number of values appended since the last NewArray.
	Len() int
	// Reserve makes room for n more values.
	Reserve(n int)
	// AppendNull appends a NULL.
	AppendNull()
	// NewArray hands the appended values over as an array and empties the builder;
	// the caller releases the array.
	NewArray() arrow.Array
	// Release frees the builder's buffers.
	Release()
}

// NewBuilder returns the decode builder of an Arrow type (see Builder), allocated from
// mem.
func NewBuilder(mem memory.Allocator, dt arrow.DataType) Builder {
	switch dt.ID() {
	case arrow.STRING, arrow.BINARY:
		return NewVarBuilder(mem, dt)
	}
	return array.NewBuilder(mem, dt)
}

// VarBuilder builds a utf8 or binary Arrow array (int32 offsets) a batch at a time.
// Where Arrow's BinaryBuilder does several calls of bookkeeping per value, a
// VarBuilder's UnsafeAppend is a copy and an offset store (and a validity bit once
// the batch has a NULL), inlined into the caller's loop: a decode reserves the batch's values and bytes once (Reserve, ReserveData)
// and then appends in a tight loop. Its buffers come from the allocator and pass to
// the array that NewArray returns. Not safe for concurrent use.
type VarBuilder struct {
	mem memory.Allocator
	// raw allocates the offsets and value bytes, which are written before they are
	// read: UninitOf(mem), which skips a pool's zeroing of reused buffers.
	raw   memory.Allocator
	dt    arrow.DataType
	offb  *memory.Buffer // int32 offsets: offs aliases its whole capacity
	datab *memory.Buffer // value bytes: data aliases its whole capacity
	valb  *memory.Buffer // validity bitmap, made by the batch's first NULL
	offs  []int32        // offs[0..n] are set; offs[0] is 0
	data  []byte
	valid []byte
	n     int // values appended
	nulls int
	size  int // bytes appended
}

// NewVarBuilder returns an empty builder of arrays of type dt (arrow.BinaryTypes.String
// or arrow.BinaryTypes.Binary; it panics on another type).
func NewVarBuilder(mem memory.Allocator, dt arrow.DataType) *VarBuilder {
	if id := dt.ID(); id != arrow.STRING && id != arrow.BINARY {
		panic(fmt.Sprintf("vec: VarBuilder of %s, want utf8 or binary", dt))
	}
	return &VarBuilder{mem: mem, raw: UninitOf(mem), dt: dt}
}

// Len implements Builder.
func (b *VarBuilder) Len() int { return b.n }

// Type is the type of the arrays built.
func (b *VarBuilder) Type() arrow.DataType { return b.dt }

// DataLen is the number of value bytes appended since the last NewArray.
func (b *VarBuilder) DataLen() int { return b.size }

// Reserve makes room for n more values, so that the next n UnsafeAppend or AppendNull
// calls do not grow the offsets (or the validity bitmap).
func (b *VarBuilder) Reserve(n int) {
	if need := b.n + n + 1; need > len(b.offs) {
		b.growValues(need)
	}
}

// ReserveData makes room for n more value bytes (inlined; the growth is not). It
// panics when the array would exceed the 2 GiB that int32 offsets address.
func (b *VarBuilder) ReserveData(n int) {
	if need := b.size + n; need > len(b.data) {
		b.growData(need)
	}
}

// growData grows the value bytes to room for need bytes in all (at least doubling).
func (b *VarBuilder) growData(need int) {
	if need > math.MaxInt32 {
		panic(fmt.Sprintf("vec: VarBuilder of %s: %d value bytes exceed int32 offsets", b.dt, need))
	}
	if need > len(b.data) {
		if b.datab == nil {
			b.datab = memory.NewResizableBuffer(b.raw)
		}
		b.datab.Reserve(min(max(need, 2*len(b.data)), math.MaxInt32))
		b.data = b.datab.Buf()
	}
}

// growValues grows the offsets (and the bitmap, if any) to room for need-1 values.
func (b *VarBuilder) growValues(need int) {
	need = max(need, 2*len(b.offs), 64)
	if b.offb == nil {
		b.offb = memory.NewResizableBuffer(b.raw)
	}
	b.offb.Reserve(need * arrow.Int32SizeBytes)
	b.offs = arrow.Int32Traits.CastFromBytes(b.offb.Buf())
	b.offs[0] = 0
	if b.valb != nil {
		b.growValid()
	}
}

// growValid sizes the bitmap to the offsets' capacity; a new bitmap has every value
// appended so far valid.
func (b *VarBuilder) growValid() {
	nb := int(bitutil.BytesForBits(int64(len(b.offs))))
	if b.valb == nil {
		b.valb = memory.NewResizableBuffer(b.mem)
		b.valb.Reserve(nb)
		b.valid = b.valb.Buf()
		clear(b.valid)
		bitutil.SetBitsTo(b.valid, 0, int64(b.n), true)
		return
	}
	old := len(b.valid)
	b.valb.Reserve(nb)
	b.valid = b.valb.Buf()
	clear(b.valid[old:])
}

// UnsafeAppend appends v; Reserve and ReserveData must have made room for it (it
// panics if they did not).
func (b *VarBuilder) UnsafeAppend(v []byte) {
	b.size += copy(b.data[b.size:b.size+len(v)], v)
	b.n++
	b.offs[b.n] = int32(b.size)
	if b.valid != nil {
		bitutil.SetBit(b.valid, b.n-1)
	}
}

// Append appends v, growing the buffers as needed.
func (b *VarBuilder) Append(v []byte) {
	b.Reserve(1)
	b.ReserveData(len(v))
	b.UnsafeAppend(v)
}

// AppendString appends s, growing the buffers as needed.
func (b *VarBuilder) AppendString(s string) {
	b.Reserve(1)
	b.ReserveData(len(s))
	b.size += copy(b.data[b.size:], s)
	b.n++
	b.offs[b.n] = int32(b.size)
	if b.valid != nil {
		bitutil.SetBit(b.valid, b.n-1)
	}
}

// AppendNull implements Builder.
func (b *VarBuilder) AppendNull() {
	b.Reserve(1)
	if b.valid == nil {
		b.growValid()
	}
	bitutil.ClearBit(b.valid, b.n)
	b.n++
	b.nulls++
	b.offs[b.n] = int32(b.size)
}

// shrinkWaste is the spare capacity, in bytes, above which NewArray copies value bytes
// that fill under a quarter of their buffer into one of their size.
const shrinkWaste = 64 << 10

// BatchBytes is the value bytes to reserve for n values of about per bytes each: an
// eighth more, so that a batch a little wider than the one that measured per does not
// grow (copy) its bytes near its end, and at most MaxBatchReserve, beyond which the
// buffer grows by doubling as values come. It is 0 when n or per is not positive.
func BatchBytes(n, per int) int {
	if n <= 0 || per <= 0 {
		return 0
	}
	if per > MaxBatchReserve/n {
		return MaxBatchReserve
	}
	r := n * per
	return min(r+r/8, MaxBatchReserve)
}

// MaxBatchReserve bounds BatchBytes.
const MaxBatchReserve = 16 << 20

// MaxBatchRows bounds the values a row decoder's Begin reserves room for; a batch of
// more grows as its values come.
const MaxBatchRows = 1 << 16

// NewArray implements Builder: the array takes the builder's buffers, and the builder
// starts its next batch with new ones from the allocator.
func (b *VarBuilder) NewArray() arrow.Array {
	b.Reserve(0)
	b.offb.ResizeNoShrink((b.n + 1) * arrow.Int32SizeBytes)
	data := b.datab
	switch {
	case data == nil:
		data = memory.NewBufferBytes(nil)
	case data.Cap() > 4*b.size && data.Cap()-b.size > shrinkWaste:
		// A batch far smaller than its reservation (the last rows of a read, say)
		// takes a copy of its bytes, and the large buffer goes back to the allocator
		// for the next batch: an array never pins much more memory than it holds.
		small := memory.NewResizableBuffer(b.raw)
		small.Resize(b.size)
		copy(small.Bytes(), b.data[:b.size])
		data.Release()
		data = small
	default:
		data.ResizeNoShrink(b.size)
	}
	valid := b.valb // non-nil exactly when the batch has a NULL
	if valid != nil {
		valid.ResizeNoShrink(int(bitutil.BytesForBits(int64(b.n))))
	}
	d := array.NewData(b.dt, b.n, []*memory.Buffer{valid, b.offb, data}, nil, b.nulls, 0)
	b.offb.Release()
	data.Release()
	if valid != nil {
		valid.Release()
	}
	a := array.MakeFromData(d)
	d.Release()
	*b = VarBuilder{mem: b.mem, raw: b.raw, dt: b.dt}
	return a
}

// Release implements Builder: it frees the builder's buffers and empties it.
func (b *VarBuilder) Release() {
	for _, buf := range []*memory.Buffer{b.offb, b.datab, b.valb} {
		if buf != nil {
			buf.Release()
		}
	}
	*b = VarBuilder{mem: b.mem, raw: b.raw, dt: b.dt}
}

var _ Builder = (*VarBuilder)(nil)
