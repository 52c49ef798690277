package executors

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
)

// HashAggConfig configures a HashAgg.
type HashAggConfig struct {
	GroupBy []int // input columns; at least one (a pk cannot be empty)
	Aggs    []AggCall
	// VnodeCount is the vnode count of the state tables (0: schema.DefaultVnodeCount).
	VnodeCount int
	// State is the group table: a state table over HashAggStateTable's schema.
	State *storage.StateTable
	// MultiSets has one state table per multiset (HashAggMultisetSlots, in its order),
	// each over HashAggMultisetTable's schema for its slot; none when no aggregate is
	// a min, max or count(DISTINCT).
	MultiSets []*storage.StateTable
	Node      *storage.Node
	Mem       memory.Allocator
	// Cache is the node's budget for the groups held in memory (shared with the
	// joins' cached rows); nil: every group stays in memory.
	Cache *StateCache
}

// HashAgg is a retractable streaming GROUP BY. Insert and UpdateInsert rows add to their
// group, Delete and UpdateDelete rows subtract. Its output is the result table keyed by
// the group keys: the group-by columns, then one column per aggregate.
//
// Changelog: the output is emitted per barrier, before the barrier: for every group
// touched in the epoch (in order of first touch) Insert when it appears (count(*) goes
// from 0 up), Delete of the old row when count(*) drops to 0, an UpdateDelete/UpdateInsert
// pair when its output row changed, and nothing when it did not (no no-op updates).
// Output chunks hold at most 1024 rows and never split a pair.
//
// State: the group table (HashAggStateTable) holds per group count(*) and the counts and
// sums of count/sum/avg. The min, max and count(DISTINCT) aggregates over one input
// column share a multiset (HashAggMultisetSlots) and its table (HashAggMultisetTable),
// which holds per (group, value) one row with each aggregate's count of rows with that
// value, so that deleting the current min/max finds the next one and the distinct
// count stays exact. In memory too a group keeps one multiset per input column
// (count(DISTINCT bidder) under three FILTERs looks each row's bidder up once, not
// three times, and writes one row when it changes, not three). Groups are cached in memory (with their
// multisets) once read, under the node's StateCache budget when Cache is set: a group
// whose state is written may be evicted after a checkpoint barrier and is read back
// on its next touch (hashagg_cache.go). The state is written behind: at each
// checkpoint barrier the groups and multiset entries changed since the last one are
// written to the state tables, which are sealed as epoch Prev, so that a group touched
// in several epochs between two checkpoints is written once (a barrier that is not a
// checkpoint seals nothing new, and a recovery restarts from the last checkpoint
// anyway); after a restart the groups are read back from the committed state on first
// touch. Float sums are kept as float64 and are exact only as long as the float
// additions and subtractions are.
//
// Barriers: like Materialize, the first barrier is passed on at once, and nothing after it
// is read until the store's committed epoch reaches its Prev. Watermarks are dropped (a
// group key watermark is not tracked).
type HashAgg struct {
	input  Executor
	cfg    HashAggConfig
	st     *storage.StateTable
	ms     []*storage.StateTable
	mem    memory.Allocator
	schema *arrow.Schema
	st2    *schema.Table   // the group table
	stLay  *vec.Layout     // its value layout
	stK    vec.Kernels     // its kernels
	msT    []*schema.Table // per slot, its multiset table
	msLay  []*vec.Layout
	msK    []vec.Kernels
	gk     rowKeys         // the group keys: their encoding and vnodes
	valT   []*schema.Table // per multiset aggregate: its value alone, nullable
	valK   []vec.Kernels
	// slots group the multiset aggregates by input column: a group keeps one multiset
	// per slot, with a count per aggregate (slot and index of each aggregate in
	// slotOf and slotIdx, -1 for the others).
	slots   []hgSlot
	slotOf  []int
	slotIdx []int
	inTyp   []schema.Type // per aggregate, its input type
	stCol   []int         // per aggregate, its first state column in the group table

	stateEpochs
	closeOnce

	// known: the group table had no row in the actor's vnodes when it first read
	// (checked): every group not in groups is absent from it, and a chunk reads
	// nothing of the tables.
	known, checked bool

	groups map[string]*hgGroup
	// ring, hand, bytes and evict are the groups under Cache (hashagg_cache.go).
	ring  []*hgGroup
	hand  int
	bytes int64
	evict []uint64
	dirty []*hgGroup // touched in the epoch
	// unsaved is the groups touched since the last checkpoint barrier, whose changes
	// the next one writes.
	unsaved []*hgGroup
	// negative is the multiset entries a count of which went below 0 in the epoch
	// (input that deleted a value more often than it inserted it).
	negative []*hgEntry
	out      []Message   // chunks to emit, then the barrier
	rowBuf   []hgRow     // a barrier's changelog rows, kept for the next barrier
	outBuf   []hgOut     // their new outputs
	sortKeys []hgSortKey // a barrier's scratch for sorting a multiset's entries

	// Per-chunk scratch.
	keys   vec.Bytes
	vals   vec.Bytes
	vn     []uint16
	rowG   []*hgGroup
	sign   []int64
	counts []int64
	// Per slot, the chunk's values encoded once, and the entry each row found.
	svals []vec.Bytes
	rowE  [][]*hgEntry
	// sel is the visible rows whose group is not cached, and stored what the group
	// table holds for them.
	sel    []int32
	stored storage.Lookup
	// The barrier's writes: per row (its key in keys), its op (exact: Insert for a key
	// the table does not hold, UpdateInsert or Delete for one it does) and vnode.
	wops []vec.Op
	wvn  []uint16
}

