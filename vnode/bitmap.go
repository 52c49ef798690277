package vnode

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
)

// ErrCountMismatch is wrapped by the errors of operations that combine bitmaps over
// different vnode counts.
var ErrCountMismatch = errors.New("vnode counts differ")

// Bitmap is a set of vnodes of a table with a fixed vnode count: the vnodes an actor
// owns, the vnodes a backfill has completed, and so on. It wraps a roaring bitmap.
//
// Build a Bitmap with NewBitmap, Full, FromRange, Mapping.Bitmaps or UnmarshalBitmap;
// the zero Bitmap is not usable. And, Or, AndNot and Clone return new bitmaps and never
// share storage with their operands.
//
// Goroutines: a Bitmap is built once (constructors, then Add), then shared read-only.
// Every method except Add only reads, so any number of goroutines may call them on a
// bitmap that nobody mutates any more; Add while another goroutine uses the same bitmap
// is a data race. Constructors and the set operations return run-optimized bitmaps, and
// MarshalBinary run-optimizes a private clone when Add has been called since, so a
// shared bitmap is never changed behind its readers' backs.
type Bitmap struct {
	rb        *roaring.Bitmap
	count     int
	optimized bool // rb has been run-optimized since its last Add
}

func mustCount(count int) {
	if err := CheckCount(count); err != nil {
		panic("vnode: " + err.Error())
	}
}

func wrap(rb *roaring.Bitmap, count int) *Bitmap {
	rb.RunOptimize()
	return &Bitmap{rb: rb, count: count, optimized: true}
}

// NewBitmap returns the bitmap over count vnodes holding the given vnodes. It panics
// when count is out of 1..MaxCount or a vnode is not below count.
func NewBitmap(count int, vnodes ...Vnode) *Bitmap {
	mustCount(count)
	rb := roaring.New()
	for _, v := range vnodes {
		if int(v) >= count {
			panic(fmt.Sprintf("vnode: NewBitmap: vnode %d out of range 0..%d", v, count-1))
		}
		rb.Add(uint32(v))
	}
	return wrap(rb, count)
}

// Full returns the bitmap of every vnode 0..count-1. It panics when count is out of
// 1..MaxCount.
func Full(count int) *Bitmap {
	return FromRange(count, 0, count)
}

// FromRange returns the bitmap over count vnodes holding the vnodes lo..hi-1 (empty when
// lo == hi). It panics unless 0 <= lo <= hi <= count and count is in 1..MaxCount.
func FromRange(count, lo, hi int) *Bitmap {
	mustCount(count)
	if lo < 0 || lo > hi || hi > count {
		panic(fmt.Sprintf("vnode: FromRange(%d, %d, %d): want 0 <= lo <= hi <= count", count, lo, hi))
	}
	rb := roaring.New()
	rb.AddRange(uint64(lo), uint64(hi))
	return wrap(rb, count)
}

// Count is the vnode count the bitmap is over (not the number of members: see Len).
func (b *Bitmap) Count() int { return b.count }

// Len is the number of vnodes in the bitmap.
func (b *Bitmap) Len() int { return int(b.rb.GetCardinality()) }

// Contains reports whether v is in the bitmap (false for v >= Count()).
func (b *Bitmap) Contains(v Vnode) bool {
	return int(v) < b.count && b.rb.Contains(uint32(v))
}

// Add adds v. It panics when v >= Count(). Add mutates the bitmap: see the type's
// goroutine rules.
func (b *Bitmap) Add(v Vnode) {
	if int(v) >= b.count {
		panic(fmt.Sprintf("vnode: Bitmap.Add: vnode %d out of range 0..%d", v, b.count-1))
	}
	if b.rb.CheckedAdd(uint32(v)) {
		b.optimized = false
	}
}

// Clone returns an independent copy.
func (b *Bitmap) Clone() *Bitmap {
	return &Bitmap{rb: b.rb.Clone(), count: b.count, optimized: b.optimized}
}

// Iterate calls fn for every vnode in increasing order until fn returns false.
func (b *Bitmap) Iterate(fn func(v Vnode) bool) {
	b.rb.Iterate(func(x uint32) bool { return fn(Vnode(x)) })
}

// ToSlice returns the vnodes in increasing order (nil when empty).
func (b *Bitmap) ToSlice() []Vnode {
	n := b.Len()
	if n == 0 {
		return nil
	}
	out := make([]Vnode, 0, n)
	b.rb.Iterate(func(x uint32) bool {
		out = append(out, Vnode(x))
		return true
	})
	return out
}

// Equal reports whether both bitmaps are over the same vnode count and hold the same
// vnodes. Two nil bitmaps are equal.
func (b *Bitmap) Equal(o *Bitmap) bool {
	if b == nil || o == nil {
		return b == o
	}
	return b.count == o.count && b.rb.Equals(o.rb)
}

// Intersects reports whether the bitmaps share a vnode. Bitmaps over different vnode
// counts never intersect: their vnodes name different parts of the key space.
func (b *Bitmap) Intersects(o *Bitmap) bool {
	return b.count == o.count && b.rb.Intersects(o.rb)
}

func (b *Bitmap) sameCount(op string, o *Bitmap) error {
	if b.count != o.count {
		return fmt.Errorf("vnode bitmap %s: bitmaps over %d and %d vnodes: %w", op, b.count, o.count, ErrCountMismatch)
	}
	return nil
}

// And returns the vnodes in both bitmaps, or an error wrapping ErrCountMismatch when
// their vnode counts differ.
func (b *Bitmap) And(o *Bitmap) (*Bitmap, error) {
	if err := b.sameCount("And", o); err != nil {
		return nil, err
	}
	return wrap(roaring.And(b.rb, o.rb), b.count), nil
}

// Or returns the vnodes in either bitmap, or an error wrapping ErrCountMismatch when
// their vnode counts differ.
func (b *Bitmap) Or(o *Bitmap) (*Bitmap, error) {
	if err := b.sameCount("Or", o); err != nil {
		return nil, err
	}
	return wrap(roaring.Or(b.rb, o.rb), b.count), nil
}

// AndNot returns the vnodes of b that are not in o, or an error wrapping
// ErrCountMismatch when their vnode counts differ.
func (b *Bitmap) AndNot(o *Bitmap) (*Bitmap, error) {
	if err := b.sameCount("AndNot", o); err != nil {
		return nil, err
	}
	return wrap(roaring.AndNot(b.rb, o.rb), b.count), nil
}

// String lists the vnodes as sorted, merged ranges: "[0-15,32]"; "[]" when empty.
func (b *Bitmap) String() string {
	var sb strings.Builder
	sb.WriteByte('[')
	first := true
	lo, hi := -1, -1
	flush := func() {
		if lo < 0 {
			return
		}
		if !first {
			sb.WriteByte(',')
		}
		first = false
		sb.WriteString(strconv.Itoa(lo))
		if hi > lo {
			sb.WriteByte('-')
			sb.WriteString(strconv.Itoa(hi))
		}
	}
	b.rb.Iterate(func(x uint32) bool {
		v := int(x)
		if v == hi+1 && lo >= 0 {
			hi = v
			return true
		}
		flush()
		lo, hi = v, v
		return true
	})
	flush()
	sb.WriteByte(']')
	return sb.String()
}
