package vec_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// vbTypes are the two types a VarBuilder builds.
var vbTypes = []arrow.DataType{arrow.BinaryTypes.String, arrow.BinaryTypes.Binary}

// vbVal is one value of a batch: a NULL or a value (possibly empty).
type vbVal struct {
	null bool
	v    string
}

// vbVals turns its arguments into values: a string is a value, nil a NULL.
func vbVals(xs ...any) []vbVal {
	out := make([]vbVal, 0, len(xs))
	for _, x := range xs {
		switch x := x.(type) {
		case nil:
			out = append(out, vbVal{null: true})
		case string:
			out = append(out, vbVal{v: x})
		default:
			panic(fmt.Sprintf("vbVals: %T", x))
		}
	}
	return out
}

func vbFormat(vals []vbVal) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, v := range vals {
		if i > 0 {
			sb.WriteByte(' ')
		}
		if i == 20 && len(vals) > 21 {
			fmt.Fprintf(&sb, "... (%d values)", len(vals))
			break
		}
		if v.null {
			sb.WriteString("NULL")
		} else {
			sb.WriteString(strconv.Quote(v.v))
		}
	}
	sb.WriteByte(']')
	return sb.String()
}

// vbRefAppend appends v to Arrow's own builder of dt.
func vbRefAppend(ref array.Builder, v vbVal) {
	if v.null {
		ref.AppendNull()
		return
	}
	switch ref := ref.(type) {
	case *array.StringBuilder:
		ref.Append(v.v)
	case *array.BinaryBuilder:
		ref.Append([]byte(v.v))
	default:
		panic(fmt.Sprintf("reference builder %T", ref))
	}
}

// vbReference builds vals with Arrow's StringBuilder or BinaryBuilder.
func vbReference(mem memory.Allocator, dt arrow.DataType, vals []vbVal) arrow.Array {
	ref := array.NewBuilder(mem, dt)
	defer ref.Release()
	for _, v := range vals {
		vbRefAppend(ref, v)
	}
	return ref.NewArray()
}

// vbCounts counts the NULLs and value bytes of vals.
func vbCounts(vals []vbVal) (nulls, size int) {
	for _, v := range vals {
		if v.null {
			nulls++
		} else {
			size += len(v.v)
		}
	}
	return nulls, size
}

// vbCheck compares an array of a VarBuilder of dt with the one Arrow's builder makes
// of the same values, down to the offsets and value bytes.
func vbCheck(got, want arrow.Array, dt arrow.DataType, vals []vbVal) error {
	if !arrow.TypeEqual(got.DataType(), dt) {
		return fmt.Errorf("type %s, want %s", got.DataType(), dt)
	}
	if got.Len() != len(vals) || want.Len() != len(vals) {
		return fmt.Errorf("Len %d (Arrow's builder: %d), want %d", got.Len(), want.Len(), len(vals))
	}
	nulls, _ := vbCounts(vals)
	if got.NullN() != nulls || want.NullN() != nulls {
		return fmt.Errorf("NullN %d (Arrow's builder: %d), want %d", got.NullN(), want.NullN(), nulls)
	}
	for i := range vals {
		if got.IsNull(i) != vals[i].null {
			return fmt.Errorf("IsNull(%d) = %v, want %v", i, got.IsNull(i), vals[i].null)
		}
	}
	var offs, wantOffs []int32
	var data, wantData []byte
	switch dt.ID() {
	case arrow.STRING:
		g, ok := got.(*array.String)
		if !ok {
			return fmt.Errorf("array is a %T, want *array.String", got)
		}
		if err := g.Validate(); err != nil {
			return err
		}
		if vbAllUTF8(vals) {
			if err := g.ValidateFull(); err != nil {
				return err
			}
		}
		w := want.(*array.String)
		offs, wantOffs, data, wantData = g.ValueOffsets(), w.ValueOffsets(), g.ValueBytes(), w.ValueBytes()
		for i, v := range vals {
			if !v.null && g.Value(i) != v.v {
				return fmt.Errorf("Value(%d) = %q, want %q", i, g.Value(i), v.v)
			}
		}
	case arrow.BINARY:
		g, ok := got.(*array.Binary)
		if !ok {
			return fmt.Errorf("array is a %T, want *array.Binary", got)
		}
		if err := g.ValidateFull(); err != nil {
			return err
		}
		w := want.(*array.Binary)
		offs, wantOffs, data, wantData = g.ValueOffsets(), w.ValueOffsets(), g.ValueBytes(), w.ValueBytes()
		for i, v := range vals {
			if !v.null && string(g.Value(i)) != v.v {
				return fmt.Errorf("Value(%d) = %q, want %q", i, g.Value(i), v.v)
			}
		}
	}
	if !slices.Equal(offs, wantOffs) {
		return fmt.Errorf("offsets %v, want %v", vbHead(offs), vbHead(wantOffs))
	}
	if !bytes.Equal(data, wantData) {
		return fmt.Errorf("value bytes %q, want %q", vbHead(data), vbHead(wantData))
	}
	if !array.Equal(got, want) {
		return fmt.Errorf("array.Equal: got %v, want %v", got, want)
	}
	return nil
}

