package sim

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
)

// The simulated tables: a(k pk, g, v, s nullable), distributed by k, and b(id pk, w),
// the right side of the join view. Their vnode counts are chosen per seed.

func tableA(vnodes int) *schema.Table {
	return &schema.Table{
		Name: "a",
		Columns: []schema.Column{
			{Name: "k", Type: schema.Type{Kind: schema.Int64}},
			{Name: "g", Type: schema.Type{Kind: schema.Int64}},
			{Name: "v", Type: schema.Type{Kind: schema.Int64}},
			{Name: "s", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
		},
		PK:         []schema.KeyColumn{{Column: 0}},
		DistKey:    []int{0},
		VnodeCount: vnodes,
	}
}

func tableB(vnodes int) *schema.Table {
	return &schema.Table{
		Name: "b",
		Columns: []schema.Column{
			{Name: "id", Type: schema.Type{Kind: schema.Int64}},
			{Name: "w", Type: schema.Type{Kind: schema.Int64}},
		},
		PK:         []schema.KeyColumn{{Column: 0}},
		DistKey:    []int{0},
		VnodeCount: vnodes,
	}
}

// aRow and bRow are rows of the reference model.
type aRow struct {
	k, g, v int64
	s       *string
}

type bRow struct{ id, w int64 }

// state is the reference content of both tables.
type state struct {
	a map[int64]aRow
	b map[int64]bRow
}

func newState() state { return state{a: map[int64]aRow{}, b: map[int64]bRow{}} }

func (s state) clone() state { return state{a: maps.Clone(s.a), b: maps.Clone(s.b)} }

func recordA(mem memory.Allocator, t *schema.Table, rows []aRow) arrow.RecordBatch {
	kb, gb, vb, sb := array.NewInt64Builder(mem), array.NewInt64Builder(mem), array.NewInt64Builder(mem), array.NewStringBuilder(mem)
	defer kb.Release()
	defer gb.Release()
	defer vb.Release()
	defer sb.Release()
	for _, r := range rows {
		kb.Append(r.k)
		gb.Append(r.g)
		vb.Append(r.v)
		if r.s == nil {
			sb.AppendNull()
		} else {
			sb.Append(*r.s)
		}
	}
	return newRecord(t, kb.NewArray(), gb.NewArray(), vb.NewArray(), sb.NewArray())
}

func recordB(mem memory.Allocator, t *schema.Table, rows []bRow) arrow.RecordBatch {
	ib, wb := array.NewInt64Builder(mem), array.NewInt64Builder(mem)
	defer ib.Release()
	defer wb.Release()
	for _, r := range rows {
		ib.Append(r.id)
		wb.Append(r.w)
	}
	return newRecord(t, ib.NewArray(), wb.NewArray())
}

func newRecord(t *schema.Table, cols ...arrow.Array) arrow.RecordBatch {
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	return array.NewRecordBatch(t.ArrowSchema(), cols, int64(cols[0].Len()))
}

// row is one row of a table or view as the oracle sees it: column name to value
// (int64, string or nil for NULL).
type row map[string]any

func (s state) rowsA() []row {
	out := make([]row, 0, len(s.a))
	for _, r := range s.a {
		var sv any
		if r.s != nil {
			sv = *r.s
		}
		out = append(out, row{"k": r.k, "g": r.g, "v": r.v, "s": sv})
	}
	return out
}

func (s state) rowsB() []row {
	out := make([]row, 0, len(s.b))
	for _, r := range s.b {
		out = append(out, row{"id": r.id, "w": r.w})
	}
	return out
}

// format renders a row as "col=value ..." in the order of cols (values formatted as
// vectest.FormatValue does: integers in decimal, strings quoted, NULL).
func format(r row, cols []string) string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(c)
		b.WriteByte('=')
		switch v := r[c].(type) {
		case nil:
			b.WriteString("NULL")
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		case string:
			b.WriteString(strconv.Quote(v))
		default:
			b.WriteString("?")
		}
	}
	return b.String()
}

