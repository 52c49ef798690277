package storage

import (
	"fmt"

	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// chunkWriter applies chunks of one table, restricted to an actor's vnodes, to a
// memtable: the part of a write that StateTable and ReplicatedTable share. Its buffers
// are reused from chunk to chunk.
type chunkWriter struct {
	id     uint32
	t      *schema.Table
	k      vec.Kernels
	vnodes *vnode.Bitmap
	mt     *memtable

	keys, vals vec.Bytes
	vn         []uint16
	keybuf     []byte
}

func newChunkWriter(id uint32, t *schema.Table, vnodes *vnode.Bitmap) chunkWriter {
	return chunkWriter{id: id, t: t, k: vec.For(t), vnodes: vnodes, mt: newMemtable()}
}

// write applies the visible rows of c, a chunk of the table's full shape, in order:
// Insert and UpdateInsert put the row under its pk, Delete and UpdateDelete delete it.
// A row in a vnode the actor does not own is an error naming the table and vnode, and
// then nothing of c is written. what names the operation in errors.
func (w *chunkWriter) write(c *vec.Chunk, what string) error {
	return w.writeChunk(c, false, what)
}

// writeChunk is write; exact says the rows are an exact changelog of the table's
// keys (StateTable.WriteExact), so that each write tells the checkpoint whether its
// key existed.
func (w *chunkWriter) writeChunk(c *vec.Chunk, exact bool, what string) error {
	n := c.NumRows()
	if cap(w.vn) < n {
		w.vn = make([]uint16, n)
	}
	vn := w.vn[:n]
	w.k.Vnodes(c, vn)
	for i := 0; i < n; i++ {
		if c.Visible(i) && !w.vnodes.Contains(vn[i]) {
			return fmt.Errorf("storage: %s: table %s: row %d is in vnode %d, which this actor does not own", what, w.t.Name, i, vn[i])
		}
	}
	w.keys.Reset()
	w.vals.Reset()
	w.k.EncodeKeys(c, &w.keys)
	w.k.EncodeValues(c, &w.vals)
	ops := c.Ops()
	for i := 0; i < n; i++ {
		if !c.Visible(i) {
			continue
		}
		b := beforeUnknown
		if exact {
			// An insert puts a key that does not exist (an UpdateInsert whose
			// UpdateDelete deleted the same key rewrites it, and the epoch's first
			// write of a key is what the checkpoint goes by); a delete deletes one
			// that does.
			b = beforeExisted
			if ops[i].IsInsert() {
				b = beforeAbsent
			}
		}
		w.put(ops[i], vn[i], w.keys.At(i), w.vals.At(i), b)
	}
	return nil
}

// put writes one encoded row: its value when op inserts, a delete otherwise; b is
// whether the key existed before, when known.
func (w *chunkWriter) put(op vec.Op, vn uint16, pk, value []byte, b before) {
	w.keybuf = AppendKey(w.keybuf[:0], w.id, vn, pk)
	if op.IsInsert() {
		w.mt.putKnown(w.keybuf, value, false, b)
	} else {
		w.mt.putKnown(w.keybuf, nil, true, b)
	}
}

// writeEncoded applies rows that the table's kernels encoded, in order: row r has op
// ops[r], the pk keys.At(at[r]) in vnode vn[at[r]], and when it inserts the value
// vals.At(r); at nil means row r's own pk and vnode (at[r] = r). The ops are exact
// (see StateTable.WriteEncoded): the checkpoint counts rows by them instead of
// probing. Lengths that do not match, a pk index out of range or a row in a vnode the
// actor does not own is an error naming the table (and the vnode), and then nothing
// is written.
func (w *chunkWriter) writeEncoded(ops []vec.Op, at []int32, vn []uint16, keys, vals *vec.Bytes, what string) error {
	if (at != nil && len(at) != len(ops)) || vals.Len() != len(ops) {
		return fmt.Errorf("storage: %s: table %s: %d ops, %d pk indexes and %d values", what, w.t.Name, len(ops), len(at), vals.Len())
	}
	pk := func(r int) int32 {
		if at == nil {
			return int32(r)
		}
		return at[r]
	}
	for r := range ops {
		i := pk(r)
		if i < 0 || int(i) >= keys.Len() || int(i) >= len(vn) {
			return fmt.Errorf("storage: %s: table %s: pk index %d out of range (%d pks, %d vnodes)", what, w.t.Name, i, keys.Len(), len(vn))
		}
		if !w.vnodes.Contains(vn[i]) {
			return fmt.Errorf("storage: %s: table %s: the row of pk %d is in vnode %d, which this actor does not own", what, w.t.Name, i, vn[i])
		}
	}
	for r, op := range ops {
		i := pk(r)
		b := beforeExisted // the ops are exact: only an Insert writes a new key
		if op == vec.Insert {
			b = beforeAbsent
		}
		w.put(op, vn[i], keys.At(int(i)), vals.At(r), b)
	}
	return nil
}
