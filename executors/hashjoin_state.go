package executors

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/schema"
)

// hashJoinVnodes is the vnode count of the state tables of a VnodeCount n.
func hashJoinVnodes(n int) int {
	if n == 0 {
		return schema.DefaultVnodeCount
	}
	return n
}

// HashJoinStateTable derives the schema of one side's state table: the input's columns
// c0, c1, ... (all nullable, the input's types), with pk (the join key columns, then
// the pk columns not among them) and the join key columns as the distribution key, so
// that all rows of a join key live in one vnode and follow one another in pk order.
func HashJoinStateTable(name string, in *arrow.Schema, keys, pk []int, vnodeCount int) (*schema.Table, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("hash join %s: no join key", name)
	}
	cols := make([]schema.Column, in.NumFields())
	for i, f := range in.Fields() {
		typ, err := schema.TypeOfArrow(f.Type)
		if err != nil {
			return nil, fmt.Errorf("hash join %s: column %d (%s): %w", name, i, f.Name, err)
		}
		cols[i] = schema.Column{Name: fmt.Sprintf("c%d", i), Type: typ, Nullable: true}
	}
	seen := map[int]bool{}
	var kcs []schema.KeyColumn
	for _, list := range [][]int{keys, pk} {
		for _, c := range list {
			if c < 0 || c >= len(cols) {
				return nil, fmt.Errorf("hash join %s: column %d out of range (%d columns)", name, c, len(cols))
			}
			if !seen[c] {
				seen[c] = true
				kcs = append(kcs, schema.KeyColumn{Column: c})
			}
		}
	}
	t := &schema.Table{Name: name, Columns: cols, PK: kcs, DistKey: append([]int(nil), keys...), VnodeCount: hashJoinVnodes(vnodeCount)}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("hash join %s: %w", name, err)
	}
	return t, nil
}

// HashJoinLeftTable is HashJoinStateTable of cfg's left side.
func HashJoinLeftTable(name string, left *arrow.Schema, cfg HashJoinConfig) (*schema.Table, error) {
	return HashJoinStateTable(name, left, cfg.LeftKeys, cfg.LeftPK, cfg.VnodeCount)
}

// HashJoinRightTable is HashJoinStateTable of cfg's right side.
func HashJoinRightTable(name string, right *arrow.Schema, cfg HashJoinConfig) (*schema.Table, error) {
	return HashJoinStateTable(name, right, cfg.RightKeys, cfg.RightPK, cfg.VnodeCount)
}

// HashJoinSchema is the output schema of a HashJoin of left and right: the left
// columns, then the right ones, all nullable.
func HashJoinSchema(left, right *arrow.Schema) *arrow.Schema {
	fields := make([]arrow.Field, 0, left.NumFields()+right.NumFields())
	for _, in := range []*arrow.Schema{left, right} {
		for _, f := range in.Fields() {
			f.Nullable = true
			fields = append(fields, f)
		}
	}
	return arrow.NewSchema(fields, nil)
}
