package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// BackfillKind is how a materialized view reads its upstream's existing rows.
type BackfillKind string

// The backfill kinds.
const (
	// ArrangementBackfill (the default) reads the upstream's stored snapshot vnode by
	// vnode; the upstream is hash-dispatched by its distribution key to the view's
	// actors, which may have any parallelism.
	ArrangementBackfill BackfillKind = "arrangement"
	// NoShuffleBackfill co-locates each view actor with one upstream actor owning the
	// same vnodes; it needs the view's parallelism to equal the upstream's.
	NoShuffleBackfill BackfillKind = "no_shuffle"
)

// dispatcher is how the upstream's actors feed a view's backfilling actors: hashed by
// the upstream's distribution key, or actor i to actor i on the same node.
func (k BackfillKind) dispatcher() executors.DispatcherKind {
	if k.coLocated() {
		return executors.NoShuffle
	}
	return executors.Hash
}

// coLocated reports whether each backfilling actor runs with the upstream actor that
// owns its vnodes, so that the view's mapping is the upstream's.
func (k BackfillKind) coLocated() bool { return k == NoShuffleBackfill }

// backfillNode is the lowered scan of a view. The view's other backfill settings, its
// rate limit and its own pause, are the catalog object's (object.RateLimit, .Paused):
// the actors read them from there when they are built.
type backfillNode struct {
	upstream *object
	// s2 is the upstream columns the view needs plus every pk column, in upstream
	// order (indexes into the upstream's columns).
	s2   []int
	kind BackfillKind
}

// lowered is a view's plan after binding: a tree of nodes, each of which runs as one
// fragment of the view's actors. A scan node backfills an upstream and runs the
// filters and projections over it; an aggregate or join node reads its inputs' nodes
// through a hash exchange on its key. The root node materializes into the view's
// table; every other node feeds its parent.
type lowered struct {
	name string
	// nodes in post-order (inputs before their parent, left before right), so that
	// nodes[0] is the leftmost scan and the root is last.
	nodes []*pnode
	root  *pnode
	// out is the view's table: the root's output columns and pk; its distribution
	// key is the upstream's (a scan root), the group-by columns (an aggregate) or the
	// join key (a join).
	out *schema.Table
	// vnodes is the vnode count of the aggregate and join nodes and of the view's table
	// when the root is one of them: the first upstream's.
	vnodes int
	kind   BackfillKind
	mem    memory.Allocator
}

type nodeKind uint8

const (
	scanNode nodeKind = iota
	aggNode
	joinNode
)

func (k nodeKind) String() string {
	return [...]string{"scan", "aggregate", "join"}[k]
}

// pnode is one node of a lowered plan.
type pnode struct {
	idx    int
	kind   nodeKind
	inputs []*pnode
	parent *pnode
	scan   backfillNode             // scan nodes
	agg    executors.HashAggConfig  // aggregate nodes: GroupBy and Aggs over the input
	join   executors.HashJoinConfig // join nodes: keys, pks and residual
	// states are the schemas of the node's state tables (aggregate: the group table,
	// then one multiset table per slot of HashAggMultisetSlots, in its order: one per
	// input column of a min, max or count(DISTINCT); join: left, right).
	states []*schema.Table
	stages []stage
	// schema is the node's output after its stages, pk its output columns that
	// identify a row.
	schema *arrow.Schema
	pk     []int
	// vnodeCount is the vnode count of the node's fragment mapping.
	vnodeCount int
	// exchange hashes the node's output by its parent's key (nil at the root).
	exchange vec.Kernels
}

// desc names the node's output in errors: the upstream of a scan, else the operator.
func (n *pnode) desc() string {
	if n.kind == scanNode {
		return n.scan.upstream.Name
	}
	return "the " + n.kind.String()
}

// tableIDs is how many catalog ids the node's state takes: a scan its progress table,
// the others their state tables.
func (n *pnode) tableIDs() int {
	if n.kind == scanNode {
		return 1
	}
	return len(n.states)
}

// stateIDs is how many catalog ids the view's state takes besides its table.
func (l *lowered) stateIDs() int {
	n := 0
	for _, p := range l.nodes {
		n += p.tableIDs()
	}
	return n
}

