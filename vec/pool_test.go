package vec_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

func TestPoolReuse(t *testing.T) {
	p := vec.NewPoolAllocator()
	a := p.Allocate(100)
	if len(a) != 100 || cap(a) != 100 {
		t.Fatalf("Allocate(100): len %d cap %d, want both 100 (as memory.GoAllocator's)", len(a), cap(a))
	}
	for i := range a {
		a[i] = 0xAA
	}
	p.Free(a)
	b := p.Allocate(120) // same class
	if addr(b) != addr(a) {
		t.Fatal("a freed buffer of the class was not reused")
	}
	if len(b) != 120 || !allZero(b) {
		t.Fatal("a reused buffer is not zeroed")
	}
	c := p.Allocate(120) // the free list is empty again: a new buffer
	if addr(c) == addr(b) {
		t.Fatal("one buffer handed out twice")
	}
	d := p.Allocate(1000) // another class does not take it
	p.Free(b)
	p.Free(c)
	p.Free(d)
	e := p.Allocate(40) // 64-byte class: nothing freed there
	if addr(e) == addr(b) || addr(e) == addr(c) {
		t.Fatal("a buffer of the 128-byte class was handed out for 40 bytes")
	}
	p.Free(e)
	if n := p.Allocated(); n != 0 {
		t.Fatalf("Allocated() = %d after freeing everything", n)
	}
	if z := p.Allocate(0); len(z) != 0 {
		t.Fatalf("Allocate(0) has %d bytes", len(z))
	}
}

// TestPoolReallocateZeroes checks that growing a buffer inside its class's capacity
// exposes zeros, as growing a memory.GoAllocator buffer does, even when the pooled
// buffer held data before.
func TestPoolReallocateZeroes(t *testing.T) {
	p := vec.NewPoolAllocator()
	a := p.Allocate(128)
	for i := range a {
		a[i] = 0xAA
	}
	p.Free(a)
	b := p.Allocate(10)
	b = p.Reallocate(70, b) // 64-byte class -> 128-byte class: copied
	if !allZero(b) {
		t.Fatal("Reallocate into a reused class exposed old bytes")
	}
	b = p.Reallocate(128, b) // inside the capacity
	if len(b) != 128 || !allZero(b) {
		t.Fatalf("Reallocate within the capacity exposed old bytes: %x", b)
	}
	b = p.Reallocate(20, b) // shrink keeps the contents
	b[19] = 7
	b = p.Reallocate(100, b)
	if b[19] != 7 || !allZero(b[20:]) {
		t.Fatalf("shrink then grow: %x", b)
	}
	if n := p.Allocated(); n != 100 {
		t.Fatalf("Allocated() = %d, want 100", n)
	}
	p.Free(b)
	if n := p.Allocated(); n != 0 {
		t.Fatalf("Allocated() = %d after Free", n)
	}
}

func TestPoolAlignment(t *testing.T) {
	p := vec.NewPoolAllocator()
	var bufs [][]byte
	for _, size := range []int{1, 7, 63, 64, 65, 100, 4095, 4096, 4097, 1 << 20} {
		for k := 0; k < 3; k++ {
			b := p.Allocate(size)
			if addr(b)%64 != 0 {
				t.Fatalf("Allocate(%d) at %#x: not 64-byte aligned", size, addr(b))
			}
			bufs = append(bufs, b)
		}
	}
	for _, b := range bufs {
		p.Free(b)
	}
	for _, size := range []int{1, 100, 4097} { // reused buffers too
		if b := p.Allocate(size); addr(b)%64 != 0 {
			t.Fatalf("reused Allocate(%d) at %#x: not 64-byte aligned", size, addr(b))
		} else {
			p.Free(b)
		}
	}
	big := p.Allocate(64<<20 + 1) // above the largest class: not pooled
	if addr(big)%64 != 0 || len(big) != 64<<20+1 {
		t.Fatal("large allocation")
	}
	p.Free(big)
	if again := p.Allocate(64<<20 + 1); addr(again) == addr(big) {
		t.Fatal("a buffer above the largest class was pooled")
	} else {
		p.Free(again)
	}
	if n := p.Allocated(); n != 0 {
		t.Fatalf("Allocated() = %d", n)
	}
}

func TestPoolMaxPerClass(t *testing.T) {
	p := &vec.PoolAllocator{MaxPerClass: 2}
	var bufs [][]byte
	for i := 0; i < 5; i++ {
		bufs = append(bufs, p.Allocate(200))
	}
	for _, b := range bufs {
		p.Free(b)
	}
	old := map[uintptr]bool{}
	for _, b := range bufs {
		old[addr(b)] = true
	}
	reused := 0
	for i := 0; i < 5; i++ {
		if b := p.Allocate(200); old[addr(b)] {
			reused++
		}
	}
	if reused != 2 {
		t.Fatalf("%d buffers reused, want MaxPerClass = 2", reused)
	}
	// A buffer that did not come from the pool breaks the allocator's contract: Free
	// panics rather than pool memory of unknown size (here the eight bytes before the
	// buffer, where a pool's header would be, are in the same allocation).
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "did not allocate") {
			t.Fatalf("Free of a foreign buffer: recovered %v", r)
		}
	}()
	p.Free(make([]byte, 108)[8:])
}

