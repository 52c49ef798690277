package vnode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestBitmapBasics(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     *Bitmap
		count int
		str   string
		want  []Vnode
	}{
		{"empty", NewBitmap(8), 8, "[]", nil},
		{"one", NewBitmap(1, 0), 1, "[0]", []Vnode{0}},
		{"unsorted dups", NewBitmap(256, 32, 3, 3, 1, 2), 256, "[1-3,32]", []Vnode{1, 2, 3, 32}},
		{"full 1", Full(1), 1, "[0]", []Vnode{0}},
		{"full 8", Full(8), 8, "[0-7]", []Vnode{0, 1, 2, 3, 4, 5, 6, 7}},
		{"range", FromRange(256, 0, 16), 256, "[0-15]", seq(0, 16)},
		{"empty range", FromRange(256, 16, 16), 256, "[]", nil},
		{"top", FromRange(MaxCount, MaxCount-2, MaxCount), MaxCount, "[32766-32767]", []Vnode{32766, 32767}},
		{"mixed", NewBitmap(64, 0, 1, 2, 5, 7, 8, 9, 63), 64, "[0-2,5,7-9,63]", []Vnode{0, 1, 2, 5, 7, 8, 9, 63}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b
			if b.Count() != tc.count || b.Len() != len(tc.want) || b.String() != tc.str {
				t.Fatalf("Count %d Len %d String %s; want %d %d %s", b.Count(), b.Len(), b.String(), tc.count, len(tc.want), tc.str)
			}
			if got := b.ToSlice(); !slices.Equal(got, tc.want) {
				t.Fatalf("ToSlice %v, want %v", got, tc.want)
			}
			for v := range min(tc.count+2, 1<<16-1) {
				if b.Contains(Vnode(v)) != slices.Contains(tc.want, Vnode(v)) {
					t.Fatalf("Contains(%d) = %v", v, b.Contains(Vnode(v)))
				}
			}
			other := tc.count - 1 // a bitmap over another count with the same members
			if other == 0 || (len(tc.want) > 0 && int(tc.want[len(tc.want)-1]) >= other) {
				other = tc.count + 1
			}
			if other <= MaxCount && b.Equal(NewBitmap(other, tc.want...)) {
				t.Fatalf("Equal ignores the count")
			}
			if !b.Equal(NewBitmap(tc.count, tc.want...)) {
				t.Fatalf("Equal disagrees with the members and count")
			}
		})
	}
}

func seq(lo, hi int) []Vnode {
	var out []Vnode
	for v := lo; v < hi; v++ {
		out = append(out, Vnode(v))
	}
	return out
}

func expectPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Errorf("%s did not panic", name)
			return
		}
		if !strings.HasPrefix(fmt.Sprint(r), "vnode: ") {
			t.Errorf("%s panicked with %q, want a message starting \"vnode: \"", name, r)
		}
	}()
	f()
}

func TestBitmapPanics(t *testing.T) {
	expectPanic(t, "NewBitmap(0)", func() { NewBitmap(0) })
	expectPanic(t, "NewBitmap(MaxCount+1)", func() { NewBitmap(MaxCount + 1) })
	expectPanic(t, "NewBitmap(8, 8)", func() { NewBitmap(8, 8) })
	expectPanic(t, "Full(-1)", func() { Full(-1) })
	expectPanic(t, "FromRange(8, 3, 2)", func() { FromRange(8, 3, 2) })
	expectPanic(t, "FromRange(8, -1, 2)", func() { FromRange(8, -1, 2) })
	expectPanic(t, "FromRange(8, 0, 9)", func() { FromRange(8, 0, 9) })
	expectPanic(t, "Add(8)", func() { NewBitmap(8).Add(8) })
	expectPanic(t, "Bitmaps(bad)", func() { Mapping{0, 1, 2}.Bitmaps(2) })
}

func TestBitmapIterateStops(t *testing.T) {
	b := FromRange(256, 10, 20)
	var got []Vnode
	b.Iterate(func(v Vnode) bool {
		got = append(got, v)
		return len(got) < 3
	})
	if !slices.Equal(got, []Vnode{10, 11, 12}) {
		t.Fatalf("Iterate visited %v, want it to stop after 3", got)
	}
}

