package storage

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// ReplicatedTable is an arrangement backfill's private view of its upstream table: the
// upstream's table id, pk, order and vnode count, restricted to the actor's vnodes and
// projected to S2 (the columns the backfill needs plus every pk column).
//
// Upstream changes written to it are expanded to the upstream's full schema S1 (columns
// outside S2 are NULL, or zero when NOT NULL: they are never read), kept in this
// actor's memory tagged with their epoch, never persisted, and dropped once the
// committed epoch reaches them. Only this table's iterators see them, on top of the
// committed upstream.
//
// It is deliberately not a StateTable: it is built only by NewReplicatedTable and
// offers only what a backfill needs (write a chunk, seal an epoch, iterate a vnode after
// a position). It is used by one actor goroutine at a time.
type ReplicatedTable struct {
	store       *Store
	s2          []int // S1 column indexes kept, in the order of the chunks written
	mem         memory.Allocator
	runs        []*run // sealed private epochs, ascending
	chunkWriter        // of S1: the upstream's table id, schema, kernels and the actor's vnodes
}

// NewReplicatedTable returns the replicated view of upstream table id (schema s1) for a
// backfill actor owning vnodes, keeping the S1 columns s2 (which must include every pk
// column). Chunks written to it have the columns s2, in that order.
func NewReplicatedTable(store *Store, id uint32, s1 *schema.Table, s2 []int, vnodes *vnode.Bitmap, mem memory.Allocator) (*ReplicatedTable, error) {
	if id == MetaTable {
		return nil, fmt.Errorf("storage: table id %d is reserved for metadata", MetaTable)
	}
	if vnodes.Count() != s1.VnodeCount {
		return nil, fmt.Errorf("storage: replicated table %s has %d vnodes, the bitmap %d", s1.Name, s1.VnodeCount, vnodes.Count())
	}
	seen := map[int]bool{}
	for _, c := range s2 {
		if c < 0 || c >= len(s1.Columns) {
			return nil, fmt.Errorf("storage: replicated table %s: column index %d out of range", s1.Name, c)
		}
		if seen[c] {
			return nil, fmt.Errorf("storage: replicated table %s: column %s listed twice", s1.Name, s1.Columns[c].Name)
		}
		seen[c] = true
	}
	for _, k := range s1.PK {
		if !seen[k.Column] {
			return nil, fmt.Errorf("storage: replicated table %s: S2 lacks pk column %s", s1.Name, s1.Columns[k.Column].Name)
		}
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	return &ReplicatedTable{store: store, s2: append([]int(nil), s2...), mem: mem, chunkWriter: newChunkWriter(id, s1, vnodes)}, nil
}

// S2 is the kept columns (S1 indexes) in the order of written chunks.
func (r *ReplicatedTable) S2() []int { return r.s2 }

// WriteChunk replicates the visible rows of an upstream chunk with the S2 columns. A
// chunk of the wrong shape or with a row outside the actor's vnodes is an error naming
// the table and the column or vnode; nothing of it is written.
func (r *ReplicatedTable) WriteChunk(c *vec.Chunk) error {
	full, err := r.expand(c)
	if err != nil {
		return err
	}
	defer full.Release()
	return r.write(full, "replicate")
}

// expand turns a chunk of S2 columns into one of S1's shape.
func (r *ReplicatedTable) expand(c *vec.Chunk) (*vec.Chunk, error) {
	rec := c.Record()
	if int(rec.NumCols()) != len(r.s2) {
		return nil, fmt.Errorf("storage: replicate: table %s: chunk has %d columns, S2 has %d", r.t.Name, rec.NumCols(), len(r.s2))
	}
	n := c.NumRows()
	cols := make([]arrow.Array, len(r.t.Columns))
	defer func() {
		for _, a := range cols {
			if a != nil {
				a.Release()
			}
		}
	}()
	for j, ci := range r.s2 {
		col := r.t.Columns[ci]
		a := rec.Column(j)
		if want := col.Type.ArrowType(); !arrow.TypeEqual(a.DataType(), want) {
			return nil, fmt.Errorf("storage: replicate: table %s: column %s: chunk has type %s, want %s", r.t.Name, col.Name, a.DataType(), want)
		}
		if !col.Nullable && a.NullN() > 0 {
			return nil, fmt.Errorf("storage: replicate: table %s: column %s: NULL in a NOT NULL column", r.t.Name, col.Name)
		}
		a.Retain()
		cols[ci] = a
	}
	for ci, col := range r.t.Columns {
		if cols[ci] != nil {
			continue
		}
		b := array.NewBuilder(r.mem, col.Type.ArrowType())
		if col.Nullable {
			b.AppendNulls(n)
		} else {
			b.AppendEmptyValues(n)
		}
		cols[ci] = b.NewArray()
		b.Release()
	}
	full := array.NewRecordBatch(r.t.ArrowSchema(), cols, int64(n))
	defer full.Release()
	return c.WithRecord(full), nil
}

// Seal tags the writes since the last Seal with epoch (the epoch they belong to, the
// barrier's Prev). Sealed epochs above the committed epoch are seen by Iter.
func (r *ReplicatedTable) Seal(epoch uint64) {
	if r.mt.empty() {
		return
	}
	r.runs = append(r.runs, r.mt.seal(r.id, epoch))
}

// PrivateBytes is the size of the replicated epochs held in memory.
func (r *ReplicatedTable) PrivateBytes() int {
	total := r.mt.bytes
	for _, run := range r.runs {
		for _, e := range run.entries {
			total += len(e.key) + len(e.value)
		}
	}
	return total
}

// View opens the committed upstream state and drops the replicated epochs it covers.
// Iterators opened on it see committed data plus every sealed replicated epoch above
// its epoch. Release it when done.
func (r *ReplicatedTable) View() (*View, error) {
	v, err := r.store.View()
	if err != nil {
		return nil, err
	}
	keep := r.runs[:0]
	for _, run := range r.runs {
		if run.epoch > v.Epoch {
			keep = append(keep, run)
		}
	}
	clear(r.runs[len(keep):])
	r.runs = keep
	v.rep, v.private = r, append([]*run(nil), keep...)
	return v, nil
}

// Iter iterates vnode v after the position after (a memcomparable pk; nil: from the
// start) in pk order, through a view from View.
func (r *ReplicatedTable) Iter(view *View, v uint16, after []byte) (*Iter, error) {
	if !r.vnodes.Contains(v) {
		return nil, fmt.Errorf("storage: iterate: replicated table %s: vnode %d is not owned by this actor", r.t.Name, v)
	}
	extra, err := r.runsFor(view)
	if err != nil {
		return nil, err
	}
	return view.newIter(r.id, v, IterBounds{After: after}, extra)
}

// runsFor is the replicated epochs a read through view sees: those the view captured
// (a newer view may have dropped them since), then those sealed after it was opened.
func (r *ReplicatedTable) runsFor(view *View) ([]*run, error) {
	if view == nil || view.snap == nil {
		return nil, fmt.Errorf("storage: replicated table %s: the view is released", r.t.Name)
	}
	var extra []*run
	if view.rep == r {
		extra = append(extra, view.private...)
	}
	for _, run := range r.runs {
		if run.epoch > view.Epoch && !slices.Contains(extra, run) {
			extra = append(extra, run)
		}
	}
	return extra, nil
}

// Table is the upstream schema S1.
func (r *ReplicatedTable) Table() *schema.Table { return r.t }

// ID is the upstream table id.
func (r *ReplicatedTable) ID() uint32 { return r.id }

// Vnodes is the bitmap of vnodes the actor owns.
func (r *ReplicatedTable) Vnodes() *vnode.Bitmap { return r.vnodes }
