package executors

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
)

// AggKind is the function of one aggregate of a HashAgg.
type AggKind uint8

// The aggregate functions.
const (
	AggCount         AggKind = iota // count(col): the non-NULL values; int64
	AggCountStar                    // count(*): the rows; int64
	AggSum                          // sum(col): int64 for integer input, float64 for float input; NULL when no value
	AggAvg                          // avg(col): float64; NULL when no value
	AggMin                          // min(col): the input type; NULL when no value
	AggMax                          // max(col): the input type; NULL when no value
	AggCountDistinct                // count(DISTINCT col): the distinct non-NULL values; int64
)

func (k AggKind) String() string {
	switch k {
	case AggCount:
		return "count"
	case AggCountStar:
		return "count_star"
	case AggSum:
		return "sum"
	case AggAvg:
		return "avg"
	case AggMin:
		return "min"
	case AggMax:
		return "max"
	case AggCountDistinct:
		return "count_distinct"
	}
	return fmt.Sprintf("AggKind(%d)", uint8(k))
}

// multiset reports whether the aggregate keeps a per-group multiset of its values.
func (k AggKind) multiset() bool { return k == AggMin || k == AggMax || k == AggCountDistinct }

// AggCall is one aggregate of a HashAgg.
type AggCall struct {
	Kind AggKind
	Col  int // input column (ignored by count(*))
	// HasFilter: only the rows whose boolean input column Filter is true (not false,
	// not NULL) count (SQL's FILTER (WHERE ...)).
	HasFilter bool
	Filter    int
	Name      string // output column name; "" gives <kind>_<index>
}

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
}

// hashAggTypeOf maps an Arrow type of a chunk column back to the schema type.
func hashAggTypeOf(dt arrow.DataType) (schema.Type, error) {
	switch t := dt.(type) {
	case *arrow.BooleanType:
		return schema.Type{Kind: schema.Boolean}, nil
	case *arrow.Int16Type:
		return schema.Type{Kind: schema.Int16}, nil
	case *arrow.Int32Type:
		return schema.Type{Kind: schema.Int32}, nil
	case *arrow.Int64Type:
		return schema.Type{Kind: schema.Int64}, nil
	case *arrow.Float32Type:
		return schema.Type{Kind: schema.Float32}, nil
	case *arrow.Float64Type:
		return schema.Type{Kind: schema.Float64}, nil
	case *arrow.Decimal128Type:
		return schema.Type{Kind: schema.Decimal, Precision: t.Precision, Scale: t.Scale}, nil
	case *arrow.StringType:
		return schema.Type{Kind: schema.Varchar}, nil
	case *arrow.BinaryType:
		return schema.Type{Kind: schema.Bytea}, nil
	case *arrow.Date32Type:
		return schema.Type{Kind: schema.Date}, nil
	case *arrow.TimestampType:
		if t.Unit == arrow.Microsecond && t.TimeZone == "" {
			return schema.Type{Kind: schema.Timestamp}, nil
		}
		if t.Unit == arrow.Microsecond && t.TimeZone == "UTC" {
			return schema.Type{Kind: schema.Timestamptz}, nil
		}
	}
	return schema.Type{}, fmt.Errorf("unsupported Arrow type %s", dt)
}

func hgIsInt(k schema.Kind) bool {
	return k == schema.Int16 || k == schema.Int32 || k == schema.Int64
}

func hgIsFloat(k schema.Kind) bool { return k == schema.Float32 || k == schema.Float64 }