func vbHead[T any](s []T) []T { return s[:min(len(s), 64)] }

func vbAllUTF8(vals []vbVal) bool {
	for _, v := range vals {
		if !v.null && !utf8.ValidString(v.v) {
			return false
		}
	}
	return true
}

// vbEmpty fails unless b is empty.
func vbEmpty(t *testing.T, b *vec.VarBuilder, when string) {
	t.Helper()
	if b.Len() != 0 || b.DataLen() != 0 {
		t.Fatalf("%s: Len %d, DataLen %d, want an empty builder", when, b.Len(), b.DataLen())
	}
}

// vbMode is a way of appending a batch of values to a VarBuilder.
type vbMode struct {
	name   string
	append func(b *vec.VarBuilder, vals []vbVal)
}

var vbModes = []vbMode{
	{"Append", func(b *vec.VarBuilder, vals []vbVal) {
		for _, v := range vals {
			if v.null {
				b.AppendNull()
				continue
			}
			buf := []byte(v.v)
			b.Append(buf)
			for i := range buf { // the builder must have copied the value
				buf[i] = '#'
			}
		}
	}},
	{"AppendString", func(b *vec.VarBuilder, vals []vbVal) {
		for _, v := range vals {
			if v.null {
				b.AppendNull()
			} else {
				b.AppendString(v.v)
			}
		}
	}},
	{"UnsafeAppend", func(b *vec.VarBuilder, vals []vbVal) {
		_, size := vbCounts(vals)
		b.Reserve(len(vals))
		b.ReserveData(size)
		for _, v := range vals {
			if v.null {
				b.AppendNull()
			} else {
				b.UnsafeAppend([]byte(v.v))
			}
		}
	}},
	{"mixed", func(b *vec.VarBuilder, vals []vbVal) {
		for i, v := range vals {
			switch {
			case v.null:
				b.AppendNull()
			case i%3 == 0:
				b.Append([]byte(v.v))
			case i%3 == 1:
				b.AppendString(v.v)
			default:
				b.Reserve(1)
				b.ReserveData(len(v.v))
				b.UnsafeAppend([]byte(v.v))
			}
		}
	}},
}

// vbBatch appends vals with mode m, checking Len and DataLen, and then checks the array
// of NewArray against Arrow's builder and that the builder is empty again.
func vbBatch(t *testing.T, mem memory.Allocator, b *vec.VarBuilder, dt arrow.DataType, m vbMode, vals []vbVal) {
	t.Helper()
	m.append(b, vals)
	_, size := vbCounts(vals)
	if b.Len() != len(vals) || b.DataLen() != size {
		t.Fatalf("%s: Len %d, DataLen %d, want %d and %d", vbFormat(vals), b.Len(), b.DataLen(), len(vals), size)
	}
	got := b.NewArray()
	defer got.Release()
	vbEmpty(t, b, "after NewArray")
	want := vbReference(mem, dt, vals)
	defer want.Release()
	if err := vbCheck(got, want, dt, vals); err != nil {
		t.Fatalf("%s: %v", vbFormat(vals), err)
	}
}

