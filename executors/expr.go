package executors

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/compute/exec"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/scalar"
)

// Expr is a vectorized expression over the columns of a record: one value per row,
// computed a batch at a time by Arrow's compute kernels (one kernel dispatch per batch
// and function, never per value).
type Expr interface {
	// Eval computes the expression over rec. The result is an array of rec's length
	// or a scalar; the caller releases it.
	Eval(ctx context.Context, rec arrow.RecordBatch) (compute.Datum, error)
	String() string
}

// Col refers to column i of the input; String and errors call it $i. An expression
// over named columns (a view's plan) uses NamedCol.
func Col(i int) Expr { return colExpr{i: i} }

// NamedCol refers to column i of the input, called name: String, and so every error
// of an expression that reads it, names the column instead of its position.
func NamedCol(i int, name string) Expr { return colExpr{i: i, name: name} }

type colExpr struct {
	i    int
	name string // "": unnamed ($i)
}

func (c colExpr) Eval(_ context.Context, rec arrow.RecordBatch) (compute.Datum, error) {
	if c.i < 0 || c.i >= int(rec.NumCols()) {
		if c.name != "" {
			return nil, fmt.Errorf("column %s (input column %d) out of range: the input has %d columns", c.name, c.i, rec.NumCols())
		}
		return nil, fmt.Errorf("column $%d out of range: the input has %d columns", c.i, rec.NumCols())
	}
	return compute.NewDatum(rec.Column(c.i)), nil
}

func (c colExpr) String() string {
	if c.name != "" {
		return c.name
	}
	return "$" + strconv.Itoa(c.i)
}

// Lit is a constant: a Go value (int64, float64, string, bool, ...) or a scalar.Scalar.
func Lit(v any) Expr { return litExpr{v: v} }

type litExpr struct{ v any }

func (l litExpr) Eval(context.Context, arrow.RecordBatch) (compute.Datum, error) {
	return compute.NewDatum(l.v), nil
}

// String quotes a string constant (as Go does), so that "1" and 1 differ.
func (l litExpr) String() string {
	if s, ok := l.v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(l.v)
}

// Call applies an Arrow compute function ("add", "multiply", "greater", "less_equal",
// "and_kleene", "equal", ...) to its arguments, with the default options. Arrow's
// "add", "multiply", ... report overflow as an error; "add_unchecked", ... wrap.
func Call(fn string, args ...Expr) Expr { return callExpr{fn: fn, args: args} }

type callExpr struct {
	fn   string
	args []Expr
}

func (c callExpr) Eval(ctx context.Context, rec arrow.RecordBatch) (compute.Datum, error) {
	in := make([]compute.Datum, 0, len(c.args))
	defer func() {
		for _, d := range in {
			d.Release()
		}
	}()
	for _, a := range c.args {
		d, err := a.Eval(ctx, rec)
		if err != nil {
			return nil, err
		}
		in = append(in, d)
	}
	out, err := compute.CallFunction(ctx, c.fn, nil, in...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c, err)
	}
	return out, nil
}

func (c callExpr) String() string {
	parts := make([]string, len(c.args))
	for i, a := range c.args {
		parts[i] = a.String()
	}
	return c.fn + "(" + strings.Join(parts, ", ") + ")"
}

// EvalArray evaluates e over rec as an array of rec's length, broadcasting a scalar
// result. The caller releases the array.
func EvalArray(ctx context.Context, e Expr, rec arrow.RecordBatch, mem memory.Allocator) (arrow.Array, error) {
	d, err := e.Eval(ctx, rec)
	if err != nil {
		return nil, err
	}
	defer d.Release()
	switch v := d.(type) {
	case *compute.ArrayDatum:
		return v.MakeArray(), nil
	case *compute.ScalarDatum:
		return scalar.MakeArrayFromScalar(v.Value, int(rec.NumRows()), mem)
	}
	return nil, fmt.Errorf("%s: result is a %s, want an array or a scalar", e, d.Kind())
}

// ResultType is the type of e's result over records of schema s, as computed over a
// record of no rows (with mem): the check of an expression before it runs. Its error
// is the expression's own (naming the part that failed); the caller names where the
// expression is used.
func ResultType(e Expr, s *arrow.Schema, mem memory.Allocator) (arrow.DataType, error) {
	empty := emptyRecord(s, mem)
	defer empty.Release()
	a, err := EvalArray(withMem(context.Background(), mem), e, empty, mem)
	if err != nil {
		return nil, err
	}
	defer a.Release()
	return a.DataType(), nil
}

// withMem runs the compute kernels of ctx with mem.
func withMem(ctx context.Context, mem memory.Allocator) context.Context {
	return exec.WithAllocator(ctx, mem)
}

// emptyRecord is a zero-row record of schema s, for learning expression types.
func emptyRecord(s *arrow.Schema, mem memory.Allocator) arrow.RecordBatch {
	cols := make([]arrow.Array, s.NumFields())
	for i, f := range s.Fields() {
		cols[i] = array.MakeArrayOfNull(mem, f.Type, 0)
	}
	rec := array.NewRecordBatch(s, cols, 0)
	for _, c := range cols {
		c.Release()
	}
	return rec
}
