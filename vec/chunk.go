package vec

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Op is what a row of a chunk does to the stream's state.
type Op uint8

// The ops. Among visible rows an UpdateDelete is immediately followed by its
// UpdateInsert, with the same stream key.
const (
	Insert Op = iota
	Delete
	UpdateDelete
	UpdateInsert
)

func (o Op) String() string {
	switch o {
	case Insert:
		return "+"
	case Delete:
		return "-"
	case UpdateDelete:
		return "U-"
	case UpdateInsert:
		return "U+"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// IsInsert reports whether the op adds its row (Insert, UpdateInsert).
func (o Op) IsInsert() bool { return o == Insert || o == UpdateInsert }

// Chunk is a batch of rows: an Arrow record, an op per row and a visibility bitmap.
// Invisible rows do not exist logically. A chunk is reference counted the Arrow way:
// it starts with one reference; Retain adds one and Release drops one, freeing its
// buffers at zero. A chunk is immutable once built and safe to read from many
// goroutines; derived chunks (WithVisibility) share the record.
type Chunk struct {
	refs atomic.Int64
	rec  arrow.RecordBatch
	ops  *memory.Buffer
	vis  *memory.Buffer // nil: every row visible
}

// NewChunk wraps a record, ops (one byte per row) and an optional visibility bitmap
// (nil: all visible). It retains each of them; the caller keeps its own references.
func NewChunk(rec arrow.RecordBatch, ops *memory.Buffer, vis *memory.Buffer) *Chunk {
	n := int(rec.NumRows())
	if ops == nil || ops.Len() < n {
		panic(fmt.Sprintf("vec: NewChunk with %d rows needs %d op bytes", n, n))
	}
	if vis != nil && vis.Len() < int(bitutil.BytesForBits(int64(n))) {
		panic(fmt.Sprintf("vec: NewChunk with %d rows: visibility bitmap too short", n))
	}
	rec.Retain()
	ops.Retain()
	if vis != nil {
		vis.Retain()
	}
	c := &Chunk{rec: rec, ops: ops, vis: vis}
	c.refs.Store(1)
	return c
}

// NewOps allocates an op buffer of n rows filled with op.
func NewOps(mem memory.Allocator, n int, op Op) *memory.Buffer {
	b := memory.NewResizableBuffer(mem)
	b.Resize(n)
	bs := b.Bytes()
	for i := range bs {
		bs[i] = byte(op)
	}
	return b
}

// NewBitmap allocates a bitmap of n bits, all clear.
func NewBitmap(mem memory.Allocator, n int) *memory.Buffer {
	b := memory.NewResizableBuffer(mem)
	b.Resize(int(bitutil.BytesForBits(int64(n))))
	clear(b.Bytes())
	return b
}

// OpsOf views an op buffer's bytes as ops.
func OpsOf(b []byte) []Op {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*Op)(unsafe.Pointer(&b[0])), len(b))
}

// Retain adds a reference.
func (c *Chunk) Retain() { c.refs.Add(1) }

// Release drops a reference; the last one releases the record and buffers.
func (c *Chunk) Release() {
	n := c.refs.Add(-1)
	if n < 0 {
		panic("vec: Chunk released too many times")
	}
	if n == 0 {
		c.rec.Release()
		c.ops.Release()
		if c.vis != nil {
			c.vis.Release()
		}
	}
}

// Record is the chunk's columns. It is owned by the chunk: Retain it to keep it longer.
func (c *Chunk) Record() arrow.RecordBatch { return c.rec }

// NumRows is the number of rows, visible or not.
func (c *Chunk) NumRows() int { return int(c.rec.NumRows()) }

// Ops is the op of every row. Do not modify it.
func (c *Chunk) Ops() []Op { return OpsOf(c.ops.Bytes()[:c.NumRows()]) }

// OpsBuffer is the chunk's op buffer, to share with a derived chunk.
func (c *Chunk) OpsBuffer() *memory.Buffer { return c.ops }

// Visibility is the visibility bitmap (bit set = visible), or nil when every row is.
func (c *Chunk) Visibility() []byte {
	if c.vis == nil {
		return nil
	}
	return c.vis.Bytes()
}

// VisibilityBuffer is the chunk's visibility bitmap buffer (nil when every row is
// visible), to share with a derived chunk.
func (c *Chunk) VisibilityBuffer() *memory.Buffer { return c.vis }

// Visible reports whether row i is visible.
func (c *Chunk) Visible(i int) bool {
	return c.vis == nil || bitutil.BitIsSet(c.vis.Bytes(), i)
}

// CountVisible counts the visible rows.
func (c *Chunk) CountVisible() int {
	if c.vis == nil {
		return c.NumRows()
	}
	return bitutil.CountSetBits(c.vis.Bytes(), 0, c.NumRows())
}

// WithVisibility returns a chunk sharing this one's record and ops with another
// visibility bitmap (nil: all visible). Both chunks must be released.
func (c *Chunk) WithVisibility(vis *memory.Buffer) *Chunk {
	return NewChunk(c.rec, c.ops, vis)
}

// WithRecord returns a chunk of another record with as many rows, sharing this one's
// ops and visibility. Both chunks must be released.
func (c *Chunk) WithRecord(rec arrow.RecordBatch) *Chunk {
	if rec.NumRows() != c.rec.NumRows() {
		panic(fmt.Sprintf("vec: WithRecord: record has %d rows, chunk %d", rec.NumRows(), c.rec.NumRows()))
	}
	return NewChunk(rec, c.ops, c.vis)
}

// WithOpsAndVisibility returns a chunk sharing this one's record with other ops and
// visibility. Both chunks must be released.
func (c *Chunk) WithOpsAndVisibility(ops, vis *memory.Buffer) *Chunk {
	return NewChunk(c.rec, ops, vis)
}