// hgGroup is one group's state: its encoded key and vnode, count(*) (rows), its
// aggregates' states and multisets, and its output before the epoch's first change
// (oldRows, old).
type hgGroup struct {
	key     string
	vn      uint16
	rows    int64
	aggs    []hgAgg
	stored  bool // the group table holds the group
	dirty   bool // in HashAgg.dirty
	unsaved bool // in HashAgg.unsaved
	oldRows int64
	old     []hgOut
	sets    []hgSet // per slot
	// slot, ref and size: its place in the ring, used since the hand passed, and
	// what it is accounted for (Cache).
	slot int
	ref  bool
	size int64
}

// NewHashAgg returns a hash aggregation of input as cfg says.
func NewHashAgg(input Executor, cfg HashAggConfig) (*HashAgg, error) {
	in := input.Schema()
	if err := hashAggCheck(in, cfg); err != nil {
		return nil, fmt.Errorf("hash agg: %w", err)
	}
	if cfg.State == nil || cfg.Node == nil || cfg.Mem == nil {
		return nil, fmt.Errorf("hash agg: nil state table, node or allocator")
	}
	want, err := HashAggStateTable(cfg.State.Table().Name, in, cfg)
	if err != nil {
		return nil, err
	}
	if got := cfg.State.Table(); got.Fingerprint() != want.Fingerprint() {
		return nil, fmt.Errorf("hash agg: state table %s does not have HashAggStateTable's shape", got.Name)
	}
	slots := hashAggSlots(cfg)
	for sl := range slots {
		typ, _ := schema.TypeOfArrow(in.Field(slots[sl].col).Type)
		slots[sl].pack = hgPackWidth(typ.Kind)
	}
	if len(cfg.MultiSets) != len(slots) {
		return nil, fmt.Errorf("hash agg %s: %d multiset tables, want %d (one per input column of a min, max or count(DISTINCT))", want.Name, len(cfg.MultiSets), len(slots))
	}
	h := &HashAgg{
		input: input, cfg: cfg, st: cfg.State, ms: cfg.MultiSets, stateEpochs: stateEpochs{node: cfg.Node}, mem: cfg.Mem,
		st2: cfg.State.Table(), stLay: vec.NewLayout(cfg.State.Table()), stK: vec.For(cfg.State.Table()),
		msT: make([]*schema.Table, len(slots)), msLay: make([]*vec.Layout, len(slots)), msK: make([]vec.Kernels, len(slots)), slots: slots,
		valT: make([]*schema.Table, len(cfg.Aggs)), valK: make([]vec.Kernels, len(cfg.Aggs)),
		inTyp: make([]schema.Type, len(cfg.Aggs)), stCol: make([]int, len(cfg.Aggs)),
		slotOf: make([]int, len(cfg.Aggs)), slotIdx: make([]int, len(cfg.Aggs)),
		groups: map[string]*hgGroup{},
	}
	if h.gk, err = newRowKeys(want.Name+"_keys", in, cfg.GroupBy, "g", hashAggVnodes(cfg)); err != nil {
		return nil, fmt.Errorf("hash agg %s: %w", want.Name, err)
	}
	fields := make([]arrow.Field, 0, len(cfg.GroupBy)+len(cfg.Aggs))
	for _, g := range cfg.GroupBy {
		fields = append(fields, in.Field(g))
	}
	next := len(cfg.GroupBy) + 1
	for i, a := range cfg.Aggs {
		h.stCol[i] = next
		if a.Kind != AggCountStar {
			h.inTyp[i], _ = schema.TypeOfArrow(in.Field(a.Col).Type)
		}
		fields = append(fields, hashAggField(in, a, i))
		switch a.Kind {
		case AggCount, AggCountStar:
			next++
		case AggSum, AggAvg:
			next += 2
		}
		h.slotOf[i], h.slotIdx[i] = -1, -1
		if !a.Kind.multiset() {
			continue
		}
		vt := &schema.Table{Name: fmt.Sprintf("%s_v%d", want.Name, i), Columns: []schema.Column{{Name: "v", Type: h.inTyp[i], Nullable: true}},
			PK: []schema.KeyColumn{{Column: 0}}, VnodeCount: 1}
		if err := vt.Validate(); err != nil {
			return nil, fmt.Errorf("hash agg %s: %w", want.Name, err)
		}
		h.valT[i], h.valK[i] = vt, vec.For(vt)
	}
	for sl, slot := range slots {
		for j, a := range slot.aggs {
			h.slotOf[a], h.slotIdx[a] = sl, j
		}
		mt := cfg.MultiSets[sl]
		if mt == nil {
			return nil, fmt.Errorf("hash agg %s: no table for multiset %d (of column %s)", want.Name, sl, in.Field(slot.col).Name)
		}
		wm, err := HashAggMultisetTable(mt.Table().Name, in, cfg, sl)
		if err != nil {
			return nil, err
		}
		if mt.Table().Fingerprint() != wm.Fingerprint() {
			return nil, fmt.Errorf("hash agg %s: multiset table %s (multiset %d, of column %s) does not have HashAggMultisetTable's shape", want.Name, mt.Table().Name, sl, in.Field(slot.col).Name)
		}
		h.msT[sl], h.msLay[sl], h.msK[sl] = mt.Table(), vec.NewLayout(mt.Table()), vec.For(mt.Table())
	}
	h.svals = make([]vec.Bytes, len(h.slots))
	h.rowE = make([][]*hgEntry, len(h.slots))
	h.schema = arrow.NewSchema(fields, nil)
	return h, nil
}

