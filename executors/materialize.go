package executors

import (
	"bytes"
	"context"
	"fmt"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
)

// Materialize writes the rows of its input into a state table and emits the exact
// changelog of what changed, in the table's full schema. Its input has the table's
// shape (column count and Arrow types; names may differ).
//
// Chunks: the visible rows are applied in order, each one seeing the effect of the
// rows before it (earlier rows of the same chunk included), resolving conflicts by pk:
//
//   - Insert (or an UpdateInsert without its UpdateDelete) of a pk that exists
//     overwrites the row: UpdateDelete(old) + UpdateInsert(new); of a missing pk:
//     Insert(new).
//   - Delete (or an UpdateDelete without its UpdateInsert) of a pk that exists:
//     Delete(old); of a missing pk: nothing.
//   - An update pair (an UpdateDelete immediately followed, among visible rows, by its
//     UpdateInsert) whose old pk exists: UpdateDelete(old) + UpdateInsert(new) when the
//     pk stays; Delete(old) followed by the Insert rule for the new row when it
//     changes. When the old pk is missing, the whole pair does nothing (table DML
//     "update of a missing row" semantics; an exact upstream changelog never hits it).
//   - A write whose new value bytes equal the stored ones emits nothing.
//
// "old" is always the stored row, not the input's. The output therefore never inserts
// a pk twice or deletes a missing one, and its UpdateDeletes are immediately followed
// by their UpdateInserts. What is emitted is what is written to the state table; a
// chunk with nothing to emit emits nothing.
//
// Barriers: every barrier seals the epoch it closes (Prev) and renews the read view.
// The first barrier is passed on at once, but no data after it is read until the
// store's committed epoch reaches its Prev: a new or rescheduled actor then reads
// fully persisted state (the coordinator commits that checkpoint after collecting the
// barrier, so the wait happens at the start of the following Next). Watermarks pass
// through.
type Materialize struct {
	input  Executor
	st     *storage.StateTable
	mem    memory.Allocator
	t      *schema.Table
	k      vec.Kernels
	schema *arrow.Schema
	proj   vec.Projection

	stateEpochs
	closeOnce

	// Per-chunk scratch, reused from chunk to chunk.
	keys, vals vec.Bytes // the input rows' memcomparable pks and values
	vn         []uint16  // the input rows' vnodes
	out        vec.Bytes // the emitted rows' values, in order
	ops        []vec.Op  // the emitted rows' ops
	at         []int32   // the input row whose pk each emitted row has
	// overlay maps the pk of every row written earlier in the chunk to the row whose
	// value it now holds, or -1 when deleted. Its keys alias m.keys (see keyString).
	// It is not used when the visible rows' pks strictly ascend (unique), so that
	// none repeats.
	overlay map[string]int32
	unique  bool
	// sel is the visible rows, and base what their pks held before the chunk (read
	// for the whole chunk at once).
	sel  []int32
	base storage.Lookup
	bs   []vec.Builder // one per column: the decoded output
	cols []arrow.Array
}

// checkInput reports whether an input's schema has table t's column count and Arrow
// types, naming the table and column when it does not.
func checkInput(t *schema.Table, in *arrow.Schema) error {
	if in.NumFields() != len(t.Columns) {
		return fmt.Errorf("table %s: input has %d columns, the table %d", t.Name, in.NumFields(), len(t.Columns))
	}
	for i, col := range t.Columns {
		if got, want := in.Field(i).Type, col.Type.ArrowType(); !arrow.TypeEqual(got, want) {
			return fmt.Errorf("table %s: column %s: input has type %s, want %s", t.Name, col.Name, got, want)
		}
	}
	return nil
}

// NewMaterialize returns a materialize of input into st, a state table of an actor on
// node. input's schema must have the table's column count and Arrow types. Buffers
// and output chunks are allocated from mem.
func NewMaterialize(input Executor, st *storage.StateTable, node *storage.Node, mem memory.Allocator) (*Materialize, error) {
	if st == nil || node == nil {
		return nil, fmt.Errorf("materialize: nil state table or node")
	}
	t := st.Table()
	if err := checkInput(t, input.Schema()); err != nil {
		return nil, fmt.Errorf("materialize: %w", err)
	}
	m := &Materialize{
		input:       input,
		st:          st,
		stateEpochs: stateEpochs{node: node},
		mem:         mem,
		t:           t,
		k:           vec.For(t),
		schema:      t.ArrowSchema(),
		proj:        make(vec.Projection, len(t.Columns)),
		overlay:     map[string]int32{},
		bs:          make([]vec.Builder, len(t.Columns)),
		cols:        make([]arrow.Array, len(t.Columns)),
	}
	for i, col := range t.Columns {
		m.proj[i] = i
		m.bs[i] = vec.NewBuilder(mem, col.Type.ArrowType())
	}
	// The actor is its vnodes' only writer and renews its view at every barrier after
	// sealing: a row above every key of its vnode (a view's rows being backfilled, in
	// pk order per vnode) is then known new without a read.
	st.SoleWriter()
	return m, nil
}

