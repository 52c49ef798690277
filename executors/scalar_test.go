package executors_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/compute/exec"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/scalar"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

var (
	tsNaive = &arrow.TimestampType{Unit: arrow.Microsecond}
	tsUTC   = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
)

// temporalCase is one line of testdata/scalar/temporal.txt.
type temporalCase struct {
	line     int
	fn, size string
	in, want string
}

func readTemporalCases(t *testing.T) []temporalCase {
	t.Helper()
	f, err := os.Open("testdata/scalar/temporal.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []temporalCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		w := strings.Fields(line)
		if len(w) != 4 {
			t.Fatalf("temporal.txt:%d: %d fields, want 4", n, len(w))
		}
		cases = append(cases, temporalCase{line: n, fn: w[0], size: w[1], in: w[2], want: w[3]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

// parseMicros parses an RFC 3339 time or us:<n>.
func parseMicros(s string) (int64, error) {
	if v, ok := strings.CutPrefix(s, "us:"); ok {
		return strconv.ParseInt(v, 10, 64)
	}
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, err
	}
	return tm.UnixMicro(), nil
}

// temporalExpr builds the expression of a case over column 0.
func temporalExpr(t *testing.T, c temporalCase) executors.Expr {
	t.Helper()
	switch c.fn {
	case "tumble_start", "tumble_end":
		size, err := time.ParseDuration(c.size)
		if err != nil {
			t.Fatalf("temporal.txt:%d: %v", c.line, err)
		}
		if c.fn == "tumble_start" {
			return executors.TumbleStart(executors.Col(0), size)
		}
		return executors.TumbleEnd(executors.Col(0), size)
	case "day":
		return executors.Day(executors.Col(0))
	case "hhmm":
		return executors.TimeOfDayHHMM(executors.Col(0))
	}
	t.Fatalf("temporal.txt:%d: unknown function %q", c.line, c.fn)
	return nil
}

// tsRecord is a one-column record of timestamps of type typ; nulls[i] makes row i NULL.
// With lead > 0, the column is a slice starting lead rows into its buffers (junk rows
// before it), to exercise array offsets.
func tsRecord(mem memory.Allocator, typ *arrow.TimestampType, vals []int64, nulls []bool, lead int) arrow.RecordBatch {
	b := array.NewTimestampBuilder(mem, typ)
	defer b.Release()
	b.Reserve(lead + len(vals))
	for i := 0; i < lead; i++ {
		if i%2 == 0 {
			b.AppendNull()
		} else {
			b.Append(arrow.Timestamp(math.MinInt64))
		}
	}
	for i, v := range vals {
		if nulls != nil && nulls[i] {
			b.AppendNull()
		} else {
			b.Append(arrow.Timestamp(v))
		}
	}
	full := b.NewArray()
	defer full.Release()
	col := array.NewSlice(full, int64(lead), int64(lead+len(vals)))
	defer col.Release()
	s := arrow.NewSchema([]arrow.Field{{Name: "ts", Type: typ, Nullable: true}}, nil)
	return array.NewRecordBatch(s, []arrow.Array{col}, int64(len(vals)))
}

// formatTemporal formats row i of a result the way temporal.txt writes expected values.
func formatTemporal(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return "NULL"
	}
	switch a := a.(type) {
	case *array.Timestamp:
		v := int64(a.Value(i))
		if v < -62135596800000000 || v > 253402300799999999 { // outside years 1..9999
			return "us:" + strconv.FormatInt(v, 10)
		}
		return time.UnixMicro(v).UTC().Format(time.RFC3339Nano)
	case *array.Date32:
		d := int64(a.Value(i))
		if d < -719162 || d > 2932896 {
			return "d:" + strconv.FormatInt(d, 10)
		}
		return time.Unix(d*86400, 0).UTC().Format(time.DateOnly)
	case *array.String:
		return a.Value(i)
	}
	return fmt.Sprintf("unexpected %s", a.DataType())
}

// normalizeWant rewrites an expected value into formatTemporal's form.
func normalizeWant(t *testing.T, c temporalCase) string {
	t.Helper()
	switch {
	case c.want == "NULL" || c.want == "ERROR":
		return c.want
	case c.fn == "tumble_start" || c.fn == "tumble_end":
		v, err := parseMicros(c.want)
		if err != nil {
			t.Fatalf("temporal.txt:%d: %v", c.line, err)
		}
		if v < -62135596800000000 || v > 253402300799999999 {
			return "us:" + strconv.FormatInt(v, 10)
		}
		return time.UnixMicro(v).UTC().Format(time.RFC3339Nano)
	case c.fn == "day" && strings.HasPrefix(c.want, "d:"):
		d, err := strconv.ParseInt(c.want[2:], 10, 64)
		if err != nil {
			t.Fatalf("temporal.txt:%d: %v", c.line, err)
		}
		if d < -719162 || d > 2932896 {
			return c.want
		}
		return time.Unix(d*86400, 0).UTC().Format(time.DateOnly)
	}
	return c.want
}

// TestTemporalData runs testdata/scalar/temporal.txt: the non-error cases of each
// function and size as one array (with an offset), each error case alone, over both
// timestamp types.
func TestTemporalData(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := exec.WithAllocator(context.Background(), mem)
	cases := readTemporalCases(t)
	type group struct{ fn, size string }
	var order []group
	groups := map[group][]temporalCase{}
	for _, c := range cases {
		g := group{c.fn, c.size}
		if c.want == "ERROR" {
			g.size += "/error@" + strconv.Itoa(c.line) // alone
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], c)
	}
	ran := 0
	for _, typ := range []*arrow.TimestampType{tsNaive, tsUTC} {
		for _, g := range order {
			cs := groups[g]
			vals := make([]int64, len(cs))
			nulls := make([]bool, len(cs))
			for i, c := range cs {
				if c.in == "NULL" {
					nulls[i] = true
					continue
				}
				v, err := parseMicros(c.in)
				if err != nil {
					t.Fatalf("temporal.txt:%d: %v", c.line, err)
				}
				vals[i] = v
			}
			e := temporalExpr(t, cs[0])
			for _, lead := range []int{0, 3} {
				rec := tsRecord(mem, typ, vals, nulls, lead)
				out, err := executors.EvalArray(ctx, e, rec, mem)
				rec.Release()
				if cs[0].want == "ERROR" {
					if err == nil {
						out.Release()
						t.Errorf("temporal.txt:%d: %s over %s (%s): no error", cs[0].line, e, cs[0].in, typ)
					} else {
						t.Logf("temporal.txt:%d: %v", cs[0].line, err)
					}
					ran++
					continue
				}
				if err != nil {
					t.Errorf("temporal.txt:%d..: %s over %s: %v", cs[0].line, e, typ, err)
					continue
				}
				if out.Len() != len(cs) {
					t.Fatalf("%s: %d rows, want %d", e, out.Len(), len(cs))
				}
				if tt, ok := out.DataType().(*arrow.TimestampType); ok && !arrow.TypeEqual(tt, typ) {
					t.Errorf("%s over %s: result type %s", e, typ, tt)
				}
				for i, c := range cs {
					if got, want := formatTemporal(out, i), normalizeWant(t, c); got != want {
						t.Errorf("temporal.txt:%d: %s(%s) over %s, offset %d: got %s, want %s", c.line, e, c.in, typ, lead, got, want)
					}
					ran++
				}
				out.Release()
			}
		}
	}
	t.Logf("%d evaluations of %d cases", ran, len(cases))
}

// TestTemporalTypes: result types, rejected argument types, and scalar arguments.
func TestTemporalTypes(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := exec.WithAllocator(context.Background(), mem)

	rec := tsRecord(mem, tsUTC, []int64{0}, nil, 0)
	defer rec.Release()
	for _, tc := range []struct {
		e    executors.Expr
		want arrow.DataType
		str  string
	}{
		{executors.TumbleStart(executors.Col(0), 10*time.Second), tsUTC, "tumble_start($0, 10s)"},
		{executors.TumbleEnd(executors.Col(0), time.Hour), tsUTC, "tumble_end($0, 1h0m0s)"},
		{executors.Day(executors.Col(0)), arrow.FixedWidthTypes.Date32, "day($0)"},
		{executors.TimeOfDayHHMM(executors.Col(0)), arrow.BinaryTypes.String, "time_of_day_hhmm($0)"},
		{executors.Between(executors.Col(0), executors.Col(1), executors.Lit(int64(3))), nil, "($0 BETWEEN $1 AND 3)"},
	} {
		if got := tc.e.String(); got != tc.str {
			t.Errorf("String() = %q, want %q", got, tc.str)
		}
		if tc.want == nil {
			continue
		}
		a, err := executors.EvalArray(ctx, tc.e, rec, mem)
		if err != nil {
			t.Fatalf("%s: %v", tc.e, err)
		}
		if !arrow.TypeEqual(a.DataType(), tc.want) {
			t.Errorf("%s: type %s, want %s", tc.e, a.DataType(), tc.want)
		}
		a.Release()
	}

	// Other units are read with their own tick: 1 ms windows of milliseconds.
	msRec := tsRecord(mem, &arrow.TimestampType{Unit: arrow.Millisecond}, []int64{-1, 86_399_999}, nil, 0)
	defer msRec.Release()
	for _, tc := range []struct {
		e    executors.Expr
		want string
	}{
		{executors.TumbleStart(executors.Col(0), 10*time.Millisecond), "[-10 86399990]"},
		{executors.TumbleEnd(executors.Col(0), time.Second), "[0 86400000]"},
		{executors.Day(executors.Col(0)), "[1969-12-31 1970-01-01]"},
		{executors.TimeOfDayHHMM(executors.Col(0)), `["23:59" "23:59"]`},
	} {
		a, err := executors.EvalArray(ctx, tc.e, msRec, mem)
		if err != nil {
			t.Fatalf("%s: %v", tc.e, err)
		}
		got := a.String()
		if ts, ok := a.(*array.Timestamp); ok {
			got = fmt.Sprint(ts.TimestampValues())
		}
		if got != tc.want {
			t.Errorf("%s over ms: %s, want %s", tc.e, got, tc.want)
		}
		a.Release()
	}
	if _, err := executors.EvalArray(ctx, executors.TumbleStart(executors.Col(0), 1500*time.Microsecond), msRec, mem); err == nil {
		t.Errorf("1.5ms windows over a ms timestamp: no error")
	}

	// Rejected: not a timestamp; a zone other than UTC.
	i64 := array.NewInt64Builder(mem)
	i64.Append(1)
	ia := i64.NewArray()
	i64.Release()
	intRec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int64}}, nil), []arrow.Array{ia}, 1)
	ia.Release()
	defer intRec.Release()
	nyRec := tsRecord(mem, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "America/New_York"}, []int64{0}, nil, 0)
	defer nyRec.Release()
	for _, r := range []arrow.RecordBatch{intRec, nyRec} {
		for _, e := range []executors.Expr{
			executors.TumbleStart(executors.Col(0), time.Second), executors.Day(executors.Col(0)), executors.TimeOfDayHHMM(executors.Col(0)),
		} {
			if a, err := executors.EvalArray(ctx, e, r, mem); err == nil {
				a.Release()
				t.Errorf("%s over %s: no error", e, r.Schema().Field(0).Type)
			}
		}
	}

	// A NULL row whose (arbitrary) value would overflow is not an error.
	vb := array.NewInt64Builder(mem)
	vb.AppendValues([]int64{math.MaxInt64, math.MinInt64, 15_000_000}, []bool{false, false, true})
	va := vb.NewArray()
	vb.Release()
	junk := array.NewData(tsNaive, 3, va.Data().Buffers(), nil, 2, 0)
	va.Release()
	ja := array.MakeFromData(junk)
	junk.Release()
	junkRec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "ts", Type: tsNaive, Nullable: true}}, nil), []arrow.Array{ja}, 3)
	ja.Release()
	defer junkRec.Release()
	for k, e := range []executors.Expr{executors.TumbleStart(executors.Col(0), 10*time.Second), executors.TumbleEnd(executors.Col(0), 10*time.Second)} {
		a, err := executors.EvalArray(ctx, e, junkRec, mem)
		if err != nil {
			t.Fatalf("%s over NULLs with extreme values: %v", e, err)
		}
		if got := fmt.Sprint(a.IsNull(0), a.IsNull(1), a.(*array.Timestamp).Value(2)); got != []string{"true true 10000000", "true true 20000000"}[k] {
			t.Errorf("%s over NULLs with extreme values: %s", e, got)
		}
		a.Release()
	}

	// A scalar argument gives a scalar.
	lit := executors.Lit(scalar.NewTimestampScalar(arrow.Timestamp(time.Date(2015, 7, 15, 13, 45, 7, 0, time.UTC).UnixMicro()), tsNaive))
	for _, tc := range []struct {
		e    executors.Expr
		want string
	}{
		{executors.TumbleStart(lit, 10*time.Second), "2015-07-15 13:45:00"},
		{executors.TumbleEnd(lit, 10*time.Second), "2015-07-15 13:45:10"},
		{executors.Day(lit), "2015-07-15"},
		{executors.TimeOfDayHHMM(lit), "13:45"},
	} {
		d, err := tc.e.Eval(ctx, rec)
		if err != nil {
			t.Fatalf("%s: %v", tc.e, err)
		}
		sd, ok := d.(*compute.ScalarDatum)
		if !ok {
			t.Errorf("%s: a %s, want a scalar", tc.e, d.Kind())
		} else if got := sd.Value.String(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s = %s, want %s", tc.e, got, tc.want)
		}
		d.Release()
	}
}

