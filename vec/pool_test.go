package vec_test

import (
	"sync"
	"testing"
	"unsafe"

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
	if len(a) != 100 || cap(a) != 128 {
		t.Fatalf("Allocate(100): len %d cap %d, want 100 and the 128-byte class", len(a), cap(a))
	}
	for i := range a[:cap(a)] {
		a[:cap(a)][i] = 0xAA
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
	// A buffer that did not come from the pool (capacity not a class size) is dropped.
	p.Free(make([]byte, 100))
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
		if b := p.Allocate(100); addr(b)%64 != 0 || cap(b) != 128 {
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
	if len(b) != 100 || cap(b) != 128 || &b[0] != &a[0] {
		t.Fatalf("Uninit().Allocate(100): len %d cap %d, reused %v; want the freed 128-byte buffer", len(b), cap(b), &b[0] == &a[0])
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
