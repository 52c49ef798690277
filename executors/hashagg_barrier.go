package executors

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
)

// hgRow is one row of the output changelog.
type hgRow struct {
	op  vec.Op
	key string
	out []hgOut
}

// barrier emits the epoch's changelog, persists the state changed since the last
// checkpoint when b is one, seals epoch Prev and renews the view.
func (h *HashAgg) barrier(b *Barrier) error {
	// The rows and their new outputs live in buffers kept from one barrier to the
	// next (the output chunks are built before this returns); an old output is the
	// group's own g.old, which only the group's next touch, in a later epoch,
	// rewrites. A slice of outs stays valid when a later append moves outs: it
	// keeps the old array.
	rows, outs := h.rowBuf[:0], h.outBuf[:0]
	defer func() {
		clear(rows)
		clear(outs)
		h.rowBuf, h.outBuf = rows[:0], outs[:0]
	}()
	for _, g := range h.dirty {
		g.dirty = false
		if g.rows < 0 {
			return fmt.Errorf("group in vnode %d has %d rows: the input deleted rows it never inserted", g.vn, g.rows)
		}
		if g.rows == 0 {
			// The group goes: a value still counted in one of its multisets was
			// deleted fewer times than inserted, so some other row's delete had
			// no insert (its multiset row would outlive the group, unseen).
			for sl, set := range g.sets {
				for e := range set.all {
					if j := e.counted(); j >= 0 {
						return fmt.Errorf("group in vnode %d has no rows left, but aggregate %d still counts a value: the input deleted rows it never inserted", g.vn, h.slots[sl].aggs[j])
					}
				}
			}
		}
		for a := range g.aggs {
			st := &g.aggs[a]
			if st.n < 0 {
				return fmt.Errorf("group in vnode %d: aggregate %d has a negative count %d", g.vn, a, st.n)
			}
			if st.n == 0 {
				st.si, st.sf = 0, 0 // no float residue in an emptied sum
			}
		}
		from := len(outs)
		outs = h.outputs(g, outs)
		newOut := outs[from:len(outs):len(outs)]
		switch {
		case g.oldRows == 0 && g.rows > 0:
			rows = append(rows, hgRow{vec.Insert, g.key, newOut})
		case g.oldRows > 0 && g.rows == 0:
			rows = append(rows, hgRow{vec.Delete, g.key, g.old})
		case g.oldRows > 0 && !hgSameOutputs(g.old, newOut):
			rows = append(rows, hgRow{vec.UpdateDelete, g.key, g.old}, hgRow{vec.UpdateInsert, g.key, newOut})
		default:
			outs = outs[:from] // no row: the outputs are not kept
		}
	}
	clear(h.dirty)
	h.dirty = h.dirty[:0]
	// A count below 0 (a value deleted more often than inserted) is 0 from the
	// barrier on, whether or not the barrier writes it.
	for _, e := range h.negative {
		for j, c := range e.cnt {
			if c < 0 {
				e.cnt[j] = 0
			}
		}
	}
	clear(h.negative)
	h.negative = h.negative[:0]
	if b.IsCheckpoint() {
		if err := h.persist(); err != nil {
			return err
		}
		// A group with no rows left is gone from the table now: it is read back
		// (as absent) if it comes again.
		for _, g := range h.unsaved {
			g.unsaved = false
			if g.rows == 0 {
				h.cacheDrop(g)
			} else {
				h.account(g)
			}
		}
		clear(h.unsaved)
		h.unsaved = h.unsaved[:0]
		h.shrink()
	}
	for start := 0; start < len(rows); {
		end := min(start+1024, len(rows))
		if end < len(rows) && rows[end-1].op == vec.UpdateDelete {
			end++
		}
		c, err := h.buildOutput(rows[start:end])
		if err != nil {
			return err
		}
		h.out = append(h.out, ChunkMessage(c))
		start = end
	}
	tables := []sealer{h.st}
	for _, m := range h.ms {
		tables = append(tables, m)
	}
	return h.endEpoch(b, tables...) // the view is taken on the next chunk
}