// TestPoolConcurrent hammers one pool from many goroutines (run it with -race): no
// buffer is handed out twice at once, and the accounting ends at zero.
func TestPoolConcurrent(t *testing.T) {
	p := &vec.PoolAllocator{MaxPerClass: 4}
	seed := vectest.Seed(t)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := vectest.NewRand(seed + uint64(g))
			var held [][]byte
			for i := 0; i < 2000; i++ {
				if len(held) > 0 && rng.IntN(2) == 0 {
					k := rng.IntN(len(held))
					b := held[k]
					for _, x := range b {
						if x != byte(g+1) {
							errs <- "a held buffer was overwritten by another goroutine"
							return
						}
					}
					if rng.IntN(4) == 0 {
						b = p.Reallocate(1+rng.IntN(3000), b)
						for j := range b {
							b[j] = byte(g + 1)
						}
						held[k] = b
						continue
					}
					p.Free(b)
					held = append(held[:k], held[k+1:]...)
					continue
				}
				b := p.Allocate(1 + rng.IntN(3000))
				if !allZero(b) {
					errs <- "Allocate returned dirty memory"
					return
				}
				for j := range b {
					b[j] = byte(g + 1)
				}
				held = append(held, b)
			}
			for _, b := range held {
				p.Free(b)
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("seed=%d: %s", seed, e)
	}
	if n := p.Allocated(); n != 0 {
		t.Fatalf("seed=%d: Allocated() = %d after every buffer was freed", seed, n)
	}
}

// TestPoolWithArrow builds, encodes, decodes and releases chunks through a checked
// allocator over the pool, twice, and checks that nothing leaks and that the second
// pass reuses the pool's buffers.
func TestPoolWithArrow(t *testing.T) {
	pool := vec.NewPoolAllocator()
	mem := memory.NewCheckedAllocator(pool)
	defer mem.AssertSize(t, 0)
	rng, seed := vectest.Rand(t)
	tab := vectest.RandomTable(rng, "t")
	g := vec.NewGeneric(tab)
	var vals, keys vec.Bytes
	for pass := 0; pass < 3; pass++ {
		for it := 0; it < 20; it++ {
			c := vectest.RandomChunk(rng, mem, tab, 500, 0.2)
			vals.Reset()
			keys.Reset()
			g.EncodeValues(c, &vals)
			g.EncodeKeys(c, &keys)
			rec, err := decodeValues(mem, g, &vals, vectest.AllColumns(tab))
			if err != nil {
				t.Fatalf("seed=%d: %v", seed, err)
			}
			if err := vectest.RecordsEqual(c.Record(), rec); err != nil {
				t.Fatalf("seed=%d: %v", seed, err)
			}
			krec, err := decodeKeys(mem, g, &keys)
			if err != nil {
				t.Fatalf("seed=%d: %v", seed, err)
			}
			rec.Release()
			krec.Release()
			c.Release()
		}
		if n := pool.Allocated(); n != 0 {
			t.Fatalf("seed=%d pass %d: pool has %d bytes allocated after every release", seed, pass, n)
		}
	}
}

// TestPoolColors checks alignedMake's colouring: buffers of a page or more start at
// varied cache-line offsets into their pages (so that loops writing many at once do
// not find them all at one offset), still 64-byte aligned and of their class's exact
// capacity, which Free relies on; smaller ones are only aligned. MakeColored does the
// same for plain slices.
func TestPoolColors(t *testing.T) {
	p := vec.NewPoolAllocator()
	offsets := map[uintptr]bool{}
	for i := 0; i < 16; i++ {
		b := p.Allocate(32 << 10)
		if addr(b)%64 != 0 || cap(b) != 32<<10 || len(b) != 32<<10 || !allZero(b) {
			t.Fatalf("buffer %d: address %#x, len %d, cap %d", i, addr(b), len(b), cap(b))
		}
		offsets[addr(b)%4096] = true
		defer p.Free(b)
	}
	if len(offsets) < 8 {
		t.Errorf("16 buffers of 32 KiB start at %d offsets into their pages, want at least 8", len(offsets))
	}
	for i := 0; i < 4; i++ {
		if b := p.Allocate(100); addr(b)%64 != 0 || cap(b) != 100 {
			t.Fatalf("small buffer: address %#x, cap %d", addr(b), cap(b))
		}
	}
	offsets = map[uintptr]bool{}
	for i := 0; i < 16; i++ {
		s := vec.MakeColored[int64](4096)
		if len(s) != 0 || cap(s) != 4096 {
			t.Fatalf("MakeColored: len %d cap %d", len(s), cap(s))
		}
		s = append(s, 1)
		a := uintptr(unsafe.Pointer(&s[0]))
		if a%8 != 0 {
			t.Fatalf("MakeColored: address %#x not aligned", a)
		}
		offsets[a%4096] = true
	}
	if len(offsets) < 8 {
		t.Errorf("16 MakeColored slices of 32 KiB start at %d offsets into their pages, want at least 8", len(offsets))
	}
	if s := vec.MakeColored[int64](10); len(s) != 0 || cap(s) != 10 {
		t.Fatalf("small MakeColored: len %d cap %d", len(s), cap(s))
	}
}

