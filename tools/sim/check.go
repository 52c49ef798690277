package sim

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// urow is one committed row of an object: its values, the vnode it lives in and its
// memcomparable pk.
type urow struct {
	vals  row
	line  string // "col=value ..." in the object's column order
	vnode uint16
	key   []byte
}

// read scans every committed row of name in snap.
func (r *runner) read(snap *engine.Snapshot, name string) ([]urow, error) {
	t, err := r.e.Table(name)
	if err != nil {
		return nil, err
	}
	rd, err := snap.Scan(r.ctx, name)
	if err != nil {
		return nil, err
	}
	defer rd.Release()
	var out []urow
	for rd.Next() {
		out = appendRows(out, t, rd.RecordBatch())
	}
	return out, rd.Err()
}

func appendRows(out []urow, t *schema.Table, rec arrow.RecordBatch) []urow {
	var dist []byte
	for i := 0; i < int(rec.NumRows()); i++ {
		u := urow{vals: row{}}
		var line []string
		for c, col := range t.Columns {
			a := rec.Column(c)
			switch {
			case a.IsNull(i):
				u.vals[col.Name] = nil
			default:
				switch a := a.(type) {
				case *array.Int64:
					u.vals[col.Name] = a.Value(i)
				case *array.String:
					// Value aliases the batch's buffer, which goes back to the
					// engine's pool when the reader is released.
					u.vals[col.Name] = strings.Clone(a.Value(i))
				}
			}
			line = append(line, col.Name+"="+vectest.FormatValue(a, i))
		}
		u.line = strings.Join(line, " ")
		for _, k := range t.PK {
			u.key = vec.AppendKeyColumn(u.key, rec.Column(k.Column), i, t.Columns[k.Column].Type, k.Desc, k.NullsFirst)
		}
		dist = dist[:0]
		for _, c := range t.DistKey {
			dist = vec.AppendKeyColumn(dist, rec.Column(c), i, t.Columns[c].Type, false, true)
		}
		u.vnode = vec.VnodeOf(dist, t.VnodeCount)
		out = append(out, u)
	}
	return out
}

// check reads the committed state and checks every invariant the simulation can see
// there: I6 (tables equal the model at the committed epoch), I1/I2 (each view equals
// its query over the committed prefix of its upstreams: the rows of Completed vnodes
// and of InProgress vnodes up to their position; every row once the backfill is done),
// I4 (progress never goes back, every vnode has an owner) and I5 (a paused backfill
// reads nothing).
func (r *runner) check(when string) error {
	r.rep.CheckpointsChecked++
	epoch := r.e.CommittedEpoch()
	ref, ok := r.refs[epoch]
	if !ok {
		r.fail("I6 durability", "%s: committed epoch %d is not one the simulation committed", when, epoch)
		return errStop
	}
	snap, err := r.e.Snapshot()
	if err != nil {
		r.fail("engine error", "%s: snapshot: %v", when, err)
		return errStop
	}
	defer snap.Release()
	if snap.Epoch() != epoch {
		r.fail("I6 durability", "%s: snapshot at epoch %d, committed epoch %d", when, snap.Epoch(), epoch)
		return errStop
	}
	objs := map[string][]urow{}
	get := func(name string) ([]urow, error) {
		if rows, ok := objs[name]; ok {
			return rows, nil
		}
		rows, err := r.read(snap, name)
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", name, err)
		}
		objs[name] = rows
		return rows, nil
	}
	for _, tc := range []struct {
		name string
		cols []string
		want []row
	}{
		{"a", []string{"k", "g", "v", "s"}, ref.rowsA()},
		{"b", []string{"id", "w"}, ref.rowsB()},
	} {
		got, err := get(tc.name)
		if err != nil {
			r.fail("engine error", "%s: %v", when, err)
			return errStop
		}
		r.compare("I6 durability", fmt.Sprintf("%s: table %s at epoch %d", when, tc.name, epoch), got, tc.want, tc.cols)
	}
	jobs := r.e.Progress()
	for _, p := range jobs {
		for _, a := range p.Actors {
			if a.ReadsKept > 0 {
				r.rep.Sometimes["snapshot_read_kept"]++
			}
			if a.HeldBack > 0 {
				r.rep.Sometimes["backfill_held_back_by_memory"]++
			}
			if a.Done {
				continue
			}
			if a.LocalReads {
				r.rep.Sometimes["backfill_reading_locally"]++
			} else {
				r.rep.Sometimes["backfill_replicating"]++
			}
		}
	}
	for _, v := range r.views {
		prog, err := r.e.VnodeProgress(v.sh.name)
		if err != nil {
			r.fail("engine error", "%s: progress of %s: %v", when, v.sh.name, err)
			return errStop
		}
		r.checkProgress(when, v, prog)
		if err := r.checkPlacement(when, v, jobs); err != nil {
			return err
		}
		ins := make([][]row, len(v.sh.upstreams))
		done := true
		for i, up := range v.sh.upstreams {
			rows, err := get(up)
			if err != nil {
				r.fail("engine error", "%s: %v", when, err)
				return errStop
			}
			byVnode := map[uint16]engine.VnodeProgress{}
			for _, p := range prog {
				if p.Scan == i {
					byVnode[p.Vnode] = p
					done = done && p.State == vec.Completed
					if p.State == vec.InProgress && p.Position != nil {
						r.rep.Sometimes["inprogress_vnode_checked"]++
					}
				}
			}
			for _, u := range rows {
				if backfilled(byVnode[u.vnode], u.key) {
					ins[i] = append(ins[i], u.vals)
				}
			}
		}
		if !done {
			r.rep.Sometimes["checkpoint_while_backfilling"]++
		}
		inv := "I1 result"
		if !done {
			inv = "I2 prefix"
		}
		got, err := get(v.sh.name)
		if err != nil {
			r.fail("engine error", "%s: %v", when, err)
			return errStop
		}
		r.compare(inv, fmt.Sprintf("%s: view %s at epoch %d", when, v.sh.name, epoch), got, v.sh.eval(ins), v.cols)
		v.last = prog
	}
	return nil
}

