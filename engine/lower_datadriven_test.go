package engine

// TestLowerDataDriven runs the scripts under testdata/lower against lower, the
// planner's binding of a view's logical plan: each script declares upstream tables
// (and views), lowers plans over them and prints what the planner made of each, node
// by node, or the error it gave.
//
// Commands:
//
//	table name=t [vnodes=N] pk=(k, ...) [dist=(k, ...)]
//	    declares an upstream table, one column a line: "name type [not null]", type
//	    as a schema file spells it (schema.ParseType). A pk entry may carry an order,
//	    as in a schema file: "k desc", "k asc nulls first". Without dist the
//	    distribution key is the pk; without vnodes, the schema's default. The table
//	    goes through the catalog's stored form (encoded and decoded as an object), as
//	    a table the engine reads back. Prints the table.
//	lower name=mv [backfill=arrangement|no_shuffle|...] [create]
//	    lowers the plan of the input (the syntax below). Prints one block per node in
//	    post-order, then the view's table and the number of its state tables (a
//	    progress table per scan, then the aggregates' and joins' tables); or
//	    "error: <message>" when lowering fails. create adds the view to the catalog
//	    (through its stored form, with its plan), so that later plans can scan it.
//
// The plan syntax is an s-expression:
//
//	(scan t)
//	(filter PLAN EXPR)
//	(project PLAN (as EXPR name) ...)
//	(aggregate PLAN (group col ...) AGG ...)
//	    AGG is (count_star name [(where col)]) or (FUNC col name [(where col)]), FUNC
//	    count, sum, avg, min, max, count_distinct (any other word reaches the
//	    planner as it is); where is SQL's FILTER (WHERE col).
//	(join LEFT RIGHT (keys lcol rcol) ... [(residual EXPR)])
//	    each keys clause adds one key pair; (left_keys col ...) and (right_keys col
//	    ...) add left or right keys alone.
//
// In an expression a bare word is a column, except true and false (boolean
// constants); an integer is an int64 constant, a number with a point a float64 one;
// 'text' is a string constant; (fn arg ...) calls the function fn.
//
// Besides printing, the harness checks what the golden output does not show at
// once: node indexes follow the post-order, every node but the root feeds a later
// node through an exchange, s2 is in upstream order and holds every pk column, a
// view re-lowered from its stored form matches what was stored, and lowering
// allocates no memory it does not release.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/datadriven"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vnode"
)

func TestLowerDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/lower", func(t *testing.T, path string) {
		h := &lowerHarness{objects: map[string]*object{}, nextID: 1}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "table":
				return h.table(t, d)
			case "lower":
				return h.lower(t, d)
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

// lowerHarness is the catalog of one script.
type lowerHarness struct {
	objects map[string]*object
	nextID  uint32
}

func (h *lowerHarness) lookup(name string) (*object, bool) {
	o, ok := h.objects[name]
	return o, ok
}

// add stores o in the catalog through its stored form, as loading the catalog does.
func (h *lowerHarness) add(t *testing.T, d *datadriven.TestData, o *object) *object {
	t.Helper()
	if _, ok := h.objects[o.Name]; ok {
		d.Fatalf(t, "%s is declared twice", o.Name)
	}
	data, err := o.encode()
	if err != nil {
		d.Fatalf(t, "encode %s: %v", o.Name, err)
	}
	back, err := decodeObject(catalogPrefix+o.Name, data)
	if err != nil {
		d.Fatalf(t, "decode %s: %v", o.Name, err)
	}
	h.objects[o.Name] = back
	return back
}

