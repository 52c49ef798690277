package executors

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/schema"
)

// hgIsInt reports whether k is an integer kind: a sum of it is an int64.
func hgIsInt(k schema.Kind) bool {
	return k == schema.Int16 || k == schema.Int32 || k == schema.Int64
}

// hgIsFloat reports whether k is a float kind: a sum of it is a float64.
func hgIsFloat(k schema.Kind) bool { return k == schema.Float32 || k == schema.Float64 }

// hashAggCheck validates cfg's columns and aggregates against the input schema.
func hashAggCheck(in *arrow.Schema, cfg HashAggConfig) error {
	if len(cfg.GroupBy) == 0 {
		return fmt.Errorf("no group-by column")
	}
	col := func(i int, what string) (schema.Type, error) {
		if i < 0 || i >= in.NumFields() {
			return schema.Type{}, fmt.Errorf("%s: column %d out of range (%d columns)", what, i, in.NumFields())
		}
		typ, err := schema.TypeOfArrow(in.Field(i).Type)
		if err != nil {
			return typ, fmt.Errorf("%s: column %d: %w", what, i, err)
		}
		return typ, nil
	}
	for _, g := range cfg.GroupBy {
		if _, err := col(g, "group by"); err != nil {
			return err
		}
	}
	for i, a := range cfg.Aggs {
		what := fmt.Sprintf("aggregate %d (%s)", i, a.Kind)
		if a.Kind > AggCountDistinct {
			return fmt.Errorf("%s: unknown kind", what)
		}
		if a.HasFilter {
			typ, err := col(a.Filter, what+" filter")
			if err != nil {
				return err
			}
			if typ.Kind != schema.Boolean {
				return fmt.Errorf("%s: filter column %d is %s, not boolean", what, a.Filter, typ)
			}
		}
		if a.Kind == AggCountStar {
			continue
		}
		typ, err := col(a.Col, what)
		if err != nil {
			return err
		}
		if (a.Kind == AggSum || a.Kind == AggAvg) && !hgIsInt(typ.Kind) && !hgIsFloat(typ.Kind) {
			return fmt.Errorf("%s: input type %s is not an integer or float type", what, typ)
		}
	}
	return nil
}

// hashAggVnodes is the vnode count of cfg's state tables.
func hashAggVnodes(cfg HashAggConfig) int {
	if cfg.VnodeCount == 0 {
		return schema.DefaultVnodeCount
	}
	return cfg.VnodeCount
}

// HashAggStateTable derives the schema of a HashAgg's group table: the group keys
// g0, g1, ... (the pk and distribution key, all nullable), rows (count(*) of the group,
// int64), then per aggregate i: count and count(*): a<i>_n (int64); sum and avg: a<i>_n
// (non-NULL count, int64) and a<i>_sum (int64 for integer input, float64 for float
// input); min, max and count(DISTINCT): nothing (their state is in their multiset's
// table).
func HashAggStateTable(name string, in *arrow.Schema, cfg HashAggConfig) (*schema.Table, error) {
	if err := hashAggCheck(in, cfg); err != nil {
		return nil, fmt.Errorf("hash agg %s: %w", name, err)
	}
	cols, pk, dist := keyColumns(in, cfg.GroupBy, "g")
	i64 := schema.Type{Kind: schema.Int64}
	cols = append(cols, schema.Column{Name: "rows", Type: i64})
	for i, a := range cfg.Aggs {
		switch a.Kind {
		case AggCount, AggCountStar:
			cols = append(cols, schema.Column{Name: fmt.Sprintf("a%d_n", i), Type: i64})
		case AggSum, AggAvg:
			typ, _ := schema.TypeOfArrow(in.Field(a.Col).Type)
			sum := i64
			if hgIsFloat(typ.Kind) {
				sum = schema.Type{Kind: schema.Float64}
			}
			cols = append(cols, schema.Column{Name: fmt.Sprintf("a%d_n", i), Type: i64},
				schema.Column{Name: fmt.Sprintf("a%d_sum", i), Type: sum})
		}
	}
	t := &schema.Table{Name: name, Columns: cols, PK: pk, DistKey: dist, VnodeCount: hashAggVnodes(cfg)}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("hash agg %s: %w", name, err)
	}
	return t, nil
}

// HashAggMultisetSlots lists the multisets a HashAgg of in as cfg says keeps per
// group: the min, max and count(DISTINCT) aggregates over one input column share one,
// and each multiset has a table (HashAggMultisetTable, in this order). An element lists the indexes of its aggregates, in cfg.Aggs's order.
func HashAggMultisetSlots(in *arrow.Schema, cfg HashAggConfig) ([][]int, error) {
	if err := hashAggCheck(in, cfg); err != nil {
		return nil, fmt.Errorf("hash agg: %w", err)
	}
	slots := hashAggSlots(cfg)
	out := make([][]int, len(slots))
	for i, sl := range slots {
		out[i] = slices.Clone(sl.aggs)
	}
	return out, nil
}

