package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seed04fbb902/weir/executors"
)

// Expr is an expression of a view's plan, over the columns of its input by name. It is
// stored in the catalog (as JSON), so it is plain data: build it with Column, Int,
// Float, String, Bool and Call.
type Expr struct {
	// Op is "col", "int", "float", "string", "bool" or "call".
	Op    string  `json:"op"`
	Name  string  `json:"name,omitempty"` // column name ("col") or Arrow compute function ("call")
	Int   int64   `json:"int,omitempty"`
	Float float64 `json:"float,omitempty"`
	Str   string  `json:"str,omitempty"`
	Bool  bool    `json:"bool,omitempty"`
	Args  []Expr  `json:"args,omitempty"`
}

// UnmarshalJSON decodes e with an empty argument list as nil: marshalling omits it, so
// a decoded expression equals its round trip (its arguments decode the same way).
func (e *Expr) UnmarshalJSON(data []byte) error {
	type plain Expr
	if err := json.Unmarshal(data, (*plain)(e)); err != nil {
		return err
	}
	if len(e.Args) == 0 {
		e.Args = nil
	}
	return nil
}

// Column refers to the input column name.
func Column(name string) Expr { return Expr{Op: "col", Name: name} }

// Int is an int64 constant.
func Int(v int64) Expr { return Expr{Op: "int", Int: v} }

// Float is a float64 constant.
func Float(v float64) Expr { return Expr{Op: "float", Float: v} }

// String is a string constant.
func String(v string) Expr { return Expr{Op: "string", Str: v} }

// Bool is a boolean constant.
func Bool(v bool) Expr { return Expr{Op: "bool", Bool: v} }

// Call applies an Arrow compute function ("add", "multiply", "greater", "equal",
// "and_kleene", ...) to args. Arrow's "add", "multiply", ... report overflow as an
// error, which fails the view's actor; "add_unchecked", ... wrap.
func Call(fn string, args ...Expr) Expr { return Expr{Op: "call", Name: fn, Args: args} }

func (e Expr) String() string {
	switch e.Op {
	case "col":
		return e.Name
	case "int":
		return strconv.FormatInt(e.Int, 10)
	case "float":
		return strconv.FormatFloat(e.Float, 'g', -1, 64)
	case "string":
		return strconv.Quote(e.Str)
	case "bool":
		return strconv.FormatBool(e.Bool)
	case "call":
		parts := make([]string, len(e.Args))
		for i, a := range e.Args {
			parts[i] = a.String()
		}
		return e.Name + "(" + strings.Join(parts, ", ") + ")"
	}
	return fmt.Sprintf("<bad expression op %q>", e.Op)
}

// Scalar functions of Weir's own (see package executors), callable by name next to
// Arrow's compute functions.

// Day is the UTC calendar day (a date) of timestamp x.
func Day(x Expr) Expr { return Call("day", x) }

// TimeOfDayHHMM is the UTC time of day of timestamp x as "HH:MM".
func TimeOfDayHHMM(x Expr) Expr { return Call("time_of_day_hhmm", x) }

// Between is lo <= x AND x <= hi (NULL when any is NULL).
func Between(x, lo, hi Expr) Expr { return Call("between", x, lo, hi) }

// TumbleStart is the start of the tumbling window of size (aligned on the Unix epoch)
// that holds timestamp x.
func TumbleStart(x Expr, size time.Duration) Expr { return Call("tumble_start", x, Int(int64(size))) }

// TumbleEnd is TumbleStart(x, size) + size.
func TumbleEnd(x Expr, size time.Duration) Expr { return Call("tumble_end", x, Int(int64(size))) }

type scalarFunc struct {
	args int
	bind func(e Expr, args []executors.Expr) (executors.Expr, error)
}

