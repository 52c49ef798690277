package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// uT is the second test table: id int64 pk, kref int64, w int64, flag boolean.
func uT() *schema.Table {
	return &schema.Table{
		Name: "u",
		Columns: []schema.Column{
			{Name: "id", Type: schema.Type{Kind: schema.Int64}},
			{Name: "kref", Type: schema.Type{Kind: schema.Int64}},
			{Name: "w", Type: schema.Type{Kind: schema.Int64}},
			{Name: "flag", Type: schema.Type{Kind: schema.Boolean}},
		},
		PK:         []schema.KeyColumn{{Column: 0}},
		VnodeCount: 16,
	}
}

type uRow struct {
	id, kref, w int64
	flag        bool
}

func uRecord(mem memory.Allocator, rows []uRow) arrow.RecordBatch {
	ib, kb, wb, fb := array.NewInt64Builder(mem), array.NewInt64Builder(mem), array.NewInt64Builder(mem), array.NewBooleanBuilder(mem)
	defer ib.Release()
	defer kb.Release()
	defer wb.Release()
	defer fb.Release()
	for _, r := range rows {
		ib.Append(r.id)
		kb.Append(r.kref)
		wb.Append(r.w)
		fb.Append(r.flag)
	}
	cols := []arrow.Array{ib.NewArray(), kb.NewArray(), wb.NewArray(), fb.NewArray()}
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	return array.NewRecordBatch(uT().ArrowSchema(), cols, int64(len(rows)))
}

// scanAll reads every row of name in snap as "col=value ..." lines, sorted.
func scanAll(t *testing.T, snap *engine.Snapshot, name string) []string {
	t.Helper()
	r, err := snap.Scan(context.Background(), name)
	if err != nil {
		t.Fatalf("scan %s: %v", name, err)
	}
	defer r.Release()
	var out []string
	for r.Next() {
		rec := r.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			var vals []string
			for c := 0; c < int(rec.NumCols()); c++ {
				vals = append(vals, rec.Schema().Field(c).Name+"="+vectest.FormatValue(rec.Column(c), i))
			}
			out = append(out, strings.Join(vals, " "))
		}
	}
	if err := r.Err(); err != nil {
		t.Fatalf("scan %s: %v", name, err)
	}
	sort.Strings(out)
	return out
}

func checkRows(t *testing.T, e *engine.Engine, name, when string, want []string) {
	t.Helper()
	snap, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	got := scanAll(t, snap, name)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: %s:\n got %q\nwant %q", when, name, got, want)
	}
}

func fmtS(s *string) string {
	if s == nil {
		return "NULL"
	}
	return strconv.Quote(*s)
}

func writeT(t *testing.T, e *engine.Engine, mem memory.Allocator, op func(context.Context, string, arrow.RecordBatch) error, rows ...kvRow) {
	t.Helper()
	rec := kvRecord(mem, rows)
	defer rec.Release()
	if err := op(context.Background(), "t", rec); err != nil {
		t.Fatal(err)
	}
}

func writeU(t *testing.T, e *engine.Engine, mem memory.Allocator, op func(context.Context, string, arrow.RecordBatch) error, rows ...uRow) {
	t.Helper()
	rec := uRecord(mem, rows)
	defer rec.Release()
	if err := op(context.Background(), "u", rec); err != nil {
		t.Fatal(err)
	}
}

