package vnode

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/RoaringBitmap/roaring/v2"
)

// BitmapVersion is the format version byte of a marshaled Bitmap.
const BitmapVersion byte = 1

// bitmapHeaderLen is the version byte plus the big-endian uint32 vnode count.
const bitmapHeaderLen = 5

// Constants of the roaring portable format (github.com/RoaringBitmap/RoaringFormatSpec)
// that UnmarshalBitmap checks before letting roaring read a payload.
const (
	roaringCookieNoRuns  = 12346 // uint32: only array and bitmap containers
	roaringCookieRuns    = 12347 // low 16 bits; the high 16 bits are containers-1
	roaringArrayMax      = 4096  // containers with more members are bitmaps
	roaringBitmapBytes   = 8192  // a bitmap container: 65536 bits
	roaringMaxContainers = 1     // vnodes < MaxCount <= 65536 all have key 0
	roaringMaxRuns       = (roaringBitmapBytes - 2) / 4
)

// MarshalBinary encodes the bitmap:
//
//	version (1 byte, BitmapVersion) | vnode count (uint32 big-endian)
//	| the members in the roaring portable format, run-optimized
//
// It does not modify b (a bitmap changed by Add since it was built is optimized in a
// private clone), so it is safe on a shared bitmap.
func (b *Bitmap) MarshalBinary() ([]byte, error) {
	rb := b.rb
	if !b.optimized {
		rb = rb.Clone()
		rb.RunOptimize()
	}
	payload, err := rb.ToBytes()
	if err != nil {
		return nil, fmt.Errorf("vnode bitmap over %d vnodes: %w", b.count, err)
	}
	out := make([]byte, bitmapHeaderLen, bitmapHeaderLen+len(payload))
	out[0] = BitmapVersion
	binary.BigEndian.PutUint32(out[1:], uint32(b.count))
	return append(out, payload...), nil
}

// UnmarshalBitmap decodes a bitmap written by MarshalBinary. It copies what it keeps
// (the result never aliases data) and returns an error, never a panic, for any input
// that is not a well-formed bitmap: unknown version, vnode count out of 1..MaxCount,
// a malformed or truncated roaring payload, trailing bytes, or a member >= the count.
func UnmarshalBitmap(data []byte) (*Bitmap, error) {
	if len(data) < bitmapHeaderLen {
		return nil, fmt.Errorf("vnode bitmap: %d bytes, shorter than the %d-byte header", len(data), bitmapHeaderLen)
	}
	if data[0] != BitmapVersion {
		return nil, fmt.Errorf("vnode bitmap: unknown format version %d (want %d)", data[0], BitmapVersion)
	}
	declared := binary.BigEndian.Uint32(data[1:])
	if declared < 1 || declared > MaxCount {
		return nil, fmt.Errorf("vnode bitmap: vnode count %d out of range 1..%d", declared, MaxCount)
	}
	count := int(declared)
	payload := data[bitmapHeaderLen:]
	card, err := checkRoaring(payload, count)
	if err != nil {
		return nil, fmt.Errorf("vnode bitmap over %d vnodes: %w", count, err)
	}
	rb, err := readRoaring(bytes.Clone(payload))
	if err != nil {
		return nil, fmt.Errorf("vnode bitmap over %d vnodes: %w", count, err)
	}
	// checkRoaring has vetted the structure; these hold unless it and roaring disagree.
	if got := rb.GetCardinality(); got != uint64(card) {
		return nil, fmt.Errorf("vnode bitmap over %d vnodes: decoded %d members, header says %d", count, got, card)
	}
	if card > 0 && int(rb.Maximum()) >= count {
		return nil, fmt.Errorf("vnode bitmap over %d vnodes: vnode %d out of range", count, rb.Maximum())
	}
	return wrap(rb, count), nil
}

// readRoaring lets roaring parse a payload that checkRoaring accepted. roaring's
// readers trust their input; the recover is a second line of defence should a future
// version panic where checkRoaring's model of the format falls short.
func readRoaring(payload []byte) (rb *roaring.Bitmap, err error) {
	defer func() {
		if r := recover(); r != nil {
			rb, err = nil, fmt.Errorf("malformed roaring payload: %v", r)
		}
	}()
	rb = roaring.New()
	n, err := rb.ReadFrom(bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("malformed roaring payload: %w", err)
	}
	if n != int64(len(payload)) {
		return nil, fmt.Errorf("malformed roaring payload: %d trailing bytes", int64(len(payload))-n)
	}
	if err := rb.Validate(); err != nil {
		return nil, fmt.Errorf("malformed roaring payload: %w", err)
	}
	return rb, nil
}