var scalarFuncs = map[string]scalarFunc{
	"day": {1, func(_ Expr, a []executors.Expr) (executors.Expr, error) { return executors.Day(a[0]), nil }},
	"time_of_day_hhmm": {1, func(_ Expr, a []executors.Expr) (executors.Expr, error) {
		return executors.TimeOfDayHHMM(a[0]), nil
	}},
	"between": {3, func(_ Expr, a []executors.Expr) (executors.Expr, error) {
		return executors.Between(a[0], a[1], a[2]), nil
	}},
	"tumble_start": {2, bindTumble(executors.TumbleStart)},
	"tumble_end":   {2, bindTumble(executors.TumbleEnd)},
}

func bindTumble(f func(executors.Expr, time.Duration) executors.Expr) func(Expr, []executors.Expr) (executors.Expr, error) {
	return func(e Expr, a []executors.Expr) (executors.Expr, error) {
		size := e.Args[1]
		if size.Op != "int" || size.Int <= 0 {
			return nil, fmt.Errorf("%s: the window size must be a positive integer constant (nanoseconds), not %s", e.Name, size)
		}
		return f(a[0], time.Duration(size.Int)), nil
	}
}

// columns adds the column names e reads to dst.
func (e Expr) columns(dst map[string]bool) {
	if e.Op == "col" {
		dst[e.Name] = true
	}
	for _, a := range e.Args {
		a.columns(dst)
	}
}

// noColumnError is a plan's reference to a column its input does not have. The
// planner sets what the input is and the columns it has for the user (see
// lowered.explainNoColumn): the input's columns before the planner pruned them to what
// the plan reads.
type noColumnError struct {
	name  string
	input string   // "the input" when not set
	cols  []string // the input's columns
}

func (e *noColumnError) Error() string {
	input := e.input
	if input == "" {
		input = "the input"
	}
	return fmt.Sprintf("no column %q (%s has %s)", e.name, input, strings.Join(e.cols, ", "))
}

// bind resolves e's column names against the input's columns. The expression keeps
// the names (executors.NamedCol), so that its errors name columns, not positions.
func (e Expr) bind(cols []string) (executors.Expr, error) {
	switch e.Op {
	case "col":
		for i, c := range cols {
			if c == e.Name {
				return executors.NamedCol(i, e.Name), nil
			}
		}
		return nil, &noColumnError{name: e.Name, cols: cols}
	case "int":
		return executors.Lit(e.Int), nil
	case "float":
		return executors.Lit(e.Float), nil
	case "string":
		return executors.Lit(e.Str), nil
	case "bool":
		return executors.Lit(e.Bool), nil
	case "call":
		if e.Name == "" {
			return nil, errors.New("call without a function name")
		}
		args := make([]executors.Expr, len(e.Args))
		for i, a := range e.Args {
			b, err := a.bind(cols)
			if err != nil {
				return nil, err
			}
			args[i] = b
		}
		if f, ok := scalarFuncs[e.Name]; ok {
			if len(args) != f.args {
				return nil, fmt.Errorf("%s takes %d arguments, not %d", e.Name, f.args, len(args))
			}
			return f.bind(e, args)
		}
		return executors.Call(e.Name, args...), nil
	}
	return nil, fmt.Errorf("unknown expression op %q", e.Op)
}

// Plan is a node of a view's logical plan: Scan, Filter, Project, Aggregate or Join.
type Plan interface {
	kind() string
	inputs() []Plan
}

// ScanPlan reads an existing table or view: a leaf of every plan. The planner turns it
// into a backfill of the upstream (see MVOptions.Backfill).
type ScanPlan struct {
	Table string `json:"table"`
}

// FilterPlan keeps the rows of its input where Pred is true.
type FilterPlan struct {
	Input Plan `json:"-"`
	Pred  Expr `json:"pred"`
}

// ProjectPlan computes named columns from its input. The input's pk columns are added
// at the end when the projection does not keep them.
type ProjectPlan struct {
	Input Plan        `json:"-"`
	Cols  []NamedExpr `json:"cols"`
}

// NamedExpr is an output column of a projection.
type NamedExpr struct {
	Name string `json:"name"`
	Expr Expr   `json:"expr"`
}

