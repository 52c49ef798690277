package engine

// Fuzz targets for the engine's public entry points: the writes (Insert, Upsert,
// Update, Delete) with random records, and CreateMV with random plans and options.
// Each call returns nil or an error and never panics, in the caller or in an actor;
// a write that returns nil is in the next checkpoint, and a view that is created
// backfills and keeps the engine healthy (or its error names what is wrong).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/schema"
)

// fuzzBytes hands out the fuzzer's bytes one decision at a time; once they run out
// every decision is 0.
type fuzzBytes struct{ b []byte }

func (f *fuzzBytes) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

// n is a decision in [0, k).
func (f *fuzzBytes) n(k int) int { return int(f.byte()) % k }

func (f *fuzzBytes) int64() int64 {
	switch f.n(8) {
	case 0:
		return math.MaxInt64
	case 1:
		return math.MinInt64
	case 2:
		return 0
	}
	var v int64
	for range 8 {
		v = v<<8 | int64(f.byte())
	}
	return v >> (f.n(64))
}

func (f *fuzzBytes) str() string {
	return strings.Repeat(string(rune('a'+f.n(26))), f.n(5))
}

func pick[T any](f *fuzzBytes, xs ...T) T { return xs[f.n(len(xs))] }

// fuzzTables are the tables the targets write and plan over: every column type, a
// composite pk with DESC and NULLS FIRST, nullable and NOT NULL columns.
func fuzzTables() []*schema.Table {
	return []*schema.Table{
		{Name: "t", Columns: []schema.Column{
			{Name: "k", Type: schema.Type{Kind: schema.Int64}},
			{Name: "v", Type: schema.Type{Kind: schema.Int64}},
			{Name: "s", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
		}, PK: []schema.KeyColumn{{Column: 0}}, VnodeCount: 8},
		{Name: "w", Columns: []schema.Column{
			{Name: "a", Type: schema.Type{Kind: schema.Int32}},
			{Name: "b", Type: schema.Type{Kind: schema.Varchar}},
			{Name: "c", Type: schema.Type{Kind: schema.Boolean}, Nullable: true},
			{Name: "d", Type: schema.Type{Kind: schema.Decimal, Precision: 12, Scale: 2}, Nullable: true},
			{Name: "ts", Type: schema.Type{Kind: schema.Timestamp}},
			{Name: "f", Type: schema.Type{Kind: schema.Float64}, Nullable: true},
			{Name: "by", Type: schema.Type{Kind: schema.Bytea}, Nullable: true},
			{Name: "dt", Type: schema.Type{Kind: schema.Date}, Nullable: true},
			{Name: "i16", Type: schema.Type{Kind: schema.Int16}, Nullable: true},
		}, PK: []schema.KeyColumn{{Column: 1, Desc: true}, {Column: 0, NullsFirst: true}}, DistKey: []int{0}, VnodeCount: 4},
	}
}

var fuzzColumnNames = []string{"k", "v", "s", "a", "b", "c", "d", "ts", "f", "by", "dt", "i16", "x", "", "K"}

func quietTestLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fuzzEngine opens an engine on a memory file system with the fuzz tables, barriers
// on demand only.
func fuzzEngine(tb testing.TB) *Engine {
	ctx := context.Background()
	e, err := Open(ctx, "db", Options{FS: vfs.NewMem(), BarrierInterval: -1, ChannelCapacity: 4, ChunkSize: 8,
		CacheSize: 1 << 20, MemTableSize: 1 << 20, Logger: quietTestLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	for _, t := range fuzzTables() {
		if err := e.CreateTable(ctx, t, TableOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	return e
}

// fuzzArray is an array of n values of a type the fuzzer picks: every type of the
// tables, some with another unit or time zone, and types no table has (nested,
// dictionary, null).
func fuzzArray(f *fuzzBytes, mem memory.Allocator, n int) arrow.Array {
	types := []arrow.DataType{
		arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int16,
		arrow.BinaryTypes.String, arrow.BinaryTypes.LargeString, arrow.BinaryTypes.Binary,
		arrow.FixedWidthTypes.Boolean, arrow.PrimitiveTypes.Float64, arrow.PrimitiveTypes.Float32,
		&arrow.TimestampType{Unit: arrow.Microsecond}, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"},
		&arrow.TimestampType{Unit: arrow.Nanosecond}, arrow.FixedWidthTypes.Date32,
		&arrow.Decimal128Type{Precision: 12, Scale: 2}, &arrow.Decimal128Type{Precision: 38, Scale: 0},
		arrow.ListOf(arrow.PrimitiveTypes.Int64),
		arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true}),
		&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String},
		arrow.Null,
	}
	dt := types[f.n(len(types))]
	nullEvery := f.n(4) // 0: no NULLs
	b := array.NewBuilder(mem, dt)
	defer b.Release()
	for i := range n {
		if nullEvery > 0 && i%nullEvery == 0 {
			b.AppendNull()
			continue
		}
		switch b := b.(type) {
		case *array.Int64Builder:
			b.Append(f.int64())
		case *array.Int32Builder:
			b.Append(int32(f.int64()))
		case *array.Int16Builder:
			b.Append(int16(f.int64()))
		case *array.StringBuilder:
			b.Append(f.str())
		case *array.LargeStringBuilder:
			b.Append(f.str())
		case *array.BinaryBuilder:
			b.Append([]byte(f.str()))
		case *array.BooleanBuilder:
			b.Append(f.n(2) == 1)
		case *array.Float64Builder:
			b.Append(pick(f, 0, math.NaN(), math.Inf(1), math.Copysign(0, -1), float64(f.int64())))
		case *array.Float32Builder:
			b.Append(float32(f.int64()))
		case *array.TimestampBuilder:
			b.Append(arrow.Timestamp(f.int64()))
		case *array.Date32Builder:
			b.Append(arrow.Date32(f.int64()))
		case *array.Decimal128Builder:
			b.Append(decimal128.FromI64(f.int64()))
		default:
			b.AppendEmptyValue()
		}
	}
	return b.NewArray()
}

// fuzzRecord is a record the fuzzer builds: nil, or up to 6 columns of picked names
// and types, with a row count that may not be the columns' (a caller's own
// RecordBatch may lie).
func fuzzRecord(f *fuzzBytes, mem memory.Allocator) arrow.RecordBatch {
	if f.n(16) == 0 {
		return nil
	}
	cols := f.n(7)
	rows := f.n(12)
	var fields []arrow.Field
	var arrs []arrow.Array
	for range cols {
		n := rows
		if f.n(8) == 0 {
			n = f.n(12)
		}
		a := fuzzArray(f, mem, n)
		fields = append(fields, arrow.Field{Name: pick(f, fuzzColumnNames...), Type: a.DataType(), Nullable: true})
		arrs = append(arrs, a)
	}
	defer func() {
		for _, a := range arrs {
			a.Release()
		}
	}()
	same := true
	for _, a := range arrs {
		same = same && a.Len() == rows
	}
	if same {
		return array.NewRecordBatch(arrow.NewSchema(fields, nil), arrs, int64(rows))
	}
	return &fuzzLyingRecord{fields: fields, arrs: retained(arrs), rows: int64(rows)}
}

func retained(arrs []arrow.Array) []arrow.Array {
	for _, a := range arrs {
		a.Retain()
	}
	return arrs
}

// fuzzLyingRecord is an arrow.RecordBatch whose columns are not all NumRows long.
type fuzzLyingRecord struct {
	fields []arrow.Field
	arrs   []arrow.Array
	rows   int64
}

func (r *fuzzLyingRecord) Release() {
	for _, a := range r.arrs {
		a.Release()
	}
	r.arrs = nil
}
func (r *fuzzLyingRecord) Retain()                  {}
func (r *fuzzLyingRecord) Schema() *arrow.Schema    { return arrow.NewSchema(r.fields, nil) }
func (r *fuzzLyingRecord) NumRows() int64           { return r.rows }
func (r *fuzzLyingRecord) NumCols() int64           { return int64(len(r.arrs)) }
func (r *fuzzLyingRecord) Columns() []arrow.Array   { return r.arrs }
func (r *fuzzLyingRecord) Column(i int) arrow.Array { return r.arrs[i] }
func (r *fuzzLyingRecord) ColumnName(i int) string  { return r.fields[i].Name }
func (r *fuzzLyingRecord) SetColumn(int, arrow.Array) (arrow.RecordBatch, error) {
	return nil, errors.New("not supported")
}
func (r *fuzzLyingRecord) NewSlice(i, j int64) arrow.RecordBatch { return r }
func (r *fuzzLyingRecord) MarshalJSON() ([]byte, error)          { return nil, errors.New("not supported") }

// fuzzWriteSeeds are inputs that make good records of both tables, among others.
var fuzzWriteSeeds = [][]byte{
	{1, 0, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 3, 1, 2},
	{0, 1, 3, 2, 0, 0, 3, 0, 1, 2, 3},
	{2, 0, 1, 3, 0, 0, 0, 0},
	{3, 1, 9, 5, 1, 3, 2},
}

// FuzzWrite: every write of a random record into either table, of each kind, returns
// nil or an error and never panics; every nil is a promise that the next checkpoint
// commits (an actor failing on an acknowledged write would break it).
func FuzzWrite(f *testing.F) {
	for _, s := range fuzzWriteSeeds {
		f.Add(s)
	}
	e := fuzzEngine(f)
	defer e.Close()
	mem := memory.NewGoAllocator()
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		fb := &fuzzBytes{b: data}
		table := pick(fb, "t", "w", "nope")
		writes := []func(context.Context, string, arrow.RecordBatch) error{e.Insert, e.Upsert, e.Update, e.Delete}
		write := writes[fb.n(len(writes))]
		rec := fuzzRecord(fb, mem)
		err := write(ctx, table, rec)
		if rec != nil {
			rec.Release()
		}
		if err != nil {
			if !strings.Contains(err.Error(), table) {
				t.Fatalf("error %q does not name table %s", err, table)
			}
			return
		}
		if _, err := e.WaitCheckpoint(ctx); err != nil {
			t.Fatalf("a write into %s returned nil, and the checkpoint after it failed: %v", table, err)
		}
	})
}