// TestPoolUninit checks the pool's Uninit allocator: it hands out the same free
// buffers without zeroing them, counts in the same Allocated, and its buffers go
// back to the free lists; a zeroing Allocate after it still gives zeros.
func TestPoolUninit(t *testing.T) {
	p := vec.NewPoolAllocator()
	a := p.Allocate(128)
	for i := range a {
		a[i] = 0xAA
	}
	p.Free(a)
	u := vec.UninitOf(p)
	b := u.Allocate(100)
	if len(b) != 100 || cap(b) != 100 || &b[0] != &a[0] {
		t.Fatalf("Uninit().Allocate(100): len %d cap %d, reused %v; want the freed 128-byte buffer, as 100 bytes", len(b), cap(b), &b[0] == &a[0])
	}
	if b[0] != 0xAA {
		t.Fatalf("Uninit().Allocate zeroed the reused buffer (b[0] = %#x)", b[0])
	}
	b = u.Reallocate(120, b) // inside the capacity: the old bytes stay
	if b[110] != 0xAA {
		t.Fatalf("Uninit().Reallocate zeroed the bytes it grew by (b[110] = %#x)", b[110])
	}
	if n := p.Allocated(); n != 120 {
		t.Fatalf("Allocated() = %d, want 120", n)
	}
	u.Free(b)
	if n := p.Allocated(); n != 0 {
		t.Fatalf("Allocated() = %d after Free, want 0", n)
	}
	if c := p.Allocate(128); &c[0] != &a[0] || !allZero(c) {
		t.Fatalf("Allocate after an Uninit buffer's Free: reused %v, zero %v; want both", &c[0] == &a[0], allZero(c))
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = vec.UninitOf(p) }); allocs != 0 {
		t.Fatalf("UninitOf allocates %v times", allocs)
	}
	g := memory.NewGoAllocator()
	if vec.UninitOf(g) != memory.Allocator(g) {
		t.Fatal("UninitOf of an allocator without Uninit is not that allocator")
	}
}

// TestPoolPoison checks that a poisoning pool fills a freed buffer, to its capacity
// and also when the class's list is full (the buffer is dropped, but a reader that
// kept it must not find its old bytes), and that a buffer handed out again is zeroed
// by Allocate and left poisoned by the Uninit allocator.
func TestPoolPoison(t *testing.T) {
	p := &vec.PoolAllocator{Poison: true, MaxPerClass: 1}
	poisoned := func(b []byte) bool {
		for _, x := range b[:cap(b)] {
			if x != vec.PoisonByte {
				return false
			}
		}
		return true
	}
	a, b := p.Allocate(100), p.Allocate(100)
	for i := range a {
		a[i], b[i] = 1, 2
	}
	p.Free(a)
	p.Free(b) // the list holds a: b is dropped
	if !poisoned(a) || !poisoned(b) {
		t.Fatalf("freed buffers not poisoned: % x / % x", a[:8], b[:8])
	}
	u := p.Uninit().Allocate(100)
	if addr(u) != addr(a) || !poisoned(u) {
		t.Fatal("the Uninit allocator did not hand out the freed buffer as it was")
	}
	p.Free(u)
	if z := p.Allocate(100); addr(z) != addr(a) || !allZero(z) {
		t.Fatal("Allocate did not zero a poisoned buffer it handed out again")
	}
	q := vec.NewPoolAllocator()
	c := q.Allocate(64)
	c[0] = 7
	q.Free(c)
	if c[0] != 7 {
		t.Fatal("a pool without Poison wrote into a freed buffer")
	}
}