// TestVarBuilderMatchesArrow builds batches of values with every way of appending and
// compares the arrays with those of Arrow's StringBuilder and BinaryBuilder; the builder
// is reused for further batches.
func TestVarBuilderMatchesArrow(t *testing.T) {
	many := func(n int, null func(i int) bool) []vbVal {
		vals := make([]vbVal, n)
		for i := range vals {
			if null(i) {
				vals[i].null = true
			} else {
				vals[i].v = strings.Repeat(string(rune('a'+i%26)), i%5)
			}
		}
		return vals
	}
	cases := []struct {
		name string
		vals []vbVal
	}{
		{"no values", nil},
		{"one value", vbVals("hello")},
		{"one empty value", vbVals("")},
		{"empty values", vbVals("", "", "")},
		{"empty among values", vbVals("", "ab", "", "c", "")},
		{"one NULL", vbVals(nil)},
		{"NULL first", vbVals(nil, "a", "bc")},
		{"NULL middle", vbVals("a", nil, "bc")},
		{"NULL last", vbVals("a", "bc", nil)},
		{"NULLs everywhere", vbVals(nil, "a", nil, nil, "bc", nil)},
		{"all NULLs", vbVals(nil, nil, nil, nil, nil, nil, nil, nil, nil, nil)},
		{"NULL and empty", vbVals(nil, "", nil, "", "")},
		{"bytes", vbVals("\x00", "\xff\xfe", "a\x00b", "", "é日本")},
		{"long value", vbVals(strings.Repeat("xyz", 1000), nil, "q")},
		{"NULLs across bitmap bytes", many(40, func(i int) bool { return i%9 == 0 || i == 39 })},
		{"NULLs around offset growth", many(300, func(i int) bool { return i >= 62 && i <= 66 || i >= 126 && i <= 130 || i == 299 })},
		{"all NULLs across growth", many(200, func(int) bool { return true })},
		{"no NULLs across growth", many(200, func(int) bool { return false })},
	}
	// Batches after the first: one with NULLs, one without, and the case again.
	second := vbVals("second", nil, "", "batch")
	third := vbVals("x", "", "yz")
	for _, dt := range vbTypes {
		for _, m := range vbModes {
			for _, c := range cases {
				t.Run(dt.String()+"/"+m.name+"/"+c.name, func(t *testing.T) {
					mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
					defer mem.AssertSize(t, 0)
					b := vec.NewVarBuilder(mem, dt)
					defer b.Release()
					vbEmpty(t, b, "new builder")
					for _, vals := range [][]vbVal{c.vals, second, c.vals, third, c.vals} {
						vbBatch(t, mem, b, dt, m, vals)
					}
				})
			}
		}
	}
}

// TestVarBuilderGrowth appends many values without reserving, and with Reserve and
// ReserveData ahead of UnsafeAppend, with the first NULL coming before, at and after
// the offsets' growth points: the bitmap made at the first NULL must keep the values
// before it valid and grow with the offsets.
func TestVarBuilderGrowth(t *testing.T) {
	value := func(i int) string { return strings.Repeat(strconv.Itoa(i), 1+i%4) }
	gen := func(n, firstNull, every int) []vbVal {
		vals := make([]vbVal, n)
		for i := range vals {
			if firstNull >= 0 && i >= firstNull && (i-firstNull)%every == 0 {
				vals[i].null = true
			} else {
				vals[i].v = value(i)
			}
		}
		return vals
	}
	for _, dt := range vbTypes {
		for _, m := range vbModes {
			for _, firstNull := range []int{-1, 0, 1, 7, 8, 62, 63, 64, 65, 127, 128, 129, 511, 1000, 4095, 4096, 9999} {
				for _, every := range []int{1, 5, 1 << 30} {
					if firstNull < 0 && every != 1 {
						continue
					}
					vals := gen(10000, firstNull, every)
					name := fmt.Sprintf("%s/%s/firstNull=%d/every=%d", dt, m.name, firstNull, every)
					t.Run(name, func(t *testing.T) {
						mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
						defer mem.AssertSize(t, 0)
						b := vec.NewVarBuilder(mem, dt)
						defer b.Release()
						vbBatch(t, mem, b, dt, m, vals)
						vbBatch(t, mem, b, dt, m, vals[:300]) // the next batch starts small again
					})
				}
			}
		}
	}
	// Len and DataLen follow every append while the buffers grow.
	for _, dt := range vbTypes {
		t.Run(dt.String()+"/counts", func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			b := vec.NewVarBuilder(mem, dt)
			defer b.Release()
			size := 0
			for i := range 5000 {
				switch i % 3 {
				case 0:
					b.Append([]byte(value(i)))
					size += len(value(i))
				case 1:
					b.AppendString(value(i))
					size += len(value(i))
				default:
					if i > 2000 {
						b.AppendNull()
					} else {
						b.AppendString("")
					}
				}
				if b.Len() != i+1 || b.DataLen() != size {
					t.Fatalf("after %d appends: Len %d, DataLen %d, want %d and %d", i+1, b.Len(), b.DataLen(), i+1, size)
				}
			}
		})
	}
}

// vbCountingAlloc counts the calls that allocate or grow memory.
type vbCountingAlloc struct {
	memory.Allocator
	calls int
}

