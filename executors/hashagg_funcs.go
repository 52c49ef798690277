package executors

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// AggKind is the function of one aggregate of a HashAgg.
type AggKind uint8

// The aggregate functions.
const (
	AggCount         AggKind = iota // count(col): the non-NULL values; int64
	AggCountStar                    // count(*): the rows; int64
	AggSum                          // sum(col): int64 for integer input, float64 for float input; NULL when no value
	AggAvg                          // avg(col): float64; NULL when no value
	AggMin                          // min(col): the input type; NULL when no value
	AggMax                          // max(col): the input type; NULL when no value
	AggCountDistinct                // count(DISTINCT col): the distinct non-NULL values; int64
)

func (k AggKind) String() string {
	switch k {
	case AggCount:
		return "count"
	case AggCountStar:
		return "count_star"
	case AggSum:
		return "sum"
	case AggAvg:
		return "avg"
	case AggMin:
		return "min"
	case AggMax:
		return "max"
	case AggCountDistinct:
		return "count_distinct"
	}
	return fmt.Sprintf("AggKind(%d)", uint8(k))
}

// multiset reports whether the aggregate keeps a per-group multiset of its values.
func (k AggKind) multiset() bool { return k == AggMin || k == AggMax || k == AggCountDistinct }

// AggCall is one aggregate of a HashAgg.
type AggCall struct {
	Kind AggKind
	Col  int // input column (ignored by count(*))
	// HasFilter: only the rows whose boolean input column Filter is true (not false,
	// not NULL) count (SQL's FILTER (WHERE ...)).
	HasFilter bool
	Filter    int
	Name      string // output column name; "" gives <kind>_<index>
}

// hgSet is a group's multiset of one slot's column. A value whose key is packed
// (hgPackWidth) is found by the key's bytes as one integer, in fixed; the others by the
// key, in byKey. Either map is made on its first entry.
type hgSet struct {
	fixed map[uint64]*hgEntry
	byKey map[string]*hgEntry
	dir   []*hgEntry // entries with a dirty count, in first-touch order
	keys  int        // bytes of the entries' keys (for the state budget)
}

// hgEntry is one value of a multiset: its count for each aggregate of the slot.
type hgEntry struct {
	key    string  // its encoded value key (kept, so that a min/max shares it)
	cnt    []int64 // per aggregate of the slot: in inline for up to 4 of them
	inline [4]int64
	stored bool // the slot's multiset table holds the entry
	dirty  bool // a count changed since the last checkpoint (the entry is in its set's dir)
}

// newHgEntry returns the entry of value key k with n counts, in one allocation when n
// is at most 4 (the counts are read with the entry, in the same cache lines).
func newHgEntry(k []byte, n int) *hgEntry {
	e := &hgEntry{key: string(k)}
	if n <= len(e.inline) {
		e.cnt = e.inline[:n:n]
	} else {
		e.cnt = make([]int64, n)
	}
	return e
}

// counted is the index of the first aggregate that counts e (count > 0), or -1.
func (e *hgEntry) counted() int {
	return slices.IndexFunc(e.cnt, func(c int64) bool { return c > 0 })
}

// hgPackWidth is the length of every non-NULL value key of kind k when it is at most
// 9 bytes (the marker and at most 8 more), which pack into one uint64; 0 for the
// kinds of variable or longer keys.
func hgPackWidth(k schema.Kind) int {
	if w := vec.KeyWidth(schema.Type{Kind: k}); w <= 9 {
		return w
	}
	return 0
}

// hgPack is the bytes of k after its marker as one integer (k at most 9 bytes): keys of
// one length pack to distinct integers.
func hgPack[K ~string | ~[]byte](k K) uint64 {
	if len(k) == 9 {
		return binary.BigEndian.Uint64([]byte(k[1:]))
	}
	var v uint64
	for i := 1; i < len(k); i++ {
		v = v<<8 | uint64(k[i])
	}
	return v
}

// entry returns the entry of value key k, made with n counts when missing; w is the
// slot's hgPackWidth.
func (set *hgSet) entry(k []byte, n, w int) *hgEntry {
	if w > 0 && len(k) == w {
		p := hgPack(k)
		if e, ok := set.fixed[p]; ok {
			return e
		}
		if set.fixed == nil {
			set.fixed = map[uint64]*hgEntry{}
		}
		e := newHgEntry(k, n)
		set.fixed[p] = e
		set.keys += len(k)
		return e
	}
	if e, ok := set.byKey[keyString(k)]; ok {
		return e
	}
	if set.byKey == nil {
		set.byKey = map[string]*hgEntry{}
	}
	e := newHgEntry(k, n)
	set.byKey[e.key] = e
	set.keys += len(k)
	return e
}