// checkRoaring walks a roaring payload that may hold vnodes below count: at most one
// container (key 0), every length in bounds, members sorted, unique and below count,
// cardinalities consistent, no trailing bytes. It returns the number of members. It
// reads only within p and allocates nothing, so roaring is never handed a payload whose
// lengths it would have to trust.
func checkRoaring(p []byte, count int) (int, error) {
	if len(p) < 4 {
		return 0, fmt.Errorf("roaring payload of %d bytes has no cookie", len(p))
	}
	cookie := binary.LittleEndian.Uint32(p)
	var containers int
	var isRun bool
	pos := 4
	switch {
	case cookie == roaringCookieNoRuns:
		if len(p) < 8 {
			return 0, fmt.Errorf("roaring payload truncated in the container count")
		}
		n := binary.LittleEndian.Uint32(p[4:])
		if n > roaringMaxContainers {
			return 0, fmt.Errorf("roaring payload has %d containers, want at most %d", n, roaringMaxContainers)
		}
		containers = int(n)
		pos = 8
	case cookie&0xFFFF == roaringCookieRuns:
		containers = int(cookie>>16) + 1
		if containers > roaringMaxContainers {
			return 0, fmt.Errorf("roaring payload has %d containers, want at most %d", containers, roaringMaxContainers)
		}
		// One is-run byte; bits above the containers must be clear.
		if len(p) < pos+1 {
			return 0, fmt.Errorf("roaring payload truncated in the run flags")
		}
		if p[pos]&^1 != 0 {
			return 0, fmt.Errorf("roaring payload: bad run flags 0x%02x", p[pos])
		}
		isRun = p[pos]&1 != 0
		pos++
	default:
		return 0, fmt.Errorf("roaring payload: unknown cookie 0x%08x", cookie)
	}
	if containers == 0 {
		if pos != len(p) {
			return 0, fmt.Errorf("empty roaring payload followed by %d bytes", len(p)-pos)
		}
		return 0, nil
	}
	// Descriptive header: key, cardinality-1.
	if len(p) < pos+4 {
		return 0, fmt.Errorf("roaring payload truncated in the container header")
	}
	key := binary.LittleEndian.Uint16(p[pos:])
	card := int(binary.LittleEndian.Uint16(p[pos+2:])) + 1
	pos += 4
	if key != 0 {
		return 0, fmt.Errorf("roaring container key %d: vnodes below %d have key 0", key, count)
	}
	if card > count {
		return 0, fmt.Errorf("roaring container of %d members over %d vnodes", card, count)
	}
	if cookie == roaringCookieNoRuns {
		// Offset header: the container starts right after it.
		if len(p) < pos+4 {
			return 0, fmt.Errorf("roaring payload truncated in the offset header")
		}
		if off := binary.LittleEndian.Uint32(p[pos:]); off != uint32(pos+4) {
			return 0, fmt.Errorf("roaring container offset %d, want %d", off, pos+4)
		}
		pos += 4
	}
	body := p[pos:]
	var size int
	var err error
	switch {
	case isRun:
		size, err = checkRuns(body, card, count)
	case card > roaringArrayMax:
		size, err = checkBitmapContainer(body, card, count)
	default:
		size, err = checkArray(body, card, count)
	}
	if err != nil {
		return 0, err
	}
	if size != len(body) {
		return 0, fmt.Errorf("roaring payload followed by %d bytes", len(body)-size)
	}
	return card, nil
}

func checkRuns(body []byte, card, count int) (int, error) {
	if len(body) < 2 {
		return 0, fmt.Errorf("roaring run container truncated in its run count")
	}
	nr := int(binary.LittleEndian.Uint16(body))
	if nr == 0 {
		return 0, fmt.Errorf("roaring run container with no runs")
	}
	// RunOptimize never keeps a run container larger than a bitmap container, and the
	// bound keeps roaring's quadratic run validation cheap.
	if nr > roaringMaxRuns {
		return 0, fmt.Errorf("roaring run container of %d runs, want at most %d", nr, roaringMaxRuns)
	}
	size := 2 + 4*nr
	if len(body) < size {
		return 0, fmt.Errorf("roaring run container of %d runs truncated (%d bytes)", nr, len(body))
	}
	total, next := 0, 0 // next: the smallest start the following run may have
	for i := range nr {
		start := int(binary.LittleEndian.Uint16(body[2+4*i:]))
		last := start + int(binary.LittleEndian.Uint16(body[4+4*i:]))
		if start < next {
			return 0, fmt.Errorf("roaring run %d at %d overlaps or touches the run before it", i, start)
		}
		if last >= count {
			return 0, fmt.Errorf("vnode %d out of range 0..%d", last, count-1)
		}
		total += last - start + 1
		next = last + 2
	}
	if total != card {
		return 0, fmt.Errorf("roaring run container holds %d members, header says %d", total, card)
	}
	return size, nil
}

func checkArray(body []byte, card, count int) (int, error) {
	size := 2 * card
	if len(body) < size {
		return 0, fmt.Errorf("roaring array container of %d members truncated (%d bytes)", card, len(body))
	}
	prev := -1
	for i := range card {
		v := int(binary.LittleEndian.Uint16(body[2*i:]))
		if v <= prev {
			return 0, fmt.Errorf("roaring array container not strictly increasing at member %d", i)
		}
		if v >= count {
			return 0, fmt.Errorf("vnode %d out of range 0..%d", v, count-1)
		}
		prev = v
	}
	return size, nil
}

func checkBitmapContainer(body []byte, card, count int) (int, error) {
	if len(body) < roaringBitmapBytes {
		return 0, fmt.Errorf("roaring bitmap container truncated (%d bytes)", len(body))
	}
	n := 0
	for i := 0; i < roaringBitmapBytes; i += 8 {
		w := binary.LittleEndian.Uint64(body[i:])
		if w == 0 {
			continue
		}
		if hi := i*8 + 63 - bits.LeadingZeros64(w); hi >= count {
			return 0, fmt.Errorf("vnode %d out of range 0..%d", hi, count-1)
		}
		n += bits.OnesCount64(w)
	}
	if n != card {
		return 0, fmt.Errorf("roaring bitmap container holds %d members, header says %d", n, card)
	}
	return roaringBitmapBytes, nil
}