func (a *vbCountingAlloc) Allocate(n int) []byte {
	a.calls++
	return a.Allocator.Allocate(n)
}

func (a *vbCountingAlloc) Reallocate(n int, b []byte) []byte {
	a.calls++
	return a.Allocator.Reallocate(n, b)
}

// TestVarBuilderReserve checks that after Reserve(n) and ReserveData(m) the next n
// UnsafeAppend and AppendNull calls of m bytes in all do not go to the allocator, once
// the batch has its bitmap, and that reserving more than is used changes nothing.
func TestVarBuilderReserve(t *testing.T) {
	for _, dt := range vbTypes {
		t.Run(dt.String(), func(t *testing.T) {
			checked := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer checked.AssertSize(t, 0)
			mem := &vbCountingAlloc{Allocator: checked}
			b := vec.NewVarBuilder(mem, dt)
			defer b.Release()
			var vals []vbVal
			add := func(v vbVal) {
				vals = append(vals, v)
				if v.null {
					b.AppendNull()
				} else {
					b.UnsafeAppend([]byte(v.v))
				}
			}
			b.AppendNull() // the bitmap
			vals = append(vals, vbVal{null: true})
			for round, n := range []int{1, 10, 63, 64, 65, 200, 1000, 5000} {
				block := make([]vbVal, n)
				size := 0
				for i := range block {
					if i%4 == 3 {
						block[i].null = true
					} else {
						block[i].v = strings.Repeat("v", (i+round)%7)
						size += len(block[i].v)
					}
				}
				b.Reserve(n)
				b.ReserveData(size)
				before := mem.calls
				for _, v := range block {
					add(v)
				}
				if mem.calls != before {
					t.Fatalf("block of %d after Reserve and ReserveData: %d allocator calls", n, mem.calls-before)
				}
				// Reserving for fewer values or bytes than there is room for is free.
				b.Reserve(0)
				b.ReserveData(0)
				if mem.calls != before {
					t.Fatalf("Reserve(0), ReserveData(0): %d allocator calls", mem.calls-before)
				}
				// Reserving more than is used does not show in the array.
				b.Reserve(n + 17)
				b.ReserveData(size + 33)
			}
			got := b.NewArray()
			defer got.Release()
			want := vbReference(checked, dt, vals)
			defer want.Release()
			if err := vbCheck(got, want, dt, vals); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestVarBuilderReserveDataLimit checks that ReserveData refuses more value bytes than
// int32 offsets address, counting the bytes already appended, without allocating them.
func TestVarBuilderReserveDataLimit(t *testing.T) {
	for _, pre := range []string{"", "abc"} {
		t.Run(fmt.Sprintf("after %d bytes", len(pre)), func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			b := vec.NewVarBuilder(mem, arrow.BinaryTypes.Binary)
			defer b.Release()
			b.AppendString(pre)
			func() {
				defer func() {
					r := recover()
					if r == nil {
						t.Fatalf("ReserveData(%d) after %d bytes did not panic", math.MaxInt32-len(pre)+1, len(pre))
					}
					if msg := fmt.Sprint(r); !strings.Contains(msg, "int32") || !strings.Contains(msg, "binary") {
						t.Fatalf("panic %q: want the type and the int32 limit named", msg)
					}
				}()
				b.ReserveData(math.MaxInt32 - len(pre) + 1)
			}()
			if b.Len() != 1 || b.DataLen() != len(pre) {
				t.Fatalf("after the panic: Len %d, DataLen %d", b.Len(), b.DataLen())
			}
		})
	}
}

// vbRandomVal returns a random value of dt: mostly short, sometimes long.
func vbRandomVal(rng *rand.Rand, dt arrow.DataType) string {
	if rng.IntN(50) == 0 {
		return strings.Repeat(string(rune('a'+rng.IntN(26))), rng.IntN(3000))
	}
	if dt.ID() == arrow.STRING {
		return vectest.RandomString(rng)
	}
	return string(vectest.RandomBytes(rng))
}

// TestVarBuilderRandom appends random sequences of operations over many batches, some
// ended by Release rather than NewArray, and compares every batch with Arrow's
// builders.
func TestVarBuilderRandom(t *testing.T) {
	rng, seed := vectest.Rand(t)
	for _, pooled := range []bool{false, true} {
		for _, dt := range vbTypes {
			varBuilderRandom(t, rng, seed, dt, pooled)
		}
	}
}

// varBuilderRandom is TestVarBuilderRandom over one type. pooled: the builder
// allocates from a PoolAllocator whose free buffers are first filled with junk, so
// that its offsets and value bytes (from the pool's Uninit allocator) start dirty.
func varBuilderRandom(t *testing.T, rng *rand.Rand, seed uint64, dt arrow.DataType, pooled bool) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	var bmem memory.Allocator = mem
	var pool *vec.PoolAllocator
	if pooled {
		pool = vec.NewPoolAllocator()
		var bufs [][]byte
		for size := 64; size <= 4<<20; size *= 2 {
			for range 3 {
				b := pool.Allocate(size)
				for i := range b {
					b[i] = 0xA5
				}
				bufs = append(bufs, b)
			}
		}
		for _, b := range bufs {
			pool.Free(b)
		}
		bmem = pool
	}
	b := vec.NewVarBuilder(bmem, dt)
	for batch := range 60 {
		var n int
		switch rng.IntN(4) {
		case 0:
			n = rng.IntN(3)
		case 1:
			n = rng.IntN(100)
		default:
			n = rng.IntN(3000)
		}
		nullFrac := []float64{0, 0, 0.05, 0.5, 1}[rng.IntN(5)]
		var vals []vbVal
		size := 0
		next := func() vbVal {
			if rng.Float64() < nullFrac {
				return vbVal{null: true}
			}
			return vbVal{v: vbRandomVal(rng, dt)}
		}
		for len(vals) < n {
			switch op := rng.IntN(10); {
			case op < 6: // one value, growing as needed
				v := next()
				switch {
				case v.null:
					b.AppendNull()
				case op < 3:
					b.Append([]byte(v.v))
				default:
					b.AppendString(v.v)
				}
				vals = append(vals, v)
				size += len(v.v)
			case op < 9: // a reserved block
				block := make([]vbVal, rng.IntN(min(200, n-len(vals))+1))
				bsize := 0
				for i := range block {
					block[i] = next()
					bsize += len(block[i].v)
				}
				b.Reserve(len(block) + rng.IntN(3))
				b.ReserveData(bsize + rng.IntN(3))
				for _, v := range block {
					if v.null {
						b.AppendNull()
					} else {
						b.UnsafeAppend([]byte(v.v))
					}
				}
				vals = append(vals, block...)
				size += bsize
			default: // reserving alone changes nothing
				if rng.IntN(2) == 0 {
					b.Reserve(rng.IntN(500))
				} else {
					b.ReserveData(rng.IntN(5000))
				}
			}
			if b.Len() != len(vals) || b.DataLen() != size {
				t.Fatalf("seed=%d %s batch %d: Len %d, DataLen %d, want %d and %d",
					seed, dt, batch, b.Len(), b.DataLen(), len(vals), size)
			}
		}
		if rng.IntN(8) == 0 {
			b.Release() // drop the batch
			vbEmpty(t, b, fmt.Sprintf("seed=%d %s batch %d: after Release", seed, dt, batch))
			continue
		}
		got := b.NewArray()
		vbEmpty(t, b, fmt.Sprintf("seed=%d %s batch %d: after NewArray", seed, dt, batch))
		want := vbReference(mem, dt, vals)
		if err := vbCheck(got, want, dt, vals); err != nil {
			t.Fatalf("seed=%d %s pooled=%v batch %d (%d values, NULL fraction %v): %v", seed, dt, pooled, batch, len(vals), nullFrac, err)
		}
		got.Release()
		want.Release()
	}
	b.Release()
	mem.AssertSize(t, 0)
	if pool != nil && pool.Allocated() != 0 {
		t.Fatalf("seed=%d %s: the pool has %d bytes out after every release", seed, dt, pool.Allocated())
	}
}

// TestVarBuilderLeaks checks that every buffer goes back to the allocator, however a
// builder's life ends.
func TestVarBuilderLeaks(t *testing.T) {
	fill := func(b *vec.VarBuilder) {
		b.AppendString("abc")
		b.AppendNull()
		b.Append([]byte("defgh"))
		for i := range 300 {
			b.AppendString(strconv.Itoa(i))
		}
		b.AppendNull()
	}
	cases := []struct {
		name string
		run  func(t *testing.T, mem memory.Allocator, dt arrow.DataType)
	}{
		{"unused builder", func(t *testing.T, mem memory.Allocator, dt arrow.DataType) {
			b := vec.NewVarBuilder(mem, dt)
			b.Release()
		}},
		{"Release mid-batch", func(t *testing.T, mem memory.Allocator, dt arrow.DataType) {
			b := vec.NewVarBuilder(mem, dt)
			fill(b)
			b.Release()
			vbEmpty(t, b, "after Release")
		}},
		{"Release after Reserve alone", func(t *testing.T, mem memory.Allocator, dt arrow.DataType) {
			b := vec.NewVarBuilder(mem, dt)
			b.Reserve(1000)
			b.ReserveData(1000)
			b.Release()
		}},
		{"Release mid-batch without NULLs", func(t *testing.T, mem memory.Allocator, dt arrow.DataType) {
			b := vec.NewVarBuilder(mem, dt)
			b.AppendString("x")
			b.Release()
		}},
		{"NewArray on an empty builder", func(t *testing.T, mem memory.Allocator, dt arrow.DataType) {
			b := vec.NewVarBuilder(mem, dt)
			a := b.NewArray()
			if a.Len() != 0 || a.NullN() != 0 || !arrow.TypeEqual(a.DataType(), dt) {
				t.Fatalf("empty NewArray: Len %d, NullN %d, type %s", a.Len(), a.NullN(), a.DataType())
			}
			a.Release()
			b.Release()
		}},
		{"NewArray of NULLs alone", func(t *testing.T, mem memory.Allocator, dt arrow.DataType) {
			b := vec.NewVarBuilder(mem, dt)
			b.AppendNull()
			b.AppendNull()
			a := b.NewArray()
			if a.Len() != 2 || a.NullN() != 2 {
				t.Fatalf("Len %d, NullN %d", a.Len(), a.NullN())
			}
			a.Release()
			b.Release()
		}},
		{"arrays outlive the builder", func(t *testing.T, mem memory.Allocator, dt arrow.DataType) {
			b := vec.NewVarBuilder(mem, dt)
			var arrs []arrow.Array
			for range 3 {
				fill(b)
				arrs = append(arrs, b.NewArray())
			}
			fill(b) // a batch in progress at Release
			b.Release()
			for _, a := range arrs {
				if a.Len() != 304 || a.NullN() != 2 || a.ValueStr(2) != vbValueStr(dt, "defgh") || a.ValueStr(303) != array.NullValueStr {
					t.Fatalf("array after the builder's Release: Len %d NullN %d [2]=%s [303]=%s", a.Len(), a.NullN(), a.ValueStr(2), a.ValueStr(303))
				}
				a.Release()
			}
		}},
		{"reuse after Release", func(t *testing.T, mem memory.Allocator, dt arrow.DataType) {
			b := vec.NewVarBuilder(mem, dt)
			fill(b)
			b.Release()
			b.AppendString("again")
			b.AppendNull()
			a := b.NewArray()
			if a.Len() != 2 || a.NullN() != 1 || a.ValueStr(0) != vbValueStr(dt, "again") {
				t.Fatalf("batch after Release: %v", a)
			}
			a.Release()
			b.Release()
		}},
	}
	for _, dt := range vbTypes {
		for _, c := range cases {
			t.Run(dt.String()+"/"+c.name, func(t *testing.T) {
				mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
				defer mem.AssertSize(t, 0)
				c.run(t, mem, dt)
			})
			t.Run(dt.String()+"/pool/"+c.name, func(t *testing.T) {
				pool := vec.NewPoolAllocator()
				c.run(t, pool, dt)
				if n := pool.Allocated(); n != 0 {
					t.Fatalf("pool: Allocated() = %d after everything was released", n)
				}
			})
		}
	}
}

// vbValueStr is the ValueStr of a value s of an array of dt.
func vbValueStr(dt arrow.DataType, s string) string {
	if dt.ID() == arrow.BINARY {
		b := array.NewBinaryBuilder(memory.DefaultAllocator, arrow.BinaryTypes.Binary)
		defer b.Release()
		b.AppendString(s)
		a := b.NewArray()
		defer a.Release()
		return a.ValueStr(0)
	}
	return s
}

// TestVarBuilderPoolAccounting checks the pool's byte count while arrays are held and
// after they are released, over several batches that reuse pooled buffers.
func TestVarBuilderPoolAccounting(t *testing.T) {
	for _, dt := range vbTypes {
		t.Run(dt.String(), func(t *testing.T) {
			pool := vec.NewPoolAllocator()
			b := vec.NewVarBuilder(pool, dt)
			for round := range 4 {
				var arrs []arrow.Array
				for i := range 5 {
					for j := range 100 * (i + 1) {
						if j%10 == 0 {
							b.AppendNull()
						} else {
							b.AppendString(strings.Repeat("p", j%13))
						}
					}
					arrs = append(arrs, b.NewArray())
				}
				if pool.Allocated() <= 0 {
					t.Fatalf("round %d: Allocated() = %d while arrays are held", round, pool.Allocated())
				}
				b.AppendString("in progress")
				for _, a := range arrs {
					a.Release()
				}
				if pool.Allocated() <= 0 {
					t.Fatalf("round %d: Allocated() = %d while a batch is in progress", round, pool.Allocated())
				}
				b.Release()
				if n := pool.Allocated(); n != 0 {
					t.Fatalf("round %d: Allocated() = %d after everything was released", round, n)
				}
			}
		})
	}
}

// TestVarBuilderAllocs checks that a steady-state batch from a pool, reserved ahead and
// filled with UnsafeAppend, allocates only NewArray's few Arrow headers: the same number
// for 64 values as for 4096.
func TestVarBuilderAllocs(t *testing.T) {
	const bound = 8
	for _, dt := range vbTypes {
		for _, withNulls := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/nulls=%v", dt, withNulls), func(t *testing.T) {
				counts := map[int]float64{}
				for _, n := range []int{64, 4096} {
					pool := vec.NewPoolAllocator()
					b := vec.NewVarBuilder(pool, dt)
					vals := make([][]byte, n)
					size := 0
					for i := range vals {
						vals[i] = []byte(strings.Repeat("v", i%17))
						size += len(vals[i])
					}
					run := func() {
						b.Reserve(n)
						b.ReserveData(size)
						for i, v := range vals {
							if withNulls && i%10 == 5 {
								b.AppendNull()
							} else {
								b.UnsafeAppend(v)
							}
						}
						a := b.NewArray()
						if a.Len() != n {
							panic(fmt.Sprintf("Len %d, want %d", a.Len(), n))
						}
						a.Release()
					}
					for range 3 {
						run()
					}
					counts[n] = testing.AllocsPerRun(50, run)
					b.Release()
					if got := pool.Allocated(); got != 0 {
						t.Fatalf("n=%d: Allocated() = %d after Release", n, got)
					}
				}
				t.Logf("allocations per batch: %v", counts)
				if counts[64] != counts[4096] {
					t.Errorf("allocations per batch: %v for 64 values, %v for 4096: not independent of the batch size", counts[64], counts[4096])
				}
				for n, c := range counts {
					if c > bound {
						t.Errorf("%d values: %v allocations per batch, want at most %d", n, c, bound)
					}
				}
			})
		}
	}
}