// An Aggregate or Join plan that cannot run gets an error naming what is wrong, and
// changes nothing; the engine goes on working.
func TestBadAggJoinInput(t *testing.T) {
	ctx := context.Background()
	e, mem := kvEngine(t)
	if err := e.CreateTable(ctx, uT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	writeT(t, e, mem, e.Insert, kvRow{k: 1, v: 20, s: str("a")}, kvRow{k: 2, v: 5, s: str("b")})
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	before := catalogState(t, e)
	jobs := len(e.Progress())
	epoch := e.CommittedEpoch()

	col, as, agg := engine.Column, engine.As, engine.Agg
	scanT, scanU := engine.Scan("t"), engine.Scan("u")
	w := col("w")
	cases := []struct {
		name string
		plan engine.Plan
		want []string // substrings the error must contain
	}{
		{"unknown aggregate function", engine.Aggregate(scanT, []string{"s"}, agg("median", "v", "m")),
			[]string{`aggregate m = median(v)`, `unknown function "median"`}},
		{"aggregate over a missing column", engine.Aggregate(scanT, []string{"s"}, agg("sum", "nope", "x")),
			[]string{`aggregate x = sum(nope)`, `no column "nope"`}},
		{"group by a missing column", engine.Aggregate(scanT, []string{"nope"}, agg("count_star", "", "n")),
			[]string{`aggregate group by: no column "nope"`}},
		{"group by a column twice", engine.Aggregate(scanT, []string{"s", "s"}),
			[]string{`column "s" is grouped by twice`}},
		{"FILTER over a missing column", engine.Aggregate(scanT, []string{"s"}, agg("count_star", "", "n").Where("nope")),
			[]string{`aggregate n = count_star() filter: no column "nope"`}},
		{"FILTER column not boolean", engine.Aggregate(scanT, []string{"s"}, agg("count_star", "", "n").Where("v")),
			[]string{"aggregate n = count_star() FILTER (WHERE v)", "not boolean"}},
		{"sum over a string", engine.Aggregate(scanT, []string{"k"}, agg("sum", "s", "x")),
			[]string{"aggregate x = sum(s)", "is not an integer or float type"}},
		{"output name of a group-by column", engine.Aggregate(scanT, []string{"s"}, agg("count_star", "", "s")),
			[]string{`aggregate s = count_star()`, "needs a name of its own"}},
		{"duplicate output name", engine.Aggregate(scanT, []string{"s"}, agg("count_star", "", "n"), agg("sum", "v", "n")),
			[]string{`aggregate n = sum(v)`, "needs a name of its own"}},
		{"aggregate without an output name", engine.Aggregate(scanT, []string{"s"}, agg("sum", "v", "")),
			[]string{`aggregate  = sum(v)`, "needs a name of its own"}},
		{"global aggregate", engine.Aggregate(scanT, nil, agg("count_star", "", "n")),
			[]string{"global aggregate is not supported"}},
		{"join with mismatched key counts", engine.Join(scanT, scanU, []string{"k"}, []string{"id", "kref"}, nil),
			[]string{"join: 1 left and 2 right keys"}},
		{"join without keys", engine.Join(scanT, scanU, nil, nil, nil),
			[]string{"join: 0 left and 0 right keys"}},
		{"join whose inputs share a column", engine.Join(scanT, scanT, []string{"k"}, []string{"k"}, nil),
			[]string{`both inputs have a column "k"`}},
		{"join on a missing column", engine.Join(scanT, scanU, []string{"k"}, []string{"nope"}, nil),
			[]string{`join right key: no column "nope"`}},
		{"join key type mismatch", engine.Join(scanT, scanU, []string{"s"}, []string{"id"}, nil),
			[]string{"join: key s is utf8 but id is int64"}},
		{"join residual not boolean", engine.Join(scanT, scanU, []string{"k"}, []string{"kref"}, &w),
			[]string{"join residual w", "want boolean"}},
		{"join residual over a missing column", engine.Join(scanT, scanU, []string{"k"}, []string{"kref"}, func() *engine.Expr {
			x := engine.Call("less", col("v"), col("nope"))
			return &x
		}()), []string{`join residual less(v, nope)`, `no column "nope"`}},
		{"tumble with a non-constant size", engine.Aggregate(engine.Project(scanT, as(engine.Call("tumble_start", col("v"), col("k")), "ws")),
			[]string{"ws"}, agg("count_star", "", "n")),
			[]string{"tumble_start: the window size must be a positive integer constant", "not k"}},
		{"tumble with a zero size", engine.Project(scanT, as(engine.TumbleEnd(col("v"), 0), "we")),
			[]string{"tumble_end: the window size must be a positive integer constant", "not 0"}},
		{"tumble with a wrong argument count", engine.Project(scanT, as(engine.Call("tumble_start", col("v")), "ws")),
			[]string{"tumble_start takes 2 arguments, not 1"}},
		{"aggregate over a join with a bad key", engine.Aggregate(engine.Join(scanT, scanU, []string{"v"}, []string{"flag"}, nil), []string{"k"}),
			[]string{"join: key v is int64 but flag is bool"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := e.CreateMV(ctx, "bad", c.plan, engine.MVOptions{})
			if err == nil {
				t.Fatal("CreateMV succeeded")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q, want one containing %q", err, w)
				}
			}
			if got := catalogState(t, e); got != before {
				t.Fatalf("the catalog changed:\n%s\nwas:\n%s", got, before)
			}
			if got := len(e.Progress()); got != jobs {
				t.Fatalf("%d jobs, was %d", got, jobs)
			}
		})
	}
	if got := e.CommittedEpoch(); got != epoch {
		t.Fatalf("bad input committed a checkpoint: epoch %d, was %d", got, epoch)
	}

	// The engine still works: an aggregate view named like the failed ones.
	plan := engine.Aggregate(scanT, []string{"s"}, agg("count_star", "", "n"), agg("sum", "v", "sv"))
	if err := e.CreateMV(ctx, "bad", plan, engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	rows := map[int64]kvRow{1: {k: 1, v: 20, s: str("a")}, 2: {k: 2, v: 5, s: str("b")}}
	more := []kvRow{{k: 3, v: 7, s: str("a")}, {k: 4, v: -2, s: str("b")}, {k: 5, v: 100, s: str("c")}, {k: 6, v: 1, s: str("a")}}
	writeT(t, e, mem, e.Insert, more...)
	for _, r := range more {
		rows[r.k] = r
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	type acc struct{ n, sum int64 }
	groups := map[string]*acc{}
	for _, r := range rows {
		g := groups[*r.s]
		if g == nil {
			g = &acc{}
			groups[*r.s] = g
		}
		g.n++
		g.sum += r.v
	}
	var want []string
	for s, g := range groups {
		want = append(want, fmt.Sprintf("s=%q n=%d sv=%d", s, g.n, g.sum))
	}
	checkRows(t, e, "bad", "after the bad input", want)
	if got := len(e.Progress()); got != jobs+1 {
		t.Fatalf("%d jobs after a good view, want %d", got, jobs+1)
	}
}

// An aggregate view, a join view and an aggregate over a join follow their tables
// through inserts, deletes and updates made before and after they are created.
func TestAggJoinEndToEnd(t *testing.T) {
	ctx := context.Background()
	e, mem := kvEngine(t)
	if err := e.CreateTable(ctx, uT(), engine.TableOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	tRows := map[int64]kvRow{}
	uRows := map[int64]uRow{}
	insT := func(rows ...kvRow) {
		writeT(t, e, mem, e.Insert, rows...)
		for _, r := range rows {
			tRows[r.k] = r
		}
	}
	updT := func(rows ...kvRow) {
		writeT(t, e, mem, e.Update, rows...)
		for _, r := range rows {
			tRows[r.k] = r
		}
	}
	delT := func(ks ...int64) {
		var rows []kvRow
		for _, k := range ks {
			rows = append(rows, kvRow{k: k})
			delete(tRows, k)
		}
		writeT(t, e, mem, e.Delete, rows...)
	}
	insU := func(rows ...uRow) {
		writeU(t, e, mem, e.Insert, rows...)
		for _, r := range rows {
			uRows[r.id] = r
		}
	}
	updU := func(rows ...uRow) {
		writeU(t, e, mem, e.Update, rows...)
		for _, r := range rows {
			uRows[r.id] = r
		}
	}
	delU := func(ids ...int64) {
		var rows []uRow
		for _, id := range ids {
			rows = append(rows, uRow{id: id})
			delete(uRows, id)
		}
		writeU(t, e, mem, e.Delete, rows...)
	}

	insT(kvRow{k: 1, v: 20, s: str("a")}, kvRow{k: 2, v: 5, s: str("b")}, kvRow{k: 3, v: 15, s: str("a")},
		kvRow{k: 4, v: 8}, kvRow{k: 5, v: 30, s: str("b")}, kvRow{k: 6, v: 20, s: str("a")})
	insU(uRow{id: 10, kref: 1, w: 25, flag: true}, uRow{id: 11, kref: 1, w: 10}, uRow{id: 12, kref: 2, w: 6, flag: true},
		uRow{id: 13, kref: 4, w: 100}, uRow{id: 14, kref: 9, w: 1000, flag: true})
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}

	col, agg := engine.Column, engine.Agg
	aggPlan := engine.Aggregate(
		engine.Project(engine.Scan("t"), engine.As(col("s"), "s"), engine.As(col("v"), "v"),
			engine.As(engine.Call("greater", col("v"), engine.Int(10)), "big")),
		[]string{"s"},
		agg("count_star", "", "n"), agg("sum", "v", "sv"), agg("min", "v", "mn"), agg("max", "v", "mx"),
		agg("count_star", "", "nbig").Where("big"), agg("count_distinct", "v", "dv"))
	residual := engine.Call("less", col("v"), col("w"))
	joinPlan := func() engine.Plan {
		return engine.Join(engine.Scan("t"), engine.Scan("u"), []string{"k"}, []string{"kref"}, &residual)
	}
	jaggPlan := engine.Aggregate(joinPlan(), []string{"k"}, agg("count_star", "", "n"), agg("sum", "w", "sw"), agg("count", "id", "nf").Where("flag"))
	for _, v := range []struct {
		name string
		plan engine.Plan
		par  int
	}{{"agg", aggPlan, 2}, {"jn", joinPlan(), 3}, {"jagg", jaggPlan, 1}} {
		if err := e.CreateMV(ctx, v.name, v.plan, engine.MVOptions{Parallelism: v.par}); err != nil {
			t.Fatalf("create %s: %v", v.name, err)
		}
	}

	check := func(when string) {
		t.Helper()
		type acc struct {
			n, sum, mn, mx, nbig int64
			vs                   map[int64]bool
		}
		groups := map[string]*acc{}
		for _, r := range tRows {
			g := groups[fmtS(r.s)]
			if g == nil {
				g = &acc{mn: r.v, mx: r.v, vs: map[int64]bool{}}
				groups[fmtS(r.s)] = g
			}
			g.n++
			g.sum += r.v
			g.mn, g.mx = min(g.mn, r.v), max(g.mx, r.v)
			if r.v > 10 {
				g.nbig++
			}
			g.vs[r.v] = true
		}
		var want []string
		for s, g := range groups {
			want = append(want, fmt.Sprintf("s=%s n=%d sv=%d mn=%d mx=%d nbig=%d dv=%d", s, g.n, g.sum, g.mn, g.mx, g.nbig, len(g.vs)))
		}
		checkRows(t, e, "agg", when, want)

		want = nil
		type jacc struct{ n, sw, nf int64 }
		jg := map[int64]*jacc{}
		for _, l := range tRows {
			for _, r := range uRows {
				if l.k != r.kref || !(l.v < r.w) {
					continue
				}
				want = append(want, fmt.Sprintf("k=%d v=%d s=%s id=%d kref=%d w=%d flag=%t", l.k, l.v, fmtS(l.s), r.id, r.kref, r.w, r.flag))
				g := jg[l.k]
				if g == nil {
					g = &jacc{}
					jg[l.k] = g
				}
				g.n++
				g.sw += r.w
				if r.flag {
					g.nf++
				}
			}
		}
		checkRows(t, e, "jn", when, want)
		want = nil
		for k, g := range jg {
			want = append(want, fmt.Sprintf("k=%d n=%d sw=%d nf=%d", k, g.n, g.sw, g.nf))
		}
		checkRows(t, e, "jagg", when, want)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	check("after the backfill")

	// Changes after creation: new groups and matches, deletes that empty a group,
	// updates that move rows between groups and in and out of the join.
	insT(kvRow{k: 7, v: 3, s: str("c")}, kvRow{k: 9, v: 50, s: str("b")})
	insU(uRow{id: 15, kref: 7, w: 4}, uRow{id: 16, kref: 3, w: 16, flag: true}, uRow{id: 17, kref: 6, w: 19})
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	check("after inserts")

	delT(2, 7)                                                                   // b loses a row; c is empty; k=2 and 7 leave the join
	delU(10)                                                                     // k=1 loses a match
	updT(kvRow{k: 6, v: 18, s: str("b")}, kvRow{k: 4, v: 8, s: str("a")})        // 6 moves a->b and now matches id 17; 4 leaves the NULL group
	updU(uRow{id: 11, kref: 1, w: 21, flag: true}, uRow{id: 14, kref: 5, w: 31}) // 11 now matches k=1; 14 moves to k=5
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	check("after deletes and updates")

	// Several changes to the same rows in one epoch.
	updT(kvRow{k: 1, v: 40, s: str("a")})
	updT(kvRow{k: 1, v: 1, s: str("d")})
	delU(11)
	insU(uRow{id: 11, kref: 1, w: 2})
	delT(9)
	insT(kvRow{k: 9, v: 50, s: str("b")})
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	check("after repeated changes")
}