// hashAggCheck validates cfg's columns and aggregates against the input schema.
func hashAggCheck(in *arrow.Schema, cfg HashAggConfig) error {
	if len(cfg.GroupBy) == 0 {
		return fmt.Errorf("no group-by column")
	}
	col := func(i int, what string) (schema.Type, error) {
		if i < 0 || i >= in.NumFields() {
			return schema.Type{}, fmt.Errorf("%s: column %d out of range (%d columns)", what, i, in.NumFields())
		}
		typ, err := hashAggTypeOf(in.Field(i).Type)
		if err != nil {
			return typ, fmt.Errorf("%s: column %d: %w", what, i, err)
		}
		return typ, nil
	}
	for _, g := range cfg.GroupBy {
		if _, err := col(g, "group by"); err != nil {
			return err
		}
	}
	for i, a := range cfg.Aggs {
		what := fmt.Sprintf("aggregate %d (%s)", i, a.Kind)
		if a.Kind > AggCountDistinct {
			return fmt.Errorf("%s: unknown kind", what)
		}
		if a.HasFilter {
			typ, err := col(a.Filter, what+" filter")
			if err != nil {
				return err
			}
			if typ.Kind != schema.Boolean {
				return fmt.Errorf("%s: filter column %d is %s, not boolean", what, a.Filter, typ)
			}
		}
		if a.Kind == AggCountStar {
			continue
		}
		typ, err := col(a.Col, what)
		if err != nil {
			return err
		}
		if (a.Kind == AggSum || a.Kind == AggAvg) && !hgIsInt(typ.Kind) && !hgIsFloat(typ.Kind) {
			return fmt.Errorf("%s: input type %s is not an integer or float type", what, typ)
		}
	}
	return nil
}

func hashAggVnodes(cfg HashAggConfig) int {
	if cfg.VnodeCount == 0 {
		return schema.DefaultVnodeCount
	}
	return cfg.VnodeCount
}

// hashAggKeyColumns returns the group-key columns g0, g1, ... of the state tables.
func hashAggKeyColumns(in *arrow.Schema, cfg HashAggConfig) ([]schema.Column, []schema.KeyColumn, []int) {
	var cols []schema.Column
	var pk []schema.KeyColumn
	var dist []int
	for i, g := range cfg.GroupBy {
		typ, _ := hashAggTypeOf(in.Field(g).Type)
		cols = append(cols, schema.Column{Name: fmt.Sprintf("g%d", i), Type: typ, Nullable: true})
		pk = append(pk, schema.KeyColumn{Column: i})
		dist = append(dist, i)
	}
	return cols, pk, dist
}

// HashAggStateTable derives the schema of a HashAgg's group table: the group keys
// g0, g1, ... (the pk and distribution key, all nullable), rows (count(*) of the group,
// int64), then per aggregate i: count and count(*): a<i>_n (int64); sum and avg: a<i>_n
// (non-NULL count, int64) and a<i>_sum (int64 for integer input, float64 for float
// input); min, max and count(DISTINCT): nothing (their state is in their multiset's
// table).
func HashAggStateTable(name string, in *arrow.Schema, cfg HashAggConfig) (*schema.Table, error) {
	if err := hashAggCheck(in, cfg); err != nil {
		return nil, fmt.Errorf("hash agg %s: %w", name, err)
	}
	cols, pk, dist := hashAggKeyColumns(in, cfg)
	i64 := schema.Type{Kind: schema.Int64}
	cols = append(cols, schema.Column{Name: "rows", Type: i64})
	for i, a := range cfg.Aggs {
		switch a.Kind {
		case AggCount, AggCountStar:
			cols = append(cols, schema.Column{Name: fmt.Sprintf("a%d_n", i), Type: i64})
		case AggSum, AggAvg:
			typ, _ := hashAggTypeOf(in.Field(a.Col).Type)
			sum := i64
			if hgIsFloat(typ.Kind) {
				sum = schema.Type{Kind: schema.Float64}
			}
			cols = append(cols, schema.Column{Name: fmt.Sprintf("a%d_n", i), Type: i64},
				schema.Column{Name: fmt.Sprintf("a%d_sum", i), Type: sum})
		}
	}
	t := &schema.Table{Name: name, Columns: cols, PK: pk, DistKey: dist, VnodeCount: hashAggVnodes(cfg)}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("hash agg %s: %w", name, err)
	}
	return t, nil
}

// HashAggMultisetSlots lists the multisets a HashAgg of in as cfg says keeps per
// group: the min, max and count(DISTINCT) aggregates over one input column share one,
// and each multiset has a table (HashAggMultisetTable, in this order). An element lists the indexes of its aggregates, in cfg.Aggs's order.
func HashAggMultisetSlots(in *arrow.Schema, cfg HashAggConfig) ([][]int, error) {
	if err := hashAggCheck(in, cfg); err != nil {
		return nil, fmt.Errorf("hash agg: %w", err)
	}
	slots := hashAggSlots(cfg)
	out := make([][]int, len(slots))
	for i, sl := range slots {
		out[i] = slices.Clone(sl.aggs)
	}
	return out, nil
}