// TestNewVarBuilderPanics checks that a VarBuilder of another type than utf8 or binary
// is refused, naming the type.
func TestNewVarBuilderPanics(t *testing.T) {
	for _, dt := range []arrow.DataType{
		arrow.PrimitiveTypes.Int64,
		arrow.FixedWidthTypes.Boolean,
		arrow.BinaryTypes.LargeString,
		arrow.BinaryTypes.LargeBinary,
		arrow.BinaryTypes.StringView,
		&arrow.FixedSizeBinaryType{ByteWidth: 4},
	} {
		t.Run(dt.String(), func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatalf("NewVarBuilder(%s) did not panic", dt)
				}
				if msg := fmt.Sprint(r); !strings.Contains(msg, dt.String()) {
					t.Fatalf("NewVarBuilder(%s) panicked with %q, which does not name the type", dt, msg)
				}
			}()
			vec.NewVarBuilder(memory.NewGoAllocator(), dt)
		})
	}
	for _, dt := range vbTypes { // and does not panic on its own types
		vec.NewVarBuilder(memory.NewGoAllocator(), dt).Release()
	}
}

// TestNewBuilder checks the builder NewBuilder picks for a type, and that it builds
// arrays of that type through the Builder interface.
func TestNewBuilder(t *testing.T) {
	cases := []struct {
		dt   arrow.DataType
		want string // the builder's Go type
	}{
		{arrow.BinaryTypes.String, "*vec.VarBuilder"},
		{arrow.BinaryTypes.Binary, "*vec.VarBuilder"},
		{arrow.PrimitiveTypes.Int64, "*array.Int64Builder"},
		{arrow.BinaryTypes.LargeString, "*array.LargeStringBuilder"},
	}
	for _, c := range cases {
		t.Run(c.dt.String(), func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			b := vec.NewBuilder(mem, c.dt)
			defer b.Release()
			if got := fmt.Sprintf("%T", b); got != c.want {
				t.Fatalf("NewBuilder(%s) is a %s, want %s", c.dt, got, c.want)
			}
			switch c.dt.ID() {
			case arrow.STRING, arrow.BINARY:
				if _, ok := b.(*vec.VarBuilder); !ok {
					t.Fatalf("NewBuilder(%s) is a %T, want *vec.VarBuilder", c.dt, b)
				}
			case arrow.INT64:
				if _, ok := b.(*array.Int64Builder); !ok {
					t.Fatalf("NewBuilder(%s) is a %T, want *array.Int64Builder", c.dt, b)
				}
			}
			for range 2 {
				b.Reserve(3)
				b.AppendNull()
				b.AppendNull()
				if b.Len() != 2 {
					t.Fatalf("Len %d after 2 NULLs", b.Len())
				}
				a := b.NewArray()
				if !arrow.TypeEqual(a.DataType(), c.dt) || a.Len() != 2 || a.NullN() != 2 {
					t.Errorf("array of type %s, Len %d, NullN %d; want %s, 2, 2", a.DataType(), a.Len(), a.NullN(), c.dt)
				}
				a.Release()
				if b.Len() != 0 {
					t.Fatalf("Len %d after NewArray", b.Len())
				}
			}
		})
	}
}