func TestBitmapCountMismatch(t *testing.T) {
	a, b := Full(8), Full(16)
	for name, op := range map[string]func(*Bitmap) (*Bitmap, error){"And": a.And, "Or": a.Or, "AndNot": a.AndNot} {
		r, err := op(b)
		if r != nil || !errors.Is(err, ErrCountMismatch) || !strings.Contains(err.Error(), "8 and 16") {
			t.Errorf("%s over 8 and 16 vnodes = %v, %v; want an ErrCountMismatch naming both", name, r, err)
		}
	}
	if a.Intersects(b) {
		t.Errorf("bitmaps over different counts intersect")
	}
}

// randomBitmap returns a bitmap over count vnodes and its members as a reference set,
// in one of several shapes that exercise every roaring container kind.
func randomBitmap(rng *rand.Rand, count int) (*Bitmap, []bool) {
	ref := make([]bool, count)
	switch rng.IntN(6) {
	case 0: // empty
	case 1: // full
		for v := range ref {
			ref[v] = true
		}
	case 2: // sparse
		for range rng.IntN(min(count, 64) + 1) {
			ref[rng.IntN(count)] = true
		}
	case 3: // dense: a bitmap container when count > 4096
		p := rng.Float64()
		for v := range ref {
			ref[v] = rng.Float64() < p
		}
	default: // runs
		for v := 0; v < count; {
			n := 1 + rng.IntN(max(1, count/8))
			on := rng.IntN(2) == 0
			for ; n > 0 && v < count; n, v = n-1, v+1 {
				ref[v] = on
			}
		}
	}
	b := NewBitmap(count)
	for v, in := range ref {
		if in {
			b.Add(Vnode(v))
		}
	}
	if rng.IntN(2) == 0 { // half the time, a run-optimized bitmap
		b = mustRoundTrip(b)
	}
	return b, ref
}

func mustRoundTrip(b *Bitmap) *Bitmap {
	data, err := b.MarshalBinary()
	if err != nil {
		panic(err)
	}
	out, err := UnmarshalBitmap(data)
	if err != nil {
		panic(err)
	}
	return out
}

func checkAgainst(t *testing.T, seed uint64, what string, b *Bitmap, ref []bool) {
	t.Helper()
	n := 0
	for v, in := range ref {
		if b.Contains(Vnode(v)) != in {
			t.Fatalf("seed %d: %s: Contains(%d) = %v, want %v", seed, what, v, !in, in)
		}
		if in {
			n++
		}
	}
	if b.Len() != n || b.Count() != len(ref) {
		t.Fatalf("seed %d: %s: Len %d Count %d, want %d %d", seed, what, b.Len(), b.Count(), n, len(ref))
	}
}

func TestBitmapSetOpsRandom(t *testing.T) {
	rng, seed := testRand(t)
	for _, count := range goldenCounts {
		rounds := 40
		if count > 256 {
			rounds = 12
		}
		for range rounds {
			a, ra := randomBitmap(rng, count)
			b, rb := randomBitmap(rng, count)
			and, or, andNot := make([]bool, count), make([]bool, count), make([]bool, count)
			inter := false
			for v := range count {
				and[v], or[v], andNot[v] = ra[v] && rb[v], ra[v] || rb[v], ra[v] && !rb[v]
				inter = inter || and[v]
			}
			aBefore, bBefore := a.Clone(), b.Clone()
			for _, op := range []struct {
				name string
				f    func(*Bitmap) (*Bitmap, error)
				want []bool
			}{{"And", a.And, and}, {"Or", a.Or, or}, {"AndNot", a.AndNot, andNot}} {
				got, err := op.f(b)
				if err != nil {
					t.Fatalf("seed %d: %s: %v", seed, op.name, err)
				}
				checkAgainst(t, seed, fmt.Sprintf("count %d %s", count, op.name), got, op.want)
				// The result is independent of its operands.
				if got.Len() < count {
					got.Add(Vnode(slices.Index(op.want, false)))
				}
			}
			if !a.Equal(aBefore) || !b.Equal(bBefore) {
				t.Fatalf("seed %d: count %d: a set operation changed an operand", seed, count)
			}
			if a.Intersects(b) != inter || b.Intersects(a) != inter {
				t.Fatalf("seed %d: count %d: Intersects = %v, want %v", seed, count, a.Intersects(b), inter)
			}
			if a.Equal(b) != slices.Equal(ra, rb) {
				t.Fatalf("seed %d: count %d: Equal = %v", seed, count, a.Equal(b))
			}
			checkAgainst(t, seed, "round trip", mustRoundTrip(a), ra)
			if s := a.ToSlice(); len(s) != a.Len() || !slices.IsSorted(s) {
				t.Fatalf("seed %d: ToSlice not sorted or wrong length", seed)
			}
		}
	}
}