// hgSortKey orders the entries of a packed slot (hgPackWidth above 0) as their keys
// do: by marker (a NULL's one byte; every value's is KeyValue), then by the value's
// packed bytes, which are of one length.
type hgSortKey struct {
	marker byte
	packed uint64
	e      *hgEntry
}

// sortEntries sorts es, entries of a slot whose hgPackWidth is w, by key; for a packed
// slot through buf, the entries' sort keys (kept for the next call).
func sortEntries(es []*hgEntry, w int, buf []hgSortKey) []hgSortKey {
	if w == 0 {
		slices.SortFunc(es, func(a, b *hgEntry) int { return strings.Compare(a.key, b.key) })
		return buf
	}
	buf = buf[:0]
	for _, e := range es {
		k := hgSortKey{marker: e.key[0], e: e}
		if len(e.key) == w {
			k.packed = hgPack(e.key)
		}
		buf = append(buf, k)
	}
	slices.SortFunc(buf, func(a, b hgSortKey) int {
		if c := cmp.Compare(a.marker, b.marker); c != 0 {
			return c
		}
		return cmp.Compare(a.packed, b.packed)
	})
	for i := range buf {
		es[i] = buf[i].e
		buf[i].e = nil
	}
	return buf
}

// drop removes e, an entry of the set whose slot's hgPackWidth is w.
func (set *hgSet) drop(e *hgEntry, w int) {
	set.keys -= len(e.key)
	if w > 0 && len(e.key) == w {
		delete(set.fixed, hgPack(e.key))
		return
	}
	delete(set.byKey, e.key)
}

// all yields every entry of the set.
func (set *hgSet) all(yield func(*hgEntry) bool) {
	for _, e := range set.fixed {
		if !yield(e) {
			return
		}
	}
	for _, e := range set.byKey {
		if !yield(e) {
			return
		}
	}
}

// hgAgg is the state of one aggregate of one group.
type hgAgg struct {
	n     int64 // count; non-NULL count (sum, avg, min, max); distinct count
	si    int64
	sf    float64
	ext   string // the current min/max (encoded value key), when extOK
	extOK bool
	stale bool // ext was deleted: rescan
}

// hgOut is one output value of an aggregate: NULL, an int64 (i), a float64's bits (f)
// or a min/max as its encoded value key (s).
type hgOut struct {
	null bool
	i    int64
	f    uint64
	s    string
}

// applyAgg folds aggregate a's input of the chunk's rows (rowG, sign set) into the
// groups: one switch per chunk, then a typed loop.
func (h *HashAgg) applyAgg(a int, rec arrow.RecordBatch) error {
	call := h.cfg.Aggs[a]
	n := len(h.sign)
	// counts[i]: the row's sign when it counts for the aggregate, else 0.
	cnt := h.counts
	copy(cnt, h.sign)
	if call.HasFilter {
		f := rec.Column(call.Filter).(*array.Boolean)
		for i := 0; i < n; i++ {
			if cnt[i] != 0 && (f.IsNull(i) || !f.Value(i)) {
				cnt[i] = 0
			}
		}
	}
	if call.Kind == AggCountStar {
		for i, s := range cnt {
			if s != 0 {
				h.rowG[i].aggs[a].n += s
			}
		}
		return nil
	}
	col := rec.Column(call.Col)
	if col.NullN() > 0 {
		for i := 0; i < n; i++ {
			if cnt[i] != 0 && col.IsNull(i) {
				cnt[i] = 0
			}
		}
	}
	switch call.Kind {
	case AggCount:
		for i, s := range cnt {
			if s != 0 {
				h.rowG[i].aggs[a].n += s
			}
		}
	case AggSum, AggAvg:
		switch arr := col.(type) {
		case *array.Int16:
			hgSumInts(h.rowG, a, cnt, arr.Int16Values())
		case *array.Int32:
			hgSumInts(h.rowG, a, cnt, arr.Int32Values())
		case *array.Int64:
			hgSumInts(h.rowG, a, cnt, arr.Int64Values())
		case *array.Float32:
			hgSumFloats(h.rowG, a, cnt, arr.Float32Values())
		case *array.Float64:
			hgSumFloats(h.rowG, a, cnt, arr.Float64Values())
		default:
			return fmt.Errorf("aggregate %d: cannot sum %s", a, col.DataType())
		}
	case AggMin, AggMax, AggCountDistinct:
		sl, j := h.slotOf[a], h.slotIdx[a]
		vals, ents, width, pw := &h.svals[sl], h.rowE[sl], len(h.slots[sl].aggs), h.slots[sl].pack
		for i, s := range cnt {
			if s == 0 {
				continue
			}
			g := h.rowG[i]
			set := &g.sets[sl]
			e := ents[i]
			if e == nil {
				e = set.entry(vals.At(i), width, pw)
				ents[i] = e
			}
			g.aggs[a].add(call.Kind, set, e, j, s)
			if e.cnt[j] < 0 {
				h.negative = append(h.negative, e)
			}
		}
	}
	return nil
}

