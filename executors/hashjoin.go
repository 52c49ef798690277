package executors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
)

// HashJoinConfig configures a HashJoin.
type HashJoinConfig struct {
	// LeftKeys and RightKeys are the equi-join columns of each input, pairwise of the
	// same type (at least one pair).
	LeftKeys, RightKeys []int
	// LeftPK and RightPK are columns of each input that identify its rows (together
	// with the join key, which is part of each state table's pk anyway).
	LeftPK, RightPK []int
	// Residual, when set, is a boolean condition over the output columns (left
	// columns ++ right columns); a pair for which it is false or NULL is dropped.
	Residual Expr
	// VnodeCount is the vnode count of the state tables (0: schema.DefaultVnodeCount).
	VnodeCount int
	// MaxChunkRows bounds the rows of an output chunk (0: 1024); the pairs of one
	// input chunk are split over as many output chunks as needed.
	MaxChunkRows int
	// ExactInputs says each input is an exact changelog per its pk (LeftPK,
	// RightPK): an Insert of a pk that has no row, a Delete or update of one that
	// has, with its stored values. The state writes then tell the checkpoint which
	// keys are new (storage.StateTable.WriteExact), sparing it a probe of the
	// committed data per written key; with inputs that are not exact, the row counts
	// of the state tables would drift.
	ExactInputs bool
	// Cache, when set, is the node's budget for the sides' rows in memory: each side
	// keeps the rows of the join keys it probed or wrote lately, so that a probe of a
	// cached key reads no table (see joinCache); nil reads the tables for every probe.
	Cache *StateCache
	// LeftState and RightState hold each input's rows: state tables over
	// HashJoinStateTable's schema for that side.
	LeftState, RightState *storage.StateTable
	Node                  *storage.Node
	Mem                   memory.Allocator
}

// HashJoin is a streaming inner equi-join of two inputs, both sides stateful. Its
// output columns are the left columns, then the right ones.
//
// Changelog: a chunk of one side is joined with the other side's rows of the same key
// in state at that moment: every visible Insert or UpdateInsert row emits an Insert
// per matching pair, every Delete or UpdateDelete row a Delete per matching pair
// (updates become Delete + Insert), pairs for which the residual condition is not
// true dropped (hidden), in chunks of at most MaxChunkRows rows; then the chunk's rows
// are written to its side's state table.
// Rows with a NULL in a join key never match and are not stored. With exact input
// changelogs (per side pk) the output is an exact changelog keyed by left pk ++ right
// pk.
//
// Barriers: each input is read by its own goroutine; a barrier is emitted once both
// inputs delivered it (the other input is not read past its barrier meanwhile), so the
// chunks of an epoch from both sides precede its barrier. At each barrier both state
// tables are sealed as epoch Prev and the view renewed; like Materialize, the first
// barrier is passed on at once and no data after it is processed until the store's
// committed epoch reaches its Prev. The state tables are the only state: a new
// HashJoin over committed state continues where the committed epoch ended. Watermarks
// are dropped. An input that ends (io.EOF) stops taking part in the alignment; the
// join ends when both have.
type HashJoin struct {
	in     [2]Executor
	cfg    HashJoinConfig
	st     [2]*storage.StateTable
	keys   [2][]int
	mem    memory.Allocator
	schema *arrow.Schema
	jk     rowKeys        // the join keys: their encoding and vnodes
	valK   [2]vec.Kernels // each side's state kernels (value decoding)
	proj   [2]vec.Projection
	nleft  int

	stateEpochs
	closeOnce

	// Input pumping.
	runCtx  context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	ch      [2]chan hjMsg
	done    [2]bool     // the input ended
	pending [2]*Barrier // a barrier delivered by that input, waiting for the other
	running bool
	out     []*vec.Chunk // output chunks not yet returned

	// Per-chunk scratch.
	kbuf    vec.Bytes
	vn      []uint16
	matched vec.Bytes
	idx     []int64
	ops     []vec.Op
	probe   storage.Iter // the other side's rows of one key, reused across a chunk's rows

	cache   [2]*joinCache // each side's rows in memory (nil: no cache)
	checked bool          // the sides' tables were checked for rows (cache known)
}