// hashAggSlots groups the multiset aggregates of cfg by input column, in order of
// first appearance.
func hashAggSlots(cfg HashAggConfig) []hgSlot {
	var slots []hgSlot
	for i, a := range cfg.Aggs {
		if !a.Kind.multiset() {
			continue
		}
		sl := slices.IndexFunc(slots, func(s hgSlot) bool { return s.col == a.Col })
		if sl < 0 {
			sl = len(slots)
			slots = append(slots, hgSlot{col: a.Col})
		}
		slots[sl].aggs = append(slots[sl].aggs, i)
	}
	return slots
}

// HashAggMultisetTable derives the schema of the table of multiset slot (an index
// into HashAggMultisetSlots): the group keys g0, g1, ..., the value v (the input
// column's type), then the value's count for each aggregate of the slot, c<agg>
// (int64, agg its index in cfg.Aggs), with pk (group keys, v) and the group keys as
// the distribution key, so that a group's multisets live in its vnode. A row exists
// while one of its counts is above 0.
func HashAggMultisetTable(name string, in *arrow.Schema, cfg HashAggConfig, slot int) (*schema.Table, error) {
	if err := hashAggCheck(in, cfg); err != nil {
		return nil, fmt.Errorf("hash agg %s: %w", name, err)
	}
	slots := hashAggSlots(cfg)
	if slot < 0 || slot >= len(slots) {
		return nil, fmt.Errorf("hash agg %s: multiset %d of %d (min, max and count(DISTINCT) keep one per input column)", name, slot, len(slots))
	}
	cols, pk, dist := hashAggKeyColumns(in, cfg)
	typ, _ := hashAggTypeOf(in.Field(slots[slot].col).Type)
	pk = append(pk, schema.KeyColumn{Column: len(cols)})
	cols = append(cols, schema.Column{Name: "v", Type: typ})
	for _, a := range slots[slot].aggs {
		cols = append(cols, schema.Column{Name: fmt.Sprintf("c%d", a), Type: schema.Type{Kind: schema.Int64}})
	}
	t := &schema.Table{Name: name, Columns: cols, PK: pk, DistKey: dist, VnodeCount: hashAggVnodes(cfg)}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("hash agg %s: %w", name, err)
	}
	return t, nil
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
// multisets) once read; the cache is not evicted. At each barrier the changed groups
// and multiset entries are written to the state tables, which are sealed as epoch
// Prev; after a restart the groups are read back from the committed state on first
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
	keyT   *schema.Table // the group keys alone: their encoding and vnodes
	keyK   vec.Kernels
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
	closed bool

	groups map[string]*hgGroup
	dirty  []*hgGroup
	out    []Message // chunks to emit, then the barrier

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

// hgSlot is the min, max and count(DISTINCT) aggregates over one input column: a
// group keeps one multiset of the column's values for all of them, so a
// row looks its value up once, however many of them (with their FILTERs) count it,
// and the slot's table keeps one row per value with a count per aggregate.
type hgSlot struct {
	col  int
	aggs []int // aggregate indexes; the first's value kernels encode the column
}

// hgSet is a group's multiset of one slot's column.
type hgSet struct {
	ms  map[string]*hgEntry
	dir []*hgEntry // entries with a dirty count, in first-touch order
}

// hgEntry is one value of a multiset: its count for each aggregate of the slot.
type hgEntry struct {
	key    string  // its key in the multiset map (kept, so that a min/max shares it)
	cnt    []int64 // per aggregate of the slot
	stored bool    // the slot's multiset table holds the entry
	dirty  bool    // a count changed since the last barrier (the entry is in its set's dir)
}

// counted is the index of the first aggregate that counts e (count > 0), or -1.
func (e *hgEntry) counted() int {
	return slices.IndexFunc(e.cnt, func(c int64) bool { return c > 0 })
}

// entry returns the entry of value key k, made with n counts when missing.
func (set *hgSet) entry(k []byte, n int) *hgEntry {
	if e, ok := set.ms[keyString(k)]; ok {
		return e
	}
	e := &hgEntry{key: string(k), cnt: make([]int64, n)}
	set.ms[e.key] = e
	return e
}

