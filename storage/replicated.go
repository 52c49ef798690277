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
	store  *Store
	id     uint32
	s1     *schema.Table
	s2     []int // S1 column indexes kept, in the order of the chunks written
	k      vec.Kernels
	vnodes *vnode.Bitmap
	mem    memory.Allocator

	mt   *memtable
	runs []*run // sealed private epochs, ascending

	keys, vals vec.Bytes
	vn         []uint16
	keybuf     []byte
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
	return &ReplicatedTable{store: store, id: id, s1: s1, s2: append([]int(nil), s2...), k: vec.For(s1), vnodes: vnodes, mem: mem, mt: newMemtable()}, nil
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
	n := full.NumRows()
	if cap(r.vn) < n {
		r.vn = make([]uint16, n)
	}
	vn := r.vn[:n]
	r.k.Vnodes(full, vn)
	for i := 0; i < n; i++ {
		if full.Visible(i) && !r.vnodes.Contains(vn[i]) {
			return fmt.Errorf("storage: replicate: table %s: row %d is in vnode %d, which this actor does not own", r.s1.Name, i, vn[i])
		}
	}
	r.keys.Reset()
	r.vals.Reset()
	r.k.EncodeKeys(full, &r.keys)
	r.k.EncodeValues(full, &r.vals)
	ops := full.Ops()
	for i := 0; i < n; i++ {
		if !full.Visible(i) {
			continue
		}
		r.keybuf = AppendKey(r.keybuf[:0], r.id, vn[i], r.keys.At(i))
		r.mt.put(r.keybuf, r.vals.At(i), !ops[i].IsInsert())
	}
	return nil
}

// expand turns a chunk of S2 columns into one of S1's shape.
func (r *ReplicatedTable) expand(c *vec.Chunk) (*vec.Chunk, error) {
	rec := c.Record()
	if int(rec.NumCols()) != len(r.s2) {
		return nil, fmt.Errorf("storage: replicate: table %s: chunk has %d columns, S2 has %d", r.s1.Name, rec.NumCols(), len(r.s2))
	}
	n := c.NumRows()
	cols := make([]arrow.Array, len(r.s1.Columns))
	defer func() {
		for _, a := range cols {
			if a != nil {
				a.Release()
			}
		}
	}()
	for j, ci := range r.s2 {
		col := r.s1.Columns[ci]
		a := rec.Column(j)
		if want := col.Type.ArrowType(); !arrow.TypeEqual(a.DataType(), want) {
			return nil, fmt.Errorf("storage: replicate: table %s: column %s: chunk has type %s, want %s", r.s1.Name, col.Name, a.DataType(), want)
		}
		if !col.Nullable && a.NullN() > 0 {
			return nil, fmt.Errorf("storage: replicate: table %s: column %s: NULL in a NOT NULL column", r.s1.Name, col.Name)
		}
		a.Retain()
		cols[ci] = a
	}
	for ci, col := range r.s1.Columns {
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
	full := array.NewRecordBatch(r.s1.ArrowSchema(), cols, int64(n))
	defer full.Release()
	return c.WithRecord(full), nil
}

// Seal tags the writes since the last Seal with epoch (the epoch they belong to, the
// barrier's Prev). Sealed epochs above the committed epoch are seen by Iter.
func (r *ReplicatedTable) Seal(epoch uint64) {
	if r.mt.len() == 0 {
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
		return nil, fmt.Errorf("storage: iterate: replicated table %s: vnode %d is not owned by this actor", r.s1.Name, v)
	}
	// The epochs the view captured (a newer view may have dropped them since), then
	// those sealed after it was opened.
	var extra []*run
	if view.rep == r {
		extra = append(extra, view.private...)
	}
	for _, run := range r.runs {
		if run.epoch > view.Epoch && !slices.Contains(extra, run) {
			extra = append(extra, run)
		}
	}
	return view.newIter(r.id, v, IterBounds{After: after}, extra)
}

// Table is the upstream schema S1.
func (r *ReplicatedTable) Table() *schema.Table { return r.s1 }

// ID is the upstream table id.
func (r *ReplicatedTable) ID() uint32 { return r.id }

// Vnodes is the bitmap of vnodes the actor owns.
func (r *ReplicatedTable) Vnodes() *vnode.Bitmap { return r.vnodes }
