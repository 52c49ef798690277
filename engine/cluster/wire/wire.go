package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
)

// Version is the format version, the first byte of every message's metadata. A change
// to any encoding of this package bumps it.
const Version byte = 2

// HeaderLen is the length of the header every message's metadata starts with: the
// version byte and the kind byte.
const HeaderLen = 2

// Kind is the second byte of a message's metadata: what the message is.
type Kind byte

// The kinds. Chunk, Barrier and Watermark carry an executors.Message; End and Ack are
// the exchange's own control messages.
const (
	// KindChunk: a chunk's ops and visibility; its columns are the Arrow IPC record of
	// the same Flight message.
	KindChunk Kind = 1
	// KindBarrier: a barrier with its mutation.
	KindBarrier Kind = 2
	// KindWatermark: a watermark.
	KindWatermark Kind = 3
	// KindEnd: the sender closed the edge; nothing follows.
	KindEnd Kind = 4
	// KindAck: the receiver has accepted the barrier of an epoch (receiver to sender).
	KindAck Kind = 5
)

func (k Kind) String() string {
	switch k {
	case KindChunk:
		return "chunk"
	case KindBarrier:
		return "barrier"
	case KindWatermark:
		return "watermark"
	case KindEnd:
		return "end"
	case KindAck:
		return "ack"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

func appendHeader(dst []byte, k Kind) []byte { return append(dst, Version, byte(k)) }

// ReadHeader returns the kind of the message whose metadata is md and the bytes after
// the header. It fails on empty or one-byte metadata, on a version other than Version
// and on an unknown kind, naming the byte it did not know.
func ReadHeader(md []byte) (Kind, []byte, error) {
	if len(md) < HeaderLen {
		return 0, nil, fmt.Errorf("wire: metadata of %d bytes, shorter than the %d-byte header", len(md), HeaderLen)
	}
	if md[0] != Version {
		return 0, nil, fmt.Errorf("wire: unknown format version %d (want %d)", md[0], Version)
	}
	k := Kind(md[1])
	if k < KindChunk || k > KindAck {
		return 0, nil, fmt.Errorf("wire: unknown message kind %d", md[1])
	}
	return k, md[HeaderLen:], nil
}

func expect(md []byte, want Kind) ([]byte, error) {
	k, body, err := ReadHeader(md)
	if err != nil {
		return nil, err
	}
	if k != want {
		return nil, fmt.Errorf("wire: %s message where a %s was expected", k, want)
	}
	return body, nil
}

// AppendMessage appends the metadata of m to dst. A chunk's columns travel apart, as
// the Arrow IPC record m.Chunk.Record(); a barrier or a watermark has no record. It
// fails on a message that sets none or more than one of its fields, and on what
// AppendBarrier and AppendWatermark refuse.
func AppendMessage(dst []byte, m executors.Message) ([]byte, error) {
	n := 0
	for _, set := range []bool{m.Chunk != nil, m.Barrier != nil, m.Watermark != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return dst, fmt.Errorf("wire: a message sets %d of chunk, barrier and watermark, want exactly 1", n)
	}
	switch {
	case m.Chunk != nil:
		return AppendChunkMeta(dst, m.Chunk), nil
	case m.Barrier != nil:
		return AppendBarrier(dst, m.Barrier)
	}
	return AppendWatermark(dst, m.Watermark)
}

// DecodeMessage decodes a message from its metadata and its record (nil when the Flight
// message had none). A chunk's buffers for ops and visibility come from mem; the chunk
// retains rec. A barrier or a watermark may come with a record of 0 rows, never with
// rows. End and Ack are not messages: DecodeMessage refuses them.
func DecodeMessage(mem memory.Allocator, md []byte, rec arrow.RecordBatch) (executors.Message, error) {
	k, _, err := ReadHeader(md)
	if err != nil {
		return executors.Message{}, err
	}
	if k != KindChunk && rec != nil && rec.NumRows() != 0 {
		return executors.Message{}, fmt.Errorf("wire: %s message comes with a record of %d rows", k, rec.NumRows())
	}
	switch k {
	case KindChunk:
		c, err := DecodeChunk(mem, md, rec)
		return executors.Message{Chunk: c}, err
	case KindBarrier:
		b, err := DecodeBarrier(md)
		return executors.Message{Barrier: b}, err
	case KindWatermark:
		w, err := DecodeWatermark(md)
		return executors.Message{Watermark: w}, err
	}
	return executors.Message{}, fmt.Errorf("wire: %s is a control message, not an executor message", k)
}

// AppendWatermark appends the metadata of a watermark:
//
//	header | column (uvarint) | value (zigzag varint)
//
// It fails on a negative column.
func AppendWatermark(dst []byte, w *executors.Watermark) ([]byte, error) {
	if w.Column < 0 || w.Column > math.MaxInt32 {
		return dst, fmt.Errorf("wire: watermark on column %d: out of range 0..%d", w.Column, math.MaxInt32)
	}
	dst = appendHeader(dst, KindWatermark)
	dst = binary.AppendUvarint(dst, uint64(w.Column))
	return binary.AppendVarint(dst, w.Value), nil
}

// DecodeWatermark decodes what AppendWatermark wrote.
func DecodeWatermark(md []byte) (*executors.Watermark, error) {
	body, err := expect(md, KindWatermark)
	if err != nil {
		return nil, err
	}
	r := Reader{b: body}
	col := r.Uvarint("column", math.MaxInt32)
	val := r.Varint("value")
	if err := r.Finish(); err != nil {
		return nil, fmt.Errorf("wire: watermark: %w", err)
	}
	return &executors.Watermark{Column: int(col), Value: val}, nil
}

// AppendEnd appends the metadata of an End: the header alone.
func AppendEnd(dst []byte) []byte { return appendHeader(dst, KindEnd) }

// DecodeEnd checks that md is an End.
func DecodeEnd(md []byte) error {
	body, err := expect(md, KindEnd)
	if err != nil {
		return err
	}
	if len(body) != 0 {
		return fmt.Errorf("wire: end: %d trailing bytes", len(body))
	}
	return nil
}

// AppendAck appends the metadata of an Ack of the barrier that starts epoch curr:
//
//	header | curr (uint64 big-endian)
func AppendAck(dst []byte, curr executors.Epoch) []byte {
	return binary.BigEndian.AppendUint64(appendHeader(dst, KindAck), uint64(curr))
}

// DecodeAck decodes what AppendAck wrote.
func DecodeAck(md []byte) (executors.Epoch, error) {
	body, err := expect(md, KindAck)
	if err != nil {
		return 0, err
	}
	r := Reader{b: body}
	e := r.U64("epoch")
	if err := r.Finish(); err != nil {
		return 0, fmt.Errorf("wire: ack: %w", err)
	}
	return executors.Epoch(e), nil
}

// Reader decodes fields from the front of a byte string, for this package's decoders
// and the control stream's (engine/cluster/control). The first failure sticks: later
// reads return zero values, and Err names the field that failed. Integers are
// canonical: only the minimal varint encoding of a value is accepted.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads b (aliasing it).
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err is the first failure, or nil.
func (r *Reader) Err() error { return r.err }

// Len is the number of bytes not yet read.
func (r *Reader) Len() int { return len(r.b) }

// Rest returns the bytes not yet read (aliasing the input) and consumes them; nil
// after a failure.
func (r *Reader) Rest() []byte {
	if r.err != nil {
		return nil
	}
	v := r.b
	r.b = nil
	return v
}

// Prefixed reads a byte string prefixed by its length as a uvarint, aliasing the
// input; an empty one is nil. The length is checked against what is left before
// anything is taken.
func (r *Reader) Prefixed(field string) []byte {
	n := r.Uvarint(field, uint64(len(r.b)))
	if r.err != nil || n == 0 {
		return nil
	}
	return r.Bytes(field, int(n))
}

// Fail records a failure of field, unless one is recorded already.
func (r *Reader) Fail(field, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
	}
}

// Finish reports the first failure, or trailing bytes.
func (r *Reader) Finish() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	return r.err
}