// fuzzExpr is an expression over the fuzz tables' columns (and missing ones), of
// Arrow's functions, Weir's own and unknown ones.
func fuzzExpr(f *fuzzBytes, depth int) Expr {
	if depth > 3 {
		return Column(pick(f, fuzzColumnNames...))
	}
	switch f.n(8) {
	case 0, 1:
		return Column(pick(f, fuzzColumnNames...))
	case 2:
		return Int(f.int64())
	case 3:
		return pick(f, Float(math.NaN()), Float(1.5), String(f.str()), Bool(f.n(2) == 1))
	case 4:
		return Expr{Op: pick(f, "", "col", "call", "nope"), Name: pick(f, fuzzColumnNames...)}
	}
	fn := pick(f, "greater", "less", "equal", "add", "multiply", "divide", "subtract", "and", "or", "invert",
		"day", "time_of_day_hhmm", "between", "tumble_start", "tumble_end", "cast", "no_such_fn", "")
	args := make([]Expr, f.n(4))
	for i := range args {
		args[i] = fuzzExpr(f, depth+1)
	}
	return Call(fn, args...)
}

// fuzzPlan is a plan tree over the fuzz tables, the views made so far and missing
// names, with nil and typed-nil inputs.
func fuzzPlan(f *fuzzBytes, depth int, views []string) Plan {
	names := append([]string{"t", "w", "nope", ""}, views...)
	if depth > 3 {
		return Scan(pick(f, names...))
	}
	col := func() string { return pick(f, fuzzColumnNames...) }
	cols := func() []string {
		out := make([]string, f.n(3))
		for i := range out {
			out[i] = col()
		}
		return out
	}
	switch f.n(10) {
	case 0, 1, 2:
		return Scan(pick(f, names...))
	case 3:
		return Filter(fuzzPlan(f, depth+1, views), fuzzExpr(f, 0))
	case 4:
		named := make([]NamedExpr, f.n(4))
		for i := range named {
			named[i] = As(fuzzExpr(f, 0), pick(f, fuzzColumnNames...))
		}
		return Project(fuzzPlan(f, depth+1, views), named...)
	case 5:
		aggs := make([]AggExpr, f.n(3))
		for i := range aggs {
			aggs[i] = Agg(pick(f, "count", "count_star", "sum", "avg", "min", "max", "count_distinct", "median"), col(), pick(f, "n", "m", "k", ""))
			if f.n(3) == 0 {
				aggs[i] = aggs[i].Where(col())
			}
		}
		return Aggregate(fuzzPlan(f, depth+1, views), cols(), aggs...)
	case 6:
		var residual *Expr
		if f.n(2) == 0 {
			r := fuzzExpr(f, 0)
			residual = &r
		}
		return Join(fuzzPlan(f, depth+1, views), fuzzPlan(f, depth+1, views), cols(), cols(), residual)
	case 7:
		return pick[Plan](f, (*ScanPlan)(nil), (*FilterPlan)(nil), (*ProjectPlan)(nil), (*AggregatePlan)(nil), (*JoinPlan)(nil))
	case 8:
		return pick[Plan](f, Filter(nil, Bool(true)), Project(nil), Aggregate(nil, nil), Join(nil, Scan("t"), nil, nil, nil))
	}
	return nil
}

