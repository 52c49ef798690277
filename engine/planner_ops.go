package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// The lowering of the operators that read their inputs through a hash exchange on
// their key: aggregates and joins (planner.go lowers scans, filters and projections).

// aggregate makes the aggregate node of p over in.
func (l *lowered) aggregate(p *AggregatePlan, in *pnode, lookup func(string) (*object, bool)) (*pnode, error) {
	if len(p.GroupBy) == 0 {
		return nil, errors.New("aggregate: no group-by column (a global aggregate is not supported)")
	}
	cfg := executors.HashAggConfig{VnodeCount: l.vnodes}
	seen := map[string]bool{}
	for _, g := range p.GroupBy {
		i, err := l.column(in.schema, g, "aggregate group by", lookup, p.Input)
		if err != nil {
			return nil, err
		}
		if seen[g] {
			return nil, fmt.Errorf("aggregate: column %q is grouped by twice", g)
		}
		seen[g] = true
		cfg.GroupBy = append(cfg.GroupBy, i)
	}
	for _, a := range p.Aggs {
		what := fmt.Sprintf("aggregate %s = %s(%s)", a.Name, a.Func, a.Col)
		k, ok := aggKinds[a.Func]
		if !ok {
			return nil, fmt.Errorf("%s: unknown function %q (want count, count_star, sum, avg, min, max or count_distinct)", what, a.Func)
		}
		if a.Name == "" || seen[a.Name] {
			return nil, fmt.Errorf("%s: the output column needs a name of its own", what)
		}
		seen[a.Name] = true
		call := executors.AggCall{Kind: k, Name: a.Name}
		if k != executors.AggCountStar {
			i, err := l.column(in.schema, a.Col, what, lookup, p.Input)
			if err != nil {
				return nil, err
			}
			call.Col = i
		}
		if a.Filter != "" {
			i, err := l.column(in.schema, a.Filter, what+" filter", lookup, p.Input)
			if err != nil {
				return nil, err
			}
			call.HasFilter, call.Filter = true, i
		}
		if a.Filter != "" {
			what += " FILTER (WHERE " + a.Filter + ")"
		}
		// Checked one by one, so that an error names the aggregate and its columns.
		if _, err := executors.HashAggSchema(in.schema, executors.HashAggConfig{GroupBy: cfg.GroupBy, Aggs: []executors.AggCall{call}}); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		cfg.Aggs = append(cfg.Aggs, call)
	}
	out, err := executors.HashAggSchema(in.schema, cfg)
	if err != nil {
		return nil, err
	}
	n := &pnode{kind: aggNode, inputs: []*pnode{in}, agg: cfg, schema: out, vnodeCount: l.vnodes}
	st, err := executors.HashAggStateTable(fmt.Sprintf("%s_agg%d", l.name, len(l.nodes)), in.schema, cfg)
	if err != nil {
		return nil, err
	}
	n.states = append(n.states, st)
	slots, err := executors.HashAggMultisetSlots(in.schema, cfg)
	if err != nil {
		return nil, err
	}
	for sl := range slots {
		mt, err := executors.HashAggMultisetTable(fmt.Sprintf("%s_agg%d_ms%d", l.name, len(l.nodes), sl), in.schema, cfg, sl)
		if err != nil {
			return nil, err
		}
		n.states = append(n.states, mt) // after the group table: HashAggConfig.MultiSets
	}
	for i := range cfg.GroupBy {
		n.pk = append(n.pk, i)
	}
	if err := l.feed(in, n, cfg.GroupBy); err != nil {
		return nil, err
	}
	l.nodes = append(l.nodes, n)
	return n, nil
}