func TestBitmapStringRandom(t *testing.T) {
	rng, seed := testRand(t)
	for range 200 {
		count := 1 + rng.IntN(300)
		b, ref := randomBitmap(rng, count)
		// Parse the string back and compare.
		s := b.String()
		inner := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
		got := make([]bool, count)
		if inner != "" {
			for _, part := range strings.Split(inner, ",") {
				var lo, hi int
				if n, _ := fmt.Sscanf(part, "%d-%d", &lo, &hi); n == 1 {
					hi = lo
				}
				for v := lo; v <= hi; v++ {
					got[v] = true
				}
			}
		}
		if !slices.Equal(got, ref) {
			t.Fatalf("seed %d: String %s does not describe the bitmap", seed, s)
		}
	}
}

func TestMarshalFormat(t *testing.T) {
	b := NewBitmap(300, 1, 2, 3, 299)
	data, err := b.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if data[0] != BitmapVersion || binary.BigEndian.Uint32(data[1:5]) != 300 {
		t.Fatalf("header % x, want version %d and count 300 big-endian", data[:5], BitmapVersion)
	}
	// Equal sets marshal to equal bytes, however they were built.
	c := NewBitmap(300)
	for _, v := range []Vnode{299, 3, 2, 1} {
		c.Add(v)
	}
	data2, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, data2) {
		t.Fatalf("equal bitmaps marshal differently:\n% x\n% x", data, data2)
	}
}

// TestMarshalContainerKinds checks the round trip of each roaring container kind and that
// the test bitmaps really produce them.
func TestMarshalContainerKinds(t *testing.T) {
	dense := NewBitmap(MaxCount)
	for v := 0; v < MaxCount; v += 3 {
		dense.Add(Vnode(v))
	}
	for _, tc := range []struct {
		name string
		b    *Bitmap
		kind string
	}{
		{"empty", NewBitmap(MaxCount), "empty"},
		{"array", NewBitmap(MaxCount, 5, 70, 32767), "array"},
		{"run", FromRange(MaxCount, 100, 30000), "run"},
		{"bitmap", dense, "bitmap"},
	} {
		data, err := tc.b.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if got := containerKind(data[bitmapHeaderLen:]); got != tc.kind {
			t.Errorf("%s: marshaled as a %s container, want %s", tc.name, got, tc.kind)
		}
		back, err := UnmarshalBitmap(data)
		if err != nil || !back.Equal(tc.b) {
			t.Errorf("%s: round trip = %v, %v", tc.name, back, err)
		}
	}
}

func containerKind(p []byte) string {
	cookie := binary.LittleEndian.Uint32(p)
	switch {
	case cookie == roaringCookieNoRuns && binary.LittleEndian.Uint32(p[4:]) == 0:
		return "empty"
	case cookie&0xFFFF == roaringCookieRuns && p[4]&1 != 0:
		return "run"
	case cookie&0xFFFF == roaringCookieRuns:
		p = p[5:]
	default:
		p = p[8:]
	}
	if int(binary.LittleEndian.Uint16(p[2:]))+1 > roaringArrayMax {
		return "bitmap"
	}
	return "array"
}

