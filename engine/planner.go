package engine

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
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

// backfillNode is the lowered scan of a view: what every backfill kind shares, and the
// kind's own settings as a tagged variant.
type backfillNode struct {
	upstream *object
	// s2 is the upstream columns the view needs plus every pk column, in upstream
	// order (indexes into the upstream's columns).
	s2     []int
	common backfillCommon
	kind   backfillVariant
}

// backfillCommon holds the settings of every backfill kind.
type backfillCommon struct {
	rateLimit *int64 // snapshot rows per second per actor; nil: unlimited, 0: paused
	paused    bool   // start paused until a Resume
}

// backfillVariant is one backfill kind's own settings.
type backfillVariant interface {
	kindName() BackfillKind
	// dispatcher is how the upstream's actors feed the view's actors.
	dispatcher() executors.DispatcherKind
}

// arrangementVariant: the upstream is hash-dispatched by its distribution key.
type arrangementVariant struct{}

// noShuffleVariant: view actor i reads upstream actor i, on the same node.
type noShuffleVariant struct{}

func (arrangementVariant) kindName() BackfillKind { return ArrangementBackfill }
func (noShuffleVariant) kindName() BackfillKind   { return NoShuffleBackfill }

func (arrangementVariant) dispatcher() executors.DispatcherKind { return executors.Hash }
func (noShuffleVariant) dispatcher() executors.DispatcherKind   { return executors.NoShuffle }

// lowered is a view's plan after binding: its backfill node and the stages after it.
type lowered struct {
	scan   backfillNode
	stages []stage
	// out is the view's table: the stages' output columns, pk and distribution key
	// those of the upstream, and the upstream's vnode count.
	out *schema.Table
}

// stage is a filter (pred set) or a projection (exprs set), bound to its input's
// column indexes.
type stage struct {
	pred  executors.Expr
	exprs []executors.Expr
	names []string
}