// persist writes the unsaved groups and multiset entries into the state tables, in
// key order within each vnode: the tables' memtables are empty at a checkpoint's
// persist (nothing is written between two), so keys that come in ascending order are
// appended as they are, with no map of the epoch's keys and no sort at the seal.
func (h *HashAgg) persist() error {
	if len(h.unsaved) == 0 {
		return nil
	}
	slices.SortFunc(h.unsaved, func(a, b *hgGroup) int {
		if a.vn != b.vn {
			return cmp.Compare(a.vn, b.vn)
		}
		return strings.Compare(a.key, b.key)
	})
	ng := len(h.cfg.GroupBy)
	cb := vec.NewChunkBuilder(h.mem, h.st2)
	defer cb.Release()
	h.resetWrites()
	for _, g := range h.unsaved {
		if !h.addWrite(g.rows > 0, &g.stored, g.vn) {
			continue
		}
		cb.AppendOp(vec.Insert) // the chunk only carries the values to encode
		h.keys.Append([]byte(g.key))
		cb.Column(ng).(*array.Int64Builder).Append(g.rows)
		for a, call := range h.cfg.Aggs {
			col := h.stCol[a]
			switch call.Kind {
			case AggCount, AggCountStar:
				cb.Column(col).(*array.Int64Builder).Append(g.aggs[a].n)
			case AggSum, AggAvg:
				cb.Column(col).(*array.Int64Builder).Append(g.aggs[a].n)
				if hgIsFloat(h.inTyp[a].Kind) {
					cb.Column(col + 1).(*array.Float64Builder).Append(g.aggs[a].sf)
				} else {
					cb.Column(col + 1).(*array.Int64Builder).Append(g.aggs[a].si)
				}
			}
		}
	}
	if err := h.writeKeyed(cb, ng, h.st, h.stK); err != nil {
		return err
	}
	for sl := range h.slots {
		if err := h.persistMultiset(sl); err != nil {
			return err
		}
		// An entry that no aggregate counts or stores any more is dropped.
		for _, g := range h.unsaved {
			set := &g.sets[sl]
			for _, e := range set.dir {
				e.dirty = false
				if !e.stored && e.counted() < 0 {
					set.drop(e, h.slots[sl].pack)
				}
			}
			clear(set.dir)
			set.dir = set.dir[:0]
		}
	}
	return nil
}

// persistMultiset writes the dirty entries of slot sl into its multiset table, one
// row per entry with every aggregate's count (none below 0: the barriers set those to
// 0); an entry none of whose counts is above 0 has no row.
func (h *HashAgg) persistMultiset(sl int) error {
	ng := len(h.cfg.GroupBy)
	mb := vec.NewChunkBuilder(h.mem, h.msT[sl])
	defer mb.Release()
	h.resetWrites()
	cols := make([]*array.Int64Builder, len(h.slots[sl].aggs))
	for j := range cols {
		cols[j] = mb.Column(ng + 1 + j).(*array.Int64Builder)
	}
	for _, g := range h.unsaved {
		// A group's key followed by a value's sorts by the group, then the value
		// (each column's key encoding is prefix-free).
		h.sortKeys = sortEntries(g.sets[sl].dir, h.slots[sl].pack, h.sortKeys)
		for _, e := range g.sets[sl].dir {
			live := e.counted() >= 0
			if !h.addWrite(live, &e.stored, g.vn) {
				continue
			}
			mb.AppendOp(vec.Insert) // the chunk only carries the values to encode
			h.keys.Data = append(append(h.keys.Data, g.key...), e.key...)
			h.keys.Commit()
			for j, c := range e.cnt {
				cols[j].Append(c)
			}
		}
	}
	return h.writeKeyed(mb, ng+1, h.ms[sl], h.msK[sl])
}

func (h *HashAgg) resetWrites() {
	h.keys.Reset()
	h.wops, h.wvn = h.wops[:0], h.wvn[:0]
}