func TestUnmarshalDoesNotAlias(t *testing.T) {
	want := NewBitmap(256, 1, 2, 3, 100)
	data, _ := want.MarshalBinary()
	got, err := UnmarshalBitmap(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := bitmapHeaderLen; i < len(data); i++ {
		data[i] ^= 0xFF
	}
	if !got.Equal(want) {
		t.Fatalf("changing the input changed the bitmap: %v", got)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	valid := func(b *Bitmap) []byte {
		data, err := b.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	patch := func(data []byte, at int, bs ...byte) []byte {
		data = bytes.Clone(data)
		copy(data[at:], bs)
		return data
	}
	header := func(version byte, count uint32) []byte {
		return binary.BigEndian.AppendUint32([]byte{version}, count)
	}
	arr := valid(NewBitmap(256, 10, 20, 200))             // no-run cookie, array container
	run := valid(FromRange(256, 100, 200))                // run cookie, run container
	bmp := valid(mustDense(t))                            // bitmap container
	emptyPayload := valid(NewBitmap(8))[bitmapHeaderLen:] // no-run cookie, no containers
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"nil", nil, "shorter than the 5-byte header"},
		{"short header", []byte{1, 0, 0}, "shorter than"},
		{"version 0", patch(arr, 0, 0), "unknown format version 0"},
		{"version 2", patch(arr, 0, 2), "unknown format version 2"},
		{"count 0", append(header(1, 0), emptyPayload...), "vnode count 0 out of range"},
		{"count too big", append(header(1, MaxCount+1), emptyPayload...), "vnode count 32769 out of range"},
		{"no payload", header(1, 8), "no cookie"},
		{"bad cookie", append(header(1, 8), 1, 2, 3, 4), "unknown cookie"},
		{"trailing byte", append(bytes.Clone(arr), 0), "followed by 1 bytes"},
		{"trailing after empty", append(valid(NewBitmap(8)), 0), "followed by 1 bytes"},
		{"member above count", patch(arr, 1, 0, 0, 0, 100), "vnode 200 out of range 0..99"},
		{"run above count", patch(run, 1, 0, 0, 0, 150), "vnode 199 out of range 0..149"},
		{"bitmap above count", patch(bmp, 1, 0, 0, 0x23, 0x28), "out of range 0..8999"},
		{"two containers", append(header(1, 8), 0x3a, 0x30, 0, 0, 2, 0, 0, 0), "2 containers"},
		{"run cookie two containers", append(header(1, 8), 0x3b, 0x30, 1, 0, 3), "2 containers"},
		{"key 1", patch(arr, bitmapHeaderLen+8, 1), "container key 1"},
		{"card above count", patch(valid(NewBitmap(8, 1)), bitmapHeaderLen+10, 20), "container of 21 members over 8"},
		{"bad offset", patch(arr, bitmapHeaderLen+12, 99), "offset 99"},
		{"unsorted array", patch(arr, bitmapHeaderLen+16, 30), "not strictly increasing"},
		{"duplicate in array", patch(arr, bitmapHeaderLen+18, 10), "not strictly increasing"},
		{"run flags", patch(run, bitmapHeaderLen+4, 3), "bad run flags"},
		{"zero runs", patch(run, bitmapHeaderLen+9, 0, 0), "no runs"},
		{"run card mismatch", patch(run, bitmapHeaderLen+7, 5, 0), "header says 6"},
		{"bitmap card mismatch", patch(bmp, bitmapHeaderLen+10, 0xFF), "header says"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := UnmarshalBitmap(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("UnmarshalBitmap(% x...) = %v, %v; want an error containing %q", tc.data[:min(len(tc.data), 40)], b, err, tc.want)
			}
		})
	}
	// Every strict prefix of a valid encoding is an error.
	for _, data := range [][]byte{arr, run, bmp} {
		for n := range len(data) {
			if b, err := UnmarshalBitmap(data[:n]); err == nil {
				t.Fatalf("the %d-byte prefix of % x decoded to %v", n, data[:min(len(data), 32)], b)
			}
		}
	}
}

// mustDense is a bitmap over MaxCount with one bitmap container of 5000 members.
func mustDense(t *testing.T) *Bitmap {
	b := NewBitmap(MaxCount)
	for v := 0; v < 10000; v += 2 {
		b.Add(Vnode(v))
	}
	b = mustRoundTrip(b)
	data, _ := b.MarshalBinary()
	if containerKind(data[bitmapHeaderLen:]) != "bitmap" {
		t.Fatalf("dense test bitmap is not a bitmap container")
	}
	return b
}

// TestBitmapConcurrentReads shares bitmaps read-only between goroutines, including one
// changed by Add (MarshalBinary must then not optimize it in place): -race checks it.
func TestBitmapConcurrentReads(t *testing.T) {
	shared := NewBitmap(MaxCount)
	for v := 0; v < 5000; v++ {
		shared.Add(Vnode(v * 5))
	}
	other := FromRange(MaxCount, 100, 20000)
	want, _ := shared.MarshalBinary()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 20 {
				data, err := shared.MarshalBinary()
				if err != nil || !bytes.Equal(data, want) {
					errs <- fmt.Errorf("concurrent MarshalBinary = %d bytes, %v", len(data), err)
					return
				}
				and, _ := shared.And(other)
				_ = and.Len() + shared.Len() + len(shared.ToSlice()) + len(shared.String())
				_ = shared.Contains(10) && shared.Intersects(other) && shared.Equal(shared)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