func (h *lowerHarness) table(t *testing.T, d *datadriven.TestData) string {
	var name string
	d.ScanArgs(t, "name", &name)
	tab := &schema.Table{Name: name}
	d.MaybeScanArgs(t, "vnodes", &tab.VnodeCount)
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			d.Fatalf(t, "column %q: want \"name type [not null]\"", line)
		}
		nullable := true
		if n := len(f); n >= 4 && strings.EqualFold(f[n-2], "not") && strings.EqualFold(f[n-1], "null") {
			nullable, f = false, f[:n-2]
		}
		typ, err := schema.ParseType(strings.Join(f[1:], " "))
		if err != nil {
			d.Fatalf(t, "column %s: %v", f[0], err)
		}
		tab.Columns = append(tab.Columns, schema.Column{Name: f[0], Type: typ, Nullable: nullable})
	}
	col := func(name string) int {
		i, ok := tab.ColumnIndex(name)
		if !ok {
			d.Fatalf(t, "table %s has no column %q", tab.Name, name)
		}
		return i
	}
	pk, ok := d.Arg("pk")
	if !ok {
		d.Fatalf(t, "table %s: no pk", name)
	}
	for _, spec := range pk.Vals {
		c, desc, nullsFirst, err := schema.ParseKeySpec(spec)
		if err != nil {
			d.Fatalf(t, "pk: %v", err)
		}
		tab.PK = append(tab.PK, schema.KeyColumn{Column: col(c), Desc: desc, NullsFirst: nullsFirst})
	}
	if dist, ok := d.Arg("dist"); ok {
		for _, c := range dist.Vals {
			tab.DistKey = append(tab.DistKey, col(strings.TrimSpace(c)))
		}
	}
	if tab.VnodeCount == 0 {
		tab.VnodeCount = schema.DefaultVnodeCount
	}
	if err := tab.Validate(); err != nil {
		d.Fatalf(t, "table %s: %v", name, err)
	}
	mapping, err := vnode.EvenSplit(tab.VnodeCount, 1)
	if err != nil {
		d.Fatalf(t, "table %s: %v", name, err)
	}
	o := h.add(t, d, &object{ID: h.nextID, Name: name, Kind: kindTable, Def: tableToJSON(tab), Parallelism: 1, Mapping: mapping, t: tab})
	h.nextID++
	return formatTable(o.t) + "\n"
}

func (h *lowerHarness) lower(t *testing.T, d *datadriven.TestData) string {
	var name, backfill string
	d.ScanArgs(t, "name", &name)
	d.MaybeScanArgs(t, "backfill", &backfill)
	plan, err := parsePlanSexp(d.Input)
	if err != nil {
		d.Fatalf(t, "plan: %v", err)
	}
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	l, err := lower(name, plan, h.lookup, BackfillKind(backfill), mem)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	checkLoweredShape(t, d, l)
	out := formatLowered(l)
	if d.HasArg("create") {
		h.create(t, d, l, plan, mem)
	}
	return out
}

// create adds the lowered view l of plan to the catalog as CreateMV stores it (with a
// parallelism of 1), and checks that its plan, lowered again from the stored form,
// gives what was stored.
func (h *lowerHarness) create(t *testing.T, d *datadriven.TestData, l *lowered, plan Plan, mem memory.Allocator) {
	var mappings [][]uint16
	for _, n := range l.nodes {
		if n.kind == scanNode && l.kind.coLocated() {
			mappings = append(mappings, slices.Clone(n.scan.upstream.Mapping))
			continue
		}
		m, err := vnode.EvenSplit(n.vnodeCount, 1)
		if err != nil {
			d.Fatalf(t, "mapping of node %d: %v", n.idx, err)
		}
		mappings = append(mappings, m)
	}
	data, err := marshalPlan(plan)
	if err != nil {
		d.Fatalf(t, "marshal plan: %v", err)
	}
	o := &object{
		ID: h.nextID, Name: l.name, Kind: kindMV, Def: tableToJSON(l.out), Parallelism: 1,
		Mapping: mappings[len(mappings)-1], Mappings: mappings, Plan: data, Backfill: string(l.kind),
		t: l.out, plan: plan,
	}
	for i := range l.stateIDs() {
		o.StateIDs = append(o.StateIDs, h.nextID+1+uint32(i))
	}
	o.ProgressID = o.StateIDs[0]
	for _, n := range l.scans() {
		o.Upstreams = append(o.Upstreams, n.scan.upstream.Name)
	}
	h.nextID += 1 + uint32(len(o.StateIDs))
	back := h.add(t, d, o)
	again, err := lower(back.Name, back.plan, h.lookup, BackfillKind(back.Backfill), mem)
	if err != nil {
		d.Fatalf(t, "view %s from its stored form: %v", back.Name, err)
	}
	if err := back.checkLowered(again); err != nil {
		t.Errorf("%s: %v", d.Pos, err)
	}
}

