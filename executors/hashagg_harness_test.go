package executors_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// The input of the hash agg tests: group keys k1 (int32, NULL possible) and k2
// (varchar), values x (int64), f (float64, multiples of 0.5 so that sums are exact), s
// (varchar), and the FILTER column flag (boolean); all values NULL now and then, every
// domain small so that groups and values collide.
var hgInSchema = arrow.NewSchema([]arrow.Field{
	{Name: "k1", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "k2", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "x", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "f", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "flag", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
}, nil)

const (
	hgK1 = iota
	hgK2
	hgX
	hgF
	hgS
	hgFlag
)

// hgRow is one input row; nil is NULL.
type hgRow [6]any

func hgAggs() []executors.AggCall {
	f := func(k executors.AggKind, col int) executors.AggCall { return executors.AggCall{Kind: k, Col: col} }
	fl := func(c executors.AggCall) executors.AggCall { c.HasFilter, c.Filter = true, hgFlag; return c }
	return []executors.AggCall{
		f(executors.AggCountStar, 0), f(executors.AggCount, hgX), f(executors.AggSum, hgX), f(executors.AggAvg, hgX),
		f(executors.AggMin, hgX), f(executors.AggMax, hgX), f(executors.AggSum, hgF), f(executors.AggAvg, hgF),
		f(executors.AggMin, hgS), f(executors.AggMax, hgF), f(executors.AggCountDistinct, hgX),
		fl(f(executors.AggCountStar, 0)), fl(f(executors.AggMax, hgX)), fl(f(executors.AggCountDistinct, hgS)),
		fl(f(executors.AggSum, hgX)), fl(f(executors.AggMin, hgS)),
	}
}

// hgBatch computes GROUP BY k1, k2 over rows from scratch: group key -> output row,
// both formatted.
func hgBatch(aggs []executors.AggCall, rows map[int]hgRow) map[string]string {
	groups := map[string][]hgRow{}
	for _, r := range rows {
		k := fmt.Sprint([]any{r[hgK1], r[hgK2]})
		groups[k] = append(groups[k], r)
	}
	out := map[string]string{}
	for k, rs := range groups {
		var vals []any
		for _, a := range aggs {
			var in []any // the counted values (or rows, for count(*))
			for _, r := range rs {
				if a.HasFilter && r[a.Filter] != true {
					continue
				}
				if a.Kind == executors.AggCountStar {
					in = append(in, true)
				} else if r[a.Col] != nil {
					in = append(in, r[a.Col])
				}
			}
			var v any
			switch a.Kind {
			case executors.AggCount, executors.AggCountStar:
				v = int64(len(in))
			case executors.AggCountDistinct:
				d := map[any]bool{}
				for _, x := range in {
					d[x] = true
				}
				v = int64(len(d))
			case executors.AggSum, executors.AggAvg:
				if len(in) == 0 {
					break
				}
				var si int64
				var sf float64
				for _, x := range in {
					switch x := x.(type) {
					case int64:
						si += x
					case float64:
						sf += x
					}
				}
				_, isF := in[0].(float64)
				switch {
				case a.Kind == executors.AggSum && isF:
					v = sf
				case a.Kind == executors.AggSum:
					v = si
				case isF:
					v = sf / float64(len(in))
				default:
					v = float64(si) / float64(len(in))
				}
			case executors.AggMin, executors.AggMax:
				for _, x := range in {
					if v == nil || hgLess(x, v) == (a.Kind == executors.AggMin) && x != v {
						v = x
					}
				}
			}
			vals = append(vals, v)
		}
		out[k] = fmt.Sprint(vals)
	}
	return out
}

func hgLess(a, b any) bool {
	switch a := a.(type) {
	case int64:
		return a < b.(int64)
	case float64:
		return a < b.(float64)
	case string:
		return a < b.(string)
	}
	panic(fmt.Sprintf("hgLess %T", a))
}

// hgCell is the Go value of an output cell, in the types hgBatch uses.
func hgCell(arr arrow.Array, i int) any {
	if arr.IsNull(i) {
		return nil
	}
	switch a := arr.(type) {
	case *array.Int32:
		return a.Value(i)
	case *array.Int64:
		return a.Value(i)
	case *array.Float64:
		return a.Value(i)
	case *array.String:
		return a.Value(i)
	case *array.Boolean:
		return a.Value(i)
	}
	panic(fmt.Sprintf("hgCell %T", arr))
}

// hgApplyOut applies an emitted changelog chunk to out (group key -> row), checking that
// it is exact: no insert of a present key, no delete or update of a missing or different
// row, no no-op update.
func hgApplyOut(out map[string]string, c *vec.Chunk, ngroup int) error {
	if err := vectest.ChangelogError(c); err != nil {
		return err
	}
	rec := c.Record()
	ops := c.Ops()
	var pendingOld string
	for i := 0; i < c.NumRows(); i++ {
		if !c.Visible(i) {
			continue
		}
		var key, vals []any
		for j := 0; j < int(rec.NumCols()); j++ {
			v := hgCell(rec.Column(j), i)
			if j < ngroup {
				key = append(key, v)
			} else {
				vals = append(vals, v)
			}
		}
		// The input's k1 is int32: hgBatch keys keep it as int32 too.
		k, v := fmt.Sprint(key), fmt.Sprint(vals)
		old, ok := out[k]
		switch ops[i] {
		case vec.Insert:
			if ok {
				return fmt.Errorf("row %d: insert of present group %s (holds %s)", i, k, old)
			}
			out[k] = v
		case vec.Delete, vec.UpdateDelete:
			if !ok || old != v {
				return fmt.Errorf("row %d: %v of group %s row %s, which holds %q (present %v)", i, ops[i], k, v, old, ok)
			}
			delete(out, k)
			pendingOld = v
		case vec.UpdateInsert:
			if v == pendingOld {
				return fmt.Errorf("row %d: no-op update of group %s to %s", i, k, v)
			}
			out[k] = v
		}
	}
	return nil
}

// hgSource is an input fed by the test as it goes. beforeBarrier, when set, runs
// once before the next barrier is handed out (after the chunks before it were read).
type hgSource struct {
	q             []executors.Message
	beforeBarrier func()
}

func (s *hgSource) Next(ctx context.Context) (executors.Message, error) {
	if len(s.q) == 0 {
		return executors.Message{}, fmt.Errorf("hgSource: empty")
	}
	m := s.q[0]
	s.q = s.q[1:]
	if m.Barrier != nil && s.beforeBarrier != nil {
		f := s.beforeBarrier
		s.beforeBarrier = nil
		f()
	}
	return m, nil
}

func (s *hgSource) Schema() *arrow.Schema { return hgInSchema }

func (s *hgSource) Close() error {
	for _, m := range s.q {
		m.Release()
	}
	s.q = nil
	return nil
}

// hgGen generates valid changelogs against a model of the live rows.
type hgGen struct {
	rng     *rand.Rand
	rows    map[int]hgRow
	nextID  int
	maxLive int // no inserts above this many live rows: groups empty out
}

func (g *hgGen) randRow() hgRow {
	rng := g.rng
	var r hgRow
	if rng.IntN(8) != 0 {
		r[hgK1] = int32(rng.IntN(3))
	}
	if rng.IntN(10) != 0 {
		r[hgK2] = []string{"a", "b"}[rng.IntN(2)]
	}
	if rng.IntN(6) != 0 {
		r[hgX] = int64(rng.IntN(11) - 5)
	}
	if rng.IntN(6) != 0 {
		r[hgF] = float64(rng.IntN(9)-4) / 2
	}
	if rng.IntN(6) != 0 {
		r[hgS] = []string{"", "p", "q", "qq", "z"}[rng.IntN(5)]
	}
	if rng.IntN(5) != 0 {
		r[hgFlag] = rng.IntN(2) == 0
	}
	return r
}

// pickDelete picks a live row to delete: often one that holds its group's max or min
// x, so that deleting the current extreme is common.
func (g *hgGen) pickDelete() (int, bool) {
	if len(g.rows) == 0 {
		return 0, false
	}
	ids := make([]int, 0, len(g.rows))
	for id := range g.rows {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	id := ids[g.rng.IntN(len(ids))]
	if g.rng.IntN(2) == 0 {
		// The row of the group of id with the largest (or smallest) x.
		r := g.rows[id]
		wantMax := g.rng.IntN(2) == 0
		best := id
		for _, o := range ids {
			q := g.rows[o]
			if q[hgK1] != r[hgK1] || q[hgK2] != r[hgK2] || q[hgX] == nil {
				continue
			}
			bx := g.rows[best][hgX]
			if bx == nil || (wantMax && q[hgX].(int64) > bx.(int64)) || (!wantMax && q[hgX].(int64) < bx.(int64)) {
				best = o
			}
		}
		id = best
	}
	return id, true
}

// chunk builds a chunk of about n rows: inserts, deletes, update pairs, plus invisible
// garbage rows; the model is updated.
func (g *hgGen) chunk(t testing.TB, mem memory.Allocator, n int) *vec.Chunk {
	tab := hgInTable()
	b := vec.NewChunkBuilder(mem, tab)
	defer b.Release()
	var vis []bool
	add := func(op vec.Op, r hgRow, visible bool) {
		if err := b.AppendRow(op, r[:]...); err != nil {
			t.Fatal(err)
		}
		vis = append(vis, visible)
	}
	for range n {
		switch p := g.rng.IntN(10); {
		case p < 4 && len(g.rows) < g.maxLive:
			r := g.randRow()
			g.rows[g.nextID] = r
			g.nextID++
			add(vec.Insert, r, true)
		case p < 7:
			if id, ok := g.pickDelete(); ok {
				add(vec.Delete, g.rows[id], true)
				delete(g.rows, id)
			}
		case p < 9:
			if id, ok := g.pickDelete(); ok {
				old := g.rows[id]
				nw := g.randRow()
				if g.rng.IntN(2) == 0 { // keep the group
					nw[hgK1], nw[hgK2] = old[hgK1], old[hgK2]
				}
				add(vec.UpdateDelete, old, true)
				if g.rng.IntN(4) == 0 {
					add(vec.Insert, g.randRow(), false) // invisible between the pair
				}
				add(vec.UpdateInsert, nw, true)
				g.rows[id] = nw
			}
		default:
			add([]vec.Op{vec.Insert, vec.Delete}[g.rng.IntN(2)], g.randRow(), false)
		}
	}
	c, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	vb := vec.NewBitmap(mem, len(vis))
	for i, v := range vis {
		if v {
			vb.Bytes()[i/8] |= 1 << (i % 8)
		}
	}
	out := c.WithVisibility(vb)
	c.Release()
	vb.Release()
	return out
}

func hgInTable() *schema.Table {
	t := &schema.Table{
		Name: "hg_in",
		Columns: []schema.Column{
			{Name: "k1", Type: schema.Type{Kind: schema.Int32}, Nullable: true},
			{Name: "k2", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
			{Name: "x", Type: schema.Type{Kind: schema.Int64}, Nullable: true},
			{Name: "f", Type: schema.Type{Kind: schema.Float64}, Nullable: true},
			{Name: "s", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
			{Name: "flag", Type: schema.Type{Kind: schema.Boolean}, Nullable: true},
		},
		PK:         []schema.KeyColumn{{Column: 0}},
		VnodeCount: 4,
	}
	return t // only for building chunks: not validated
}

// hgActor is a HashAgg with its state tables on a node.
type hgActor struct {
	src                       *hgSource
	agg                       *executors.HashAgg
	tables                    []*storage.StateTable // the group table and the multisets
	inserts, deletes, updates int                   // rows emitted
}

// checkRowCounts compares the store's row count of every vnode of the actor's state
// tables with the committed rows: the hash agg writes them with exact ops, which the
// checkpoint trusts instead of probing.
func (a *hgActor) checkRowCounts(t testing.TB, store *storage.Store) {
	t.Helper()
	view, err := store.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	for _, st := range a.tables {
		counts := make([]int64, st.Table().VnodeCount)
		for _, r := range mvRead(t, st, view) {
			counts[r.vn]++
		}
		for v, want := range counts {
			if got, err := store.RowCount(st.ID(), uint16(v)); err != nil || got != want {
				t.Fatalf("table %s: row count of vnode %d = %d (%v), want %d", st.Table().Name, v, got, err, want)
			}
		}
	}
}

func newHGActor(t testing.TB, node *storage.Node, mem memory.Allocator, cfg executors.HashAggConfig) *hgActor {
	t.Helper()
	st, err := executors.HashAggStateTable("hg_state", hgInSchema, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Node, cfg.Mem = node, mem
	cfg.State, err = storage.NewStateTable(node, 20, st, vnode.Full(st.VnodeCount))
	if err != nil {
		t.Fatal(err)
	}
	slots, err := executors.HashAggMultisetSlots(hgInSchema, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MultiSets = make([]*storage.StateTable, len(slots))
	for i := range slots {
		mt, err := executors.HashAggMultisetTable(fmt.Sprintf("hg_ms%d", i), hgInSchema, cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MultiSets[i], err = storage.NewStateTable(node, uint32(21+i), mt, vnode.Full(mt.VnodeCount))
		if err != nil {
			t.Fatal(err)
		}
	}
	src := &hgSource{}
	agg, err := executors.NewHashAgg(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := &hgActor{src: src, agg: agg, tables: []*storage.StateTable{cfg.State}}
	for _, mt := range cfg.MultiSets {
		if mt != nil {
			a.tables = append(a.tables, mt)
		}
	}
	return a
}

// run feeds msgs (ending with a barrier) and applies what comes out up to that barrier.
func (a *hgActor) run(t testing.TB, msgs []executors.Message, out map[string]string) {
	t.Helper()
	a.src.q = append(a.src.q, msgs...)
	for {
		m, err := a.agg.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if m.Barrier != nil {
			return
		}
		if m.Chunk == nil {
			t.Fatalf("unexpected message %v", m)
		}
		if m.Chunk.NumRows() == 0 {
			t.Fatal("empty chunk emitted")
		}
		for i, op := range m.Chunk.Ops() {
			if !m.Chunk.Visible(i) {
				continue
			}
			switch op {
			case vec.Insert:
				a.inserts++
			case vec.Delete:
				a.deletes++
			case vec.UpdateInsert:
				a.updates++
			}
		}
		err = hgApplyOut(out, m.Chunk, 2)
		m.Chunk.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func hgDiff(want, got map[string]string) string {
	var b strings.Builder
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	var ks []string
	for k := range keys {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		if want[k] != got[k] {
			fmt.Fprintf(&b, "\n  group %s: want %q got %q", k, want[k], got[k])
		}
	}
	return b.String()
}

func hgClone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func hgCloneRows(m map[int]hgRow) map[int]hgRow {
	out := make(map[int]hgRow, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