type hjMsg struct {
	msg Message
	err error
}

// NewHashJoin returns the inner hash join of left and right as cfg says.
func NewHashJoin(left, right Executor, cfg HashJoinConfig) (*HashJoin, error) {
	if cfg.LeftState == nil || cfg.RightState == nil || cfg.Node == nil || cfg.Mem == nil {
		return nil, fmt.Errorf("hash join: nil state table, node or allocator")
	}
	if len(cfg.LeftKeys) == 0 || len(cfg.LeftKeys) != len(cfg.RightKeys) {
		return nil, fmt.Errorf("hash join: %d left and %d right key columns", len(cfg.LeftKeys), len(cfg.RightKeys))
	}
	ls, rs := left.Schema(), right.Schema()
	for i := range cfg.LeftKeys {
		l, r := cfg.LeftKeys[i], cfg.RightKeys[i]
		if l < 0 || l >= ls.NumFields() || r < 0 || r >= rs.NumFields() {
			return nil, fmt.Errorf("hash join: key pair %d: column out of range", i)
		}
		if !arrow.TypeEqual(ls.Field(l).Type, rs.Field(r).Type) {
			return nil, fmt.Errorf("hash join: key pair %d: left column %d is %s, right column %d is %s", i, l, ls.Field(l).Type, r, rs.Field(r).Type)
		}
	}
	for _, want := range []struct {
		in  *arrow.Schema
		st  *storage.StateTable
		f   func(string, *arrow.Schema, HashJoinConfig) (*schema.Table, error)
		nam string
	}{{ls, cfg.LeftState, HashJoinLeftTable, "left"}, {rs, cfg.RightState, HashJoinRightTable, "right"}} {
		t, err := want.f(want.st.Table().Name, want.in, cfg)
		if err != nil {
			return nil, err
		}
		if want.st.Table().Fingerprint() != t.Fingerprint() {
			return nil, fmt.Errorf("hash join: %s state table %s does not have HashJoinStateTable's shape", want.nam, want.st.Table().Name)
		}
	}
	h := &HashJoin{
		in: [2]Executor{left, right}, cfg: cfg, st: [2]*storage.StateTable{cfg.LeftState, cfg.RightState},
		keys: [2][]int{cfg.LeftKeys, cfg.RightKeys}, stateEpochs: stateEpochs{node: cfg.Node}, mem: cfg.Mem, nleft: ls.NumFields(),
	}
	var err error
	if h.jk, err = newRowKeys(cfg.LeftState.Table().Name+"_keys", ls, cfg.LeftKeys, "k", hashJoinVnodes(cfg.VnodeCount)); err != nil {
		return nil, fmt.Errorf("hash join: %w", err)
	}
	for s, in := range []*arrow.Schema{ls, rs} {
		h.valK[s] = vec.For(h.st[s].Table())
		h.proj[s] = make(vec.Projection, in.NumFields())
		for i := range in.Fields() {
			h.proj[s][i] = i
		}
	}
	h.schema = HashJoinSchema(ls, rs)
	if cfg.Cache != nil {
		h.cache = [2]*joinCache{newJoinCache(cfg.Cache), newJoinCache(cfg.Cache)}
	}
	if cfg.Residual != nil {
		empty := emptyRecord(h.schema, cfg.Mem)
		a, err := EvalArray(withMem(context.Background(), cfg.Mem), cfg.Residual, empty, cfg.Mem)
		empty.Release()
		if err != nil {
			return nil, fmt.Errorf("hash join: residual %s: %w", cfg.Residual, err)
		}
		dt := a.DataType()
		a.Release()
		if dt.ID() != arrow.BOOL {
			return nil, fmt.Errorf("hash join: residual %s is %s, want boolean", cfg.Residual, dt)
		}
	}
	return h, nil
}

// Schema implements Executor: the left columns, then the right ones.
func (h *HashJoin) Schema() *arrow.Schema { return h.schema }

func (h *HashJoin) name() string {
	return h.st[0].Table().Name + "/" + h.st[1].Table().Name
}