// AggregatePlan groups its input by the GroupBy columns and computes Aggs per group
// (SQL's GROUP BY; retractions from the input are applied). Its output is the group-by
// columns, then one column per aggregate; its pk is the group-by columns.
type AggregatePlan struct {
	Input   Plan      `json:"-"`
	GroupBy []string  `json:"group_by"`
	Aggs    []AggExpr `json:"aggs,omitempty"`
}

// UnmarshalJSON decodes p with an empty list of aggregates as nil: marshalling omits
// it, so a decoded plan equals its round trip.
func (p *AggregatePlan) UnmarshalJSON(data []byte) error {
	type plain AggregatePlan
	if err := json.Unmarshal(data, (*plain)(p)); err != nil {
		return err
	}
	if len(p.Aggs) == 0 {
		p.Aggs = nil
	}
	return nil
}

// AggExpr is one aggregate of an AggregatePlan.
type AggExpr struct {
	// Func is "count", "count_star", "sum", "avg", "min", "max" or "count_distinct".
	Func string `json:"func"`
	// Col is the input column (not for count_star).
	Col string `json:"col,omitempty"`
	// Filter, when set, is a boolean input column: only rows where it is true count
	// (SQL's FILTER (WHERE ...)).
	Filter string `json:"filter,omitempty"`
	// Name is the output column.
	Name string `json:"name"`
}

// Agg is aggregate fn over column col, named name (col is ignored by count_star).
func Agg(fn, col, name string) AggExpr { return AggExpr{Func: fn, Col: col, Name: name} }

// Where restricts the aggregate to the rows where the boolean input column filter is
// true.
func (a AggExpr) Where(filter string) AggExpr { a.Filter = filter; return a }

// JoinPlan is the inner equi-join of Left and Right on LeftKeys[i] = RightKeys[i],
// keeping the pairs where Residual (when set, over the output columns) is true. Its
// output is Left's columns then Right's, whose names must differ (rename with a
// Project); its pk is the key columns, then Left's pk, then Right's.
type JoinPlan struct {
	Left      Plan     `json:"-"`
	Right     Plan     `json:"-"`
	LeftKeys  []string `json:"left_keys"`
	RightKeys []string `json:"right_keys"`
	Residual  *Expr    `json:"residual,omitempty"`
}

// As names an expression.
func As(e Expr, name string) NamedExpr { return NamedExpr{Name: name, Expr: e} }

// Scan reads table (a table or view).
func Scan(table string) *ScanPlan { return &ScanPlan{Table: table} }

// Filter keeps the rows of in where pred is true (NULL counts as false).
func Filter(in Plan, pred Expr) *FilterPlan { return &FilterPlan{Input: in, Pred: pred} }

// Project computes cols from in.
func Project(in Plan, cols ...NamedExpr) *ProjectPlan { return &ProjectPlan{Input: in, Cols: cols} }

// Aggregate groups in by the columns groupBy and computes aggs per group.
func Aggregate(in Plan, groupBy []string, aggs ...AggExpr) *AggregatePlan {
	return &AggregatePlan{Input: in, GroupBy: groupBy, Aggs: aggs}
}

// Join is the inner join of left and right on leftKeys[i] = rightKeys[i]; residual,
// when not nil, is a further condition over the output columns.
func Join(left, right Plan, leftKeys, rightKeys []string, residual *Expr) *JoinPlan {
	return &JoinPlan{Left: left, Right: right, LeftKeys: leftKeys, RightKeys: rightKeys, Residual: residual}
}

func (*ScanPlan) kind() string      { return "scan" }
func (*FilterPlan) kind() string    { return "filter" }
func (*ProjectPlan) kind() string   { return "project" }
func (*AggregatePlan) kind() string { return "aggregate" }
func (*JoinPlan) kind() string      { return "join" }

