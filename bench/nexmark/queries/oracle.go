package queries

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Tables are the rows of the three Nexmark tables (Arrow records with the nexmark.yaml
// schemas, any chunking). A record may carry only the columns the evaluated query reads,
// in any order; Eval finds them by name.
type Tables struct{ Person, Auction, Bid []arrow.RecordBatch }

// Eval computes query name over t by a batch evaluation (hash joins and maps in plain
// Go), returning canonical rows in the query's Columns order. NULLs behave as in SQL: a
// NULL key never joins, MAX and COUNT(DISTINCT) ignore NULL, a comparison with NULL is
// not true, GROUP BY puts NULLs in one group.
//
// q0 and q7 return rows in input order; q4, q8 and q16 in sorted order. The rows do not
// reference t's memory.
func Eval(name string, t Tables) ([]Row, error) {
	switch name {
	case "q0":
		return evalQ0(t)
	case "q4":
		return evalQ4(t)
	case "q7":
		return evalQ7(t)
	case "q8":
		return evalQ8(t)
	case "q16":
		return evalQ16(t)
	}
	return nil, fmt.Errorf("queries: Eval: unknown query %q", name)
}

// colKind is the type of a column Eval reads.
type colKind uint8

const (
	kInt colKind = iota
	kString
	kTime
)

func (k colKind) String() string {
	return [...]string{"int64", "string", "timestamp"}[k]
}

// colSpec names a column Eval reads and its expected type.
type colSpec struct {
	name string
	kind colKind
}

// ints is an int64 column of one record (timestamps converted to microseconds).
type ints struct {
	v     []int64
	a     arrow.Array
	nulls bool
}

func (c ints) null(i int) bool { return c.nulls && c.a.IsNull(i) }

// strs is a string column of one record.
type strs struct {
	a     *array.String
	nulls bool
}

func (c strs) null(i int) bool { return c.nulls && c.a.IsNull(i) }

// cols is the columns of one record, in the order of the colSpecs that read them.
type cols struct {
	n    int
	ints []ints // the kInt and kTime columns, in spec order
	strs []strs // the kString columns, in spec order
}

// readTable checks that every record of table has the columns of specs with their types
// and returns them, typed.
func readTable(table string, recs []arrow.RecordBatch, specs ...colSpec) ([]cols, error) {
	out := make([]cols, 0, len(recs))
	for ri, r := range recs {
		c := cols{n: int(r.NumRows())}
		for _, s := range specs {
			idx := r.Schema().FieldIndices(s.name)
			if len(idx) == 0 {
				return nil, fmt.Errorf("queries: table %s: record %d has no column %q", table, ri, s.name)
			}
			a := r.Column(idx[0])
			bad := func() error {
				return fmt.Errorf("queries: table %s: column %q is %s, want %s", table, s.name, a.DataType(), s.kind)
			}
			switch s.kind {
			case kInt:
				x, ok := a.(*array.Int64)
				if !ok {
					return nil, bad()
				}
				c.ints = append(c.ints, ints{v: x.Int64Values(), a: a, nulls: a.NullN() > 0})
			case kTime:
				x, ok := a.(*array.Timestamp)
				if !ok {
					return nil, bad()
				}
				unit := x.DataType().(*arrow.TimestampType).Unit
				ts := x.TimestampValues()
				v := make([]int64, len(ts))
				for i, t := range ts {
					v[i] = toMicros(int64(t), unit)
				}
				c.ints = append(c.ints, ints{v: v, a: a, nulls: a.NullN() > 0})
			case kString:
				x, ok := a.(*array.String)
				if !ok {
					return nil, bad()
				}
				c.strs = append(c.strs, strs{a: x, nulls: a.NullN() > 0})
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func evalQ0(t Tables) ([]Row, error) {
	recs, err := readTable("bid", t.Bid,
		colSpec{"auction", kInt}, colSpec{"bidder", kInt}, colSpec{"price", kInt}, colSpec{"date_time", kTime})
	if err != nil {
		return nil, err
	}
	n := 0
	for _, c := range recs {
		n += c.n
	}
	out := make([]Row, 0, n)
	vals := make([]any, 4*n)
	for _, c := range recs {
		for i := 0; i < c.n; i++ {
			r := Row(vals[:4:4])
			vals = vals[4:]
			for k := range r {
				if !c.ints[k].null(i) {
					r[k] = c.ints[k].v[i]
				}
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// nint is a nullable int64 usable as a map key.
type nint struct {
	v    int64
	null bool
}

func (x nint) value() any {
	if x.null {
		return nil
	}
	return x.v
}

func intAt(c ints, i int) nint {
	if c.null(i) {
		return nint{null: true}
	}
	return nint{v: c.v[i]}
}

func evalQ4(t Tables) ([]Row, error) {
	auctions, err := readTable("auction", t.Auction,
		colSpec{"id", kInt}, colSpec{"category", kInt}, colSpec{"date_time", kTime}, colSpec{"expires", kTime})
	if err != nil {
		return nil, err
	}
	bids, err := readTable("bid", t.Bid,
		colSpec{"auction", kInt}, colSpec{"price", kInt}, colSpec{"date_time", kTime})
	if err != nil {
		return nil, err
	}
	// Build: auction id -> its rows (an id is unique in the generated data, but a
	// duplicate joins as SQL would: once per row).
	type auction struct {
		category       nint
		start, expires nint
		group          int // index in groups
	}
	type groupKey struct {
		id       int64
		category nint
	}
	type group struct {
		category nint
		max      int64
		hasMax   bool // some joined bid had a non-NULL price
	}
	byID := make(map[int64][]auction)
	groupOf := make(map[groupKey]int)
	var groups []group
	for _, c := range auctions {
		id, cat, start, exp := c.ints[0], c.ints[1], c.ints[2], c.ints[3]
		for i := 0; i < c.n; i++ {
			if id.null(i) {
				continue
			}
			k := groupKey{id.v[i], intAt(cat, i)}
			g, ok := groupOf[k]
			if !ok {
				g = len(groups)
				groupOf[k] = g
				groups = append(groups, group{category: k.category})
			}
			byID[k.id] = append(byID[k.id], auction{k.category, intAt(start, i), intAt(exp, i), g})
		}
	}
	// Probe; a group exists in the result only if some bid joined it.
	joined := make([]bool, len(groups))
	for _, c := range bids {
		auc, price, ts := c.ints[0], c.ints[1], c.ints[2]
		for i := 0; i < c.n; i++ {
			if auc.null(i) || ts.null(i) {
				continue
			}
			for _, a := range byID[auc.v[i]] {
				if a.start.null || a.expires.null || ts.v[i] < a.start.v || ts.v[i] > a.expires.v {
					continue
				}
				joined[a.group] = true
				if price.null(i) {
					continue
				}
				g := &groups[a.group]
				if !g.hasMax || price.v[i] > g.max {
					g.max, g.hasMax = price.v[i], true
				}
			}
		}
	}
	type avg struct {
		sum   float64
		count int64
	}
	byCat := make(map[nint]*avg)
	var cats []nint
	for gi, g := range groups {
		if !joined[gi] {
			continue
		}
		a := byCat[g.category]
		if a == nil {
			a = &avg{}
			byCat[g.category] = a
			cats = append(cats, g.category)
		}
		if g.hasMax {
			a.sum += float64(g.max)
			a.count++
		}
	}
	out := make([]Row, 0, len(cats))
	for _, cat := range cats {
		a := byCat[cat]
		var v any
		if a.count > 0 {
			v = a.sum / float64(a.count)
		}
		out = append(out, Row{cat.value(), v})
	}
	slices.SortFunc(out, compareRows)
	return out, nil
}

// windowStart is the start of the 10 s window holding ts (µs).
func windowStart(ts int64) int64 {
	return floorDiv(ts, WindowMicros) * WindowMicros
}

func evalQ7(t Tables) ([]Row, error) {
	bids, err := readTable("bid", t.Bid,
		colSpec{"auction", kInt}, colSpec{"price", kInt}, colSpec{"bidder", kInt}, colSpec{"date_time", kTime})
	if err != nil {
		return nil, err
	}
	// The max price of each window. A bid with a NULL date_time falls in the NULL
	// window, which no bid is BETWEEN, so it is left out; a NULL price is ignored by MAX.
	maxOf := make(map[int64]int64)
	for _, c := range bids {
		price, ts := c.ints[1], c.ints[3]
		for i := 0; i < c.n; i++ {
			if price.null(i) || ts.null(i) {
				continue
			}
			w := windowStart(ts.v[i])
			if m, ok := maxOf[w]; !ok || price.v[i] > m {
				maxOf[w] = price.v[i]
			}
		}
	}
	// A bid is BETWEEN the bounds of its own window, and also of the previous window
	// when it lies exactly on a boundary (window_end is inclusive): then it can match
	// twice.
	var out []Row
	for _, c := range bids {
		auc, price, bidder, ts := c.ints[0], c.ints[1], c.ints[2], c.ints[3]
		for i := 0; i < c.n; i++ {
			if price.null(i) || ts.null(i) {
				continue
			}
			w := windowStart(ts.v[i])
			matches := 0
			if m, ok := maxOf[w]; ok && m == price.v[i] {
				matches++
			}
			if ts.v[i] == w {
				if m, ok := maxOf[w-WindowMicros]; ok && m == price.v[i] {
					matches++
				}
			}
			for ; matches > 0; matches-- {
				out = append(out, Row{intAt(auc, i).value(), price.v[i], intAt(bidder, i).value(), ts.v[i]})
			}
		}
	}
	return out, nil
}

func evalQ8(t Tables) ([]Row, error) {
	persons, err := readTable("person", t.Person,
		colSpec{"id", kInt}, colSpec{"date_time", kTime}, colSpec{"name", kString})
	if err != nil {
		return nil, err
	}
	auctions, err := readTable("auction", t.Auction,
		colSpec{"seller", kInt}, colSpec{"date_time", kTime})
	if err != nil {
		return nil, err
	}
	// Groups with a NULL id, seller or window never join: leave them out.
	type sellerWindow struct{ seller, start int64 }
	sellers := make(map[sellerWindow]struct{})
	for _, c := range auctions {
		seller, ts := c.ints[0], c.ints[1]
		for i := 0; i < c.n; i++ {
			if seller.null(i) || ts.null(i) {
				continue
			}
			sellers[sellerWindow{seller.v[i], windowStart(ts.v[i])}] = struct{}{}
		}
	}
	type personGroup struct {
		id    int64
		name  string
		null  bool // name is NULL
		start int64
	}
	seen := make(map[personGroup]struct{})
	var out []Row
	for _, c := range persons {
		id, ts, name := c.ints[0], c.ints[1], c.strs[0]
		for i := 0; i < c.n; i++ {
			if id.null(i) || ts.null(i) {
				continue
			}
			w := windowStart(ts.v[i])
			if _, ok := sellers[sellerWindow{id.v[i], w}]; !ok {
				continue
			}
			k := personGroup{id: id.v[i], start: w}
			if name.null(i) {
				k.null = true
			} else {
				k.name = name.a.Value(i)
			}
			if _, dup := seen[k]; dup {
				continue
			}
			k.name = strings.Clone(k.name)
			seen[k] = struct{}{}
			var n any
			if !k.null {
				n = k.name
			}
			out = append(out, Row{k.id, n, k.start})
		}
	}
	slices.SortFunc(out, compareRows)
	return out, nil
}

// The q16 price buckets: rank 1 below 10,000, rank 2 from 10,000 to 999,999, rank 3
// from 1,000,000.
func priceRank(p int64) int {
	switch {
	case p < 10_000:
		return 1
	case p < 1_000_000:
		return 2
	}
	return 3
}

const dayMicros = 86_400_000_000

func evalQ16(t Tables) ([]Row, error) {
	bids, err := readTable("bid", t.Bid,
		colSpec{"auction", kInt}, colSpec{"bidder", kInt}, colSpec{"price", kInt}, colSpec{"date_time", kTime},
		colSpec{"channel", kString})
	if err != nil {
		return nil, err
	}
	type groupKey struct {
		channel  string
		chanNull bool
		day      nint // days since the epoch
	}
	type group struct {
		key       groupKey
		maxMinute int64 // minute of the day, -1 if none (all date_times NULL)
		bids      [4]int64
		bidders   [4]int64
		auctions  [4]int64
	}
	// The COUNT(DISTINCT)s sort (group, value, buckets) triples rather than fill a
	// map: at a million bids that is several times faster. bits holds 1 for the
	// total and 1<<rank for the price's bucket.
	type distinct struct {
		group int32
		bits  uint8
		v     int64
	}
	groupOf := make(map[groupKey]int32)
	var groups []group
	var bidders, auctions []distinct
	for _, c := range bids {
		auc, bidder, price, ts, ch := c.ints[0], c.ints[1], c.ints[2], c.ints[3], c.strs[0]
		for i := 0; i < c.n; i++ {
			var k groupKey
			if ch.null(i) {
				k.chanNull = true
			} else {
				k.channel = ch.a.Value(i)
			}
			minute := int64(-1)
			if ts.null(i) {
				k.day.null = true
			} else {
				k.day.v = floorDiv(ts.v[i], dayMicros)
				minute = (ts.v[i] - k.day.v*dayMicros) / 60_000_000
			}
			gi, ok := groupOf[k]
			if !ok {
				gi = int32(len(groups))
				k.channel = strings.Clone(k.channel)
				groupOf[k] = gi
				groups = append(groups, group{key: k, maxMinute: -1})
			}
			g := &groups[gi]
			g.maxMinute = max(g.maxMinute, minute)
			rank := 0 // the price's bucket, 0 if the price is NULL
			if !price.null(i) {
				rank = priceRank(price.v[i])
			}
			g.bids[0]++
			if rank > 0 {
				g.bids[rank]++
			}
			bits := uint8(1)
			if rank > 0 {
				bits |= 1 << rank
			}
			if !bidder.null(i) {
				bidders = append(bidders, distinct{gi, bits, bidder.v[i]})
			}
			if !auc.null(i) {
				auctions = append(auctions, distinct{gi, bits, auc.v[i]})
			}
		}
	}
	countDistinct := func(ds []distinct, counts func(g *group) *[4]int64) {
		slices.SortFunc(ds, func(a, b distinct) int {
			if c := cmp.Compare(a.group, b.group); c != 0 {
				return c
			}
			return cmp.Compare(a.v, b.v)
		})
		for lo := 0; lo < len(ds); {
			hi, bits := lo, uint8(0)
			for ; hi < len(ds) && ds[hi].group == ds[lo].group && ds[hi].v == ds[lo].v; hi++ {
				bits |= ds[hi].bits
			}
			into := counts(&groups[ds[lo].group])
			for b := range into {
				if bits&(1<<b) != 0 {
					into[b]++
				}
			}
			lo = hi
		}
	}
	countDistinct(bidders, func(g *group) *[4]int64 { return &g.bidders })
	countDistinct(auctions, func(g *group) *[4]int64 { return &g.auctions })
	out := make([]Row, 0, len(groups))
	for _, g := range groups {
		r := make(Row, 0, 15)
		if g.key.chanNull {
			r = append(r, nil)
		} else {
			r = append(r, g.key.channel)
		}
		if g.key.day.null {
			r = append(r, nil)
		} else {
			r = append(r, formatDay(g.key.day.v))
		}
		if g.maxMinute < 0 {
			r = append(r, nil)
		} else {
			r = append(r, fmt.Sprintf("%02d:%02d", g.maxMinute/60, g.maxMinute%60))
		}
		for _, counts := range [][4]int64{g.bids, g.bidders, g.auctions} {
			for _, n := range counts {
				r = append(r, n)
			}
		}
		out = append(out, r)
	}
	slices.SortFunc(out, compareRows)
	return out, nil
}