// start launches one goroutine per input, each feeding its channel.
func (h *HashJoin) start() {
	h.running = true
	h.runCtx, h.cancel = context.WithCancel(context.Background())
	for s := range h.in {
		h.ch[s] = make(chan hjMsg, 1)
		h.wg.Add(1)
		go h.pump(s)
	}
}

func (h *HashJoin) pump(s int) {
	defer h.wg.Done()
	for {
		m, err := h.in[s].Next(h.runCtx)
		select {
		case h.ch[s] <- hjMsg{msg: m, err: err}:
		case <-h.runCtx.Done():
			m.Release()
			return
		}
		if err != nil {
			return
		}
	}
}

// Next implements Executor.
func (h *HashJoin) Next(ctx context.Context) (Message, error) {
	if h.closed {
		return Message{}, fmt.Errorf("hash join %s: next after close", h.name())
	}
	if !h.running {
		h.start()
	}
	if len(h.out) > 0 {
		return ChunkMessage(h.popOut()), nil
	}
	if err := h.awaitCommit(ctx); err != nil {
		return Message{}, fmt.Errorf("hash join %s: %w", h.name(), err)
	}
	for {
		if h.done[0] && h.done[1] {
			return Message{}, io.EOF
		}
		// Receive from the inputs that have not delivered a pending barrier.
		var chs [2]chan hjMsg
		for s := range chs {
			if !h.done[s] && h.pending[s] == nil {
				chs[s] = h.ch[s]
			}
		}
		var r hjMsg
		s := 0
		select {
		case r = <-chs[0]:
		case r = <-chs[1]:
			s = 1
		case <-ctx.Done():
			return Message{}, ctx.Err()
		}
		if r.err != nil {
			if errors.Is(r.err, io.EOF) {
				h.done[s] = true
				if b := h.aligned(); b != nil {
					return h.barrier(b)
				}
				continue
			}
			return Message{}, r.err
		}
		switch {
		case r.msg.Chunk != nil:
			err := h.apply(s, r.msg.Chunk)
			r.msg.Chunk.Release()
			if err != nil {
				return Message{}, fmt.Errorf("hash join %s: epoch %d: %w", h.name(), h.epoch, err)
			}
			if len(h.out) > 0 {
				return ChunkMessage(h.popOut()), nil
			}
		case r.msg.Barrier != nil:
			h.pending[s] = r.msg.Barrier
			if b := h.aligned(); b != nil {
				return h.barrier(b)
			}
		}
	}
}

func (h *HashJoin) popOut() *vec.Chunk {
	c := h.out[0]
	h.out[0] = nil
	h.out = h.out[1:]
	return c
}

// aligned returns the barrier to emit when every live input delivered it.
func (h *HashJoin) aligned() *Barrier {
	var b *Barrier
	for s := range h.pending {
		if h.done[s] {
			continue
		}
		if h.pending[s] == nil {
			return nil
		}
		b = h.pending[s]
	}
	return b
}

func (h *HashJoin) barrier(b *Barrier) (Message, error) {
	for s := range h.pending {
		if p := h.pending[s]; p != nil && (p.Prev != b.Prev || p.Curr != b.Curr) {
			return Message{}, fmt.Errorf("hash join %s: misaligned barriers %v and %v", h.name(), h.pending[0], h.pending[1])
		}
		h.pending[s] = nil
	}
	if err := h.endEpoch(b, h.st[0], h.st[1]); err != nil {
		return Message{}, fmt.Errorf("hash join %s: %v: %w", h.name(), b, err)
	}
	return BarrierMessage(b), nil
}

