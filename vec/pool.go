package vec

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// PoolAllocator is a memory.Allocator for hot paths: freed buffers go back to free
// lists by power-of-two size class and are handed out again, so a pipeline that builds
// and releases batches of the same shape allocates nothing in steady state. Buffers are
// 64-byte aligned and zeroed on Allocate, as memory.GoAllocator's are (Uninit gives an
// allocator over the same lists that skips the zeroing); those of 32 KiB classes and up
// are cache-coloured (see alignedMake), for a page more of heap each, which Allocated
// does not count. As memory.GoAllocator's, a buffer's capacity is its length: arrow-go's
// compute kernels write a buffer up to its capacity while tracking its length, so the
// rest of the class's room stays hidden until Reallocate or Free (which are only ever
// given this pool's own buffers) take it back. Each class keeps at most MaxPerClass
// buffers, and all of them at most MaxBytes; buffers above 64 MiB are not pooled.
// Safe for concurrent use.
type PoolAllocator struct {
	MaxPerClass int // 0: 64
	// MaxBytes caps the bytes the free lists hold in all (classes' capacities): a
	// buffer freed beyond it is left to the collector, so that a burst of large
	// buffers (a long epoch's backfill buffer) is not kept for good. 0: 64 MiB.
	MaxBytes int64
	// Poison makes Free fill each buffer with PoisonByte before it goes back to its
	// free list, for tests: code that reads a buffer after releasing it then reads
	// garbage, which a comparison against a reference catches, rather than the bytes
	// it expected (which it would find until another user took the buffer).
	Poison    bool
	mu        sync.Mutex
	free      [maxClass + 1][][]byte
	pooled    int64 // bytes in the free lists (under mu)
	allocated atomic.Int64
}

const (
	minClass  = 6  // 64 B
	maxClass  = 26 // 64 MiB
	alignment = 64
)

var _ memory.Allocator = (*PoolAllocator)(nil)

// NewPoolAllocator returns an empty pool.
func NewPoolAllocator() *PoolAllocator { return &PoolAllocator{} }

// Uninit returns an allocator over the pool's free lists that skips the zeroing: a
// buffer it hands out again (or the bytes a Reallocate grows by) may hold an earlier
// user's bytes; a new one is zero, as Go makes it. It is for buffers whose every byte
// is written before it is read, such as a VarBuilder's value bytes and offsets;
// zeroing a reused 1 MiB buffer only for a decode to overwrite it costs a pass over
// memory. Buffers go back to the same free lists (either allocator's Free takes
// them) and count in the same Allocated.
func (p *PoolAllocator) Uninit() memory.Allocator { return uninitPool{p} }

// uninitPool is PoolAllocator.Uninit's allocator (pointer-shaped: it fits an
// interface without an allocation).
type uninitPool struct{ p *PoolAllocator }

func (u uninitPool) Allocate(size int) []byte             { return u.p.allocate(size, false) }
func (u uninitPool) Reallocate(size int, b []byte) []byte { return u.p.reallocate(size, b, false) }
func (u uninitPool) Free(b []byte)                        { u.p.Free(b) }

// UninitOf is mem's Uninit allocator when it has one (a *PoolAllocator), else mem.
func UninitOf(mem memory.Allocator) memory.Allocator {
	if u, ok := mem.(interface{ Uninit() memory.Allocator }); ok {
		return u.Uninit()
	}
	return mem
}

func classOf(size int) int {
	if size <= 1<<minClass {
		return minClass
	}
	return bits.Len(uint(size - 1))
}

// Allocate returns a zeroed buffer of size bytes.
func (p *PoolAllocator) Allocate(size int) []byte { return p.allocate(size, true) }

func (p *PoolAllocator) allocate(size int, zero bool) []byte {
	if size == 0 {
		return []byte{}
	}
	p.allocated.Add(int64(size))
	c := classOf(size)
	if c > maxClass {
		return alignedMake(size, size, 0)
	}
	p.mu.Lock()
	l := p.free[c]
	if n := len(l); n > 0 {
		b := l[n-1]
		l[n-1] = nil
		p.free[c] = l[:n-1]
		p.pooled -= 1 << c
		p.mu.Unlock()
		b = b[:size:size]
		if zero {
			clear(b)
		}
		return b
	}
	p.mu.Unlock()
	return alignedMake(size, 1<<c, c)[:size:size]
}