// TestVarBuilderUnsafeAppendPastReserve checks that an UnsafeAppend the reservation
// does not cover panics instead of storing a truncated value.
func TestVarBuilderUnsafeAppendPastReserve(t *testing.T) {
	b := vec.NewVarBuilder(memory.NewGoAllocator(), arrow.BinaryTypes.String)
	defer b.Release()
	b.Reserve(2)
	b.ReserveData(2) // the buffer rounds up to 64 bytes
	b.UnsafeAppend([]byte("ab"))
	defer func() {
		if recover() == nil {
			t.Fatalf("UnsafeAppend of 100 bytes into %d reserved did not panic", 64-b.DataLen())
		}
	}()
	b.UnsafeAppend(bytes.Repeat([]byte{'x'}, 100))
}

// TestBatchBytes checks the reservation of a row decoder's var-width bytes: an eighth
// above n × per, never negative, bounded by vec.MaxBatchReserve even where n × per would
// overflow.
func TestBatchBytes(t *testing.T) {
	for _, tc := range []struct{ n, per, want int }{
		{0, 10, 0},
		{10, 0, 0},
		{-1, 10, 0},
		{10, -1, 0},
		{1, 1, 1},
		{4096, 100, 460800},
		{4096, 1 << 20, vec.MaxBatchReserve},
		{vec.MaxBatchReserve, 1, vec.MaxBatchReserve},
		{1 << 40, 1 << 40, vec.MaxBatchReserve},
		{math.MaxInt, math.MaxInt, vec.MaxBatchReserve},
	} {
		if got := vec.BatchBytes(tc.n, tc.per); got != tc.want {
			t.Errorf("BatchBytes(%d, %d) = %d, want %d", tc.n, tc.per, got, tc.want)
		}
	}
}

