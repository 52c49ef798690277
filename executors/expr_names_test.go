package executors_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute/exec"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
)

// amountRecord is one int64 column, amount, holding vals.
func amountRecord(mem memory.Allocator, vals ...int64) arrow.RecordBatch {
	b := array.NewInt64Builder(mem)
	defer b.Release()
	b.AppendValues(vals, nil)
	a := b.NewArray()
	defer a.Release()
	return array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "amount", Type: arrow.PrimitiveTypes.Int64}}, nil), []arrow.Array{a}, int64(len(vals)))
}

// TestExprNames: an expression over named columns (NamedCol) prints, and every error
// of its checks and of its evaluation names, the columns; Col's print as $i.
func TestExprNames(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := exec.WithAllocator(context.Background(), mem)
	amount := executors.NamedCol(0, "amount")
	big := executors.Lit(int64(math.MaxInt64))

	for _, c := range []struct {
		e    executors.Expr
		want string
	}{
		{amount, "amount"},
		{executors.Col(0), "$0"},
		{executors.Call("greater", amount, executors.Lit(int64(1))), "greater(amount, 1)"},
		{executors.Call("equal", amount, executors.Lit("1")), `equal(amount, "1")`},
		{executors.Between(amount, executors.Lit(1.5), executors.Lit(int64(2))), "(amount BETWEEN 1.5 AND 2)"},
		{executors.Day(amount), "day(amount)"},
	} {
		if got := c.e.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}

	// Checks (over no rows) and evaluation (over rows).
	rec := amountRecord(mem, 1, 2)
	defer rec.Release()
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"filter that is not boolean", func() error {
			_, err := executors.NewFilter(executors.NewValues(rec.Schema(), nil), amount, mem)
			return err
		}, "filter amount: predicate is int64, want boolean"},
		{"filter of mismatched types", func() error {
			_, err := executors.NewFilter(executors.NewValues(rec.Schema(), nil), executors.Call("greater", amount, executors.Lit("x")), mem)
			return err
		}, `filter greater(amount, "x"): greater(amount, "x"): not implemented`},
		{"projection of a timestamp function of an integer", func() error {
			_, err := executors.NewProject(executors.NewValues(rec.Schema(), nil), []executors.Expr{executors.TimeOfDayHHMM(amount)}, []string{"hhmm"}, mem)
			return err
		}, "project column hhmm = time_of_day_hhmm(amount): time_of_day_hhmm(amount): argument amount is int64, want a timestamp"},
		{"column out of range", func() error {
			_, err := executors.ResultType(executors.Call("negate", executors.NamedCol(3, "price")), rec.Schema(), mem)
			return err
		}, "column price (input column 3) out of range: the input has 1 columns"},
		{"overflow in a filter", func() error {
			f, err := executors.NewFilter(executors.NewValues(rec.Schema(), []executors.Message{chunkOf(mem, rec)}),
				executors.Call("greater", executors.Call("add", amount, big), executors.Lit(int64(0))), mem)
			if err != nil {
				return err
			}
			defer f.Close()
			m, err := f.Next(ctx)
			m.Release()
			return err
		}, "filter greater(add(amount, 9223372036854775807), 0): add(amount, 9223372036854775807): invalid: overflow"},
		{"overflow in a projection", func() error {
			p, err := executors.NewProject(executors.NewValues(rec.Schema(), []executors.Message{chunkOf(mem, rec)}),
				[]executors.Expr{executors.Call("multiply", amount, big)}, []string{"m"}, mem)
			if err != nil {
				return err
			}
			defer p.Close()
			m, err := p.Next(ctx)
			m.Release()
			return err
		}, "project column m = multiply(amount, 9223372036854775807): multiply(amount, 9223372036854775807): invalid: overflow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.err()
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("error\n\t%s\nwant one starting\n\t%s", err, c.want)
			}
			if strings.Contains(err.Error(), "$") {
				t.Errorf("error %q names a column by its position", err)
			}
		})
	}
}

// chunkOf is a chunk of rec's rows, all inserts.
func chunkOf(mem memory.Allocator, rec arrow.RecordBatch) executors.Message {
	ops := vec.NewOps(mem, int(rec.NumRows()), vec.Insert)
	defer ops.Release()
	return executors.ChunkMessage(vec.NewChunk(rec, ops, nil))
}