// checkLoweredShape checks the structure of l that the printed form leaves implicit.
func checkLoweredShape(t *testing.T, d *datadriven.TestData, l *lowered) {
	t.Helper()
	if len(l.nodes) == 0 || l.root != l.nodes[len(l.nodes)-1] {
		t.Errorf("%s: the root is not the last node", d.Pos)
		return
	}
	for i, n := range l.nodes {
		if n.idx != i {
			t.Errorf("%s: node %d has index %d", d.Pos, i, n.idx)
		}
		for _, in := range n.inputs {
			if in.idx >= i || in.parent != n {
				t.Errorf("%s: node %d: input node %d comes after it or feeds another node", d.Pos, i, in.idx)
			}
		}
		if n == l.root {
			if n.parent != nil || n.exchange != nil {
				t.Errorf("%s: the root (node %d) has a parent or an exchange", d.Pos, i)
			}
			continue
		}
		if n.parent == nil || n.parent.idx <= i || n.exchange == nil {
			t.Errorf("%s: node %d does not feed a later node through an exchange", d.Pos, i)
		}
		if n.kind == scanNode {
			s2 := n.scan.s2
			if !slices.IsSorted(s2) || len(slices.Compact(slices.Clone(s2))) != len(s2) {
				t.Errorf("%s: node %d: s2 %v is not in upstream order", d.Pos, i, s2)
			}
			for _, k := range n.scan.upstream.t.PK {
				if !slices.Contains(s2, k.Column) {
					t.Errorf("%s: node %d: s2 %v lacks pk column %d", d.Pos, i, s2, k.Column)
				}
			}
		}
	}
}

func formatLowered(l *lowered) string {
	var b strings.Builder
	for _, n := range l.nodes {
		switch n.kind {
		case scanNode:
			up := n.scan.upstream
			what := up.Name
			if up.Kind == kindMV {
				what = "view " + up.Name
			}
			coloc := ""
			if n.scan.kind.coLocated() {
				coloc = ", co-located"
			}
			fmt.Fprintf(&b, "node %d: scan %s (%s, %s dispatcher%s)\n", n.idx, what, n.scan.kind, n.scan.kind.dispatcher(), coloc)
			s2 := namesAt(fieldNames(up.t.ArrowSchema()), n.scan.s2)
			fmt.Fprintf(&b, "  s2: %s\n", strings.Join(s2, " "))
		case aggNode:
			fmt.Fprintf(&b, "node %d: aggregate of node %d\n", n.idx, n.inputs[0].idx)
			in := fieldNames(n.inputs[0].schema)
			fmt.Fprintf(&b, "  group by: %s\n", strings.Join(namesAt(in, n.agg.GroupBy), ", "))
			var aggs []string
			for _, a := range n.agg.Aggs {
				arg := "*"
				if a.Kind != executors.AggCountStar {
					arg = nameAt(in, a.Col)
				}
				s := fmt.Sprintf("%s := %s(%s)", a.Name, a.Kind, arg)
				if a.HasFilter {
					s += " where " + nameAt(in, a.Filter)
				}
				aggs = append(aggs, s)
			}
			if len(aggs) > 0 {
				fmt.Fprintf(&b, "  aggs: %s\n", strings.Join(aggs, ", "))
			}
		case joinNode:
			left, right := n.inputs[0], n.inputs[1]
			ln, rn := fieldNames(left.schema), fieldNames(right.schema)
			fmt.Fprintf(&b, "node %d: join of nodes %d and %d\n", n.idx, left.idx, right.idx)
			var keys []string
			for i := range n.join.LeftKeys {
				keys = append(keys, nameAt(ln, n.join.LeftKeys[i])+" = "+nameAt(rn, n.join.RightKeys[i]))
			}
			fmt.Fprintf(&b, "  keys: %s\n", strings.Join(keys, ", "))
			fmt.Fprintf(&b, "  left pk: %s; right pk: %s\n", strings.Join(namesAt(ln, n.join.LeftPK), ", "), strings.Join(namesAt(rn, n.join.RightPK), ", "))
			if n.join.Residual != nil {
				fmt.Fprintf(&b, "  residual: %s\n", n.join.Residual)
			}
		}
		for _, st := range n.states {
			fmt.Fprintf(&b, "  state %s\n", formatTable(st))
		}
		var stages []string
		for _, st := range n.stages {
			if st.pred != nil {
				stages = append(stages, "filter "+st.pred.String())
				continue
			}
			var cols []string
			for i, e := range st.exprs {
				cols = append(cols, st.names[i]+" := "+e.String())
			}
			stages = append(stages, "project "+strings.Join(cols, ", "))
		}
		if len(stages) > 0 {
			fmt.Fprintf(&b, "  stages: %s\n", strings.Join(stages, "; "))
		}
		names := fieldNames(n.schema)
		fmt.Fprintf(&b, "  out: %s; pk %s\n", formatFields(n.schema), strings.Join(namesAt(names, n.pk), ", "))
		fmt.Fprintf(&b, "  vnodes %d\n", n.vnodeCount)
		if n.exchange != nil {
			ex := n.exchange.Table()
			fmt.Fprintf(&b, "  exchange to node %d by %s\n", n.parent.idx, strings.Join(namesAt(fieldNames(ex.ArrowSchema()), ex.PKColumns()), ", "))
		}
	}
	fmt.Fprintf(&b, "view %s\n", formatTable(l.out))
	fmt.Fprintf(&b, "state tables: %d\n", l.stateIDs())
	return b.String()
}

