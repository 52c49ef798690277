package executors

import (
	"context"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/vec"
)

// Values emits a fixed list of messages, then io.EOF: a bounded source for tests and
// batch inputs. It takes ownership of the messages' chunks.
type Values struct {
	schema *arrow.Schema
	msgs   []Message
}

// NewValues returns a source of msgs, whose chunks have the given schema.
func NewValues(schema *arrow.Schema, msgs []Message) *Values {
	return &Values{schema: schema, msgs: msgs}
}

// Next implements Executor.
func (v *Values) Next(ctx context.Context) (Message, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, err
	}
	if len(v.msgs) == 0 {
		return Message{}, io.EOF
	}
	m := v.msgs[0]
	v.msgs = v.msgs[1:]
	return m, nil
}

// Schema implements Executor.
func (v *Values) Schema() *arrow.Schema { return v.schema }

// Close releases the messages not yet emitted.
func (v *Values) Close() error {
	for _, m := range v.msgs {
		m.Release()
	}
	v.msgs = nil
	return nil
}

// Filter keeps the rows for which a boolean expression is true (NULL counts as false).
// Chunks: rows are hidden by visibility, never copied; an update pair that the
// predicate splits becomes a Delete or an Insert (vec.RepairUpdatePairs); a chunk left
// with no visible row is dropped. Barriers and watermarks pass through unchanged.
type Filter struct {
	input   Executor
	pred    Expr
	mem     memory.Allocator
	scratch []vec.Op
}

// NewFilter returns a filter of input's rows by pred, a boolean expression.
func NewFilter(input Executor, pred Expr, mem memory.Allocator) (*Filter, error) {
	t, err := ResultType(pred, input.Schema(), mem)
	if err != nil {
		return nil, fmt.Errorf("filter %s: %w", pred, err)
	}
	if t.ID() != arrow.BOOL {
		return nil, fmt.Errorf("filter %s: predicate is %s, want boolean", pred, t)
	}
	return &Filter{input: input, pred: pred, mem: mem}, nil
}

// Next implements Executor.
func (f *Filter) Next(ctx context.Context) (Message, error) {
	for {
		m, err := f.input.Next(ctx)
		if err != nil || m.Chunk == nil {
			return m, err
		}
		out, err := f.filter(ctx, m.Chunk)
		m.Chunk.Release()
		if err != nil {
			return Message{}, err
		}
		if out != nil {
			return ChunkMessage(out), nil
		}
	}
}

func (f *Filter) filter(ctx context.Context, c *vec.Chunk) (*vec.Chunk, error) {
	a, err := EvalArray(withMem(ctx, f.mem), f.pred, c.Record(), f.mem)
	if err != nil {
		return nil, fmt.Errorf("filter %s: %w", f.pred, err)
	}
	defer a.Release()
	pred, ok := a.(*array.Boolean)
	if !ok {
		return nil, fmt.Errorf("filter %s: predicate gave %s, want boolean", f.pred, a.DataType())
	}
	n := c.NumRows()
	vis := vec.NewBitmap(f.mem, n)
	defer vis.Release()
	bits := vis.Bytes()
	for i := 0; i < n; i++ {
		if c.Visible(i) && pred.IsValid(i) && pred.Value(i) {
			bits[i>>3] |= 1 << (i & 7)
		}
	}
	return keepRows(c, vis, f.mem, &f.scratch), nil
}

// keepRows returns c restricted to the rows set in vis (a subset of c's visible rows),
// sharing c's record, with the update pairs that vis splits repaired
// (vec.RepairUpdatePairs); nil when vis keeps no row. Repaired ops are built in
// *scratch, which is reused from call to call.
func keepRows(c *vec.Chunk, vis *memory.Buffer, mem memory.Allocator, scratch *[]vec.Op) *vec.Chunk {
	n := c.NumRows()
	bits := vis.Bytes()
	if bitutil.CountSetBits(bits, 0, n) == 0 {
		return nil
	}
	ops := c.Ops()
	repaired := vec.RepairUpdatePairs(ops, c.Visibility(), bits, *scratch)
	if &repaired[0] == &ops[0] {
		return c.WithVisibility(vis)
	}
	*scratch = repaired
	opsBuf := vec.NewOps(mem, n, vec.Insert)
	defer opsBuf.Release()
	copy(vec.OpsOf(opsBuf.Bytes()), repaired)
	return c.WithOpsAndVisibility(opsBuf, vis)
}

// Schema implements Executor: a filter keeps its input's columns.
func (f *Filter) Schema() *arrow.Schema { return f.input.Schema() }

// Close implements Executor.
func (f *Filter) Close() error { return f.input.Close() }

// Project computes one output column per expression from each chunk, keeping the rows'
// ops and visibility. Barriers and watermarks pass through unchanged.
type Project struct {
	input  Executor
	exprs  []Expr
	schema *arrow.Schema
	mem    memory.Allocator
}

// NewProject returns a projection of input to exprs, named names. The output types are
// the expressions' result types.
func NewProject(input Executor, exprs []Expr, names []string, mem memory.Allocator) (*Project, error) {
	if len(exprs) != len(names) {
		return nil, fmt.Errorf("project: %d expressions, %d names", len(exprs), len(names))
	}
	fields := make([]arrow.Field, len(exprs))
	for i, e := range exprs {
		t, err := ResultType(e, input.Schema(), mem)
		if err != nil {
			return nil, fmt.Errorf("project column %s = %s: %w", names[i], e, err)
		}
		fields[i] = arrow.Field{Name: names[i], Type: t, Nullable: true}
	}
	return &Project{input: input, exprs: exprs, schema: arrow.NewSchema(fields, nil), mem: mem}, nil
}

// Next implements Executor.
func (p *Project) Next(ctx context.Context) (Message, error) {
	m, err := p.input.Next(ctx)
	if err != nil || m.Chunk == nil {
		return m, err
	}
	defer m.Chunk.Release()
	ectx := withMem(ctx, p.mem)
	cols := make([]arrow.Array, 0, len(p.exprs))
	defer func() {
		for _, a := range cols {
			a.Release()
		}
	}()
	for i, e := range p.exprs {
		a, err := EvalArray(ectx, e, m.Chunk.Record(), p.mem)
		if err != nil {
			return Message{}, fmt.Errorf("project column %s = %s: %w", p.schema.Field(i).Name, e, err)
		}
		cols = append(cols, a)
	}
	rec := array.NewRecordBatch(p.schema, cols, int64(m.Chunk.NumRows()))
	defer rec.Release()
	return ChunkMessage(m.Chunk.WithRecord(rec)), nil
}

// Schema implements Executor.
func (p *Project) Schema() *arrow.Schema { return p.schema }

// Close implements Executor.
func (p *Project) Close() error { return p.input.Close() }