// Schema implements Executor: the table's full schema.
func (m *Materialize) Schema() *arrow.Schema { return m.schema }

// Next implements Executor.
func (m *Materialize) Next(ctx context.Context) (Message, error) {
	if err := m.awaitCommit(ctx); err != nil {
		return Message{}, fmt.Errorf("materialize %s: %w", m.t.Name, err)
	}
	for {
		msg, err := m.input.Next(ctx)
		if err != nil {
			return Message{}, err
		}
		switch {
		case msg.Chunk != nil:
			out, err := m.apply(msg.Chunk)
			msg.Chunk.Release()
			if err != nil {
				return Message{}, err
			}
			if out != nil {
				return ChunkMessage(out), nil
			}
		case msg.Barrier != nil:
			if err := m.barrier(msg.Barrier); err != nil {
				return Message{}, err
			}
			return msg, nil
		default:
			return msg, nil
		}
	}
}

// barrier seals the epoch b closes and renews the view (after the commit wait, for the
// first barrier).
func (m *Materialize) barrier(b *Barrier) error {
	first := !m.started
	if err := m.endEpoch(b, m.st); err != nil {
		return fmt.Errorf("materialize %s: %w", m.t.Name, err)
	}
	if first {
		return nil // the view is taken after the wait
	}
	return m.takeView()
}

func (m *Materialize) takeView() error {
	if _, err := m.readView(); err != nil {
		return fmt.Errorf("materialize %s: %w", m.t.Name, err)
	}
	return nil
}

// keyString views b as a string without copying, for map lookups and keys that must
// not outlive b's arena: the overlay's keys alias m.keys, which is not written while
// the overlay is in use and is cleared before m.keys is reused.
func keyString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// apply applies the visible rows of c and returns the changelog, or nil when nothing
// changed.
func (m *Materialize) apply(c *vec.Chunk) (*vec.Chunk, error) {
	if err := vec.CheckChunk(m.t, c); err != nil {
		return nil, fmt.Errorf("materialize: %w", err)
	}
	if m.view == nil {
		if err := m.takeView(); err != nil {
			return nil, err
		}
	}
	n := c.NumRows()
	clear(m.overlay) // before m.keys is overwritten: its keys alias it
	m.keys.Reset()
	m.vals.Reset()
	m.out.Reset()
	m.ops, m.at = m.ops[:0], m.at[:0]
	if cap(m.vn) < n {
		m.vn = make([]uint16, n)
	}
	m.vn = m.vn[:n]
	m.k.EncodeKeys(c, &m.keys)
	m.k.EncodeValues(c, &m.vals)
	m.k.Vnodes(c, m.vn)
	m.sel = m.sel[:0]
	for i := 0; i < n; i++ {
		if c.Visible(i) {
			m.sel = append(m.sel, int32(i))
		}
	}
	m.unique = m.ascending()
	if err := m.st.GetMany(m.view, m.vn, &m.keys, m.sel, &m.base); err != nil {
		return nil, fmt.Errorf("materialize %s: epoch %d: %w", m.t.Name, m.epoch, err)
	}

	ops := c.Ops()
	for i := 0; i < n; i++ {
		if !c.Visible(i) {
			continue
		}
		switch ops[i] {
		case vec.Insert, vec.UpdateInsert:
			m.upsert(i)
		case vec.Delete:
			m.remove(i)
		case vec.UpdateDelete:
			j := i + 1
			for j < n && !c.Visible(j) {
				j++
			}
			if j == n || ops[j] != vec.UpdateInsert {
				m.remove(i) // an UpdateDelete without its UpdateInsert
				break
			}
			m.update(i, j)
			i = j
		default:
			return nil, fmt.Errorf("materialize %s: epoch %d: row %d has unknown op %d", m.t.Name, m.epoch, i, ops[i])
		}
	}
	if len(m.ops) == 0 {
		return nil, nil
	}
	// The rows are written as they were encoded for the lookups, not encoded again.
	if err := m.st.WriteEncoded(m.ops, m.at, m.vn, &m.keys, &m.out); err != nil {
		return nil, fmt.Errorf("materialize %s: epoch %d: %w", m.t.Name, m.epoch, err)
	}
	if m.insertsOnly() {
		return m.passThrough(c), nil
	}
	out, err := m.build()
	if err != nil {
		return nil, fmt.Errorf("materialize %s: epoch %d: %w", m.t.Name, m.epoch, err)
	}
	return out, nil
}

// ascending reports whether the visible rows' pks are strictly ascending, so that no
// pk repeats in the chunk (a snapshot batch, a sorted load) and no row needs to see an
// earlier row's write.
func (m *Materialize) ascending() bool {
	for k := 1; k < len(m.sel); k++ {
		if bytes.Compare(m.keys.At(int(m.sel[k-1])), m.keys.At(int(m.sel[k]))) >= 0 {
			return false
		}
	}
	return true
}

