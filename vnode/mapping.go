package vnode

import (
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
)

// maxActors bounds the actor count of a Mapping: actor indexes are uint16.
const maxActors = 1 << 16

// Mapping assigns every vnode of a table to an actor of a fragment: m[v] is the index
// (0..n-1) of the actor that owns vnode v, and len(m) is the vnode count. A mapping is
// a plain slice: share it read-only, and copy it before changing it.
type Mapping []uint16

// EvenSplit assigns count vnodes to n actors in contiguous ranges whose sizes differ by
// at most one, the earlier actors taking the larger ones: actor 0 owns 0..k-1, actor 1
// the next range, and so on. count must be in 1..MaxCount and n in 1..count.
func EvenSplit(count, n int) (Mapping, error) {
	if err := CheckCount(count); err != nil {
		return nil, fmt.Errorf("even split: %w", err)
	}
	if n < 1 || n > count {
		return nil, fmt.Errorf("even split: %d actors for %d vnodes, want 1..%d", n, count, count)
	}
	m := make(Mapping, count)
	q, r := count/n, count%n
	v := 0
	for a := range n {
		size := q
		if a < r {
			size++
		}
		for range size {
			m[v] = uint16(a)
			v++
		}
	}
	return m, nil
}

// Actors is one more than the highest actor index in m (0 for an empty mapping): the
// actor count, when every actor owns at least one vnode.
func (m Mapping) Actors() int {
	if len(m) == 0 {
		return 0
	}
	return int(slices.Max(m)) + 1
}

// Validate checks that m maps count vnodes (count in 1..MaxCount) to actors 0..n-1.
// The error names the first vnode whose actor is out of range.
func (m Mapping) Validate(count, n int) error {
	if err := CheckCount(count); err != nil {
		return fmt.Errorf("vnode mapping: %w", err)
	}
	if len(m) != count {
		return fmt.Errorf("vnode mapping: maps %d vnodes, want %d", len(m), count)
	}
	if n < 1 || n > maxActors {
		return fmt.Errorf("vnode mapping: %d actors, want 1..%d", n, maxActors)
	}
	for v, a := range m {
		if int(a) >= n {
			return fmt.Errorf("vnode mapping: vnode %d maps to actor %d, want an actor in 0..%d", v, a, n-1)
		}
	}
	return nil
}

// Bitmaps returns the vnodes of each actor 0..n-1 (an actor that owns none gets an
// empty bitmap over len(m) vnodes). m must be valid for n actors (see Validate):
// Bitmaps panics otherwise. The bitmaps are disjoint and together hold every vnode.
func (m Mapping) Bitmaps(n int) []*Bitmap {
	if err := m.Validate(len(m), n); err != nil {
		panic("vnode: Mapping.Bitmaps: " + err.Error())
	}
	rbs := make([]*roaring.Bitmap, n)
	for a := range rbs {
		rbs[a] = roaring.New()
	}
	// Add each run of vnodes owned by one actor as a range.
	for lo := 0; lo < len(m); {
		hi := lo + 1
		for hi < len(m) && m[hi] == m[lo] {
			hi++
		}
		rbs[m[lo]].AddRange(uint64(lo), uint64(hi))
		lo = hi
	}
	out := make([]*Bitmap, n)
	for a, rb := range rbs {
		out[a] = wrap(rb, len(m))
	}
	return out
}

// sizes counts the vnodes of each actor 0..n-1 (m must be valid for n).
func (m Mapping) sizes(n int) []int {
	s := make([]int, n)
	for _, a := range m {
		s[a]++
	}
	return s
}

// Rebalance reassigns the vnodes of m, a mapping to from actors, to to actors, moving as
// few vnodes as possible, and returns the new mapping (m is not modified) and the number
// of vnodes whose actor changed. Actor i < min(from, to) is the same actor before and
// after; actors to..from-1 go away and lose every vnode. m need not be balanced; the
// result always is: every actor owns count/to or count/to+1 vnodes. to must be in
// 1..len(m).
//
// Each surviving actor keeps its lowest vnodes up to its target size; the vnodes freed
// by actors above their target or removed go, in increasing order, to the actors below
// their target, lowest actor first. The count/to+1 targets go to the actors that own the
// most vnodes (ties: the lower index).
//
// Why this is minimal: in any balanced result actor i owns some t_i in {q, q+1}
// (q = count/to, exactly count%to of them q+1), and at most min(c_i, t_i) of its c_i
// current vnodes can stay, so at least count - sum_i min(c_i, t_i) vnodes move. Keeping
// exactly min(c_i, t_i) per actor attains that bound for the chosen t, and the choice
// maximizes the sum: raising t_i from q to q+1 adds one exactly when c_i > q, and
// the actors owning the most have c_i > q whenever anyone among the rest does.
func Rebalance(m Mapping, from, to int) (Mapping, int, error) {
	count := len(m)
	if err := m.Validate(count, from); err != nil {
		return nil, 0, fmt.Errorf("rebalance %d to %d actors: %w", from, to, err)
	}
	if to < 1 || to > count {
		return nil, 0, fmt.Errorf("rebalance %d to %d actors: want 1..%d actors for %d vnodes", from, to, count, count)
	}
	cur := m.sizes(max(from, to))[:to]
	target := targets(cur, count)

	out := make(Mapping, count)
	kept := make([]int, to)
	var freed []int
	for v, a := range m {
		if int(a) < to && kept[a] < target[a] {
			kept[a]++
			out[v] = a
			continue
		}
		freed = append(freed, v)
	}
	a := 0
	for _, v := range freed {
		for kept[a] == target[a] {
			a++
		}
		kept[a]++
		out[v] = uint16(a)
	}
	return out, len(freed), nil
}

// targets returns the balanced sizes for actors that own cur[i] vnodes of count: q =
// count/len(cur) each, plus one for the count%len(cur) actors owning the most (ties:
// the lower index).
func targets(cur []int, count int) []int {
	n := len(cur)
	q, r := count/n, count%n
	t := make([]int, n)
	order := make([]int, n)
	for i := range t {
		t[i] = q
		order[i] = i
	}
	// Stable: equal sizes keep index order.
	slices.SortStableFunc(order, func(a, b int) int { return cur[b] - cur[a] })
	for _, i := range order[:r] {
		t[i]++
	}
	return t
}