// TestBetween: lo <= x <= hi, NULL when any argument is NULL (unlike SQL's three-valued
// BETWEEN, which gives FALSE for 1 BETWEEN 2 AND NULL).
func TestBetween(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := exec.WithAllocator(context.Background(), mem)
	type v = *int64
	p := func(i int64) v { return &i }
	rows := []struct {
		x, lo, hi v
		want      string // true, false, NULL
	}{
		{p(5), p(1), p(10), "true"},
		{p(1), p(1), p(10), "true"},
		{p(10), p(1), p(10), "true"},
		{p(0), p(1), p(10), "false"},
		{p(11), p(1), p(10), "false"},
		{p(5), p(10), p(1), "false"}, // an empty range
		{p(math.MinInt64), p(math.MinInt64), p(math.MaxInt64), "true"},
		{nil, p(1), p(10), "NULL"},
		{p(5), nil, p(10), "NULL"},
		{p(5), p(1), nil, "NULL"},
		{p(0), p(1), nil, "NULL"}, // SQL: FALSE
		{p(11), nil, p(10), "NULL"},
		{nil, nil, nil, "NULL"},
	}
	bs := [3]*array.Int64Builder{array.NewInt64Builder(mem), array.NewInt64Builder(mem), array.NewInt64Builder(mem)}
	for _, r := range rows {
		for i, x := range []v{r.x, r.lo, r.hi} {
			if x == nil {
				bs[i].AppendNull()
			} else {
				bs[i].Append(*x)
			}
		}
	}
	cols := make([]arrow.Array, 3)
	fields := make([]arrow.Field, 3)
	for i, b := range bs {
		cols[i] = b.NewArray()
		b.Release()
		fields[i] = arrow.Field{Name: fmt.Sprint("c", i), Type: arrow.PrimitiveTypes.Int64, Nullable: true}
	}
	rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, int64(len(rows)))
	for _, c := range cols {
		c.Release()
	}
	defer rec.Release()
	out, err := executors.EvalArray(ctx, executors.Between(executors.Col(0), executors.Col(1), executors.Col(2)), rec, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	for i, r := range rows {
		got := "NULL"
		if out.IsValid(i) {
			got = strconv.FormatBool(out.(*array.Boolean).Value(i))
		}
		if got != r.want {
			t.Errorf("row %d: got %s, want %s", i, got, r.want)
		}
	}

	// Literal bounds, as in q16's price buckets.
	lit, err := executors.EvalArray(ctx, executors.Between(executors.Col(0), executors.Lit(int64(1)), executors.Lit(int64(10))), rec, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer lit.Release()
	if got, want := lit.String(), "[true true true false false true false (null) true true false false (null)]"; got != want {
		t.Errorf("BETWEEN 1 AND 10: %s, want %s", got, want)
	}

	// Type errors come back with the expression named.
	if _, err := executors.EvalArray(ctx, executors.Between(executors.Col(0), executors.Lit("a"), executors.Lit(int64(1))), rec, mem); err == nil || !strings.Contains(err.Error(), "BETWEEN") {
		t.Errorf("int BETWEEN string: %v", err)
	}
}

// refWindow is the reference window start of micros for size: the UTC day of the time
// (time.Time calendar arithmetic) plus the offset into the day truncated to size, which
// is the epoch-aligned window when size divides 24h (every size refSizes lists).
func refWindow(micros int64, size time.Duration) int64 {
	tm := time.UnixMicro(micros).UTC()
	day := time.Date(tm.Year(), tm.Month(), tm.Day(), 0, 0, 0, 0, time.UTC)
	return day.Add(tm.Sub(day).Truncate(size)).UnixMicro()
}

var refSizes = []time.Duration{time.Microsecond, time.Millisecond, time.Second, 10 * time.Second,
	time.Minute, time.Hour, 90 * time.Minute, 24 * time.Hour}

// TestTemporalRandom compares every function with a per-row time.Time reference over
// random timestamps: near the epoch, near window and day boundaries, and over most of the
// int64 range; with NULLs, offsets and both timestamp types.
func TestTemporalRandom(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := exec.WithAllocator(context.Background(), mem)
	rng, seed := vectest.Rand(t)
	const margin = int64(48 * time.Hour / time.Microsecond) // away from the int64 extremes
	for round := 0; round < 60; round++ {
		n := 1 + rng.IntN(2000)
		vals := make([]int64, n)
		nulls := make([]bool, n)
		nullFrac := []float64{0, 0, 0.1, 0.9}[rng.IntN(4)]
		for i := range vals {
			nulls[i] = rng.Float64() < nullFrac
			switch rng.IntN(4) {
			case 0: // within a few days of the epoch
				vals[i] = rng.Int64N(10*86400e6) - 5*86400e6
			case 1: // a boundary of some size, nudged
				sz := int64(refSizes[rng.IntN(len(refSizes))] / time.Microsecond)
				vals[i] = (rng.Int64N(1e6)-5e5)*sz + rng.Int64N(3) - 1
			case 2: // the Nexmark era, 2015 +- 30 years
				vals[i] = 1436918400e6 + rng.Int64N(60*365*86400e6) - 30*365*86400e6
			default: // most of the range
				lo, hi := int64(math.MinInt64)+margin, int64(math.MaxInt64)-margin
				vals[i] = lo + int64(rng.Uint64N(uint64(hi)-uint64(lo))) // wraps to lo..hi
			}
		}
		typ := []*arrow.TimestampType{tsNaive, tsUTC}[rng.IntN(2)]
		lead := rng.IntN(3) * 5
		rec := tsRecord(mem, typ, vals, nulls, lead)
		size := refSizes[rng.IntN(len(refSizes))]
		exprs := []executors.Expr{
			executors.TumbleStart(executors.Col(0), size), executors.TumbleEnd(executors.Col(0), size),
			executors.Day(executors.Col(0)), executors.TimeOfDayHHMM(executors.Col(0)),
		}
		for k, e := range exprs {
			out, err := executors.EvalArray(ctx, e, rec, mem)
			if err != nil {
				t.Fatalf("seed=%d round %d: %s: %v", seed, round, e, err)
			}
			if out.Len() != n || out.NullN() != countTrue(nulls) {
				t.Fatalf("seed=%d round %d: %s: %d rows, %d NULLs; want %d, %d", seed, round, e, out.Len(), out.NullN(), n, countTrue(nulls))
			}
			for i, v := range vals {
				if nulls[i] {
					if !out.IsNull(i) {
						t.Fatalf("seed=%d round %d: %s row %d: NULL in, %s out", seed, round, e, i, formatTemporal(out, i))
					}
					continue
				}
				tm := time.UnixMicro(v).UTC()
				var want, got string
				switch k {
				case 0, 1:
					w := refWindow(v, size)
					if k == 1 {
						w += int64(size / time.Microsecond)
					}
					want, got = strconv.FormatInt(w, 10), strconv.FormatInt(int64(out.(*array.Timestamp).Value(i)), 10)
				case 2:
					day := time.Date(tm.Year(), tm.Month(), tm.Day(), 0, 0, 0, 0, time.UTC)
					want, got = strconv.FormatInt(day.Unix()/86400, 10), strconv.FormatInt(int64(out.(*array.Date32).Value(i)), 10)
				case 3:
					want, got = tm.Format("15:04"), out.(*array.String).Value(i)
				}
				if got != want {
					t.Fatalf("seed=%d round %d: %s over %s (%d us, %s): got %s, want %s", seed, round, e, typ, v, tm.Format(time.RFC3339Nano), got, want)
				}
			}
			out.Release()
		}
		rec.Release()
	}
}

func countTrue(b []bool) int {
	n := 0
	for _, x := range b {
		if x {
			n++
		}
	}
	return n
}