// nameAt is names[k]; an index out of range prints as "#k", so that a broken index
// shows in the output instead of stopping the script.
func nameAt(names []string, k int) string {
	if k < 0 || k >= len(names) {
		return "#" + strconv.Itoa(k)
	}
	return names[k]
}

// namesAt is nameAt(names, k) for each k of idx.
func namesAt(names []string, idx []int) []string {
	out := make([]string, len(idx))
	for i, k := range idx {
		out[i] = nameAt(names, k)
	}
	return out
}

func formatType(dt arrow.DataType) string {
	if typ, err := schema.TypeOfArrow(dt); err == nil {
		return typ.String()
	}
	return dt.String()
}

func formatFields(s *arrow.Schema) string {
	var cols []string
	for _, f := range s.Fields() {
		c := f.Name + " " + formatType(f.Type)
		if !f.Nullable {
			c += " not null"
		}
		cols = append(cols, c)
	}
	return strings.Join(cols, ", ")
}

// formatTable prints t as "name: columns; pk ...; dist ...; vnodes N", a pk column
// with its order when it is not the ascending default.
func formatTable(t *schema.Table) string {
	var cols, pk, dist []string
	for _, c := range t.Columns {
		s := c.Name + " " + c.Type.String()
		if !c.Nullable {
			s += " not null"
		}
		cols = append(cols, s)
	}
	for _, k := range t.PK {
		s := t.Columns[k.Column].Name
		switch {
		case k.Desc && k.NullsFirst:
			s += " desc"
		case k.Desc:
			s += " desc nulls last"
		case k.NullsFirst:
			s += " asc nulls first"
		}
		pk = append(pk, s)
	}
	for _, c := range t.DistKey {
		dist = append(dist, t.Columns[c].Name)
	}
	return fmt.Sprintf("%s: %s; pk %s; dist %s; vnodes %d", t.Name, strings.Join(cols, ", "), strings.Join(pk, ", "), strings.Join(dist, ", "), t.VnodeCount)
}

// sexp is a node of the plan syntax: an atom (a word, or a quoted string) or a list.
type sexp struct {
	atom   string
	quoted bool
	list   []sexp
	isList bool
}

func (s sexp) String() string {
	if !s.isList {
		if s.quoted {
			return "'" + s.atom + "'"
		}
		return s.atom
	}
	parts := make([]string, len(s.list))
	for i, c := range s.list {
		parts[i] = c.String()
	}
	return "(" + strings.Join(parts, " ") + ")"
}

