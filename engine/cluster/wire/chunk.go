package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/vec"
)

// AppendChunkMeta appends the metadata of chunk c:
//
//	header | rows (uvarint) | ops (one byte per row)
//	| visibility flag (0: every row visible, 1: a bitmap follows)
//	| bitmap (ceil(rows/8) bytes, bit set = visible; bits past the last row clear)
//
// The columns travel as the Arrow IPC record c.Record().
func AppendChunkMeta(dst []byte, c *vec.Chunk) []byte {
	n := c.NumRows()
	dst = appendHeader(dst, KindChunk)
	dst = binary.AppendUvarint(dst, uint64(n))
	for _, op := range c.Ops() {
		dst = append(dst, byte(op))
	}
	if c.VisibilityBuffer() == nil {
		return append(dst, 0)
	}
	vis := c.Visibility()
	dst = append(dst, 1)
	nb := int(bitutil.BytesForBits(int64(n)))
	start := len(dst)
	dst = append(dst, vis[:nb]...)
	if tail := n % 8; tail != 0 {
		dst[start+nb-1] &= byte(1)<<tail - 1
	}
	return dst
}

// ChunkMeta is a chunk's metadata as DecodeChunkMeta reads it. Ops and Visibility
// alias the input.
type ChunkMeta struct {
	Ops        []vec.Op
	Visibility []byte // nil: every row visible
}

// DecodeChunkMeta decodes what AppendChunkMeta wrote, without allocating: the result
// aliases md. It fails on an op that is not one of vec's, a visibility flag other than
// 0 or 1, a bitmap with a bit set past the last row, and trailing bytes.
func DecodeChunkMeta(md []byte) (ChunkMeta, error) {
	body, err := expect(md, KindChunk)
	if err != nil {
		return ChunkMeta{}, err
	}
	r := Reader{b: body}
	n := int(r.Uvarint("rows", math.MaxInt32))
	ops := r.Bytes("ops", n)
	for i, op := range ops {
		if op > byte(vec.UpdateInsert) {
			r.Fail("ops", "row %d: unknown op %d", i, op)
			break
		}
	}
	var vis []byte
	if r.Flag("visibility flag") {
		vis = r.Bytes("visibility", int(bitutil.BytesForBits(int64(n))))
		if tail := n % 8; r.err == nil && tail != 0 && vis[len(vis)-1]>>tail != 0 {
			r.Fail("visibility", "bits set past row %d", n-1)
		}
	}
	if err := r.Finish(); err != nil {
		return ChunkMeta{}, fmt.Errorf("wire: chunk: %w", err)
	}
	return ChunkMeta{Ops: vec.OpsOf(ops), Visibility: vis}, nil
}

// DecodeChunk decodes a chunk from its metadata and its record: the ops and
// visibility are copied into buffers from mem, and the chunk retains rec (the caller
// keeps its own reference). It fails when rec is nil or its row count is not the
// metadata's, and on what DecodeChunkMeta refuses. The caller releases the chunk.
func DecodeChunk(mem memory.Allocator, md []byte, rec arrow.RecordBatch) (*vec.Chunk, error) {
	meta, err := DecodeChunkMeta(md)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("wire: chunk of %d rows comes without a record", len(meta.Ops))
	}
	if rec.NumRows() != int64(len(meta.Ops)) {
		return nil, fmt.Errorf("wire: chunk metadata has %d rows, its record %d", len(meta.Ops), rec.NumRows())
	}
	ops := memory.NewResizableBuffer(mem)
	defer ops.Release()
	ops.Resize(len(meta.Ops))
	copy(vec.OpsOf(ops.Bytes()), meta.Ops)
	var vis *memory.Buffer
	if meta.Visibility != nil {
		vis = vec.NewBitmap(mem, len(meta.Ops))
		defer vis.Release()
		copy(vis.Bytes(), meta.Visibility)
	}
	return vec.NewChunk(rec, ops, vis), nil
}
