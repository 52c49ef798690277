package storage

import (
	"bytes"
	"fmt"

	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// StateTable reads and writes one table restricted to the vnodes an actor owns. Writes
// go to the actor's private memtable until Seal publishes them on the node as an
// epoch; reads see committed data overlaid with the node's sealed epochs and the
// actor's own unsealed writes, the newest version of a key winning. It is used by one
// actor goroutine at a time.
type StateTable struct {
	node *Node
	chunkWriter
	// sole: the state table is its vnodes' only writer (SoleWriter). Then top is, per
	// vnode a GetMany asked about, the largest key the table may hold in it apart from
	// the actor's unsealed writes (committed or sealed; nil: none), and a key above
	// both top and its memtable's largest in the vnode is absent without a read. A
	// seal raises it.
	sole bool
	top  map[uint16][]byte
}

// SoleWriter declares that, from now on, no other state table writes the actor's
// vnodes of the table (no other actor owns them: the barrier protocol's rule for the
// actors of a fragment) and that the actor reads through views taken after its own
// last seal (renewed at every barrier). GetMany then settles a key above every key its
// vnode holds (the next row of a view being backfilled, a new group) as absent with no
// read: it finds each vnode's largest key once, from the store, and follows the
// actor's writes from there. A state table that only reads others' writes must not
// declare it.
func (s *StateTable) SoleWriter() { s.sole = true }

// NewStateTable returns the state table of table id (schema t) for an actor on node
// owning vnodes. The kernels are the generated ones when registered.
func NewStateTable(node *Node, id uint32, t *schema.Table, vnodes *vnode.Bitmap) (*StateTable, error) {
	if id == MetaTable {
		return nil, fmt.Errorf("storage: table id %d is reserved for metadata", MetaTable)
	}
	if vnodes.Count() != t.VnodeCount {
		return nil, fmt.Errorf("storage: table %s has %d vnodes, the bitmap %d", t.Name, t.VnodeCount, vnodes.Count())
	}
	return &StateTable{node: node, chunkWriter: newChunkWriter(id, t, vnodes)}, nil
}

// Table is the table's schema.
func (s *StateTable) Table() *schema.Table { return s.t }

// ID is the table id.
func (s *StateTable) ID() uint32 { return s.id }

// Vnodes is the bitmap of vnodes the actor owns.
func (s *StateTable) Vnodes() *vnode.Bitmap { return s.vnodes }

// Write applies the visible rows of c in order: Insert and UpdateInsert put the row
// under its pk, Delete and UpdateDelete delete it. A chunk of the wrong shape, or with
// a row in a vnode the actor does not own, is an error naming the table and the column
// or vnode, and nothing of it is written.
func (s *StateTable) Write(c *vec.Chunk) error {
	if err := vec.CheckChunk(s.t, c); err != nil {
		return fmt.Errorf("storage: write: %w", err)
	}
	before := s.mt.bytes
	err := s.write(c, "write")
	s.node.unsealed.Add(int64(s.mt.bytes - before))
	return err
}

// WriteExact is Write for a chunk whose visible rows are an exact changelog of the
// table's keys, in order: an Insert or UpdateInsert puts a key that does not exist at
// that point (or that the row before it, its UpdateDelete, deleted), a Delete or
// UpdateDelete deletes one that does. The checkpoint then updates the row counts from
// the ops instead of probing the committed data for every key. A join's side, whose
// keys are its join key and its input's pk, is such a table when its input is an
// exact changelog: an update that changes the join key deletes one key and inserts
// another that did not exist.
func (s *StateTable) WriteExact(c *vec.Chunk) error {
	if err := vec.CheckChunk(s.t, c); err != nil {
		return fmt.Errorf("storage: write: %w", err)
	}
	before := s.mt.bytes
	err := s.writeChunk(c, true, "write")
	s.node.unsealed.Add(int64(s.mt.bytes - before))
	return err
}

// LastWrite returns what the last successful Write or WriteExact encoded, for every
// row of its chunk, visible or not: the rows' vnodes, memcomparable pks and values
// (the table's kernels' encodings, as stored). An executor that keeps its own copy of
// some rows (a cache of the table) takes them from here instead of encoding the chunk
// again. They are valid until the next write.
func (s *StateTable) LastWrite() (vn []uint16, pks, vals *vec.Bytes) {
	return s.vn[:s.keys.Len()], &s.keys, &s.vals
}

// WriteEncoded applies rows already encoded by the table's kernels (vec.For of its
// table: memcomparable pks and row values), in order, without encoding them again: row
// r has op ops[r] (Insert and UpdateInsert put, Delete and UpdateDelete delete), the pk
// keys.At(at[r]) in vnode vn[at[r]] (at nil: keys.At(r) in vn[r]), and, when it puts,
// the value vals.At(r) (vals has one entry per row; a deleting row's is ignored). The
// values are not checked: they must come from the table's kernels. Mismatched
// lengths, an index out of range, or a row in a vnode the actor does not own is an
// error naming the table, and then nothing is written.
//
// The ops must be an exact changelog of the table as the actor reads it (through
// Get, GetMany or its own bookkeeping): an Insert writes a pk that does not exist; a
// Delete, UpdateDelete or UpdateInsert one that does. The checkpoint then updates the
// row counts from the ops instead of probing the committed data for every key (a
// materialize's output, a hash agg's groups known stored or not). Write makes no
// such assumption.
func (s *StateTable) WriteEncoded(ops []vec.Op, at []int32, vn []uint16, keys, vals *vec.Bytes) error {
	before := s.mt.bytes
	err := s.writeEncoded(ops, at, vn, keys, vals, "write")
	s.node.unsealed.Add(int64(s.mt.bytes - before))
	return err
}

// Seal publishes the writes since the last Seal on the node as epoch, where every
// reader on the node sees them and the next checkpoint at or above epoch commits them.
// A seal at or below a committed or committing epoch is refused and keeps the writes.
func (s *StateTable) Seal(epoch uint64) error {
	if s.mt.empty() {
		return nil
	}
	for _, v := range s.mt.used {
		vi := s.mt.vnodes[v]
		if t, ok := s.top[v]; ok && bytes.Compare(vi.max, t) > 0 {
			s.top[v] = vi.max // an arena copy, never changed
		}
	} // (s.top is nil unless the table is its vnodes' sole writer)
	r := s.mt.seal(s.id, epoch)
	r.owned = s.vnodes
	if err := s.node.addRun(r); err != nil {
		s.mt.unseal(r)
		return err
	}
	s.node.unsealed.Add(-int64(r.bytes)) // addRun counted them as sealed
	return nil
}

// UnsealedBytes is the size of the writes not yet sealed (a key written again counts
// at each write made before its vnode was read; see Node.PendingBytes).
func (s *StateTable) UnsealedBytes() int { return s.mt.bytes }

// Get reads the value of the row with the memcomparable pk in vnode: the actor's own
// unsealed write, else the view. The value is a copy.
func (s *StateTable) Get(view *View, v uint16, pk []byte) ([]byte, bool, error) {
	if !s.vnodes.Contains(v) {
		return nil, false, fmt.Errorf("storage: get: table %s: vnode %d is not owned by this actor", s.t.Name, v)
	}
	s.keybuf = AppendKey(s.keybuf[:0], s.id, v, pk)
	if e, ok := s.mt.get(s.keybuf); ok {
		if e.del {
			return nil, false, nil
		}
		return append([]byte(nil), e.value...), true, nil
	}
	val, ok, err := view.get(s.id, s.keybuf)
	if err != nil {
		return nil, false, fmt.Errorf("storage: get: table %s vnode %d: %w", s.t.Name, v, err)
	}
	return val, ok, nil
}

// Iter iterates vnode v in pk order within bounds through the view, including the
// actor's own unsealed writes.
func (s *StateTable) Iter(view *View, v uint16, b IterBounds) (*Iter, error) {
	if !s.vnodes.Contains(v) {
		return nil, fmt.Errorf("storage: iterate: table %s: vnode %d is not owned by this actor", s.t.Name, v)
	}
	var extra []*run
	if es := s.mt.sortedVnode(v); len(es) > 0 {
		extra = []*run{{table: s.id, entries: es}}
	}
	return view.newIter(s.id, v, b, extra)
}