// lower binds a view's plan over upstream (a table or view): it prunes the upstream's
// columns to what the plan reads plus the pk, checks every expression, and derives the
// view's table. name names the view in errors.
func lower(name string, p Plan, upstream *object, kind BackfillKind, mem memory.Allocator) (*lowered, error) {
	var chain []Plan
	for n := p; n != nil; n = n.input() {
		chain = append(chain, n)
	}
	slices.Reverse(chain)
	if _, ok := chain[0].(*ScanPlan); !ok {
		return nil, fmt.Errorf("materialized view %s: the plan does not start with a scan", name)
	}
	up := upstream.t
	l := &lowered{scan: backfillNode{upstream: upstream}}
	switch kind {
	case ArrangementBackfill, "":
		l.scan.kind = arrangementVariant{}
	case NoShuffleBackfill:
		l.scan.kind = noShuffleVariant{}
	default:
		return nil, fmt.Errorf("materialized view %s: unknown backfill kind %q (want %q or %q)", name, kind, ArrangementBackfill, NoShuffleBackfill)
	}

	// Column pruning: the columns read before the first projection (all of them when
	// nothing projects), plus the pk.
	need := map[string]bool{}
	projects := false
	for _, n := range chain[1:] {
		if pr, ok := n.(*ProjectPlan); ok {
			for _, c := range pr.Cols {
				c.Expr.columns(need)
			}
			projects = true
			break
		}
		n.(*FilterPlan).Pred.columns(need)
	}
	for i, c := range up.Columns {
		if !projects || need[c.Name] || up.IsPK(i) {
			l.scan.s2 = append(l.scan.s2, i)
		}
	}
	for c := range need {
		if _, ok := up.ColumnIndex(c); !ok {
			return nil, fmt.Errorf("materialized view %s: %s has no column %q", name, up.Name, c)
		}
	}

	// Bind every stage against its input's columns, and learn the output types by
	// building the chain over an empty input.
	pkNames := make([]string, len(up.PK))
	for i, k := range up.PK {
		pkNames[i] = up.Columns[k.Column].Name
	}
	var in executors.Executor = executors.NewValues(up.ProjectedArrowSchema(l.scan.s2), nil)
	for _, n := range chain[1:] {
		cols := fieldNames(in.Schema())
		switch n := n.(type) {
		case *FilterPlan:
			pred, err := n.Pred.bind(cols)
			if err != nil {
				return nil, fmt.Errorf("materialized view %s: filter %s: %w", name, n.Pred, err)
			}
			f, err := executors.NewFilter(in, pred, mem)
			if err != nil {
				return nil, fmt.Errorf("materialized view %s: %w", name, err)
			}
			in = f
			l.stages = append(l.stages, stage{pred: pred})
		case *ProjectPlan:
			st := stage{}
			seen := map[string]bool{}
			for _, c := range n.Cols {
				if c.Name == "" {
					return nil, fmt.Errorf("materialized view %s: projection %s has no name", name, c.Expr)
				}
				if seen[c.Name] {
					return nil, fmt.Errorf("materialized view %s: column %q is projected twice", name, c.Name)
				}
				seen[c.Name] = true
				if slices.Contains(pkNames, c.Name) && (c.Expr.Op != "col" || c.Expr.Name != c.Name) {
					return nil, fmt.Errorf("materialized view %s: column %q is a pk column of %s and must be that column unchanged, not %s", name, c.Name, up.Name, c.Expr)
				}
				e, err := c.Expr.bind(cols)
				if err != nil {
					return nil, fmt.Errorf("materialized view %s: column %s = %s: %w", name, c.Name, c.Expr, err)
				}
				st.exprs = append(st.exprs, e)
				st.names = append(st.names, c.Name)
			}
			// The pk travels through every projection.
			for _, pk := range pkNames {
				if seen[pk] {
					continue
				}
				e, err := Column(pk).bind(cols)
				if err != nil {
					return nil, fmt.Errorf("materialized view %s: pk column %s: %w", name, pk, err)
				}
				st.exprs = append(st.exprs, e)
				st.names = append(st.names, pk)
			}
			pj, err := executors.NewProject(in, st.exprs, st.names, mem)
			if err != nil {
				return nil, fmt.Errorf("materialized view %s: %w", name, err)
			}
			in = pj
			l.stages = append(l.stages, st)
		default:
			return nil, fmt.Errorf("materialized view %s: a %s node can only be the plan's leaf", name, n.kind())
		}
	}

	// The view's table.
	out := &schema.Table{Name: name, VnodeCount: up.VnodeCount}
	for _, f := range in.Schema().Fields() {
		typ, ok := schemaType(f.Type)
		if !ok {
			return nil, fmt.Errorf("materialized view %s: column %s has type %s, which a table cannot store", name, f.Name, f.Type)
		}
		col := schema.Column{Name: f.Name, Type: typ, Nullable: true}
		if i, ok := up.ColumnIndex(f.Name); ok && up.IsPK(i) {
			col.Nullable = up.Columns[i].Nullable
		}
		out.Columns = append(out.Columns, col)
	}
	for _, k := range up.PK {
		i, _ := out.ColumnIndex(up.Columns[k.Column].Name)
		out.PK = append(out.PK, schema.KeyColumn{Column: i, Desc: k.Desc, NullsFirst: k.NullsFirst})
	}
	for _, d := range up.DistKey {
		i, _ := out.ColumnIndex(up.Columns[d].Name)
		out.DistKey = append(out.DistKey, i)
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("materialized view %s: %w", name, err)
	}
	l.out = out
	return l, nil
}

func fieldNames(s *arrow.Schema) []string {
	out := make([]string, s.NumFields())
	for i, f := range s.Fields() {
		out[i] = f.Name
	}
	return out
}

// buildStages puts the stages of a view over in (whose columns are the upstream's S2).
func (l *lowered) buildStages(in executors.Executor, mem memory.Allocator) (executors.Executor, error) {
	for _, st := range l.stages {
		var err error
		if st.pred != nil {
			in, err = executors.NewFilter(in, st.pred, mem)
		} else {
			in, err = executors.NewProject(in, st.exprs, st.names, mem)
		}
		if err != nil {
			return nil, fmt.Errorf("materialized view %s: %w", l.out.Name, err)
		}
	}
	return in, nil
}