// scans lists the scan nodes, left to right.
func (l *lowered) scans() []*pnode {
	var out []*pnode
	for _, n := range l.nodes {
		if n.kind == scanNode {
			out = append(out, n)
		}
	}
	return out
}

// stage is a filter (pred set) or a projection (exprs set), bound to its input's
// column indexes.
type stage struct {
	pred  executors.Expr
	exprs []executors.Expr
	names []string
}

// lower binds a view's plan over the upstreams it scans (tables or views, found by
// lookup): it prunes each upstream's columns to what the plan reads plus the pk, checks
// every expression and key, splits the plan into nodes, and derives the view's table.
// name names the view in errors.
func lower(name string, p Plan, lookup func(string) (*object, bool), kind BackfillKind, mem memory.Allocator) (*lowered, error) {
	switch kind {
	case "":
		kind = ArrangementBackfill
	case ArrangementBackfill, NoShuffleBackfill:
	default:
		return nil, fmt.Errorf("materialized view %s: unknown backfill kind %q (want %q or %q)", name, kind, ArrangementBackfill, NoShuffleBackfill)
	}
	scans, err := scansOf(p)
	if err != nil {
		return nil, fmt.Errorf("materialized view %s: %w", name, err)
	}
	first, ok := lookup(scans[0].Table)
	if !ok {
		return nil, fmt.Errorf("materialized view %s: no table or materialized view %q", name, scans[0].Table)
	}
	l := &lowered{name: name, vnodes: first.t.VnodeCount, kind: kind, mem: mem}
	root, err := l.lowerNode(p, nil, lookup)
	if err != nil {
		return nil, fmt.Errorf("materialized view %s: %w", name, err)
	}
	l.root = root
	for i, n := range l.nodes {
		n.idx = i
	}
	if err := l.viewTable(); err != nil {
		return nil, fmt.Errorf("materialized view %s: %w", name, err)
	}
	return l, nil
}

// union is a ∪ the names of cols; nil (every column) stays nil.
func union(a map[string]bool, cols ...string) map[string]bool {
	if a == nil {
		return nil
	}
	out := make(map[string]bool, len(a)+len(cols))
	for c := range a {
		out[c] = true
	}
	for _, c := range cols {
		out[c] = true
	}
	return out
}

func exprColumns(es ...Expr) []string {
	m := map[string]bool{}
	for _, e := range es {
		e.columns(m)
	}
	out := make([]string, 0, len(m))
	for c := range m {
		out = append(out, c)
	}
	return out
}