// insertsOnly reports whether the changelog is an Insert of every visible row, in
// order, with its own value. An Insert is only ever emitted with the value of the row
// it writes, and a row emits at most one, so it suffices that every emitted op is an
// Insert and there are as many as visible rows.
func (m *Materialize) insertsOnly() bool {
	if len(m.ops) != len(m.sel) {
		return false
	}
	for _, op := range m.ops {
		if op != vec.Insert {
			return false
		}
	}
	return true
}

// passThrough returns c itself as the changelog when every visible row of c is
// inserted as it is (insertsOnly): c's columns under the table's schema, with its
// visibility, and all ops Insert (a lone UpdateInsert among c's rows becomes one).
func (m *Materialize) passThrough(c *vec.Chunk) *vec.Chunk {
	rec := c.Record()
	if !rec.Schema().Equal(m.schema) { // the input's names may differ
		rec = array.NewRecordBatch(m.schema, rec.Columns(), rec.NumRows())
		defer rec.Release()
	}
	ops := c.OpsBuffer()
	in := c.Ops()
	for _, i := range m.sel {
		if in[i] != vec.Insert {
			ops = vec.NewOps(m.mem, c.NumRows(), vec.Insert)
			defer ops.Release()
			break
		}
	}
	return vec.NewChunk(rec, ops, c.VisibilityBuffer())
}

// current is the value that row i's pk holds before row i: an earlier row of the
// chunk's, else the state table's as read before the chunk.
func (m *Materialize) current(i int) ([]byte, bool) {
	if m.unique {
		return m.base.Value(i)
	}
	key := m.keys.At(i)
	if r, ok := m.overlay[keyString(key)]; ok {
		if r < 0 {
			return nil, false
		}
		return m.vals.At(int(r)), true
	}
	return m.base.Value(i)
}

// emit appends a row of the changelog: op, with the pk of input row i and value val.
func (m *Materialize) emit(op vec.Op, i int, val []byte) {
	m.out.Append(val)
	m.ops = append(m.ops, op)
	m.at = append(m.at, int32(i))
}

// wrote records that row i's pk now holds row r's value (-1: deleted), for the rows
// after it in the chunk.
func (m *Materialize) wrote(i int, r int32) {
	if !m.unique {
		m.overlay[keyString(m.keys.At(i))] = r
	}
}

// upsert writes row i over whatever its pk holds.
func (m *Materialize) upsert(i int) {
	old, ok := m.current(i)
	m.put(i, old, ok)
}

// put writes row i over old (ok: old exists).
func (m *Materialize) put(i int, old []byte, ok bool) {
	val := m.vals.At(i)
	switch {
	case !ok:
		m.emit(vec.Insert, i, val)
	case bytes.Equal(old, val):
		return // nothing changes
	default:
		m.emit(vec.UpdateDelete, i, old)
		m.emit(vec.UpdateInsert, i, val)
	}
	m.wrote(i, int32(i))
}

// remove deletes row i's pk, when it exists.
func (m *Materialize) remove(i int) {
	old, ok := m.current(i)
	if !ok {
		return
	}
	m.emit(vec.Delete, i, old)
	m.wrote(i, -1)
}

// update applies the update pair of rows i (UpdateDelete) and j (UpdateInsert).
func (m *Materialize) update(i, j int) {
	old, ok := m.current(i)
	if !ok {
		return // a missing old row: the pair does nothing
	}
	if bytes.Equal(m.keys.At(i), m.keys.At(j)) {
		m.put(j, old, true)
		return
	}
	m.emit(vec.Delete, i, old)
	m.wrote(i, -1)
	m.upsert(j)
}

// build decodes the emitted values into a chunk with the emitted ops.
func (m *Materialize) build() (*vec.Chunk, error) {
	n := len(m.ops)
	for _, b := range m.bs {
		b.Reserve(n)
	}
	if err := m.k.DecodeValues(&m.out, m.proj, m.bs); err != nil {
		for _, b := range m.bs { // drop the partial rows
			b.NewArray().Release()
		}
		return nil, err
	}
	for i, b := range m.bs {
		m.cols[i] = b.NewArray()
	}
	rec := array.NewRecordBatch(m.schema, m.cols, int64(n))
	for i, a := range m.cols {
		a.Release()
		m.cols[i] = nil
	}
	defer rec.Release()
	opsBuf := vec.NewOps(m.mem, n, vec.Insert)
	defer opsBuf.Release()
	copy(vec.OpsOf(opsBuf.Bytes()), m.ops)
	return vec.NewChunk(rec, opsBuf, nil), nil
}

// Close releases the view and buffers and closes the input.
func (m *Materialize) Close() error {
	if !m.firstClose() {
		return nil
	}
	m.releaseView()
	for _, b := range m.bs {
		b.Release()
	}
	m.bs = nil
	clear(m.overlay)
	return m.input.Close()
}