// head is the first word of a list, or "".
func (s sexp) head() string {
	if !s.isList || len(s.list) == 0 || s.list[0].isList || s.list[0].quoted {
		return ""
	}
	return s.list[0].atom
}

func parseSexp(src string) (sexp, error) {
	var toks []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case unicode.IsSpace(rune(c)):
			i++
		case c == '(' || c == ')':
			toks = append(toks, string(c))
			i++
		case c == '\'':
			j := strings.IndexByte(src[i+1:], '\'')
			if j < 0 {
				return sexp{}, fmt.Errorf("unterminated string at %q", src[i:])
			}
			toks = append(toks, src[i:i+j+2])
			i += j + 2
		default:
			j := i
			for j < len(src) && !unicode.IsSpace(rune(src[j])) && !strings.ContainsRune("()'", rune(src[j])) {
				j++
			}
			toks = append(toks, src[i:j])
			i = j
		}
	}
	pos := 0
	var parse func() (sexp, error)
	parse = func() (sexp, error) {
		if pos >= len(toks) {
			return sexp{}, fmt.Errorf("unexpected end of input")
		}
		tok := toks[pos]
		pos++
		switch {
		case tok == ")":
			return sexp{}, fmt.Errorf("unexpected )")
		case tok == "(":
			s := sexp{isList: true}
			for {
				if pos >= len(toks) {
					return sexp{}, fmt.Errorf("missing )")
				}
				if toks[pos] == ")" {
					pos++
					return s, nil
				}
				c, err := parse()
				if err != nil {
					return sexp{}, err
				}
				s.list = append(s.list, c)
			}
		case tok[0] == '\'':
			return sexp{atom: tok[1 : len(tok)-1], quoted: true}, nil
		}
		return sexp{atom: tok}, nil
	}
	s, err := parse()
	if err != nil {
		return sexp{}, err
	}
	if pos != len(toks) {
		return sexp{}, fmt.Errorf("text after the plan: %s", strings.Join(toks[pos:], " "))
	}
	return s, nil
}

func parsePlanSexp(src string) (Plan, error) {
	s, err := parseSexp(src)
	if err != nil {
		return nil, err
	}
	return sexpPlan(s)
}

// word is the unquoted atom s.
func word(s sexp) (string, error) {
	if s.isList || s.quoted {
		return "", fmt.Errorf("want a name, not %s", s)
	}
	return s.atom, nil
}

func words(ss []sexp) ([]string, error) {
	out := make([]string, len(ss))
	for i, s := range ss {
		w, err := word(s)
		if err != nil {
			return nil, err
		}
		out[i] = w
	}
	return out, nil
}