// Schema implements Executor: the group-by columns, then one column per aggregate.
func (h *HashAgg) Schema() *arrow.Schema { return h.schema }

// Next implements Executor.
func (h *HashAgg) Next(ctx context.Context) (Message, error) {
	if len(h.out) > 0 {
		m := h.out[0]
		h.out[0] = Message{}
		h.out = h.out[1:]
		return m, nil
	}
	if err := h.awaitCommit(ctx); err != nil {
		return Message{}, fmt.Errorf("hash agg %s: %w", h.st2.Name, err)
	}
	for {
		msg, err := h.input.Next(ctx)
		if err != nil {
			return Message{}, err
		}
		switch {
		case msg.Chunk != nil:
			err := h.apply(msg.Chunk)
			msg.Chunk.Release()
			if err != nil {
				return Message{}, fmt.Errorf("hash agg %s: epoch %d: %w", h.st2.Name, h.epoch, err)
			}
		case msg.Barrier != nil:
			if err := h.barrier(msg.Barrier); err != nil {
				return Message{}, fmt.Errorf("hash agg %s: %v: %w", h.st2.Name, msg.Barrier, err)
			}
			h.out = append(h.out, msg)
			m := h.out[0]
			h.out[0] = Message{}
			h.out = h.out[1:]
			return m, nil
		}
	}
}