// joinNode makes the join node of p over left and right.
func (l *lowered) joinNode(p *JoinPlan, left, right *pnode, lookup func(string) (*object, bool)) (*pnode, error) {
	if len(p.LeftKeys) == 0 || len(p.LeftKeys) != len(p.RightKeys) {
		return nil, fmt.Errorf("join: %d left and %d right keys (want the same number, at least one)", len(p.LeftKeys), len(p.RightKeys))
	}
	ln, rn := fieldNames(left.schema), fieldNames(right.schema)
	for _, c := range ln {
		if slices.Contains(rn, c) {
			return nil, fmt.Errorf("join: both inputs have a column %q (rename one with a projection)", c)
		}
	}
	// Every input of a plan node is an exact changelog per its pk: a backfill's
	// output (its upstream's materialized changelog, merged with the snapshot),
	// repaired by filters, an aggregate's groups, a join's pairs.
	cfg := executors.HashJoinConfig{LeftPK: left.pk, RightPK: right.pk, VnodeCount: l.vnodes, ExactInputs: true}
	for i := range p.LeftKeys {
		lk, err := l.column(left.schema, p.LeftKeys[i], "join left key", lookup, p.Left)
		if err != nil {
			return nil, err
		}
		rk, err := l.column(right.schema, p.RightKeys[i], "join right key", lookup, p.Right)
		if err != nil {
			return nil, err
		}
		if lt, rt := left.schema.Field(lk).Type, right.schema.Field(rk).Type; !arrow.TypeEqual(lt, rt) {
			return nil, fmt.Errorf("join: key %s is %s but %s is %s", p.LeftKeys[i], lt, p.RightKeys[i], rt)
		}
		cfg.LeftKeys = append(cfg.LeftKeys, lk)
		cfg.RightKeys = append(cfg.RightKeys, rk)
	}
	out := executors.HashJoinSchema(left.schema, right.schema)
	if p.Residual != nil {
		r, err := p.Residual.bind(fieldNames(out))
		if err != nil {
			return nil, fmt.Errorf("join residual %s: %w", *p.Residual, l.explainNoColumn(err, lookup, p.Left, p.Right))
		}
		if err := l.checkPredicate(r, out); err != nil {
			return nil, fmt.Errorf("join residual %s: %w", *p.Residual, err)
		}
		cfg.Residual = r
	}
	n := &pnode{kind: joinNode, inputs: []*pnode{left, right}, join: cfg, schema: out, vnodeCount: l.vnodes}
	name := fmt.Sprintf("%s_join%d", l.name, len(l.nodes))
	lt, err := executors.HashJoinLeftTable(name+"_left", left.schema, cfg)
	if err != nil {
		return nil, err
	}
	rt, err := executors.HashJoinRightTable(name+"_right", right.schema, cfg)
	if err != nil {
		return nil, err
	}
	n.states = []*schema.Table{lt, rt}
	// pk: the key (left's columns), then each side's pk.
	for _, c := range slices.Concat(cfg.LeftKeys, left.pk) {
		if !slices.Contains(n.pk, c) {
			n.pk = append(n.pk, c)
		}
	}
	for _, c := range right.pk {
		n.pk = append(n.pk, len(ln)+c)
	}
	if err := l.feed(left, n, cfg.LeftKeys); err != nil {
		return nil, err
	}
	if err := l.feed(right, n, cfg.RightKeys); err != nil {
		return nil, err
	}
	l.nodes = append(l.nodes, n)
	return n, nil
}

// feed makes child the input of parent, hash-exchanged by the child's columns keys.
func (l *lowered) feed(child, parent *pnode, keys []int) error {
	child.parent = parent
	t := &schema.Table{Name: fmt.Sprintf("%s_exchange%d", l.name, len(l.nodes)), VnodeCount: l.vnodes}
	for _, f := range child.schema.Fields() {
		typ, err := schema.TypeOfArrow(f.Type)
		if err != nil {
			return fmt.Errorf("column %s has type %s, which cannot be exchanged", f.Name, f.Type)
		}
		t.Columns = append(t.Columns, schema.Column{Name: f.Name, Type: typ, Nullable: true})
	}
	for _, k := range keys {
		t.PK = append(t.PK, schema.KeyColumn{Column: k})
		t.DistKey = append(t.DistKey, k)
	}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("exchange: %w", err)
	}
	child.exchange = vec.For(t)
	return nil
}
