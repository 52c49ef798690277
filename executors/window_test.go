package executors_test

import (
	"context"
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// windowTable has both timestamp types, nullable, over the int64 pk.
func windowTable() *schema.Table {
	return &schema.Table{Name: "w", Columns: []schema.Column{
		{Name: "id", Type: schema.Type{Kind: schema.Int64}},
		{Name: "ts", Type: schema.Type{Kind: schema.Timestamp}, Nullable: true},
		{Name: "tstz", Type: schema.Type{Kind: schema.Timestamptz}, Nullable: true},
	}, PK: []schema.KeyColumn{{Column: 0}}, DistKey: []int{0}, VnodeCount: 16}
}

// TestTumbleProject windows random chunks through executors.NewProject, the way q7 and
// q8 use TUMBLE: the input columns are kept, window_start and window_end are added, and
// every chunk keeps its ops and visibility. Values are checked against the time.Time
// reference, rows with a timestamp in the extremes (where a window bound overflows, an
// error) are avoided by clamping the random values.
func TestTumbleProject(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	rng, seed := vectest.Rand(t)
	for _, tc := range []struct {
		name string
		tab  *schema.Table
		col  int
		size time.Duration
	}{
		{"bid-10s", tables.BidTable(), tables.BidColDateTime, 10 * time.Second},
		{"ts-1h", windowTable(), 1, time.Hour},
		{"tstz-1d", windowTable(), 2, 24 * time.Hour},
		{"tstz-1s", windowTable(), 2, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []executors.Message
			var keep []*vec.Chunk
			defer func() {
				for _, c := range keep {
					c.Release()
				}
			}()
			for i := 0; i < 20; i++ {
				c := clampTimestamps(t, mem, vectest.RandomChunk(rng, mem, tc.tab, 1+rng.IntN(300), 0.1), tc.col)
				c.Retain()
				keep = append(keep, c)
				msgs = append(msgs, executors.ChunkMessage(c))
				if i%4 == 3 {
					msgs = append(msgs, executors.BarrierMessage(&executors.Barrier{Prev: executors.Epoch(i), Curr: executors.Epoch(i + 1)}))
				}
			}
			src := executors.NewValues(tc.tab.ArrowSchema(), msgs)
			col := executors.Col(tc.col)
			p, err := executors.NewProject(src, []executors.Expr{
				executors.Col(0), col,
				executors.TumbleStart(col, tc.size), executors.TumbleEnd(col, tc.size),
				executors.Day(col), executors.TimeOfDayHHMM(col),
			}, []string{"k", "date_time", "window_start", "window_end", "day", "hhmm"}, mem)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			tsType := tc.tab.Columns[tc.col].Type.ArrowType()
			for i, want := range []arrow.DataType{tsType, tsType, arrow.FixedWidthTypes.Date32, arrow.BinaryTypes.String} {
				if got := p.Schema().Field(2 + i).Type; !arrow.TypeEqual(got, want) {
					t.Fatalf("column %s: type %s, want %s", p.Schema().Field(2+i).Name, got, want)
				}
			}
			next, barriers := 0, 0
			for {
				m, err := p.Next(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if m.Barrier != nil {
					barriers++
					continue
				}
				in := keep[next]
				next++
				checkWindowChunk(t, seed, in, m.Chunk, tc.col, tc.size)
				m.Chunk.Release()
			}
			if next != len(keep) || barriers != 5 {
				t.Fatalf("seed=%d: %d chunks and %d barriers out, want %d and 5", seed, next, barriers, len(keep))
			}
		})
	}
}

// checkWindowChunk checks one projected chunk against its input.
func checkWindowChunk(t *testing.T, seed uint64, in, out *vec.Chunk, col int, size time.Duration) {
	t.Helper()
	if out.NumRows() != in.NumRows() {
		t.Fatalf("seed=%d: %d rows out of %d", seed, out.NumRows(), in.NumRows())
	}
	inOps, outOps := in.Ops(), out.Ops()
	for i := range inOps {
		if inOps[i] != outOps[i] || in.Visible(i) != out.Visible(i) {
			t.Fatalf("seed=%d row %d: op %s visible %v became %s %v", seed, i, inOps[i], in.Visible(i), outOps[i], out.Visible(i))
		}
	}
	if (in.Visibility() == nil) != (out.Visibility() == nil) {
		t.Fatalf("seed=%d: visibility nil %v became nil %v", seed, in.Visibility() == nil, out.Visibility() == nil)
	}
	rec := out.Record()
	ts := in.Record().Column(col).(*array.Timestamp)
	start, end := rec.Column(2).(*array.Timestamp), rec.Column(3).(*array.Timestamp)
	day, hhmm := rec.Column(4).(*array.Date32), rec.Column(5).(*array.String)
	for i := 0; i < ts.Len(); i++ {
		if ts.IsNull(i) {
			if start.IsValid(i) || end.IsValid(i) || day.IsValid(i) || hhmm.IsValid(i) {
				t.Fatalf("seed=%d row %d: NULL timestamp, non-NULL window or day", seed, i)
			}
			continue
		}
		v := int64(ts.Value(i))
		tm := time.UnixMicro(v).UTC()
		ws := refWindow(v, size)
		d := time.Date(tm.Year(), tm.Month(), tm.Day(), 0, 0, 0, 0, time.UTC).Unix() / 86400
		if int64(start.Value(i)) != ws || int64(end.Value(i)) != ws+int64(size/time.Microsecond) ||
			int64(day.Value(i)) != d || hhmm.Value(i) != tm.Format("15:04") {
			t.Fatalf("seed=%d row %d: %s: window [%d, %d) day %d %s, want [%d, %d) %d %s", seed, i, tm.Format(time.RFC3339Nano),
				start.Value(i), end.Value(i), day.Value(i), hhmm.Value(i), ws, ws+int64(size/time.Microsecond), d, tm.Format("15:04"))
		}
	}
}

// clampTimestamps replaces column col of c (taking over c) with its values kept more
// than two days from the int64 extremes, where window bounds would not fit.
func clampTimestamps(t *testing.T, mem memory.Allocator, c *vec.Chunk, col int) *vec.Chunk {
	t.Helper()
	defer c.Release()
	const margin = int64(48 * time.Hour / time.Microsecond)
	old := c.Record().Column(col).(*array.Timestamp)
	b := array.NewTimestampBuilder(mem, old.DataType().(*arrow.TimestampType))
	defer b.Release()
	b.Reserve(old.Len())
	for i := 0; i < old.Len(); i++ {
		if old.IsNull(i) {
			b.AppendNull()
			continue
		}
		v := int64(old.Value(i))
		v = max(min(v, math.MaxInt64-margin), math.MinInt64+margin)
		b.Append(arrow.Timestamp(v))
	}
	a := b.NewArray()
	defer a.Release()
	cols := append([]arrow.Array(nil), c.Record().Columns()...)
	cols[col] = a
	rec := array.NewRecordBatch(c.Record().Schema(), cols, int64(old.Len()))
	defer rec.Release()
	return c.WithRecord(rec)
}

// BenchmarkTemporal evaluates each function over 1024 Nexmark-era timestamps with 10%
// NULLs (ns/op is per 1024-row batch).
func BenchmarkTemporal(b *testing.B) {
	mem := memory.NewGoAllocator()
	rng := vectest.NewRand(1)
	vals := make([]int64, 1024)
	nulls := make([]bool, len(vals))
	for i := range vals {
		vals[i] = 1436918400e6 + rng.Int64N(365*86400e6)
		nulls[i] = rng.IntN(10) == 0
	}
	rec := tsRecord(mem, tsNaive, vals, nulls, 0)
	defer rec.Release()
	ctx := context.Background()
	for _, e := range []executors.Expr{
		executors.TumbleStart(executors.Col(0), 10*time.Second), executors.TumbleEnd(executors.Col(0), 10*time.Second),
		executors.Day(executors.Col(0)), executors.TimeOfDayHHMM(executors.Col(0)),
	} {
		b.Run(e.String(), func(b *testing.B) {
			for b.Loop() {
				a, err := executors.EvalArray(ctx, e, rec, mem)
				if err != nil {
					b.Fatal(err)
				}
				a.Release()
			}
		})
	}
}