// classBuf is b with the whole capacity of its class when it is a pooled class's
// buffer, from its header, and ok false for any other (empty, or above the largest
// class). Given a buffer this pool did not make (which breaks the allocator's
// contract), it reads the bytes before it and, all but surely, panics.
func classBuf(b []byte) (full []byte, c int, ok bool) {
	if cap(b) == 0 {
		return nil, 0, false
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	hdr := (*[headerLen]byte)(unsafe.Add(p, -headerLen))
	if binary.LittleEndian.Uint32(hdr[:4]) != headerMagic(p) {
		panic("vec: PoolAllocator given a buffer it did not allocate")
	}
	c = int(hdr[4])
	if c < minClass || c > maxClass {
		return nil, 0, false
	}
	return unsafe.Slice((*byte)(p), 1<<c), c, true
}

// headerMagic is the first word of the header of the buffer at p: a constant mixed
// with the buffer's address, so that bytes before a foreign buffer match it only by
// a one in four billion chance.
func headerMagic(p unsafe.Pointer) uint32 { return 0x5A17C0DE ^ uint32(uintptr(p)) }

// alignedMake returns a 64-byte aligned buffer. A buffer of a class of colorMin or
// more also starts at the next of 64 cache-line offsets into its page (cache
// colouring), at the cost of one more page: the heap gives such large objects
// page-aligned, and a loop writing many of them at once (a row decoder filling a
// dozen column buffers, row by row) would otherwise find every stream at the same
// offset in its page, where they contend for the same cache sets and trip the CPU's
// 4 KiB address-aliasing check. (Smaller objects come from size-class spans, which
// already spread their offsets.)
func alignedMake(size, capacity, class int) []byte {
	extra := alignment + headerLen
	color := 0
	if capacity >= colorMin {
		extra += colorPage
		color = nextColor()
	}
	buf := make([]byte, capacity+extra)
	shift := alignment - int(uintptrOf(buf)%alignment)
	if shift < headerLen {
		shift += alignment
	}
	shift += color
	hdr := buf[shift-headerLen : shift]
	binary.LittleEndian.PutUint32(hdr[:4], headerMagic(unsafe.Pointer(&buf[shift])))
	hdr[4] = byte(class)
	return buf[shift : shift+size : shift+capacity]
}

// Every buffer alignedMake makes is preceded by a header of headerLen bytes in the
// same allocation: headerMagic, then its class (0 for a buffer above the largest
// class, which is never pooled). Free and Reallocate read the class there, as the
// buffers they are given hide the class's room (see PoolAllocator), and a shrunk
// buffer's capacity no longer tells it.
const headerLen = 8

// colorPage is the page size of alignedMake's colouring; colorMin the smallest
// capacity it colours (the heap's objects of 32 KiB and more start page-aligned).
const (
	colorPage = 4096
	colorMin  = 32 << 10
)

// colors hands out alignedMake's colours in turn.
var colors atomic.Uint32

// nextColor is the next colour: a cache-line offset into a page.
func nextColor() int { return int(colors.Add(1)%(colorPage/alignment)) * alignment }

// Reallocate grows or shrinks b, keeping its contents; bytes it grows by are zero.
func (p *PoolAllocator) Reallocate(size int, b []byte) []byte { return p.reallocate(size, b, true) }

func (p *PoolAllocator) reallocate(size int, b []byte, zero bool) []byte {
	nb := b
	if full, _, ok := classBuf(b); ok {
		nb = full // the class's room, hidden from the user
	}
	if size <= cap(nb) {
		p.allocated.Add(int64(size - len(b)))
		nb = nb[:size:size]
		if zero && size > len(b) {
			// A pooled buffer's spare capacity may hold an earlier user's bytes.
			clear(nb[len(b):])
		}
		return nb
	}
	nb = p.allocate(size, zero)
	copy(nb, b)
	p.Free(b)
	return nb
}

// PoisonByte is what a PoolAllocator with Poison fills freed buffers with.
const PoisonByte = 0xA5

// Free returns b to its class's free list.
func (p *PoolAllocator) Free(b []byte) {
	p.allocated.Add(-int64(len(b)))
	full, c, ok := classBuf(b)
	if !ok {
		return
	}
	if p.Poison {
		for i := range full {
			full[i] = PoisonByte
		}
	}
	max := p.MaxPerClass
	if max == 0 {
		max = 64
	}
	maxBytes := p.MaxBytes
	if maxBytes == 0 {
		maxBytes = DefaultPoolMaxBytes
	}
	p.mu.Lock()
	if len(p.free[c]) < max && p.pooled+1<<c <= maxBytes {
		p.free[c] = append(p.free[c], full[:0])
		p.pooled += 1 << c
	}
	p.mu.Unlock()
}

// DefaultPoolMaxBytes is PoolAllocator.MaxBytes's default.
const DefaultPoolMaxBytes = 64 << 20

// Pooled is the bytes the free lists hold (classes' capacities).
func (p *PoolAllocator) Pooled() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pooled
}

// Allocated is the number of bytes handed out and not yet freed.
func (p *PoolAllocator) Allocated() int64 { return p.allocated.Load() }

// MakeColored returns an empty slice with room for n values. When it spans colorMin
// or more, its first element starts about the next of alignedMake's cache-line
// colours into its page (to the element below it): for buffers that a loop fills
// together with others, like a row decoder's per-column values.
func MakeColored[T any](n int) []T {
	var z T
	size := int(unsafe.Sizeof(z))
	if size == 0 || n < colorMin/size {
		return make([]T, 0, n)
	}
	skew := nextColor() / size
	return make([]T, skew, skew+n)[skew:]
}