// Byte reads one byte.
func (r *Reader) Byte(field string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.Fail(field, "truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// Flag reads a byte that must be 0 or 1.
func (r *Reader) Flag(field string) bool {
	v := r.Byte(field)
	if v > 1 {
		r.Fail(field, "flag byte %d, want 0 or 1", v)
	}
	return v == 1
}

// U64 reads a big-endian uint64.
func (r *Reader) U64(field string) uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 8 {
		r.Fail(field, "truncated")
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// Uvarint reads an unsigned varint no greater than max. Only the minimal encoding of a
// value is accepted (the encoding is canonical: one value, one byte string).
func (r *Reader) Uvarint(field string, max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || (n > 1 && r.b[n-1] == 0) {
		r.Fail(field, "truncated, overlong or non-minimal varint")
		return 0
	}
	r.b = r.b[n:]
	if v > max {
		r.Fail(field, "%d out of range 0..%d", v, max)
		return 0
	}
	return v
}

// Varint reads a signed varint, minimal encoding only.
func (r *Reader) Varint(field string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 || (n > 1 && r.b[n-1] == 0) {
		r.Fail(field, "truncated, overlong or non-minimal varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Count reads a list length whose elements take at least minLen bytes each, so that
// a length larger than the rest of the input can afford is refused before anything is
// allocated for it.
func (r *Reader) Count(field string, minLen int) int {
	n := r.Uvarint(field, uint64(len(r.b)/minLen))
	return int(n)
}

// Bytes returns the next n bytes (aliasing the input).
func (r *Reader) Bytes(field string, n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.Fail(field, "%d bytes, %d left", n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}