func sexpPlan(s sexp) (Plan, error) {
	args := s.list[min(1, len(s.list)):]
	bad := func(want string) (Plan, error) {
		return nil, fmt.Errorf("bad %s: want %s", s, want)
	}
	switch s.head() {
	case "scan":
		if len(args) != 1 {
			return bad("(scan name)")
		}
		name, err := word(args[0])
		if err != nil {
			return nil, err
		}
		return Scan(name), nil
	case "filter":
		if len(args) != 2 {
			return bad("(filter PLAN EXPR)")
		}
		in, err := sexpPlan(args[0])
		if err != nil {
			return nil, err
		}
		pred, err := sexpExpr(args[1])
		if err != nil {
			return nil, err
		}
		return Filter(in, pred), nil
	case "project":
		if len(args) < 1 {
			return bad("(project PLAN (as EXPR name) ...)")
		}
		in, err := sexpPlan(args[0])
		if err != nil {
			return nil, err
		}
		var cols []NamedExpr
		for _, c := range args[1:] {
			if c.head() != "as" || len(c.list) != 3 {
				return nil, fmt.Errorf("bad projection %s: want (as EXPR name)", c)
			}
			e, err := sexpExpr(c.list[1])
			if err != nil {
				return nil, err
			}
			name, err := word(c.list[2])
			if err != nil {
				return nil, err
			}
			cols = append(cols, As(e, name))
		}
		return Project(in, cols...), nil
	case "aggregate":
		if len(args) < 2 || args[1].head() != "group" {
			return bad("(aggregate PLAN (group col ...) AGG ...)")
		}
		in, err := sexpPlan(args[0])
		if err != nil {
			return nil, err
		}
		group, err := words(args[1].list[1:])
		if err != nil {
			return nil, err
		}
		var aggs []AggExpr
		for _, a := range args[2:] {
			agg, err := sexpAgg(a)
			if err != nil {
				return nil, err
			}
			aggs = append(aggs, agg)
		}
		return Aggregate(in, group, aggs...), nil
	case "join":
		if len(args) < 2 {
			return bad("(join LEFT RIGHT (keys l r) ... [(residual EXPR)])")
		}
		left, err := sexpPlan(args[0])
		if err != nil {
			return nil, err
		}
		right, err := sexpPlan(args[1])
		if err != nil {
			return nil, err
		}
		j := Join(left, right, nil, nil, nil)
		for _, c := range args[2:] {
			ws, werr := words(c.list[min(1, len(c.list)):])
			if werr != nil && c.head() != "residual" {
				return nil, werr
			}
			switch c.head() {
			case "keys":
				if len(c.list) != 3 {
					return nil, fmt.Errorf("bad %s: want (keys lcol rcol)", c)
				}
				j.LeftKeys = append(j.LeftKeys, ws[0])
				j.RightKeys = append(j.RightKeys, ws[1])
			case "left_keys":
				j.LeftKeys = append(j.LeftKeys, ws...)
			case "right_keys":
				j.RightKeys = append(j.RightKeys, ws...)
			case "residual":
				if len(c.list) != 2 {
					return nil, fmt.Errorf("bad %s: want (residual EXPR)", c)
				}
				r, err := sexpExpr(c.list[1])
				if err != nil {
					return nil, err
				}
				j.Residual = &r
			default:
				return nil, fmt.Errorf("bad join clause %s", c)
			}
		}
		return j, nil
	}
	return nil, fmt.Errorf("not a plan: %s", s)
}

// sexpAgg parses (count_star name [(where col)]) or (fn col name [(where col)]).
func sexpAgg(s sexp) (AggExpr, error) {
	fn := s.head()
	if fn == "" {
		return AggExpr{}, fmt.Errorf("bad aggregate %s", s)
	}
	args := s.list[1:]
	var filter string
	if n := len(args); n > 0 && args[n-1].head() == "where" {
		w := args[n-1]
		if len(w.list) != 2 {
			return AggExpr{}, fmt.Errorf("bad %s: want (where col)", w)
		}
		f, err := word(w.list[1])
		if err != nil {
			return AggExpr{}, err
		}
		filter, args = f, args[:n-1]
	}
	ws, err := words(args)
	if err != nil {
		return AggExpr{}, err
	}
	var a AggExpr
	switch {
	case fn == "count_star" && len(ws) == 1:
		a = Agg(fn, "", ws[0])
	case fn != "count_star" && len(ws) == 2:
		a = Agg(fn, ws[0], ws[1])
	default:
		return AggExpr{}, fmt.Errorf("bad aggregate %s: want (count_star name) or (fn col name)", s)
	}
	if filter != "" {
		a = a.Where(filter)
	}
	return a, nil
}

func sexpExpr(s sexp) (Expr, error) {
	if s.isList {
		fn := s.head()
		if fn == "" {
			return Expr{}, fmt.Errorf("bad expression %s: want (fn arg ...)", s)
		}
		var args []Expr
		for _, a := range s.list[1:] {
			e, err := sexpExpr(a)
			if err != nil {
				return Expr{}, err
			}
			args = append(args, e)
		}
		return Call(fn, args...), nil
	}
	if s.quoted {
		return String(s.atom), nil
	}
	switch w := s.atom; {
	case w == "true" || w == "false":
		return Bool(w == "true"), nil
	case w[0] == '-' || (w[0] >= '0' && w[0] <= '9'):
		if v, err := strconv.ParseInt(w, 10, 64); err == nil {
			return Int(v), nil
		}
		v, err := strconv.ParseFloat(w, 64)
		if err != nil {
			return Expr{}, fmt.Errorf("bad number %q", w)
		}
		return Float(v), nil
	}
	return Column(s.atom), nil
}