// apply joins the visible rows of chunk c of side s with the other side's state, then
// writes them into side s's state. The output chunks are queued in h.out.
func (h *HashJoin) apply(s int, c *vec.Chunk) error {
	if !h.started {
		return fmt.Errorf("a chunk before the first barrier")
	}
	if err := vec.CheckChunk(h.st[s].Table(), c); err != nil {
		return err
	}
	view, err := h.readView()
	if err != nil {
		return err
	}
	if h.cache[0] != nil && !h.checked {
		if err := h.checkEmpty(view); err != nil {
			return err
		}
	}
	n := c.NumRows()
	if n == 0 {
		return nil
	}
	rec := c.Record()
	// The join keys, their vnodes and NULLs, once per chunk.
	if cap(h.vn) < n {
		h.vn = make([]uint16, n)
	}
	h.vn = h.vn[:n]
	h.jk.encode(c, h.keys[s], &h.kbuf, h.vn)
	vis := vec.NewBitmap(h.mem, n) // the rows to store: visible, no NULL key
	defer vis.Release()
	bits := vis.Bytes()
	for i := 0; i < n; i++ {
		if c.Visible(i) {
			bits[i>>3] |= 1 << (i & 7)
		}
	}
	for _, k := range h.keys[s] {
		a := rec.Column(k)
		if a.NullN() == 0 {
			continue
		}
		for i := 0; i < n; i++ {
			if a.IsNull(i) {
				bits[i>>3] &^= 1 << (i & 7)
			}
		}
	}

	// Probe the other side.
	o := 1 - s
	h.matched.Reset()
	h.idx = h.idx[:0]
	h.ops = h.ops[:0]
	ops := c.Ops()
	var end []byte
	prev, from, to := -1, 0, 0 // the last row probed, and its matches in h.matched
	cache := h.cache[o]
	var hits, loads, absent int64
	for i := 0; i < n; i++ {
		if bits[i>>3]&(1<<(i&7)) == 0 {
			continue
		}
		op := vec.Insert
		if !ops[i].IsInsert() {
			op = vec.Delete
		}
		prefix := h.kbuf.At(i)
		// A row with the key of the row probed last matches what that row matched: the
		// other side does not change within the chunk. Rows of a snapshot come in pk
		// order, so rows with one join key are often neighbours (bids by auction).
		if prev >= 0 && bytes.Equal(prefix, h.kbuf.At(prev)) { // (so is the vnode, of the key)
			for k := from; k < to; k++ {
				h.matched.Append(h.matched.At(k))
				h.idx = append(h.idx, int64(i))
				h.ops = append(h.ops, op)
			}
			continue
		}
		var entry *jcEntry // the entry to fill from the table (a miss)
		if cache != nil {
			key := cache.key(h.vn[i], prefix)
			if e := cache.get(key); e != nil {
				hits++
				prev, from = i, h.matched.Len()
				for _, r := range e.rows {
					h.matched.Append(e.value(r))
					h.idx = append(h.idx, int64(i))
					h.ops = append(h.ops, op)
				}
				to = h.matched.Len()
				continue
			}
			if cache.absent(key) {
				absent++
				prev, from, to = i, h.matched.Len(), h.matched.Len()
				continue
			}
			loads++
			entry = cache.add(key)
		}
		end = append(end[:0], prefix...)
		// From, not After: a side whose pk is its join key stores exactly the prefix.
		b := storage.IterBounds{From: prefix}
		if e, ok := keyPrefixEnd(end); ok {
			b.Before = e
		}
		if err := h.st[o].ReuseIter(h.view, h.vn[i], b, &h.probe); err != nil {
			h.probe.Close()
			return err
		}
		prev, from = i, h.matched.Len()
		for h.probe.Next() {
			h.matched.Append(h.probe.Value())
			h.idx = append(h.idx, int64(i))
			h.ops = append(h.ops, op)
			if entry != nil {
				cache.append(entry, h.probe.PK(), h.probe.Value())
			}
		}
		if err := h.probe.Error(); err != nil {
			h.probe.Close()
			if entry != nil {
				cache.drop(entry) // partly filled
			}
			return err
		}
		to = h.matched.Len()
		if entry != nil {
			cache.account(entry)
			cache.shrink(entry)
		}
	}
	if cache != nil {
		cache.budget.hits.Add(hits)
		cache.budget.loads.Add(loads)
		cache.budget.absent.Add(absent)
	}
	// One pebble iterator served the chunk's probes; the view may change before the
	// next chunk.
	if err := h.probe.Close(); err != nil {
		return err
	}
	max := h.cfg.MaxChunkRows
	if max <= 0 {
		max = 1024
	}
	for lo := 0; lo < len(h.ops); lo += max {
		hi := min(lo+max, len(h.ops))
		out, err := h.build(s, rec, lo, hi)
		if err != nil {
			return err
		}
		if out != nil {
			h.out = append(h.out, out)
		}
	}
	w := c.WithVisibility(vis)
	if h.cfg.ExactInputs {
		err = h.st[s].WriteExact(w)
	} else {
		err = h.st[s].Write(w)
	}
	w.Release()
	if err != nil || h.cache[s] == nil {
		return err
	}
	h.cacheWrites(s, bits, n, ops)
	return nil
}