// TestPoolCapacityHidden checks that a buffer's capacity is its length through
// Allocate, growing and shrinking Reallocates, and reuse: arrow-go's compute kernels
// write up to a buffer's capacity while tracking its length, and a Take of strings
// over a pool that showed its class's room panicked. A grow inside the class keeps
// the buffer (and zeroes what it grows by); a shrunk buffer (as arrow's builders
// leave theirs) goes back to the class it was made for, where the next buffer of its
// first size is looked for.
func TestPoolCapacityHidden(t *testing.T) {
	p := vec.NewPoolAllocator()
	a := p.Allocate(100)
	for i := range a {
		a[i] = 1
	}
	b := p.Reallocate(120, a) // inside the 128-byte class
	if addr(b) != addr(a) || len(b) != 120 || cap(b) != 120 || b[99] != 1 || !allZero(b[100:]) {
		t.Fatalf("Reallocate(120): moved %v, len %d cap %d, kept %d, grown zero %v", addr(b) != addr(a), len(b), cap(b), b[99], allZero(b[100:]))
	}
	c := p.Reallocate(129, b) // past the class: a new buffer
	if addr(c) == addr(b) || len(c) != 129 || cap(c) != 129 || c[99] != 1 {
		t.Fatalf("Reallocate(129): moved %v, len %d cap %d", addr(c) != addr(b), len(c), cap(c))
	}
	if r := p.Allocate(128); addr(r) != addr(a) { // b went back to its class
		t.Fatal("the buffer Reallocate left was not freed to its class")
	}
	d := p.Reallocate(60, c) // shrink: 60 bytes of the 256-byte buffer
	if addr(d) != addr(c) || len(d) != 60 || cap(d) != 60 {
		t.Fatalf("Reallocate(60): moved %v, len %d cap %d", addr(d) != addr(c), len(d), cap(d))
	}
	p.Free(d)
	if e := p.Allocate(64); addr(e) == addr(c) {
		t.Fatal("a shrunk buffer was freed to the class of its new size")
	}
	if e := p.Allocate(200); addr(e) != addr(c) || cap(e) != 200 {
		t.Fatal("a shrunk buffer was not freed to the class it was made for")
	}
}

// TestPoolArrowTake runs arrow-go's Take over strings allocated from the pool, as the
// hash join does. Its kernel sizes the output's bytes by the input's mean length and
// then trusts the buffer's capacity: with a pool that showed its class's room (a
// 192-byte reservation in a 256-byte class) it wrote past the buffer's length,
// dropping bytes and then panicking. Here one value in fifty is long and the take
// picks long values.
func TestPoolArrowTake(t *testing.T) {
	p := vec.NewPoolAllocator()
	mem := memory.NewCheckedAllocator(p)
	defer mem.AssertSize(t, 0)
	ctx := compute.WithAllocator(context.Background(), mem)
	value := func(i int) string {
		if i%50 == 0 {
			return strings.Repeat(string(rune('a'+i/50)), 100)
		}
		return ""
	}
	sb := array.NewStringBuilder(mem)
	defer sb.Release()
	for i := 0; i < 300; i++ {
		sb.Append(value(i))
	}
	src := sb.NewStringArray()
	defer src.Release()
	for n := 1; n < 200; n++ {
		ib := array.NewInt64Builder(mem)
		for i := 0; i < n; i++ {
			ib.Append(int64(i % 6 * 50))
		}
		idx := ib.NewArray()
		ib.Release()
		out, err := compute.TakeArray(ctx, src, idx)
		idx.Release()
		if err != nil {
			t.Fatal(err)
		}
		s := out.(*array.String)
		for i := 0; i < n; i++ {
			if want := value(i % 6 * 50); s.Value(i) != want {
				t.Fatalf("take of %d: value %d is %q, want %q", n, i, s.Value(i), want)
			}
		}
		out.Release()
	}
}

// TestPoolMaxBytes checks the cap on the bytes the free lists hold: buffers freed
// beyond it are dropped, Pooled counts classes' capacities, and taking a buffer
// back out makes room again.
func TestPoolMaxBytes(t *testing.T) {
	p := &vec.PoolAllocator{MaxBytes: 300}
	var bufs [][]byte
	for i := 0; i < 3; i++ {
		bufs = append(bufs, p.Allocate(100)) // 128-byte class
	}
	for _, b := range bufs {
		p.Free(b)
	}
	if n := p.Pooled(); n != 256 {
		t.Fatalf("Pooled() = %d after freeing three 128-byte buffers under a 300-byte cap, want 256", n)
	}
	b := p.Allocate(128)
	if n := p.Pooled(); n != 128 {
		t.Fatalf("Pooled() = %d after taking one back, want 128", n)
	}
	p.Free(b)
	p.Free(p.Allocate(1000)) // 1 KiB class: over the cap, dropped
	if n := p.Pooled(); n != 256 {
		t.Fatalf("Pooled() = %d, want 256", n)
	}
	if d := vec.NewPoolAllocator(); d.MaxBytes != 0 || vec.DefaultPoolMaxBytes != 64<<20 {
		t.Fatalf("default cap %d", vec.DefaultPoolMaxBytes)
	}
}