func fuzzMVOptions(f *fuzzBytes) MVOptions {
	o := MVOptions{
		Parallelism: pick(f, 0, 1, 2, 3, -1, 9, 1<<20),
		Backfill:    pick(f, "", ArrangementBackfill, NoShuffleBackfill, BackfillKind("magic")),
		Paused:      f.n(4) == 0,
		Background:  f.n(2) == 0,
	}
	switch f.n(5) {
	case 1:
		o.RateLimit = RowsPerSecond(0)
	case 2:
		o.RateLimit = RowsPerSecond(-1)
	case 3:
		o.RateLimit = RowsPerSecond(1 << 40)
	}
	return o
}

// FuzzCreateMV: CreateMV of a random plan with random options returns nil or an
// error naming the view, and never panics. A view it creates is healthy: the next
// checkpoints commit and its backfill finishes (unless paused) or the view is
// dropped; a refused one leaves nothing behind.
func FuzzCreateMV(f *testing.F) {
	for _, s := range [][]byte{{0}, {3, 0, 0, 0, 0, 0}, {5, 0, 0, 0, 1, 2}, {6, 0, 0, 0, 1, 0}, {7, 1}, {8, 2}, {9}, {4, 1, 0, 0, 0}} {
		f.Add(s)
	}
	st := &createMVFuzz{e: fuzzEngine(f)}
	defer func() { st.e.Close() }()
	f.Fuzz(st.run)
}