// addWrite records the op and vnode vn of the write of the next row (its key goes to
// h.keys), live or not, which the table holds when *stored: Insert for a live row the
// table does not hold, UpdateInsert for one it holds, Delete for a held row no longer
// live. It sets *stored to whether the table holds the row after the write, and
// reports false, recording nothing, for a row neither live nor held.
func (h *HashAgg) addWrite(live bool, stored *bool, vn uint16) bool {
	var op vec.Op
	switch {
	case live && *stored:
		op = vec.UpdateInsert
	case live:
		op = vec.Insert
	case *stored:
		op = vec.Delete
	default:
		return false
	}
	*stored = live
	h.wops = append(h.wops, op)
	h.wvn = append(h.wvn, vn)
	return true
}

// writeKeyed decodes h.keys into the first npk columns of cb (whose other columns are
// appended), encodes the rows' values with k, st's kernels, and writes them into st
// under h.keys with the recorded ops and vnodes: the keys are not encoded again, nor
// the vnodes hashed, and the exact ops spare the checkpoint its probes.
func (h *HashAgg) writeKeyed(cb *vec.ChunkBuilder, npk int, st *storage.StateTable, k vec.Kernels) error {
	if cb.Len() == 0 {
		return nil
	}
	bs := make([]array.Builder, npk)
	for i := range bs {
		bs[i] = cb.Column(i)
	}
	if err := k.DecodeKeys(&h.keys, bs); err != nil {
		return err
	}
	c, err := cb.Build()
	if err != nil {
		return err
	}
	defer c.Release()
	h.vals.Reset()
	k.EncodeValues(c, &h.vals)
	return st.WriteEncoded(h.wops, nil, h.wvn, &h.keys, &h.vals)
}

// buildOutput builds one output chunk of rows.
func (h *HashAgg) buildOutput(rows []hgRow) (*vec.Chunk, error) {
	ng := len(h.cfg.GroupBy)
	bs := make([]array.Builder, h.schema.NumFields())
	for i, f := range h.schema.Fields() {
		bs[i] = array.NewBuilder(h.mem, f.Type)
		bs[i].Reserve(len(rows))
	}
	defer func() {
		for _, b := range bs {
			b.Release()
		}
	}()
	h.keys.Reset()
	for _, r := range rows {
		h.keys.Append([]byte(r.key))
	}
	if err := h.gk.k.DecodeKeys(&h.keys, bs[:ng]); err != nil {
		return nil, err
	}
	for a, call := range h.cfg.Aggs {
		b := bs[ng+a]
		switch call.Kind {
		case AggCount, AggCountStar, AggCountDistinct:
			ib := b.(*array.Int64Builder)
			for _, r := range rows {
				ib.Append(r.out[a].i)
			}
		case AggSum, AggAvg:
			if fb, ok := b.(*array.Float64Builder); ok {
				for _, r := range rows {
					if r.out[a].null {
						fb.AppendNull()
					} else {
						fb.Append(math.Float64frombits(r.out[a].f))
					}
				}
			} else {
				ib := b.(*array.Int64Builder)
				for _, r := range rows {
					if r.out[a].null {
						ib.AppendNull()
					} else {
						ib.Append(r.out[a].i)
					}
				}
			}
		case AggMin, AggMax:
			h.vals.Reset()
			null := vec.AppendKeyNull(nil, false)
			for _, r := range rows {
				if r.out[a].null {
					h.vals.Append(null)
				} else {
					h.vals.Append([]byte(r.out[a].s))
				}
			}
			if err := h.valK[a].DecodeKeys(&h.vals, []array.Builder{b}); err != nil {
				return nil, err
			}
		}
	}
	cols := make([]arrow.Array, len(bs))
	for i, b := range bs {
		cols[i] = b.NewArray()
	}
	rec := array.NewRecordBatch(h.schema, cols, int64(len(rows)))
	for _, c := range cols {
		c.Release()
	}
	defer rec.Release()
	ops := vec.NewOps(h.mem, len(rows), vec.Insert)
	defer ops.Release()
	o := vec.OpsOf(ops.Bytes())
	for i, r := range rows {
		o[i] = r.op
	}
	return vec.NewChunk(rec, ops, nil), nil
}