// lowerNode lowers plan node p, whose parent reads the columns req of it (nil: all).
func (l *lowered) lowerNode(p Plan, req map[string]bool, lookup func(string) (*object, bool)) (*pnode, error) {
	switch p := p.(type) {
	case *ScanPlan:
		up, ok := lookup(p.Table)
		if !ok {
			return nil, fmt.Errorf("no table or materialized view %q", p.Table)
		}
		n := &pnode{kind: scanNode, scan: backfillNode{upstream: up, kind: l.kind}, vnodeCount: up.t.VnodeCount}
		for i, c := range up.t.Columns {
			if req == nil || req[c.Name] || up.t.IsPK(i) {
				n.scan.s2 = append(n.scan.s2, i)
			}
		}
		n.schema = up.t.ProjectedArrowSchema(n.scan.s2)
		for _, k := range up.t.PK {
			n.pk = append(n.pk, slices.Index(n.scan.s2, k.Column))
		}
		l.nodes = append(l.nodes, n)
		return n, nil

	case *FilterPlan:
		n, err := l.lowerNode(p.Input, union(req, exprColumns(p.Pred)...), lookup)
		if err != nil {
			return nil, err
		}
		pred, err := p.Pred.bind(fieldNames(n.schema))
		if err != nil {
			return nil, fmt.Errorf("filter %s over %s: %w", p.Pred, n.desc(), l.explainNoColumn(err, lookup, p.Input))
		}
		if err := l.checkPredicate(pred, n.schema); err != nil {
			return nil, fmt.Errorf("filter %s over %s: %w", p.Pred, n.desc(), err)
		}
		n.stages = append(n.stages, stage{pred: pred})
		return n, nil

	case *ProjectPlan:
		var es []Expr
		for _, c := range p.Cols {
			es = append(es, c.Expr)
		}
		n, err := l.lowerNode(p.Input, union(map[string]bool{}, exprColumns(es...)...), lookup)
		if err != nil {
			return nil, err
		}
		cols := fieldNames(n.schema)
		pkNames := make([]string, len(n.pk))
		for i, k := range n.pk {
			pkNames[i] = cols[k]
		}
		st := stage{}
		seen := map[string]bool{}
		for _, c := range p.Cols {
			if c.Name == "" {
				return nil, fmt.Errorf("projection %s has no name", c.Expr)
			}
			if seen[c.Name] {
				return nil, fmt.Errorf("column %q is projected twice", c.Name)
			}
			seen[c.Name] = true
			e, err := c.Expr.bind(cols)
			if err != nil {
				return nil, fmt.Errorf("column %s = %s over %s: %w", c.Name, c.Expr, n.desc(), l.explainNoColumn(err, lookup, p.Input))
			}
			if _, err := executors.ResultType(e, n.schema, l.mem); err != nil {
				return nil, fmt.Errorf("column %s = %s over %s: %w", c.Name, c.Expr, n.desc(), err)
			}
			st.exprs = append(st.exprs, e)
			st.names = append(st.names, c.Name)
		}
		// The pk travels through every projection: a pk column projected as itself
		// (under any name) stays a pk column; one not projected is added at the end.
		newPK := make([]int, len(pkNames))
		for i, pk := range pkNames {
			newPK[i] = slices.IndexFunc(p.Cols, func(c NamedExpr) bool { return c.Expr.Op == "col" && c.Expr.Name == pk })
			if newPK[i] >= 0 {
				continue
			}
			if seen[pk] {
				c := p.Cols[slices.IndexFunc(p.Cols, func(c NamedExpr) bool { return c.Name == pk })]
				return nil, fmt.Errorf("column %q is a pk column of %s and must be that column unchanged, not %s", pk, n.desc(), c.Expr)
			}
			e, _ := Column(pk).bind(cols)
			newPK[i] = len(st.names)
			st.exprs = append(st.exprs, e)
			st.names = append(st.names, pk)
			seen[pk] = true
		}
		pj, err := executors.NewProject(executors.NewValues(n.schema, nil), st.exprs, st.names, l.mem)
		if err != nil {
			return nil, fmt.Errorf("projection over %s: %w", n.desc(), err)
		}
		n.schema = pj.Schema()
		pj.Close()
		n.pk = newPK
		n.stages = append(n.stages, st)
		return n, nil

	case *AggregatePlan:
		need := slices.Clone(p.GroupBy)
		for _, a := range p.Aggs {
			need = append(need, a.Col, a.Filter)
		}
		in, err := l.lowerNode(p.Input, union(map[string]bool{}, need...), lookup)
		if err != nil {
			return nil, err
		}
		return l.aggregate(p, in, lookup)

	case *JoinPlan:
		var sideReq map[string]bool
		if req != nil {
			extra := append(slices.Clone(p.LeftKeys), p.RightKeys...)
			if p.Residual != nil {
				extra = append(extra, exprColumns(*p.Residual)...)
			}
			sideReq = union(req, extra...)
		}
		left, err := l.lowerNode(p.Left, sideReq, lookup)
		if err != nil {
			return nil, err
		}
		right, err := l.lowerNode(p.Right, sideReq, lookup)
		if err != nil {
			return nil, err
		}
		return l.joinNode(p, left, right, lookup)
	}
	return nil, fmt.Errorf("unknown plan node %T", p)
}

var aggKinds = map[string]executors.AggKind{
	"count": executors.AggCount, "count_star": executors.AggCountStar, "sum": executors.AggSum,
	"avg": executors.AggAvg, "min": executors.AggMin, "max": executors.AggMax,
	"count_distinct": executors.AggCountDistinct,
}

// column finds name among the columns of s, the lowered output of the plan in; what
// names the reference in errors.
func (l *lowered) column(s *arrow.Schema, name, what string, lookup func(string) (*object, bool), in ...Plan) (int, error) {
	for i, f := range s.Fields() {
		if f.Name == name {
			return i, nil
		}
	}
	err := l.explainNoColumn(&noColumnError{name: name, cols: fieldNames(s)}, lookup, in...)
	return 0, fmt.Errorf("%s: %w", what, err)
}

