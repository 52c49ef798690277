package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

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

// columns adds the column names e reads to dst.
func (e Expr) columns(dst map[string]bool) {
	if e.Op == "col" {
		dst[e.Name] = true
	}
	for _, a := range e.Args {
		a.columns(dst)
	}
}

// bind resolves e's column names against the input's columns.
func (e Expr) bind(cols []string) (executors.Expr, error) {
	switch e.Op {
	case "col":
		for i, c := range cols {
			if c == e.Name {
				return executors.Col(i), nil
			}
		}
		return nil, fmt.Errorf("no column %q (the input has %s)", e.Name, strings.Join(cols, ", "))
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
		return executors.Call(e.Name, args...), nil
	}
	return nil, fmt.Errorf("unknown expression op %q", e.Op)
}

// Plan is a node of a view's logical plan: Scan, Filter or Project.
type Plan interface {
	kind() string
	input() Plan
}

// ScanPlan reads an existing table or view: the leaf of every plan. The planner turns it
// into a backfill of the upstream (see ViewOptions.Backfill).
type ScanPlan struct {
	Table string `json:"table"`
}

// FilterPlan keeps the rows of its input where Pred is true.
type FilterPlan struct {
	Input Plan `json:"-"`
	Pred  Expr `json:"pred"`
}

// ProjectPlan computes named columns from its input. The view's pk columns (those of
// the upstream's pk) are added at the end when the projection does not keep them.
type ProjectPlan struct {
	Input Plan        `json:"-"`
	Cols  []NamedExpr `json:"cols"`
}

// NamedExpr is an output column of a projection.
type NamedExpr struct {
	Name string `json:"name"`
	Expr Expr   `json:"expr"`
}

// As names an expression.
func As(e Expr, name string) NamedExpr { return NamedExpr{Name: name, Expr: e} }

// Scan reads table (a table or view).
func Scan(table string) *ScanPlan { return &ScanPlan{Table: table} }

// Filter keeps the rows of in where pred is true (NULL counts as false).
func Filter(in Plan, pred Expr) *FilterPlan { return &FilterPlan{Input: in, Pred: pred} }

// Project computes cols from in.
func Project(in Plan, cols ...NamedExpr) *ProjectPlan { return &ProjectPlan{Input: in, Cols: cols} }

func (*ScanPlan) kind() string    { return "scan" }
func (*FilterPlan) kind() string  { return "filter" }
func (*ProjectPlan) kind() string { return "project" }

func (*ScanPlan) input() Plan      { return nil }
func (p *FilterPlan) input() Plan  { return p.Input }
func (p *ProjectPlan) input() Plan { return p.Input }

// planJSON is the stored form of a plan: a list of nodes from the scan up.
type planJSON struct {
	Kind    string       `json:"kind"`
	Scan    *ScanPlan    `json:"scan,omitempty"`
	Filter  *FilterPlan  `json:"filter,omitempty"`
	Project *ProjectPlan `json:"project,omitempty"`
}

func marshalPlan(p Plan) ([]byte, error) {
	var nodes []planJSON
	for n := p; n != nil; n = n.input() {
		switch n := n.(type) {
		case *ScanPlan:
			nodes = append(nodes, planJSON{Kind: n.kind(), Scan: n})
		case *FilterPlan:
			nodes = append(nodes, planJSON{Kind: n.kind(), Filter: n})
		case *ProjectPlan:
			nodes = append(nodes, planJSON{Kind: n.kind(), Project: n})
		default:
			return nil, fmt.Errorf("unknown plan node %T", n)
		}
	}
	// Store leaf first.
	for i, j := 0, len(nodes)-1; i < j; i, j = i+1, j-1 {
		nodes[i], nodes[j] = nodes[j], nodes[i]
	}
	return json.Marshal(nodes)
}

func unmarshalPlan(data []byte) (Plan, error) {
	var nodes []planJSON
	if err := json.Unmarshal(data, &nodes); err != nil {
		return nil, err
	}
	var p Plan
	for i, n := range nodes {
		switch {
		case n.Kind == "scan" && n.Scan != nil && i == 0:
			p = n.Scan
		case n.Kind == "filter" && n.Filter != nil && i > 0:
			n.Filter.Input = p
			p = n.Filter
		case n.Kind == "project" && n.Project != nil && i > 0:
			n.Project.Input = p
			p = n.Project
		default:
			return nil, fmt.Errorf("plan node %d: bad %q node", i, n.Kind)
		}
	}
	if p == nil {
		return nil, errors.New("empty plan")
	}
	return p, nil
}

// scanOf returns the leaf scan of a plan.
func scanOf(p Plan) (*ScanPlan, error) {
	for n := p; n != nil; n = n.input() {
		if s, ok := n.(*ScanPlan); ok {
			if n.input() != nil {
				return nil, errors.New("a scan has an input")
			}
			return s, nil
		}
	}
	return nil, errors.New("the plan has no scan")
}