// checkPlacement checks where v's actors run, in seeds with a backfill node (the
// last): only there while v backfills on it (a WaitCheckpoint after its backfill is
// done moves it off; a Barrier does not), never there otherwise. jobs is the engine's
// Progress at the check.
func (r *runner) checkPlacement(when string, v *view, jobs []engine.JobProgress) error {
	if len(r.eo.NodeRoles) == 0 {
		return nil
	}
	role := len(r.eo.NodeRoles) - 1
	for _, p := range jobs {
		if p.Name != v.sh.name {
			continue
		}
		switch {
		case p.BackfillOn == "backfill" && (!v.onRole || v.moved || !slices.Equal(p.Nodes, []int{role})):
			r.fail("placement", "%s: view %s backfills on the role's node %d (created on it %v, moved %v) but runs on %v", when, v.sh.name, role, v.onRole, v.moved, p.Nodes)
			return errStop
		case p.BackfillOn == "" && slices.Contains(p.Nodes, role):
			r.fail("placement", "%s: view %s runs on nodes %v, the role's node %d among them", when, v.sh.name, p.Nodes, role)
			return errStop
		case p.BackfillOn == "" && v.onRole && !v.moved:
			v.moved = true
			r.rep.Sometimes["view_moved_off_role_nodes"]++
		}
	}
	return nil
}

// checkProgress checks I4 and I5 between the last checked progress of v and prog.
func (r *runner) checkProgress(when string, v *view, prog []engine.VnodeProgress) {
	name := v.sh.name
	if v.frozen {
		if n := sumRows(prog); n != v.frozenRows {
			r.fail("I5 liveness", "%s: view %s is paused but its committed snapshot rows went from %d to %d", when, name, v.frozenRows, n)
		}
	}
	type sk struct {
		scan  int
		vnode uint16
	}
	last := map[sk]engine.VnodeProgress{}
	for _, p := range v.last {
		last[sk{p.Scan, p.Vnode}] = p
	}
	completed := map[int]int{}
	total := map[int]int{}
	newly := map[int]bool{}
	states := map[uint64]map[vec.BackfillState]bool{}
	for _, p := range prog {
		total[p.Scan]++
		if p.State == vec.Completed {
			completed[p.Scan]++
		}
		if p.Actor == 0 {
			r.fail("I4 ownership", "%s: view %s scan %d vnode %d has no owner actor", when, name, p.Scan, p.Vnode)
		} else {
			if states[uint64(p.Actor)] == nil {
				states[uint64(p.Actor)] = map[vec.BackfillState]bool{}
			}
			states[uint64(p.Actor)][p.State] = true
		}
		old, ok := last[sk{p.Scan, p.Vnode}]
		if !ok {
			continue
		}
		switch {
		case p.State < old.State:
			r.fail("I4 ownership", "%s: view %s scan %d vnode %d went back from %v to %v", when, name, p.Scan, p.Vnode, old.State, p.State)
		case p.State == vec.InProgress && old.State == vec.InProgress && bytes.Compare(p.Position, old.Position) < 0:
			r.fail("I4 ownership", "%s: view %s scan %d vnode %d: position went back from %x to %x", when, name, p.Scan, p.Vnode, old.Position, p.Position)
		case p.Rows < old.Rows:
			r.fail("I4 ownership", "%s: view %s scan %d vnode %d: rows went back from %d to %d", when, name, p.Scan, p.Vnode, old.Rows, p.Rows)
		}
		if p.State == vec.Completed && old.State != vec.Completed {
			newly[p.Scan] = true
		}
	}
	for scan := range newly {
		if completed[scan] < total[scan] {
			r.rep.Sometimes["vnode_finishing_alone"]++
		}
	}
	if v.rescaled {
		v.rescaled = false
		for _, st := range states {
			if len(st) >= 2 {
				r.rep.Sometimes["actor_with_mixed_states"]++
				break
			}
		}
	}
}

// compare compares the rows of an object with the oracle's, as multisets.
func (r *runner) compare(inv, what string, got []urow, want []row, cols []string) {
	g := make([]string, len(got))
	for i, u := range got {
		g[i] = u.line
	}
	w := make([]string, len(want))
	for i, x := range want {
		w[i] = format(x, cols)
	}
	slices.Sort(g)
	slices.Sort(w)
	r.rep.RowsCompared += int64(len(g))
	if slices.Equal(g, w) {
		return
	}
	missing, extra := diff(w, g), diff(g, w)
	r.fail(inv, "%s: %d rows, want %d; missing %s; unexpected %s", what, len(g), len(w), head(missing), head(extra))
}

// diff returns the lines of a not in b (both sorted), as multisets.
func diff(a, b []string) []string {
	var out []string
	i, j := 0, 0
	for i < len(a) {
		switch {
		case j >= len(b) || a[i] < b[j]:
			out = append(out, a[i])
			i++
		case a[i] > b[j]:
			j++
		default:
			i++
			j++
		}
	}
	return out
}

func head(lines []string) string {
	if len(lines) == 0 {
		return "none"
	}
	n := min(len(lines), 5)
	s := fmt.Sprintf("%d, e.g. %q", len(lines), lines[:n])
	return s
}