// checkPredicate checks that pred, over records of schema s, is a boolean.
func (l *lowered) checkPredicate(pred executors.Expr, s *arrow.Schema) error {
	t, err := executors.ResultType(pred, s, l.mem)
	if err != nil {
		return err
	}
	if t.ID() != arrow.BOOL {
		return fmt.Errorf("predicate is %s, want boolean", t)
	}
	return nil
}

// explainNoColumn completes a *noColumnError (any other error is returned as it is)
// of a reference to the output of the plans in (one input, or a join's two): it lists
// their columns as the user sees them, those of the tables and views scanned (through
// the plan's filters, projections, aggregates and joins), rather than the lowered
// input's, which the planner prunes to the columns that the plan reads. Only error
// paths call it: it lowers the inputs again, unpruned.
func (l *lowered) explainNoColumn(err error, lookup func(string) (*object, bool), in ...Plan) error {
	var nc *noColumnError
	if !errors.As(err, &nc) || len(in) == 0 {
		return err
	}
	var cols []string
	for _, p := range in {
		scratch := &lowered{name: l.name, vnodes: l.vnodes, kind: l.kind, mem: l.mem}
		n, lerr := scratch.lowerNode(p, nil, lookup)
		if lerr != nil {
			return err // keep the lowered input's columns
		}
		cols = append(cols, fieldNames(n.schema)...)
	}
	nc.cols = cols
	nc.input = "the join"
	if len(in) == 1 {
		nc.input = planDesc(in[0])
	}
	return err
}

// planDesc names the output of plan node p in errors: the table or view that a scan
// (and a filter over it) reads, else the operator.
func planDesc(p Plan) string {
	switch p := p.(type) {
	case *ScanPlan:
		return p.Table
	case *FilterPlan:
		return planDesc(p.Input)
	case *ProjectPlan:
		return "the projection"
	case *AggregatePlan:
		return "the aggregate"
	case *JoinPlan:
		return "the join"
	}
	return "the input"
}

// viewTable derives the view's table from the root.
func (l *lowered) viewTable() error {
	r := l.root
	out := &schema.Table{Name: l.name, VnodeCount: r.vnodeCount}
	up := r.scan.upstream
	for _, f := range r.schema.Fields() {
		typ, err := schema.TypeOfArrow(f.Type)
		if err != nil {
			return fmt.Errorf("column %s has type %s, which a table cannot store", f.Name, f.Type)
		}
		out.Columns = append(out.Columns, schema.Column{Name: f.Name, Type: typ, Nullable: true})
	}
	for _, k := range r.pk {
		out.PK = append(out.PK, schema.KeyColumn{Column: k})
	}
	switch r.kind {
	case scanNode:
		// r.pk follows the upstream's pk through the projections (renamed or not).
		for i, k := range up.t.PK {
			out.PK[i].Desc, out.PK[i].NullsFirst = k.Desc, k.NullsFirst
			out.Columns[r.pk[i]].Nullable = up.t.Columns[k.Column].Nullable
		}
		for _, d := range up.t.DistKey {
			i := slices.IndexFunc(up.t.PK, func(k schema.KeyColumn) bool { return k.Column == d })
			out.DistKey = append(out.DistKey, r.pk[i])
		}
	case aggNode:
		out.DistKey = slices.Clone(r.pk[:len(r.agg.GroupBy)])
	case joinNode:
		out.DistKey = slices.Clone(r.pk[:len(r.join.LeftKeys)])
	}
	// The distribution columns reach the root unchanged: projections after an
	// aggregate or join keep its pk (the key first) under the same names.
	if err := out.Validate(); err != nil {
		return err
	}
	l.out = out
	return nil
}

func fieldNames(s *arrow.Schema) []string {
	out := make([]string, s.NumFields())
	for i, f := range s.Fields() {
		out[i] = f.Name
	}
	return out
}

// buildStages puts node n's stages over in (whose columns are the node's operator's
// output).
func (n *pnode) buildStages(view string, in executors.Executor, mem memory.Allocator) (executors.Executor, error) {
	for _, st := range n.stages {
		var err error
		if st.pred != nil {
			in, err = executors.NewFilter(in, st.pred, mem)
		} else {
			in, err = executors.NewProject(in, st.exprs, st.names, mem)
		}
		if err != nil {
			return nil, fmt.Errorf("materialized view %s: %w", view, err)
		}
	}
	return in, nil
}