// apply folds the visible rows of c into their groups.
func (h *HashAgg) apply(c *vec.Chunk) error {
	if !h.started {
		return fmt.Errorf("a chunk before the first barrier")
	}
	view, err := h.readView()
	if err != nil {
		return err
	}
	if !h.checked {
		if err := h.checkEmpty(view); err != nil {
			return err
		}
	}
	n := c.NumRows()
	if n == 0 {
		return nil
	}
	rec := c.Record()
	if cap(h.vn) < n {
		h.vn = make([]uint16, n)
		h.rowG = make([]*hgGroup, n)
		h.sign = make([]int64, n)
		h.counts = make([]int64, n)
	}
	h.vn, h.rowG, h.sign, h.counts = h.vn[:n], h.rowG[:n], h.sign[:n], h.counts[:n]
	// The group keys and their vnodes, once per chunk.
	h.gk.encode(c, h.cfg.GroupBy, &h.keys, h.vn)
	// The visible rows' cached groups; the stored state of the others, read for the
	// whole chunk at once (nothing is written to the state tables before the barrier).
	h.sel = h.sel[:0]
	for i := 0; i < n; i++ {
		h.rowG[i], h.sign[i] = nil, 0
		if !c.Visible(i) {
			continue
		}
		if g, ok := h.groups[keyString(h.keys.At(i))]; ok {
			g.ref = true
			h.rowG[i] = g
		} else if !h.known || h.evicted(h.keys.At(i)) {
			h.sel = append(h.sel, int32(i))
		}
	}
	if !h.known || len(h.sel) > 0 {
		if err := h.st.GetMany(h.view, h.vn, &h.keys, h.sel, &h.stored); err != nil {
			return err
		}
	}

	ops := c.Ops()
	for i := 0; i < n; i++ {
		if !c.Visible(i) {
			continue
		}
		s := int64(1)
		if !ops[i].IsInsert() {
			s = -1
		}
		g := h.rowG[i]
		if g == nil { // not cached before the chunk (an earlier row may have made it)
			var err error
			if g, err = h.group(i); err != nil {
				return err
			}
		}
		h.touch(g)
		g.rows += s
		h.rowG[i], h.sign[i] = g, s
	}
	// Each slot's column is encoded once for all its aggregates.
	for sl, slot := range h.slots {
		col := rec.Column(slot.col)
		vrec := array.NewRecordBatch(h.valT[slot.aggs[0]].ArrowSchema(), []arrow.Array{col}, int64(n))
		ops := vec.NewOps(h.mem, n, vec.Insert)
		vc := vec.NewChunk(vrec, ops, nil)
		vrec.Release()
		ops.Release()
		h.svals[sl].Reset()
		h.valK[slot.aggs[0]].EncodeKeys(vc, &h.svals[sl])
		vc.Release()
		if cap(h.rowE[sl]) < n {
			h.rowE[sl] = make([]*hgEntry, n)
		}
		h.rowE[sl] = h.rowE[sl][:n]
		clear(h.rowE[sl])
	}
	for a := range h.cfg.Aggs {
		if err := h.applyAgg(a, rec); err != nil {
			return err
		}
	}
	return nil
}

// checkEmpty finds out, once, whether the group table has no row in the actor's
// vnodes. Then every group the aggregate does not hold is absent from its tables
// unless its key shares a bit with an evicted one's (hashagg_cache.go), and one whose
// rows all went leaves memory only once a
// checkpoint has written its delete (a group's multiset rows exist only while the
// group's row does). A backfilled view's aggregate starts so.
func (h *HashAgg) checkEmpty(view *storage.View) error {
	empty, err := h.st.Empty(view)
	h.known, h.checked = empty, err == nil
	return err
}