func hgSumInts[T int16 | int32 | int64](rowG []*hgGroup, a int, cnt []int64, vals []T) {
	for i, s := range cnt {
		if s != 0 {
			st := &rowG[i].aggs[a]
			st.n += s
			st.si += s * int64(vals[i])
		}
	}
}

func hgSumFloats[T float32 | float64](rowG []*hgGroup, a int, cnt []int64, vals []T) {
	for i, s := range cnt {
		if s != 0 {
			st := &rowG[i].aggs[a]
			st.n += s
			st.sf += float64(s) * float64(vals[i])
		}
	}
}

// add adds s (+1 or -1 rows) to the count of e, an entry of set, for the aggregate
// (index j of its slot) whose state st is.
func (st *hgAgg) add(kind AggKind, set *hgSet, e *hgEntry, j int, s int64) {
	if !e.dirty {
		e.dirty = true
		set.dir = append(set.dir, e)
	}
	before := e.cnt[j]
	e.cnt[j] += s
	after := e.cnt[j]
	switch kind {
	case AggCountDistinct:
		if before <= 0 && after > 0 {
			st.n++
		} else if before > 0 && after <= 0 {
			st.n--
		}
	case AggMin, AggMax:
		st.n += s
		if s > 0 && after > 0 && !st.stale && (!st.extOK || hgBetter(kind, e.key, st.ext)) {
			st.ext, st.extOK = e.key, true
		}
		if s < 0 && after == 0 && st.extOK && st.ext == e.key {
			st.stale = true
		}
	}
}

// better reports whether value key a beats b for min (smaller) or max (larger): the
// memcomparable order is the value order.
func hgBetter(kind AggKind, a, b string) bool {
	if kind == AggMin {
		return a < b
	}
	return a > b
}

// extreme returns the current min/max, rescanning the multiset (set, the aggregate's
// counts at index j) when it was deleted.
func (st *hgAgg) extreme(kind AggKind, set *hgSet, j int) (string, bool) {
	if st.stale {
		st.stale, st.extOK, st.ext = false, false, ""
		for e := range set.all {
			if e.cnt[j] > 0 && (!st.extOK || hgBetter(kind, e.key, st.ext)) {
				st.ext, st.extOK = e.key, true
			}
		}
	}
	return st.ext, st.extOK
}

// outputs appends g's output values, one per aggregate.
func (h *HashAgg) outputs(g *hgGroup, out []hgOut) []hgOut {
	for a, call := range h.cfg.Aggs {
		st := &g.aggs[a]
		var o hgOut
		switch call.Kind {
		case AggCount, AggCountStar, AggCountDistinct:
			o.i = st.n
		case AggSum:
			if st.n == 0 {
				o.null = true
			} else if hgIsFloat(h.inTyp[a].Kind) {
				o.f = math.Float64bits(st.sf)
			} else {
				o.i = st.si
			}
		case AggAvg:
			if st.n == 0 {
				o.null = true
			} else if hgIsFloat(h.inTyp[a].Kind) {
				o.f = math.Float64bits(st.sf / float64(st.n))
			} else {
				o.f = math.Float64bits(float64(st.si) / float64(st.n))
			}
		case AggMin, AggMax:
			if k, ok := st.extreme(call.Kind, &g.sets[h.slotOf[a]], h.slotIdx[a]); ok {
				o.s = k
			} else {
				o.null = true
			}
		}
		out = append(out, o)
	}
	return out
}

func hgSameOutputs(a, b []hgOut) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