// TestVarBuilderNewArrayShrinks checks that a batch far smaller than its reservation
// does not pin the reservation: NewArray copies its bytes into a buffer of their size
// and frees the large one, and the array holds the same values. A batch that fills
// most of its buffer keeps it.
func TestVarBuilderNewArrayShrinks(t *testing.T) {
	for _, tc := range []struct {
		reserve, values int
		shrunk          bool
	}{
		{1 << 20, 3, true},
		{1 << 20, 0, true},
		{1 << 20, 1 << 14, false}, // 256 KiB of 1 MiB: a quarter, kept
		{64 << 10, 1, false},      // the spare capacity is not above 64 KiB
	} {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		b := vec.NewVarBuilder(mem, arrow.BinaryTypes.String)
		b.ReserveData(tc.reserve)
		for i := 0; i < tc.values; i++ {
			b.Append([]byte("0123456789abcdef"))
		}
		a := b.NewArray()
		if got, want := a.Len(), tc.values; got != want {
			t.Fatalf("%+v: %d values, want %d", tc, got, want)
		}
		for i := 0; i < a.Len(); i++ {
			if s := a.(*array.String).Value(i); s != "0123456789abcdef" {
				t.Fatalf("%+v: value %d is %q", tc, i, s)
			}
		}
		held := mem.CurrentAlloc()
		if shrunk := held < tc.reserve; shrunk != tc.shrunk {
			t.Errorf("%+v: the array holds %d bytes; shrunk %v, want %v", tc, held, shrunk, tc.shrunk)
		}
		a.Release()
		b.Release()
		mem.AssertSize(t, 0)
	}
}