// group returns the group of row i's key, from the cache or the state tables (read
// by apply before its loop; nothing when the tables are known to hold no group
// outside the cache).
func (h *HashAgg) group(i int) (*hgGroup, error) {
	key, vn := h.keys.At(i), h.vn[i]
	if g, ok := h.groups[keyString(key)]; ok {
		return g, nil
	}
	g := &hgGroup{key: string(key), vn: vn, aggs: make([]hgAgg, len(h.cfg.Aggs)), sets: make([]hgSet, len(h.slots))}
	var val []byte
	ok := false
	evicted := h.evicted(key)
	if !h.known || evicted {
		val, ok = h.stored.Value(i)
	}
	if evicted {
		h.cfg.Cache.groupLoads.Add(1)
	}
	if ok {
		if err := h.stLay.CheckValue(val); err != nil {
			return nil, fmt.Errorf("table %s vnode %d: %w", h.st2.Name, vn, err)
		}
		u := func(col int) int64 { return int64(binary.LittleEndian.Uint64(val[h.stLay.Slot[col]:])) }
		g.stored = true
		g.rows = u(len(h.cfg.GroupBy))
		for a, call := range h.cfg.Aggs {
			st := &g.aggs[a]
			switch call.Kind {
			case AggCount, AggCountStar:
				st.n = u(h.stCol[a])
			case AggSum, AggAvg:
				st.n = u(h.stCol[a])
				if hgIsFloat(h.inTyp[a].Kind) {
					st.sf = math.Float64frombits(uint64(u(h.stCol[a] + 1)))
				} else {
					st.si = u(h.stCol[a] + 1)
				}
			}
		}
		for sl := range h.slots {
			if err := h.loadMultiset(sl, g); err != nil {
				return nil, err
			}
		}
	}
	h.groups[g.key] = g
	h.cacheAdd(g)
	return g, nil
}

// loadMultiset reads g's multiset of slot sl from its table, with the states of the
// slot's aggregates.
func (h *HashAgg) loadMultiset(sl int, g *hgGroup) error {
	lay, t, aggs := h.msLay[sl], h.msT[sl], h.slots[sl].aggs
	b := storage.IterBounds{After: []byte(g.key)}
	if end, ok := keyPrefixEnd([]byte(g.key)); ok {
		b.Before = end
	}
	it, err := h.ms[sl].Iter(h.view, g.vn, b)
	if err != nil {
		return err
	}
	set := &g.sets[sl]
	cnt0 := len(t.Columns) - len(aggs) // the first count column
	for it.Next() {
		pk, val := it.PK(), it.Value()
		if len(pk) < len(g.key) || string(pk[:len(g.key)]) != g.key {
			continue
		}
		if err := lay.CheckValue(val); err != nil {
			it.Close()
			return fmt.Errorf("table %s vnode %d: %w", t.Name, g.vn, err)
		}
		e := set.entry(pk[len(g.key):], len(aggs), h.slots[sl].pack)
		e.stored = true
		k := e.key
		for j, a := range aggs {
			c := int64(binary.LittleEndian.Uint64(val[lay.Slot[cnt0+j]:]))
			if c < 0 {
				it.Close()
				return fmt.Errorf("table %s vnode %d: count %d of column %s", t.Name, g.vn, c, t.Columns[cnt0+j].Name)
			}
			e.cnt[j] = c
			if c == 0 {
				continue
			}
			st := &g.aggs[a]
			switch kind := h.cfg.Aggs[a].Kind; kind {
			case AggCountDistinct:
				st.n++
			default:
				st.n += c
				if !st.extOK || hgBetter(kind, k, st.ext) {
					st.ext, st.extOK = k, true
				}
			}
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return fmt.Errorf("table %s vnode %d: %w", t.Name, g.vn, err)
	}
	return it.Close()
}

// touch remembers g's output before its first change of the epoch.
func (h *HashAgg) touch(g *hgGroup) {
	if g.dirty {
		return
	}
	g.dirty = true
	g.oldRows = g.rows
	g.old = h.outputs(g, g.old[:0])
	h.dirty = append(h.dirty, g)
	if !g.unsaved {
		g.unsaved = true
		h.unsaved = append(h.unsaved, g)
	}
}

// Close releases the view and pending output and closes the input.
func (h *HashAgg) Close() error {
	if !h.firstClose() {
		return nil
	}
	h.releaseView()
	for _, m := range h.out {
		m.Release()
	}
	h.out = nil
	h.releaseCache()
	h.groups, h.dirty, h.unsaved, h.negative = nil, nil, nil, nil
	return h.input.Close()
}