// hashAggSlots groups the multiset aggregates of cfg by input column, in order of
// first appearance.
func hashAggSlots(cfg HashAggConfig) []hgSlot {
	var slots []hgSlot
	for i, a := range cfg.Aggs {
		if !a.Kind.multiset() {
			continue
		}
		sl := slices.IndexFunc(slots, func(s hgSlot) bool { return s.col == a.Col })
		if sl < 0 {
			sl = len(slots)
			slots = append(slots, hgSlot{col: a.Col})
		}
		slots[sl].aggs = append(slots[sl].aggs, i)
	}
	return slots
}

// HashAggMultisetTable derives the schema of the table of multiset slot (an index
// into HashAggMultisetSlots): the group keys g0, g1, ..., the value v (the input
// column's type), then the value's count for each aggregate of the slot, c<agg>
// (int64, agg its index in cfg.Aggs), with pk (group keys, v) and the group keys as
// the distribution key, so that a group's multisets live in its vnode. A row exists
// while one of its counts is above 0.
func HashAggMultisetTable(name string, in *arrow.Schema, cfg HashAggConfig, slot int) (*schema.Table, error) {
	if err := hashAggCheck(in, cfg); err != nil {
		return nil, fmt.Errorf("hash agg %s: %w", name, err)
	}
	slots := hashAggSlots(cfg)
	if slot < 0 || slot >= len(slots) {
		return nil, fmt.Errorf("hash agg %s: multiset %d of %d (min, max and count(DISTINCT) keep one per input column)", name, slot, len(slots))
	}
	cols, pk, dist := keyColumns(in, cfg.GroupBy, "g")
	typ, _ := schema.TypeOfArrow(in.Field(slots[slot].col).Type)
	pk = append(pk, schema.KeyColumn{Column: len(cols)})
	cols = append(cols, schema.Column{Name: "v", Type: typ})
	for _, a := range slots[slot].aggs {
		cols = append(cols, schema.Column{Name: fmt.Sprintf("c%d", a), Type: schema.Type{Kind: schema.Int64}})
	}
	t := &schema.Table{Name: name, Columns: cols, PK: pk, DistKey: dist, VnodeCount: hashAggVnodes(cfg)}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("hash agg %s: %w", name, err)
	}
	return t, nil
}

// hgSlot is the min, max and count(DISTINCT) aggregates over one input column: a
// group keeps one multiset of the column's values for all of them, so a
// row looks its value up once, however many of them (with their FILTERs) count it,
// and the slot's table keeps one row per value with a count per aggregate.
type hgSlot struct {
	col  int
	aggs []int // aggregate indexes; the first's value kernels encode the column
	pack int   // the column's hgPackWidth
}

// HashAggSchema is the output schema of a HashAgg of in as cfg says (only GroupBy and
// Aggs are read): the group-by columns, then one column per aggregate.
func HashAggSchema(in *arrow.Schema, cfg HashAggConfig) (*arrow.Schema, error) {
	if err := hashAggCheck(in, cfg); err != nil {
		return nil, fmt.Errorf("hash agg: %w", err)
	}
	fields := make([]arrow.Field, 0, len(cfg.GroupBy)+len(cfg.Aggs))
	for _, g := range cfg.GroupBy {
		fields = append(fields, in.Field(g))
	}
	for i, a := range cfg.Aggs {
		fields = append(fields, hashAggField(in, a, i))
	}
	return arrow.NewSchema(fields, nil), nil
}

// hashAggField is the output column of aggregate a (the i-th) over in.
func hashAggField(in *arrow.Schema, a AggCall, i int) arrow.Field {
	name := a.Name
	if name == "" {
		name = fmt.Sprintf("%s_%d", a.Kind, i)
	}
	var dt arrow.DataType
	switch a.Kind {
	case AggCount, AggCountStar, AggCountDistinct:
		dt = arrow.PrimitiveTypes.Int64
	case AggSum:
		dt = arrow.PrimitiveTypes.Int64
		if typ, _ := schema.TypeOfArrow(in.Field(a.Col).Type); hgIsFloat(typ.Kind) {
			dt = arrow.PrimitiveTypes.Float64
		}
	case AggAvg:
		dt = arrow.PrimitiveTypes.Float64
	case AggMin, AggMax:
		typ, _ := schema.TypeOfArrow(in.Field(a.Col).Type)
		dt = typ.ArrowType()
	}
	nullable := a.Kind == AggSum || a.Kind == AggAvg || a.Kind == AggMin || a.Kind == AggMax
	return arrow.Field{Name: name, Type: dt, Nullable: nullable}
}
