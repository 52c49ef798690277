package engine

import (
	"fmt"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// VnodeProgress is the committed backfill progress of one upstream vnode of a view.
type VnodeProgress struct {
	// Scan numbers the view's scans left to right (0 for a view over one upstream),
	// and Upstream names the table or view it reads.
	Scan     int
	Upstream string
	Vnode    uint16
	// Actor is the view's actor that owns the vnode now (0 when the view's actors
	// are not running).
	Actor executors.ActorID
	// State is NotStarted, InProgress or Completed; Position is the last upstream pk
	// the vnode's snapshot read returned (a memcomparable key; nil when NotStarted or
	// when the vnode had no row), and Rows the snapshot rows it has read.
	State    vec.BackfillState
	Position []byte
	Rows     int64
}

// VnodeProgress lists the committed progress of every upstream vnode of view name's
// backfill, by scan and vnode.
func (e *Engine) VnodeProgress(name string) ([]VnodeProgress, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return nil, err
	}
	o, ok := e.cat.objects[name]
	if !ok || o.Kind != kindMV {
		return nil, fmt.Errorf("progress of %s: no such materialized view", name)
	}
	j := e.g.jobs[name]
	view, err := e.store.View()
	if err != nil {
		return nil, fmt.Errorf("progress of %s: %w", name, err)
	}
	defer view.Release()
	var out []VnodeProgress
	err = e.loadProgress(view, o, j.low, func(scan int, n *pnode, pos *vec.Positions, rows []int64) {
		up := n.scan.upstream
		f := j.frags[n.idx]
		for v := 0; v < up.t.VnodeCount; v++ {
			p := VnodeProgress{Scan: scan, Upstream: up.Name, Vnode: uint16(v), State: pos.State[v], Position: pos.Pos[v], Rows: rows[v]}
			if i := int(f.mapping[v]); i < len(f.actors) {
				p.Actor = f.actors[i].id
			}
			out = append(out, p)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("progress of %s: %w", name, err)
	}
	return out, nil
}

// loadProgress reads the committed progress table of each scan of view o (lowered
// as low) in view, and calls fn with each scan's positions and row counts, left to
// right. A corrupt progress row is an error naming the table and vnode.
func (e *Engine) loadProgress(view *storage.View, o *object, low *lowered, fn func(scan int, n *pnode, pos *vec.Positions, rows []int64)) error {
	ids := o.StateIDs
	scan := 0
	for _, n := range low.nodes {
		id := ids[0]
		ids = ids[n.tableIDs():]
		if n.kind != scanNode {
			continue
		}
		up := n.scan.upstream
		pt, err := storage.NewProgressTable(e.nodes[0], id, fmt.Sprintf("%s_progress%d", o.Name, n.idx), up.t, vnode.Full(up.t.VnodeCount))
		if err != nil {
			return err
		}
		pos, rows, err := pt.Load(view)
		if err != nil {
			return err
		}
		fn(scan, n, pos, rows)
		scan++
	}
	return nil
}

// seedProgress gives the backfill actors of view o's job j that have not reported
// a loaded progress yet the committed progress of their vnodes. The coordinator knows
// a backfill's progress only from its actors' reports, and a backfill passes its
// first barrier on before it loads its progress: until its next report, the
// committed rows are what there is to know (after a recovery, all of it: a view
// built before is done at once).
func (e *Engine) seedProgress(o *object, j *job) error {
	view, err := e.store.View()
	if err != nil {
		return err
	}
	defer view.Release()
	return e.loadProgress(view, o, j.low, func(_ int, n *pnode, pos *vec.Positions, rows []int64) {
		for _, a := range j.frags[n.idx].actors {
			if a.progress.Started {
				continue
			}
			st := executors.BackfillStats{Started: true}
			a.vnodes.Iterate(func(v vnode.Vnode) bool {
				st.Owned++
				if pos.State[v] == vec.Completed {
					st.Completed++
				}
				st.Rows += rows[v]
				return true
			})
			st.Done = st.Completed == st.Owned
			a.progress = st
		}
	})
}