// createMVFuzz is FuzzCreateMV's engine and the views it keeps, from input to input.
type createMVFuzz struct {
	e     *Engine
	views []string
	n     int
}

func (st *createMVFuzz) run(t *testing.T, data []byte) {
	ctx := context.Background()
	e := st.e
	fb := &fuzzBytes{b: data}
	plan := fuzzPlan(fb, 0, st.views)
	opts := fuzzMVOptions(fb)
	st.n++
	name := fmt.Sprintf("mv%d", st.n)
	e.mu.Lock()
	objects := len(e.cat.objects)
	e.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := e.CreateMV(wctx, name, plan, opts)
	if err != nil {
		if !strings.Contains(err.Error(), name) {
			t.Fatalf("error %q does not name view %s", err, name)
		}
		if _, err := e.Table(name); err == nil {
			t.Fatalf("a CreateMV that failed (%v) left view %s", err, name)
		}
		e.mu.Lock()
		got := len(e.cat.objects)
		e.mu.Unlock()
		if got != objects {
			t.Fatalf("a CreateMV that failed left %d objects, was %d", got, objects)
		}
		return
	}
	// A view may fail at run time on values its expression cannot take (an
	// overflow); the engine then recovers at every round, which is not what this
	// target checks: it drops such a view, or starts over.
	_, cerr := e.WaitCheckpoint(wctx)
	if cerr == nil && !opts.Paused && (opts.RateLimit == nil || *opts.RateLimit > 0) {
		cerr = e.WaitBackfill(wctx, name)
	}
	if cerr != nil {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := e.DropMV(dctx, name); err != nil {
			e.Crash()
			st.e = fuzzEngine(t)
			st.views = nil
		}
		return
	}
	st.views = append(st.views, name)
	if len(st.views) > 4 {
		old := st.views[0]
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := e.DropMV(dctx, old); err == nil {
			st.views = st.views[1:]
		} else if !strings.Contains(err.Error(), "read by") {
			t.Fatalf("drop %s: %v", old, err)
		}
	}
}