type hgAgg struct {
	n     int64 // count; non-NULL count (sum, avg, min, max); distinct count
	si    int64
	sf    float64
	ext   string // the current min/max (encoded value key), when extOK
	extOK bool
	stale bool // ext was deleted: rescan
}

type hgOut struct {
	null bool
	i    int64
	f    uint64
	s    string
}

type hgGroup struct {
	key     string
	vn      uint16
	rows    int64
	aggs    []hgAgg
	stored  bool // the group table holds the group
	dirty   bool
	oldRows int64
	old     []hgOut
	sets    []hgSet // per slot
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
	cols, pk, dist := hashAggKeyColumns(in, cfg)
	h.keyT = &schema.Table{Name: want.Name + "_keys", Columns: cols, PK: pk, DistKey: dist, VnodeCount: hashAggVnodes(cfg)}
	if err := h.keyT.Validate(); err != nil {
		return nil, fmt.Errorf("hash agg %s: %w", want.Name, err)
	}
	h.keyK = vec.For(h.keyT)
	fields := make([]arrow.Field, 0, len(cfg.GroupBy)+len(cfg.Aggs))
	for _, g := range cfg.GroupBy {
		fields = append(fields, in.Field(g))
	}
	next := len(cfg.GroupBy) + 1
	for i, a := range cfg.Aggs {
		h.stCol[i] = next
		if a.Kind != AggCountStar {
			h.inTyp[i], _ = hashAggTypeOf(in.Field(a.Col).Type)
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

// HashAggSchema is the output schema of a HashAgg of in as cfg says (only GroupBy and
// Aggs are read): the group-by columns, then one column per aggregate.
func HashAggSchema(in *arrow.Schema, cfg HashAggConfig) (*arrow.Schema, error) {
	if err := hashAggCheck(in, cfg); err != nil {
		return nil, fmt.Errorf("hash agg: %w", err)
	}
	fields := make([]arrow.Field, 0, len(cfg.GroupBy)+len(cfg.Aggs))
	for _, g := range cfg.GroupBy {
		fields = append(fields, in.Field(g))
	}
	for i, a := range cfg.Aggs {
		fields = append(fields, hashAggField(in, a, i))
	}
	return arrow.NewSchema(fields, nil), nil
}

// hashAggField is the output column of aggregate a (the i-th) over in.
func hashAggField(in *arrow.Schema, a AggCall, i int) arrow.Field {
	name := a.Name
	if name == "" {
		name = fmt.Sprintf("%s_%d", a.Kind, i)
	}
	var dt arrow.DataType
	switch a.Kind {
	case AggCount, AggCountStar, AggCountDistinct:
		dt = arrow.PrimitiveTypes.Int64
	case AggSum:
		dt = arrow.PrimitiveTypes.Int64
		if typ, _ := hashAggTypeOf(in.Field(a.Col).Type); hgIsFloat(typ.Kind) {
			dt = arrow.PrimitiveTypes.Float64
		}
	case AggAvg:
		dt = arrow.PrimitiveTypes.Float64
	case AggMin, AggMax:
		typ, _ := hashAggTypeOf(in.Field(a.Col).Type)
		dt = typ.ArrowType()
	}
	nullable := a.Kind == AggSum || a.Kind == AggAvg || a.Kind == AggMin || a.Kind == AggMax
	return arrow.Field{Name: name, Type: dt, Nullable: nullable}
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
	if _, err := h.readView(); err != nil {
		return err
	}
	n := c.NumRows()
	if n == 0 {
		return nil
	}
	rec := c.Record()
	// The group keys and their vnodes, once per chunk.
	kcols := make([]arrow.Array, len(h.cfg.GroupBy))
	for i, g := range h.cfg.GroupBy {
		kcols[i] = rec.Column(g)
	}
	krec := array.NewRecordBatch(h.keyT.ArrowSchema(), kcols, int64(n))
	kc := c.WithRecord(krec)
	krec.Release()
	h.keys.Reset()
	h.keyK.EncodeKeys(kc, &h.keys)
	if cap(h.vn) < n {
		h.vn = make([]uint16, n)
		h.rowG = make([]*hgGroup, n)
		h.sign = make([]int64, n)
		h.counts = make([]int64, n)
	}
	h.vn, h.rowG, h.sign, h.counts = h.vn[:n], h.rowG[:n], h.sign[:n], h.counts[:n]
	h.keyK.Vnodes(kc, h.vn)
	kc.Release()
	// The visible rows' cached groups; the stored state of the others, read for the
	// whole chunk at once (nothing is written to the state tables before the barrier).
	h.sel = h.sel[:0]
	for i := 0; i < n; i++ {
		h.rowG[i], h.sign[i] = nil, 0
		if !c.Visible(i) {
			continue
		}
		if g, ok := h.groups[keyString(h.keys.At(i))]; ok {
			h.rowG[i] = g
		} else {
			h.sel = append(h.sel, int32(i))
		}
	}
	if err := h.st.GetMany(h.view, h.vn, &h.keys, h.sel, &h.stored); err != nil {
		return err
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

// applyAgg folds aggregate a's input of the chunk's rows (rowG, sign set) into the
// groups: one switch per chunk, then a typed loop.
func (h *HashAgg) applyAgg(a int, rec arrow.RecordBatch) error {
	call := h.cfg.Aggs[a]
	n := len(h.sign)
	// counts[i]: the row's sign when it counts for the aggregate, else 0.
	cnt := h.counts
	copy(cnt, h.sign)
	if call.HasFilter {
		f := rec.Column(call.Filter).(*array.Boolean)
		for i := 0; i < n; i++ {
			if cnt[i] != 0 && (f.IsNull(i) || !f.Value(i)) {
				cnt[i] = 0
			}
		}
	}
	if call.Kind == AggCountStar {
		for i, s := range cnt {
			if s != 0 {
				h.rowG[i].aggs[a].n += s
			}
		}
		return nil
	}
	col := rec.Column(call.Col)
	if col.NullN() > 0 {
		for i := 0; i < n; i++ {
			if cnt[i] != 0 && col.IsNull(i) {
				cnt[i] = 0
			}
		}
	}
	switch call.Kind {
	case AggCount:
		for i, s := range cnt {
			if s != 0 {
				h.rowG[i].aggs[a].n += s
			}
		}
	case AggSum, AggAvg:
		switch arr := col.(type) {
		case *array.Int16:
			hgSumInts(h.rowG, a, cnt, arr.Int16Values())
		case *array.Int32:
			hgSumInts(h.rowG, a, cnt, arr.Int32Values())
		case *array.Int64:
			hgSumInts(h.rowG, a, cnt, arr.Int64Values())
		case *array.Float32:
			hgSumFloats(h.rowG, a, cnt, arr.Float32Values())
		case *array.Float64:
			hgSumFloats(h.rowG, a, cnt, arr.Float64Values())
		default:
			return fmt.Errorf("aggregate %d: cannot sum %s", a, col.DataType())
		}
	case AggMin, AggMax, AggCountDistinct:
		sl, j := h.slotOf[a], h.slotIdx[a]
		vals, ents, width := &h.svals[sl], h.rowE[sl], len(h.slots[sl].aggs)
		for i, s := range cnt {
			if s == 0 {
				continue
			}
			g := h.rowG[i]
			set := &g.sets[sl]
			e := ents[i]
			if e == nil {
				e = set.entry(vals.At(i), width)
				ents[i] = e
			}
			g.aggs[a].add(call.Kind, set, e, j, s)
		}
	}
	return nil
}

func hgSumInts[T int16 | int32 | int64](rowG []*hgGroup, a int, cnt []int64, vals []T) {
	for i, s := range cnt {
		if s != 0 {
			st := &rowG[i].aggs[a]
			st.n += s
			st.si += s * int64(vals[i])
		}
	}
}

func hgSumFloats[T float32 | float64](rowG []*hgGroup, a int, cnt []int64, vals []T) {
	for i, s := range cnt {
		if s != 0 {
			st := &rowG[i].aggs[a]
			st.n += s
			st.sf += float64(s) * float64(vals[i])
		}
	}
}

// add adds s (+1 or -1 rows) to the count of e, an entry of set, for the aggregate
// (index j of its slot) whose state st is.
func (st *hgAgg) add(kind AggKind, set *hgSet, e *hgEntry, j int, s int64) {
	if !e.dirty {
		e.dirty = true
		set.dir = append(set.dir, e)
	}
	before := e.cnt[j]
	e.cnt[j] += s
	after := e.cnt[j]
	switch kind {
	case AggCountDistinct:
		if before <= 0 && after > 0 {
			st.n++
		} else if before > 0 && after <= 0 {
			st.n--
		}
	case AggMin, AggMax:
		st.n += s
		if s > 0 && !st.stale && (!st.extOK || hgBetter(kind, e.key, st.ext)) {
			st.ext, st.extOK = e.key, true
		}
		if s < 0 && after == 0 && st.extOK && st.ext == e.key {
			st.stale = true
		}
	}
}

// better reports whether value key a beats b for min (smaller) or max (larger): the
// memcomparable order is the value order.
func hgBetter(kind AggKind, a, b string) bool {
	if kind == AggMin {
		return a < b
	}
	return a > b
}

// extreme returns the current min/max, rescanning the multiset (set, the aggregate's
// counts at index j) when it was deleted.
func (st *hgAgg) extreme(kind AggKind, set *hgSet, j int) (string, bool) {
	if st.stale {
		st.stale, st.extOK, st.ext = false, false, ""
		for k, e := range set.ms {
			if e.cnt[j] > 0 && (!st.extOK || hgBetter(kind, k, st.ext)) {
				st.ext, st.extOK = k, true
			}
		}
	}
	return st.ext, st.extOK
}

// group returns the group of row i's key, from the cache or the state tables (read
// by apply before its loop).
func (h *HashAgg) group(i int) (*hgGroup, error) {
	key, vn := h.keys.At(i), h.vn[i]
	if g, ok := h.groups[keyString(key)]; ok {
		return g, nil
	}
	g := &hgGroup{key: string(key), vn: vn, aggs: make([]hgAgg, len(h.cfg.Aggs)), sets: make([]hgSet, len(h.slots))}
	for sl := range g.sets {
		g.sets[sl].ms = map[string]*hgEntry{}
	}
	if val, ok := h.stored.Value(i); ok {
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
	return g, nil
}

// loadMultiset reads g's multiset of slot sl from its table, with the states of the
// slot's aggregates.
func (h *HashAgg) loadMultiset(sl int, g *hgGroup) error {
	lay, t, aggs := h.msLay[sl], h.msT[sl], h.slots[sl].aggs
	b := storage.IterBounds{After: []byte(g.key)}
	if end, ok := hgPrefixSuccessor([]byte(g.key)); ok {
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
		e := set.entry(pk[len(g.key):], len(aggs))
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

// hgPrefixSuccessor is the smallest key above every key starting with p, if any.
func hgPrefixSuccessor(p []byte) ([]byte, bool) {
	out := append([]byte(nil), p...)
	for i := len(out) - 1; i >= 0; i-- {
		if out[i] != 0xff {
			out[i]++
			return out[:i+1], true
		}
	}
	return nil, false
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
}

// outputs appends g's output values, one per aggregate.
func (h *HashAgg) outputs(g *hgGroup, out []hgOut) []hgOut {
	for a, call := range h.cfg.Aggs {
		st := &g.aggs[a]
		var o hgOut
		switch call.Kind {
		case AggCount, AggCountStar, AggCountDistinct:
			o.i = st.n
		case AggSum:
			if st.n == 0 {
				o.null = true
			} else if hgIsFloat(h.inTyp[a].Kind) {
				o.f = math.Float64bits(st.sf)
			} else {
				o.i = st.si
			}
		case AggAvg:
			if st.n == 0 {
				o.null = true
			} else if hgIsFloat(h.inTyp[a].Kind) {
				o.f = math.Float64bits(st.sf / float64(st.n))
			} else {
				o.f = math.Float64bits(float64(st.si) / float64(st.n))
			}
		case AggMin, AggMax:
			if k, ok := st.extreme(call.Kind, &g.sets[h.slotOf[a]], h.slotIdx[a]); ok {
				o.s = k
			} else {
				o.null = true
			}
		}
		out = append(out, o)
	}
	return out
}

func hgSameOutputs(a, b []hgOut) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// hgRow is one row of the output changelog.
type hgRow struct {
	op  vec.Op
	key string
	out []hgOut
}

// barrier emits the epoch's changelog, persists the changed state, seals epoch Prev and
// renews the view.
func (h *HashAgg) barrier(b *Barrier) error {
	var rows []hgRow
	var newOut []hgOut
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
				for _, e := range set.ms {
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
		newOut = h.outputs(g, nil)
		switch {
		case g.oldRows == 0 && g.rows > 0:
			rows = append(rows, hgRow{vec.Insert, g.key, newOut})
		case g.oldRows > 0 && g.rows == 0:
			rows = append(rows, hgRow{vec.Delete, g.key, append([]hgOut(nil), g.old...)})
		case g.oldRows > 0 && !hgSameOutputs(g.old, newOut):
			rows = append(rows, hgRow{vec.UpdateDelete, g.key, append([]hgOut(nil), g.old...)}, hgRow{vec.UpdateInsert, g.key, newOut})
		}
	}
	if err := h.persist(); err != nil {
		return err
	}
	for _, g := range h.dirty {
		if g.rows == 0 {
			delete(h.groups, g.key)
		}
	}
	clear(h.dirty)
	h.dirty = h.dirty[:0]
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

// persist writes the dirty groups and multiset entries into the state tables.
func (h *HashAgg) persist() error {
	if len(h.dirty) == 0 {
		return nil
	}
	ng := len(h.cfg.GroupBy)
	cb := vec.NewChunkBuilder(h.mem, h.st2)
	defer cb.Release()
	h.resetWrites()
	for _, g := range h.dirty {
		switch {
		case g.rows > 0 && g.stored:
			h.addWrite(vec.UpdateInsert, g.vn)
		case g.rows > 0:
			h.addWrite(vec.Insert, g.vn)
			g.stored = true
		case g.stored:
			h.addWrite(vec.Delete, g.vn)
			g.stored = false
		default:
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
		for _, g := range h.dirty {
			set := &g.sets[sl]
			for _, e := range set.dir {
				e.dirty = false
				if !e.stored && e.counted() < 0 {
					delete(set.ms, e.key)
				}
			}
			clear(set.dir)
			set.dir = set.dir[:0]
		}
	}
	return nil
}

// persistMultiset writes the dirty entries of slot sl into its multiset table, one
// row per entry with every aggregate's count. A count below 0 (a value deleted more
// often than inserted) is written as 0 and is 0 from then on; an entry none of whose
// counts is above 0 has no row.
func (h *HashAgg) persistMultiset(sl int) error {
	ng := len(h.cfg.GroupBy)
	mb := vec.NewChunkBuilder(h.mem, h.msT[sl])
	defer mb.Release()
	h.resetWrites()
	cols := make([]*array.Int64Builder, len(h.slots[sl].aggs))
	for j := range cols {
		cols[j] = mb.Column(ng + 1 + j).(*array.Int64Builder)
	}
	for _, g := range h.dirty {
		for _, e := range g.sets[sl].dir {
			live := false
			for j, c := range e.cnt {
				if c < 0 {
					e.cnt[j] = 0
				}
				live = live || c > 0
			}
			switch {
			case live && e.stored:
				h.addWrite(vec.UpdateInsert, g.vn)
			case live:
				h.addWrite(vec.Insert, g.vn)
				e.stored = true
			case e.stored:
				h.addWrite(vec.Delete, g.vn)
				e.stored = false
			default:
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

// addWrite records the op and vnode of the next row written (its key goes to h.keys).
func (h *HashAgg) addWrite(op vec.Op, vn uint16) {
	h.wops = append(h.wops, op)
	h.wvn = append(h.wvn, vn)
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
	if err := h.keyK.DecodeKeys(&h.keys, bs[:ng]); err != nil {
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

// Close releases the view and pending output and closes the input.
func (h *HashAgg) Close() error {
	if h.closed {
		return nil
	}
	h.closed = true
	h.releaseView()
	for _, m := range h.out {
		m.Release()
	}
	h.out = nil
	h.groups = nil
	return h.input.Close()
}