// build assembles the output of the probed pairs lo..hi-1: side s's columns taken from
// rec at h.idx, the other side's decoded from h.matched, then hides the pairs failing
// the residual condition. nil when none passes.
func (h *HashJoin) build(s int, rec arrow.RecordBatch, lo, hi int) (*vec.Chunk, error) {
	n := hi - lo
	o := 1 - s
	ctx := withMem(context.Background(), h.mem)
	cols := make([]arrow.Array, h.schema.NumFields())
	defer func() {
		for _, a := range cols {
			if a != nil {
				a.Release()
			}
		}
	}()
	off := [2]int{0, h.nleft}
	// Side s: one Take per column.
	ib := array.NewInt64Builder(h.mem)
	ib.AppendValues(h.idx[lo:hi], nil)
	indices := ib.NewArray()
	ib.Release()
	defer indices.Release()
	for i := 0; i < int(rec.NumCols()); i++ {
		a, err := compute.TakeArray(ctx, rec.Column(i), indices)
		if err != nil {
			return nil, fmt.Errorf("take column %d: %w", i, err)
		}
		cols[off[s]+i] = a
	}
	// The other side: decode the matched values.
	bs := make([]vec.Builder, len(h.proj[o]))
	for i := range bs {
		bs[i] = vec.NewBuilder(h.mem, h.schema.Field(off[o]+i).Type)
		bs[i].Reserve(n)
	}
	vals := vec.Bytes{Data: h.matched.Data, Offsets: h.matched.Offsets[lo : hi+1]}
	err := h.valK[o].DecodeValues(&vals, h.proj[o], bs)
	for i, b := range bs {
		cols[off[o]+i] = b.NewArray()
		b.Release()
	}
	if err != nil {
		return nil, err
	}
	out := array.NewRecordBatch(h.schema, cols, int64(n))
	defer out.Release()
	opsBuf := vec.NewOps(h.mem, n, vec.Insert)
	defer opsBuf.Release()
	copy(vec.OpsOf(opsBuf.Bytes()), h.ops[lo:hi])
	if h.cfg.Residual == nil {
		return vec.NewChunk(out, opsBuf, nil), nil
	}
	a, err := EvalArray(ctx, h.cfg.Residual, out, h.mem)
	if err != nil {
		return nil, fmt.Errorf("residual %s: %w", h.cfg.Residual, err)
	}
	defer a.Release()
	pred, ok := a.(*array.Boolean)
	if !ok {
		return nil, fmt.Errorf("residual %s gave %s, want boolean", h.cfg.Residual, a.DataType())
	}
	vis := vec.NewBitmap(h.mem, n)
	defer vis.Release()
	bits := vis.Bytes()
	kept := 0
	for i := 0; i < n; i++ {
		if pred.IsValid(i) && pred.Value(i) {
			bits[i>>3] |= 1 << (i & 7)
			kept++
		}
	}
	if kept == 0 {
		return nil, nil
	}
	return vec.NewChunk(out, opsBuf, vis), nil
}

// Close stops the input goroutines, releases what is buffered and the view, and closes
// the inputs.
func (h *HashJoin) Close() error {
	if !h.firstClose() {
		return nil
	}
	if h.running {
		h.cancel()
		h.wg.Wait()
		for s := range h.ch {
			for {
				select {
				case r := <-h.ch[s]:
					r.msg.Release()
					continue
				default:
				}
				break
			}
		}
	}
	for _, c := range h.out {
		c.Release()
	}
	h.out = nil
	for _, c := range h.cache {
		if c != nil {
			c.release()
		}
	}
	h.releaseView()
	err := h.in[0].Close()
	if err2 := h.in[1].Close(); err == nil {
		err = err2
	}
	return err
}