func (*ScanPlan) inputs() []Plan        { return nil }
func (p *FilterPlan) inputs() []Plan    { return []Plan{p.Input} }
func (p *ProjectPlan) inputs() []Plan   { return []Plan{p.Input} }
func (p *AggregatePlan) inputs() []Plan { return []Plan{p.Input} }
func (p *JoinPlan) inputs() []Plan      { return []Plan{p.Left, p.Right} }

// planJSON is the stored form of a plan node, with its inputs.
type planJSON struct {
	Kind      string         `json:"kind"`
	Scan      *ScanPlan      `json:"scan,omitempty"`
	Filter    *FilterPlan    `json:"filter,omitempty"`
	Project   *ProjectPlan   `json:"project,omitempty"`
	Aggregate *AggregatePlan `json:"aggregate,omitempty"`
	Join      *JoinPlan      `json:"join,omitempty"`
	Inputs    []planJSON     `json:"inputs,omitempty"`
}

func toPlanJSON(p Plan) (planJSON, error) {
	if p == nil {
		return planJSON{}, errors.New("nil plan node")
	}
	j := planJSON{Kind: p.kind()}
	switch n := p.(type) {
	case *ScanPlan:
		j.Scan = n
	case *FilterPlan:
		j.Filter = n
	case *ProjectPlan:
		j.Project = n
	case *AggregatePlan:
		j.Aggregate = n
	case *JoinPlan:
		j.Join = n
	default:
		return j, fmt.Errorf("unknown plan node %T", p)
	}
	for _, in := range p.inputs() {
		c, err := toPlanJSON(in)
		if err != nil {
			return j, err
		}
		j.Inputs = append(j.Inputs, c)
	}
	return j, nil
}

func marshalPlan(p Plan) ([]byte, error) {
	j, err := toPlanJSON(p)
	if err != nil {
		return nil, err
	}
	return json.Marshal(j)
}

func fromPlanJSON(j planJSON, depth int) (Plan, error) {
	if depth > 64 {
		return nil, errors.New("plan nested deeper than 64 nodes")
	}
	ins := make([]Plan, len(j.Inputs))
	for i, c := range j.Inputs {
		p, err := fromPlanJSON(c, depth+1)
		if err != nil {
			return nil, err
		}
		ins[i] = p
	}
	bad := func() (Plan, error) {
		return nil, fmt.Errorf("bad %q node with %d inputs", j.Kind, len(ins))
	}
	switch {
	case j.Kind == "scan" && j.Scan != nil:
		if len(ins) != 0 {
			return bad()
		}
		return j.Scan, nil
	case j.Kind == "filter" && j.Filter != nil:
		if len(ins) != 1 {
			return bad()
		}
		j.Filter.Input = ins[0]
		return j.Filter, nil
	case j.Kind == "project" && j.Project != nil:
		if len(ins) != 1 {
			return bad()
		}
		j.Project.Input = ins[0]
		return j.Project, nil
	case j.Kind == "aggregate" && j.Aggregate != nil:
		if len(ins) != 1 {
			return bad()
		}
		j.Aggregate.Input = ins[0]
		return j.Aggregate, nil
	case j.Kind == "join" && j.Join != nil:
		if len(ins) != 2 {
			return bad()
		}
		j.Join.Left, j.Join.Right = ins[0], ins[1]
		return j.Join, nil
	}
	return bad()
}

func unmarshalPlan(data []byte) (Plan, error) {
	var j planJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, err
	}
	return fromPlanJSON(j, 0)
}

// scansOf lists the scans of a plan, left to right.
func scansOf(p Plan) ([]*ScanPlan, error) {
	var out []*ScanPlan
	var walk func(p Plan, depth int) error
	walk = func(p Plan, depth int) error {
		if p == nil {
			return errors.New("a plan node has a nil input")
		}
		if depth > 64 {
			return errors.New("plan nested deeper than 64 nodes")
		}
		if s, ok := p.(*ScanPlan); ok {
			out = append(out, s)
			return nil
		}
		for _, in := range p.inputs() {
			if err := walk(in, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(p, 0); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("the plan has no scan")
	}
	return out, nil
}