// shape is one kind of materialized view the simulation builds, with its batch
// evaluation: the oracle.
type shape struct {
	name string
	// upstreams are the objects the plan scans, left to right.
	upstreams []string
	plan      func() engine.Plan
	// eval evaluates the view's query over the rows of each upstream.
	eval func(ins [][]row) []row
}

var shapes = []shape{
	{
		name:      "pass",
		upstreams: []string{"a"},
		plan:      func() engine.Plan { return engine.Scan("a") },
		eval:      func(ins [][]row) []row { return ins[0] },
	},
	{
		name:      "filt",
		upstreams: []string{"a"},
		plan: func() engine.Plan {
			return engine.Project(engine.Filter(engine.Scan("a"), engine.Call("greater", engine.Column("v"), engine.Int(500))),
				engine.As(engine.Column("k"), "k"), engine.As(engine.Column("v"), "v"), engine.As(engine.Column("s"), "s"))
		},
		eval: func(ins [][]row) []row {
			var out []row
			for _, r := range ins[0] {
				if r["v"].(int64) > 500 {
					out = append(out, row{"k": r["k"], "v": r["v"], "s": r["s"]})
				}
			}
			return out
		},
	},
	{
		name:      "agg",
		upstreams: []string{"a"},
		plan: func() engine.Plan {
			return engine.Aggregate(engine.Scan("a"), []string{"g"},
				engine.Agg("count_star", "", "n"), engine.Agg("count", "s", "ns"), engine.Agg("sum", "v", "sv"),
				engine.Agg("min", "v", "mn"), engine.Agg("max", "v", "mx"))
		},
		eval: func(ins [][]row) []row {
			groups := map[int64]row{}
			for _, r := range ins[0] {
				g, v := r["g"].(int64), r["v"].(int64)
				o, ok := groups[g]
				if !ok {
					o = row{"g": g, "n": int64(0), "ns": int64(0), "sv": int64(0), "mn": v, "mx": v}
					groups[g] = o
				}
				o["n"] = o["n"].(int64) + 1
				if r["s"] != nil {
					o["ns"] = o["ns"].(int64) + 1
				}
				o["sv"] = o["sv"].(int64) + v
				o["mn"] = min(o["mn"].(int64), v)
				o["mx"] = max(o["mx"].(int64), v)
			}
			return slices.Collect(maps.Values(groups))
		},
	},
	{
		// The view keeps the join key g as a hidden column of its pk.
		name:      "join",
		upstreams: []string{"a", "b"},
		plan: func() engine.Plan {
			return engine.Project(engine.Join(engine.Scan("a"), engine.Scan("b"), []string{"g"}, []string{"id"}, nil),
				engine.As(engine.Column("k"), "k"), engine.As(engine.Column("id"), "id"),
				engine.As(engine.Column("v"), "v"), engine.As(engine.Column("w"), "w"))
		},
		eval: func(ins [][]row) []row {
			right := map[int64][]row{}
			for _, r := range ins[1] {
				id := r["id"].(int64)
				right[id] = append(right[id], r)
			}
			var out []row
			for _, l := range ins[0] {
				for _, r := range right[l["g"].(int64)] {
					out = append(out, row{"k": l["k"], "id": r["id"], "v": l["v"], "w": r["w"], "g": l["g"]})
				}
			}
			return out
		},
	},
	{
		// A view over the view "pass".
		name:      "mvmv",
		upstreams: []string{"pass"},
		plan: func() engine.Plan {
			return engine.Filter(engine.Scan("pass"), engine.Call("less", engine.Column("v"), engine.Int(700)))
		},
		eval: func(ins [][]row) []row {
			var out []row
			for _, r := range ins[0] {
				if r["v"].(int64) < 700 {
					out = append(out, r)
				}
			}
			return out
		},
	},
}
