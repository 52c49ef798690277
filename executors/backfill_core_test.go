package executors

// Layer 1 of docs/testing.md: the arrangement backfill's state machine (backfillCore) alone,
// fed seeded random interleavings of upstream chunks, snapshot batches, barriers,
// checkpoints, pauses, crashes and rescales, and checked against a reference model
// after every message and every barrier. No goroutines, no storage: the test plays the
// executor (backfill.go), the snapshot reader, the replicated table, the progress table
// and the downstream MV.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/internal/invariants"
	"github.com/seed04fbb902/weir/internal/testschemas"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// ---- fixtures shared with backfill_regress_test.go ---------------------------------

// bfAlloc counts the bytes allocated and not yet freed: a leak check cheap enough for
// thousands of seeds (memory.CheckedAllocator records a stack per allocation).
type bfAlloc struct {
	mem memory.Allocator
	n   atomic.Int64
}

func newBFAlloc() *bfAlloc { return &bfAlloc{mem: memory.NewGoAllocator()} }

func (a *bfAlloc) Allocate(size int) []byte {
	a.n.Add(int64(size))
	return a.mem.Allocate(size)
}

func (a *bfAlloc) Reallocate(size int, b []byte) []byte {
	a.n.Add(int64(size - len(b)))
	return a.mem.Reallocate(size, b)
}

func (a *bfAlloc) Free(b []byte) {
	a.n.Add(-int64(len(b)))
	a.mem.Free(b)
}

// bfS2Table is the table of a backfill's output columns: tab's columns s2 (every pk
// column among them), in that order, with tab's pk order, distribution key and vnode
// count. Its memcomparable keys and vnodes equal tab's, and its value encoding
// identifies an output row.
func bfS2Table(tab *schema.Table, s2 []int) *schema.Table {
	idx := map[int]int{}
	t2 := &schema.Table{Name: tab.Name + "_s2", VnodeCount: tab.VnodeCount}
	for i, c := range s2 {
		idx[c] = i
		t2.Columns = append(t2.Columns, tab.Columns[c])
	}
	for _, k := range tab.PK {
		t2.PK = append(t2.PK, schema.KeyColumn{Column: idx[k.Column], Desc: k.Desc, NullsFirst: k.NullsFirst})
	}
	for _, d := range tab.DistKey {
		t2.DistKey = append(t2.DistKey, idx[d])
	}
	if err := t2.Validate(); err != nil {
		panic(fmt.Sprintf("S2 table of %s: %v", tab.Name, err))
	}
	return t2
}

// bfDecoder encodes the rows of S2 chunks (what the core emits and replicates): their
// memcomparable pks, S2 values and vnodes, computed by generic kernels of the S2 table.
type bfDecoder struct {
	k2         *vec.Generic
	schema     *arrow.Schema
	keys, vals vec.Bytes
	vn         []uint16
}

func newBFDecoder(tab *schema.Table, s2 []int) *bfDecoder {
	return &bfDecoder{k2: vec.NewGeneric(bfS2Table(tab, s2)), schema: tab.ProjectedArrowSchema(s2)}
}

// rows encodes every row of ch (visible or not).
func (d *bfDecoder) rows(ch *vec.Chunk) error {
	if !ch.Record().Schema().Equal(d.schema) {
		return fmt.Errorf("chunk has columns %s, want S2 %s", ch.Record().Schema(), d.schema)
	}
	n := ch.NumRows()
	d.keys.Reset()
	d.k2.EncodeKeys(ch, &d.keys)
	d.vals.Reset()
	d.k2.EncodeValues(ch, &d.vals)
	d.vn = slices.Grow(d.vn[:0], n)[:n]
	d.k2.Vnodes(ch, d.vn)
	return nil
}

// bfApply applies the visible rows of ch, an S2 chunk, to down (memcomparable pk -> S2
// value), checking invariant I3: ch is a changelog, no insert of a pk already present,
// no delete of a missing row (or of another value than the one present), no row of a
// vnode that owns(vnode) rejects.
func bfApply(down map[string]string, d *bfDecoder, ch *vec.Chunk, owns func(uint16) bool) error {
	if err := vectest.ChangelogError(ch); err != nil {
		return fmt.Errorf("not a changelog: %w", err)
	}
	if err := d.rows(ch); err != nil {
		return err
	}
	ops := ch.Ops()
	for i := 0; i < ch.NumRows(); i++ {
		if !ch.Visible(i) {
			continue
		}
		row := func() string {
			return fmt.Sprintf("row %d %v %s (vnode %d)", i, ops[i], vectest.FormatRow(ch.Record(), i), d.vn[i])
		}
		if owns != nil && !owns(d.vn[i]) {
			return fmt.Errorf("%s: a vnode the actor does not own", row())
		}
		key, val := string(d.keys.At(i)), string(d.vals.At(i))
		if ops[i].IsInsert() {
			if _, dup := down[key]; dup {
				return fmt.Errorf("%s: inserts a pk already present downstream", row())
			}
			down[key] = val
			continue
		}
		switch old, ok := down[key]; {
		case !ok:
			return fmt.Errorf("%s: deletes a row missing downstream", row())
		case old != val:
			return fmt.Errorf("%s: deletes a row whose downstream value differs", row())
		}
		delete(down, key)
	}
	return nil
}

// bfRow is a row of an upstream chunk: a universe row, its op and visibility.
type bfRow struct {
	u   int
	op  vec.Op
	vis bool
}

// bfWorld is a table, the backfill's S2 columns and a universe of rows: every row the
// workload can write. Rows sharing a memcomparable pk are variants of one pk id (an
// update picks another variant).
type bfWorld struct {
	t       *schema.Table
	k       vec.Kernels
	s2      []int
	all     vec.Projection
	dec     *bfDecoder
	uni     arrow.RecordBatch // every universe row, S1 (for messages)
	vals    vec.Bytes         // S1 value of each universe row
	s2v     []string          // S2 value of each universe row (the S2 table's encoding)
	pkOf    []int             // universe row -> pk id
	keys    []string          // pk id -> memcomparable pk
	vn      []uint16          // pk id -> vnode
	vars    [][]int           // pk id -> its universe rows
	byVnode [][]int           // vnode -> pk ids in pk order
	idOf    map[string]int    // memcomparable pk -> pk id
	uOf     map[string]int    // S2 value -> a universe row that has it
	scratch vec.Bytes
	b1, b2  []vec.Builder // reused builders of every column and of S2
	sch1    *arrow.Schema
	sch2    *arrow.Schema
}

func newBFWorld(mem memory.Allocator, tab *schema.Table, k vec.Kernels, s2 []int, uni arrow.RecordBatch) (*bfWorld, error) {
	n := int(uni.NumRows())
	w := &bfWorld{t: tab, k: k, s2: s2, all: vec.Projection(vectest.AllColumns(tab)), dec: newBFDecoder(tab, s2),
		uni: uni, byVnode: make([][]int, tab.VnodeCount), idOf: map[string]int{}, uOf: map[string]int{}}
	uni.Retain()
	w.b1, w.b2 = vectest.ValueBuildersFor(mem, tab, w.all), vectest.ValueBuildersFor(mem, tab, s2)
	w.sch1, w.sch2 = tab.ArrowSchema(), tab.ProjectedArrowSchema(s2)
	ch := vectest.ChunkOf(mem, uni, make([]vec.Op, n), nil)
	defer ch.Release()
	var keys vec.Bytes
	keys.Reset()
	k.EncodeKeys(ch, &keys)
	w.vals.Reset()
	k.EncodeValues(ch, &w.vals)
	vns := make([]uint16, n)
	k.Vnodes(ch, vns)
	r2 := vectest.Project(tab, uni, s2)
	c2 := vectest.ChunkOf(mem, r2, make([]vec.Op, n), nil)
	r2.Release()
	defer c2.Release()
	if err := w.dec.rows(c2); err != nil {
		return nil, err
	}
	for u := 0; u < n; u++ {
		key := string(keys.At(u))
		if string(w.dec.keys.At(u)) != key || w.dec.vn[u] != vns[u] {
			return nil, fmt.Errorf("table %s row %s: the S2 table's key or vnode differs from the table's", tab.Name, vectest.FormatRow(uni, u))
		}
		id, ok := w.idOf[key]
		if !ok {
			id = len(w.keys)
			w.idOf[key] = id
			w.keys = append(w.keys, key)
			w.vn = append(w.vn, vns[u])
			w.vars = append(w.vars, nil)
			w.byVnode[vns[u]] = append(w.byVnode[vns[u]], id)
		} else if w.vn[id] != vns[u] {
			return nil, fmt.Errorf("table %s: rows %s and %s have one pk and vnodes %d and %d",
				tab.Name, vectest.FormatRow(uni, w.vars[id][0]), vectest.FormatRow(uni, u), w.vn[id], vns[u])
		}
		w.pkOf = append(w.pkOf, id)
		w.vars[id] = append(w.vars[id], u)
		s := string(w.dec.vals.At(u))
		w.s2v = append(w.s2v, s)
		if _, ok := w.uOf[s]; !ok {
			w.uOf[s] = u
		}
	}
	for _, ids := range w.byVnode {
		sort.Slice(ids, func(i, j int) bool { return w.keys[ids[i]] < w.keys[ids[j]] })
	}
	return w, nil
}

func (w *bfWorld) release() {
	w.uni.Release()
	vectest.ReleaseBuilders(w.b1)
	vectest.ReleaseBuilders(w.b2)
}

// decode builds a record of the projected columns (w.all or w.s2) from S1 values, with
// the world's reused builders.
func (w *bfWorld) decode(vals *vec.Bytes, proj vec.Projection) (arrow.RecordBatch, error) {
	bs, sch := w.b1, w.sch1
	if len(proj) != len(w.all) {
		bs, sch = w.b2, w.sch2
	}
	err := w.k.DecodeValues(vals, proj, bs)
	cols := make([]arrow.Array, len(bs))
	for i, b := range bs {
		cols[i] = b.NewArray()
	}
	defer func() {
		for _, a := range cols {
			a.Release()
		}
	}()
	if err != nil {
		return nil, err
	}
	for i, a := range cols {
		if a.Len() != vals.Len() {
			return nil, fmt.Errorf("column %d: decoded %d values of %d", i, a.Len(), vals.Len())
		}
	}
	return array.NewRecordBatch(sch, cols, int64(vals.Len())), nil
}

// chunk builds an upstream chunk (S1) of rows.
func (w *bfWorld) chunk(mem memory.Allocator, rows []bfRow) (*vec.Chunk, error) {
	w.scratch.Reset()
	ops := make([]vec.Op, len(rows))
	var vis []bool
	for i, r := range rows {
		w.scratch.Append(w.vals.At(r.u))
		ops[i] = r.op
		if !r.vis && vis == nil {
			vis = make([]bool, len(rows))
			for j := range vis {
				vis[j] = rows[j].vis
			}
		}
	}
	rec, err := w.decode(&w.scratch, w.all)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	return vectest.ChunkOf(mem, rec, ops, vis), nil
}

// batch builds a snapshot batch of vnode v: universe rows us (S2), in pk order.
func (w *bfWorld) batch(v uint16, us []int, end bool) (storage.SnapshotBatch, error) {
	b := storage.SnapshotBatch{Vnode: v, Rows: len(us), End: end}
	if len(us) == 0 {
		return b, nil
	}
	w.scratch.Reset()
	for _, u := range us {
		w.scratch.Append(w.vals.At(u))
	}
	rec, err := w.decode(&w.scratch, vec.Projection(w.s2))
	if err != nil {
		return b, err
	}
	b.Record = rec
	b.LastPK = []byte(w.keys[w.pkOf[us[len(us)-1]]])
	return b, nil
}

// showRow renders universe row u.
func (w *bfWorld) showRow(u int) string { return vectest.FormatRow(w.uni, u) }

// showS2 renders an S2 value through a universe row that has it.
func (w *bfWorld) showS2(val string) string {
	if u, ok := w.uOf[val]; ok {
		return w.showRow(u)
	}
	return fmt.Sprintf("S2 value %x (no such universe row)", val)
}

// bfRandomS2 picks S2: every pk column and a random subset of the others, in table order.
func bfRandomS2(rng *rand.Rand, tab *schema.Table) []int {
	var s2 []int
	for c := range tab.Columns {
		if tab.IsPK(c) || rng.IntN(2) == 0 {
			s2 = append(s2, c)
		}
	}
	return s2
}

// randomBFWorld builds a universe whose pks come from a small pool, so that rows
// collide and pks have several variants, and whose distribution keys often come from
// two "hot" pool rows, so that some vnodes hold many pks.
func randomBFWorld(rng *rand.Rand, mem memory.Allocator, tab *schema.Table, k vec.Kernels) (*bfWorld, error) {
	s2 := bfRandomS2(rng, tab)
	npk := 2 + rng.IntN(50)
	n := npk * (1 + rng.IntN(3))
	cand := vectest.RandomChunk(rng, mem, tab, npk, 0.2)
	defer cand.Release()
	body := vectest.RandomChunk(rng, mem, tab, n, 0.3)
	defer body.Release()
	hot := [2]int64{rng.Int64N(int64(npk)), rng.Int64N(int64(npk))}
	ob, db := array.NewInt64Builder(mem), array.NewInt64Builder(mem)
	for i := 0; i < n; i++ {
		o := rng.Int64N(int64(npk))
		d := o
		if rng.IntN(5) < 2 {
			d = hot[rng.IntN(2)]
		}
		ob.Append(o)
		db.Append(d)
	}
	own, dk := ob.NewArray(), db.NewArray()
	ob.Release()
	db.Release()
	defer own.Release()
	defer dk.Release()
	ctx := compute.WithAllocator(context.Background(), mem)
	cols := make([]arrow.Array, len(tab.Columns))
	defer func() {
		for _, a := range cols {
			if a != nil {
				a.Release()
			}
		}
	}()
	for c := range tab.Columns {
		idx := own
		switch {
		case slices.Contains(tab.DistKey, c):
			idx = dk
		case tab.IsPK(c):
		default:
			cols[c] = body.Record().Column(c)
			cols[c].Retain()
			continue
		}
		a, err := compute.TakeArray(ctx, cand.Record().Column(c), idx)
		if err != nil {
			return nil, fmt.Errorf("take: %w", err)
		}
		cols[c] = a
	}
	rec := array.NewRecordBatch(tab.ArrowSchema(), cols, int64(n))
	defer rec.Release()
	return newBFWorld(mem, tab, k, s2, rec)
}

// bfKVTable is a table built at run time (generic kernels): pk (g, k DESC NULLS FIRST)
// distributed by g alone, so that a vnode holds many pks.
func bfKVTable(vnodes int) *schema.Table {
	t := &schema.Table{
		Name: "bf_kv",
		Columns: []schema.Column{
			{Name: "g", Type: schema.Type{Kind: schema.Int16}},
			{Name: "k", Type: schema.Type{Kind: schema.Int32}, Nullable: true},
			{Name: "v", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
			{Name: "w", Type: schema.Type{Kind: schema.Float64}, Nullable: true},
		},
		PK:         []schema.KeyColumn{{Column: 0}, {Column: 1, Desc: true, NullsFirst: true}},
		DistKey:    []int{0},
		VnodeCount: vnodes,
	}
	if err := t.Validate(); err != nil {
		panic(err)
	}
	return t
}

// bfTable picks the seed's table: the kv table, a random table (both with generic
// kernels) or a generated test table.
func bfTable(rng *rand.Rand, seed uint64) (*schema.Table, vec.Kernels) {
	var tab *schema.Table
	switch r := rng.IntN(10); {
	case r < 3:
		tab = bfKVTable([]int{1, 4, 16, 256}[rng.IntN(4)])
	case r < 6:
		tab = vectest.RandomTable(rng, fmt.Sprintf("bf_random_%d", seed))
		tab.VnodeCount = []int{1, 2, 8, 64, 256}[rng.IntN(5)]
		if err := tab.Validate(); err != nil {
			panic(err)
		}
	default:
		gens := []func() *schema.Table{testschemas.T00Table, testschemas.T01Table, testschemas.T02Table,
			testschemas.T05Table, testschemas.T13Table, testschemas.P1Table, testschemas.P2Table, testschemas.P3Table}
		tab = gens[rng.IntN(len(gens))]()
	}
	return tab, vec.For(tab)
}

// ---- the simulation ----------------------------------------------------------------

// bfCounters are a run's figures (docs/testing.md): what happened, and "sometimes" counters
// proving that each scenario did.
type bfCounters struct {
	Seeds, GeneratedSeeds, GenericSeeds int
	Epochs, BackfillEpochs              int
	Barriers, Checkpoints               int
	UpstreamRows, SnapshotRows          int
	InvisibleRows, RangeDeletes         int
	SpilledChunks                       int // upstream chunks the epoch buffer spilled to disk
	OneRowReads                         int
	Crashes, Rescales, PausedEpochs     int
	FinalBarriers                       int
	Compared                            int // rows compared by the I2 and I1 checks

	// sometimes
	UpdateStraddle     int // an update pair split by a position (repaired into Delete or Insert)
	PKChangeAcross     int // a pk-changing Delete+Insert whose rows the marker decided differently
	FinishAlone        int // a vnode Completed while another vnode of its actor is not
	OneRowEnd          int // an at-least-one-row read that ended the actor's last pending vnode
	CrashMidBackfill   int // a crash while an actor is still backfilling
	CrashBeforeCommit  int // a crash after a checkpoint barrier, before its commit
	RescaleInProgress  int // a rescale that moves an InProgress vnode to another bitmap
	OnlyDoneAndNew     int // an actor with Completed and NotStarted vnodes only, after a rescale
	EmptyActor         int // an actor without vnodes after a rescale
	NoProgressAhead    int // an epoch without snapshot rows while keys above a position change
	AboveNonCheckpoint int // changes above a position carried over a non-checkpoint barrier
	DeletesInRescale   int // deletes in the epoch of a rescale, mid-backfill
	PausedWithChanges  int // a paused epoch with upstream changes while backfilling
}

type bfPair struct {
	update   bool // UpdateDelete+UpdateInsert (else Delete+Insert)
	from, to int  // pk ids
}

type bfCheckpoint struct {
	model  map[int]int
	down   map[string]string
	prog   []storage.VnodeProgress
	assign [][]uint16
}

type bfActor struct {
	id      int
	core    *backfillCore
	owned   []uint16    // ascending
	rep     map[int]int // the replicated table's view (owned vnodes): pk id -> universe row
	reads   int         // snapshot batches left this epoch
	open    []uint16    // vnodes whose read is open this epoch and not ended
	inOrder bool        // one worker: vnodes read one after the other
	rows    int64       // snapshot rows fed this epoch
	above   bool        // a change above an InProgress position this epoch
	changed bool        // an upstream change this epoch
}

type bfSim struct {
	t     testing.TB
	seed  uint64
	trace bool
	rng   *rand.Rand
	mem   *bfAlloc
	w     *bfWorld
	cnt   *bfCounters

	job     []bool   // per vnode: the backfill covers it
	jobList []uint16 // ascending
	owner   []int    // per vnode: the index of the actor owning it, -1 outside the job
	actors  []*bfActor
	ids     []int // every pk id

	model map[int]int             // the upstream table now: pk id -> universe row
	down  map[string]string       // the MV: memcomparable pk -> S2 value
	prog  []storage.VnodeProgress // the progress table: the rows persisted
	exp   []storage.VnodeProgress // each vnode's progress now, from the snapshot rows fed
	ck    bfCheckpoint            // the last committed checkpoint

	start    []vec.BackfillState // states at the epoch's start
	pairs    []bfPair            // pk-changing updates this epoch
	deletes  int                 // deletes in job vnodes this epoch
	hot      []int               // pk ids written more often
	spill    int64               // the epoch buffer's memory budget (0: the default)
	spillDir string
	batchMax int // rows per snapshot batch
	readMax  int // snapshot batches per actor and epoch
	ckEvery  int
}

func (s *bfSim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d, table %s (%d vnodes, %d pks, S2 %v, generated kernels %v): %s\nrerun: go test ./executors -run '^TestBackfillCoreRandom$' -seed=%d -v",
		s.seed, s.w.t.Name, s.w.t.VnodeCount, len(s.w.keys), s.w.s2, s.w.k.Generated(), fmt.Sprintf(format, args...), s.seed)
}

func (s *bfSim) logf(format string, args ...any) {
	if s.trace {
		s.t.Helper()
		s.t.Logf(format, args...)
	}
}

func runBackfillSim(t testing.TB, seed uint64, trace bool, spillDir string, cnt *bfCounters) {
	rng := vectest.NewRand(seed)
	mem := newBFAlloc()
	tab, k := bfTable(rng, seed)
	w, err := randomBFWorld(rng, mem, tab, k)
	if err != nil {
		t.Fatalf("seed %d: table %s: %v", seed, tab.Name, err)
	}
	s := &bfSim{t: t, seed: seed, trace: trace, rng: rng, mem: mem, w: w, cnt: cnt, spillDir: spillDir,
		batchMax: []int{1, 2, 3, 8, 64}[rng.IntN(5)], readMax: []int{1, 2, 4, 16}[rng.IntN(4)], ckEvery: 1 + rng.IntN(3)}
	cnt.Seeds++
	if k.Generated() {
		cnt.GeneratedSeeds++
	} else {
		cnt.GenericSeeds++
	}
	if rng.IntN(3) == 0 {
		s.spill = 1 + rng.Int64N(4096) // a few chunks in memory, the rest spilled
	}
	s.setup()
	for i, n := 0, 4+rng.IntN(30); i < n && !s.allDone(); i++ {
		s.epoch(false, false)
	}
	s.finish()
	s.stop()
	w.release()
	if n := mem.n.Load(); n != 0 {
		s.fatalf("%d bytes of Arrow memory not released", n)
	}
}

func (s *bfSim) setup() {
	w, rng := s.w, s.rng
	count := w.t.VnodeCount
	s.job = make([]bool, count)
	full := rng.IntN(2) == 0
	p := rng.Float64()
	for v := range s.job {
		s.job[v] = full || rng.Float64() < p
	}
	if !slices.Contains(s.job, true) {
		s.job[rng.IntN(count)] = true
	}
	for v, in := range s.job {
		if in {
			s.jobList = append(s.jobList, uint16(v))
		}
	}
	for id := range w.keys {
		s.ids = append(s.ids, id)
	}
	for range 1 + rng.IntN(3) {
		s.hot = append(s.hot, rng.IntN(len(w.keys)))
	}
	s.model = map[int]int{}
	fill := rng.Float64()
	for id := range w.keys {
		if rng.Float64() < fill {
			s.model[id] = s.variant(id)
		}
	}
	s.down = map[string]string{}
	s.prog = make([]storage.VnodeProgress, count)
	assign := make([][]uint16, 1+rng.IntN(3))
	for _, v := range s.jobList {
		i := rng.IntN(len(assign))
		assign[i] = append(assign[i], v)
	}
	s.ck = bfCheckpoint{model: bfClone(s.model), down: bfClone(s.down), prog: cloneProgress(s.prog), assign: assign}
	s.logf("table %s: %d vnodes, job %d vnodes, %d pks, %d rows, %d actors", w.t.Name, count, len(s.jobList), len(w.keys), len(s.model), len(assign))
	s.begin(assign)
}

func bfClone[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// cloneProgress copies progress rows; their positions are shared, as the simulation
// never writes into one (it replaces them).
func cloneProgress(p []storage.VnodeProgress) []storage.VnodeProgress { return slices.Clone(p) }

func (s *bfSim) variant(id int) int {
	vs := s.w.vars[id]
	return vs[s.rng.IntN(len(vs))]
}

// begin creates one actor per bitmap of assign, each from the persisted progress of its
// vnodes, with a replicated view of the committed upstream (the model now).
func (s *bfSim) begin(assign [][]uint16) {
	w := s.w
	count := w.t.VnodeCount
	s.owner = make([]int, count)
	for v := range s.owner {
		s.owner[v] = -1
	}
	s.exp = cloneProgress(s.prog)
	s.actors = nil
	for i, vs := range assign {
		vs = slices.Clone(vs)
		slices.Sort(vs)
		pos := vec.NewPositions(count)
		rows := make([]int64, count)
		for _, v := range vs {
			s.owner[v] = i
			pos.State[v] = s.prog[v].State
			pos.Pos[v] = bytes.Clone(s.prog[v].Pos)
			rows[v] = s.prog[v].Rows
		}
		core, err := newBackfillCore(w.t, w.k, w.s2, vnode.NewBitmap(count, vs...), pos, rows, s.mem)
		if err != nil {
			s.fatalf("actor %d: new core: %v", i, err)
		}
		if s.spill > 0 {
			core.setBuffer(s.spill, s.spillDir)
		}
		s.actors = append(s.actors, &bfActor{id: i, core: core, owned: vs, rep: map[int]int{}})
	}
	for id, u := range s.model {
		if o := s.owner[w.vn[id]]; o >= 0 {
			s.actors[o].rep[id] = u
		}
	}
	for _, a := range s.actors {
		allDone := true
		for _, v := range a.owned {
			allDone = allDone && s.exp[v].State == vec.Completed
		}
		if (a.core.Phase() == done) != allDone {
			s.fatalf("actor %d (vnodes %v) starts in phase %s; every vnode Completed: %v", a.id, a.owned, a.core.Phase(), allDone)
		}
		s.checkCore(a, "new core")
	}
}

func (s *bfSim) allDone() bool {
	for _, a := range s.actors {
		if a.core.Phase() != done {
			return false
		}
	}
	return true
}

func (s *bfSim) stop() {
	for _, a := range s.actors {
		s.cnt.SpilledChunks += int(a.core.buf.spills)
		a.core.release()
	}
	s.actors = nil
}

func (s *bfSim) assignment() [][]uint16 {
	out := make([][]uint16, len(s.actors))
	for i, a := range s.actors {
		out[i] = slices.Clone(a.owned)
	}
	return out
}

// checkCore checks the core's pending vnodes, positions, rows and stats against exp.
func (s *bfSim) checkCore(a *bfActor, when string) {
	s.t.Helper()
	c := a.core
	got := c.pending()
	var rows int64
	completed, i := 0, 0
	for _, v := range a.owned {
		e := s.exp[v]
		rows += e.Rows
		if c.pos.State[v] != e.State || c.rows[v] != e.Rows || (e.Rows > 0 && !bytes.Equal(c.pos.Pos[v], e.Pos)) {
			s.fatalf("%s: actor %d vnode %d: core has %s{pos %x, rows %d}, want %s", when, a.id, v, c.pos.State[v], c.pos.Pos[v], c.rows[v], e)
		}
		if e.State == vec.Completed {
			completed++
			continue
		}
		// NotStarted: read the whole vnode; InProgress: read after the position.
		if i >= len(got) || got[i].Vnode != v || !bytes.Equal(got[i].After, e.Pos) || (got[i].After == nil) != (e.State == vec.NotStarted) {
			s.fatalf("%s: actor %d: pending %v, want vnode %d (%s) at index %d", when, a.id, got, v, e, i)
		}
		i++
	}
	if i != len(got) {
		s.fatalf("%s: actor %d: pending %v lists %d vnodes, want %d", when, a.id, got, len(got), i)
	}
	gr, gc, gn := c.stats()
	if gr != rows || gc != completed || gn != len(a.owned) {
		s.fatalf("%s: actor %d: stats rows %d, completed %d of %d; want %d, %d of %d", when, a.id, gr, gc, gn, rows, completed, len(a.owned))
	}
}

// epoch runs one epoch and its barrier. final: read every pending vnode to its end, no
// pause, crash or rescale; passThrough: the same, once every actor is done.
func (s *bfSim) epoch(final, passThrough bool) {
	rng := s.rng
	s.cnt.Epochs++
	calm := final || passThrough
	paused := !calm && rng.IntN(7) == 0
	s.start = s.start[:0]
	for _, e := range s.exp {
		s.start = append(s.start, e.State)
	}
	s.pairs, s.deletes = s.pairs[:0], 0
	anyBackfilling := false
	for _, a := range s.actors {
		a.reads, a.open, a.rows, a.above, a.changed = 0, a.open[:0], 0, false, false
		if a.core.Phase() != backfilling {
			continue
		}
		anyBackfilling = true
		if paused {
			continue
		}
		for _, vs := range a.core.pending() {
			a.open = append(a.open, vs.Vnode)
		}
		a.inOrder = rng.IntN(2) == 0
		switch {
		case final:
			a.reads = math.MaxInt
		case rng.IntN(5) == 0:
			a.reads = 0 // no snapshot progress this epoch
		default:
			a.reads = 1 + rng.IntN(s.readMax)
		}
	}
	if anyBackfilling {
		s.cnt.BackfillEpochs++
	}
	if paused && anyBackfilling {
		s.cnt.PausedEpochs++
	}
	nUp := rng.IntN(4)
	if rng.IntN(8) == 0 {
		nUp += 4
	}
	crashAt := -1
	if !calm && rng.IntN(10) == 0 {
		crashAt = rng.IntN(nUp + 4)
	}
	for ev := 0; ; ev++ {
		if ev == crashAt {
			s.crash("mid-epoch")
			return
		}
		var ready []*bfActor
		for _, a := range s.actors {
			if a.reads > 0 && len(a.open) > 0 {
				ready = append(ready, a)
			}
		}
		if nUp == 0 && len(ready) == 0 {
			break
		}
		if nUp > 0 && (len(ready) == 0 || rng.IntN(len(ready)+1) == 0) {
			nUp--
			s.upstream()
			continue
		}
		a := ready[rng.IntN(len(ready))]
		a.reads--
		i := 0
		if !a.inOrder {
			i = rng.IntN(len(a.open))
		}
		if s.feed(a, a.open[i], 1+rng.IntN(s.batchMax), "snapshot") {
			a.open = slices.Delete(a.open, i, i+1)
		}
	}
	if paused && anyBackfilling {
		for _, a := range s.actors {
			if a.changed && a.core.Phase() == backfilling {
				s.cnt.PausedWithChanges++
				break
			}
		}
	}
	ckpt := calm || rng.IntN(s.ckEvery) == 0
	s.barrier(paused, final, ckpt)
	if !ckpt {
		return
	}
	if !calm && rng.IntN(25) == 0 {
		s.cnt.CrashBeforeCommit++
		s.crash("after a checkpoint barrier, before its commit")
		return
	}
	s.checkpoint()
	if !calm && rng.IntN(5) == 0 {
		s.rescale()
	}
}

// next returns the next rows of vnode v after its position in the actor's replicated
// view (at most n), and whether the vnode has no row after them.
func (s *bfSim) next(a *bfActor, v uint16, n int) (ids []int, end bool) {
	list := s.w.byVnode[v]
	i := 0
	if e := s.exp[v]; e.State == vec.InProgress {
		i = sort.Search(len(list), func(j int) bool { return s.w.keys[list[j]] > string(e.Pos) })
	}
	for ; i < len(list); i++ {
		id := list[i]
		if _, ok := a.rep[id]; !ok {
			continue
		}
		if len(ids) == n {
			return ids, false
		}
		ids = append(ids, id)
	}
	return ids, true
}

// feed hands the core a snapshot batch of at most n rows of vnode v, as the snapshot
// reader would, and reports whether it ended the vnode.
func (s *bfSim) feed(a *bfActor, v uint16, n int, what string) bool {
	ids, end := s.next(a, v, n)
	us := make([]int, len(ids))
	for i, id := range ids {
		us[i] = a.rep[id]
	}
	b, err := s.w.batch(v, us, end)
	if err != nil {
		s.fatalf("batch: %v", err)
	}
	s.logf("  %s: actor %d vnode %d: %d rows, end %v", what, a.id, v, len(ids), end)
	out, err := a.core.snapshot(b)
	if err != nil {
		s.fatalf("%s: actor %d vnode %d: %v", what, a.id, v, err)
	}
	e := &s.exp[v]
	if len(ids) > 0 {
		e.State, e.Pos, e.Rows = vec.InProgress, []byte(s.w.keys[ids[len(ids)-1]]), e.Rows+int64(len(ids))
	}
	if end {
		e.State = vec.Completed
	}
	a.rows += int64(len(ids))
	s.cnt.SnapshotRows += len(ids)
	s.emit(a, out, what)
	if a.core.epochRows != a.rows {
		s.fatalf("%s: actor %d: epochRows %d, want %d", what, a.id, a.core.epochRows, a.rows)
	}
	allDone := true
	for _, v := range a.owned {
		allDone = allDone && s.exp[v].State == vec.Completed
	}
	if want := map[bool]backfillPhase{false: backfilling, true: finishing}[allDone]; a.core.Phase() != want {
		s.fatalf("%s: actor %d vnode %d: phase %s, want %s", what, a.id, v, a.core.Phase(), want)
	}
	return end
}

// emit applies what actor a emitted to the MV (checking I3) and releases it.
func (s *bfSim) emit(a *bfActor, out []*vec.Chunk, what string) {
	s.t.Helper()
	for i, ch := range out {
		if err := bfApply(s.down, s.w.dec, ch, func(v uint16) bool { return s.owner[v] == a.id }); err != nil {
			s.fatalf("%s: actor %d, output chunk %d of %d: %v", what, a.id, i, len(out), err)
		}
		ch.Release()
	}
}

// upstream makes a chunk of changes, applies it to the model, and hands each actor its
// rows (hash dispatch by vnode).
func (s *bfSim) upstream() {
	rows := s.changes()
	per := make([][]bfRow, len(s.actors))
	for _, r := range rows {
		if o := s.owner[s.w.vn[s.w.pkOf[r.u]]]; o >= 0 {
			per[o] = append(per[o], r)
		}
	}
	for _, i := range s.rng.Perm(len(s.actors)) {
		a := s.actors[i]
		if len(per[i]) == 0 && s.rng.IntN(4) != 0 {
			continue // dispatchers send no empty chunks, mostly
		}
		ch, err := s.w.chunk(s.mem, per[i])
		if err != nil {
			s.fatalf("chunk: %v", err)
		}
		s.cnt.UpstreamRows += len(per[i])
		s.logf("  upstream: actor %d: %d rows", i, len(per[i]))
		backfill := a.core.Phase() == backfilling
		out := a.core.upstream(ch)
		if backfill && len(out) > 0 {
			s.fatalf("upstream: actor %d emitted %d chunks while backfilling (must wait for the barrier)", i, len(out))
		}
		s.emit(a, out, "upstream")
	}
}

// note records a change of pk id for the counters.
func (s *bfSim) note(id int, op vec.Op) {
	v := s.w.vn[id]
	o := s.owner[v]
	if o < 0 {
		return
	}
	a := s.actors[o]
	a.changed = true
	if !op.IsInsert() {
		s.deletes++
	}
	if e := s.exp[v]; e.State == vec.InProgress && s.w.keys[id] > string(e.Pos) {
		a.above = true
	}
}

// changes returns a random chunk of changes that is a valid changelog against the
// model, and applies it to the model: inserts, deletes, updates keeping the pk, updates
// changing it within a vnode (an update pair) or anywhere (Delete+Insert), runs of
// deletes of consecutive keys, and invisible junk rows.
func (s *bfSim) changes() []bfRow {
	rng := s.rng
	var out []bfRow
	add := func(u int, op vec.Op) {
		out = append(out, bfRow{u: u, op: op, vis: true})
		s.note(s.w.pkOf[u], op)
	}
	junk := func() {
		out = append(out, bfRow{u: rng.IntN(len(s.w.pkOf)), op: vec.Op(rng.IntN(4))})
		s.cnt.InvisibleRows++
	}
	n := 1 + rng.IntN(6)
	if rng.IntN(8) == 0 {
		n += rng.IntN(24)
	}
	for range n {
		switch r := rng.IntN(100); {
		case r < 24: // insert
			if p, ok := s.pick(false, -1); ok {
				u := s.variant(p)
				s.model[p] = u
				add(u, vec.Insert)
			}
		case r < 38: // delete
			if p, ok := s.pick(true, -1); ok {
				add(s.model[p], vec.Delete)
				delete(s.model, p)
			}
		case r < 54: // update keeping the pk
			if p, ok := s.pick(true, -1); ok {
				u := s.variant(p)
				add(s.model[p], vec.UpdateDelete)
				if rng.IntN(6) == 0 {
					junk()
				}
				add(u, vec.UpdateInsert)
				s.model[p] = u
			}
		case r < 68: // update pair changing the pk within a vnode
			p, ok := s.pick(true, -1)
			if !ok {
				continue
			}
			q, ok := s.pick(false, int(s.w.vn[p]))
			if !ok {
				continue
			}
			u := s.variant(q)
			add(s.model[p], vec.UpdateDelete)
			if rng.IntN(6) == 0 {
				junk()
			}
			add(u, vec.UpdateInsert)
			delete(s.model, p)
			s.model[q] = u
			s.pairs = append(s.pairs, bfPair{update: true, from: p, to: q})
		case r < 80: // pk change as Delete + Insert (how a dispatcher sends it across vnodes)
			p, ok := s.pick(true, -1)
			if !ok {
				continue
			}
			q, ok := s.pick(false, -1)
			if !ok {
				continue
			}
			u := s.variant(q)
			add(s.model[p], vec.Delete)
			delete(s.model, p)
			add(u, vec.Insert)
			s.model[q] = u
			s.pairs = append(s.pairs, bfPair{from: p, to: q})
		case r < 86: // a run of deletes of consecutive keys
			p, ok := s.pick(true, -1)
			if !ok {
				continue
			}
			list := s.w.byVnode[s.w.vn[p]]
			i := slices.Index(list, p)
			run := 2 + rng.IntN(len(list)+1)
			deleted := 0
			for ; i < len(list) && deleted < run; i++ {
				if u, ok := s.model[list[i]]; ok {
					add(u, vec.Delete)
					delete(s.model, list[i])
					deleted++
				}
			}
			if deleted > 1 {
				s.cnt.RangeDeletes++
			}
		case r < 93:
			junk()
		default: // insert
			if p, ok := s.pick(false, -1); ok {
				u := s.variant(p)
				s.model[p] = u
				add(u, vec.Insert)
			}
		}
	}
	return out
}

// pick returns a pk id present in the model (existing) or absent from it, in vnode vn
// when vn >= 0: often one around an InProgress position or a hot one.
func (s *bfSim) pick(existing bool, vn int) (int, bool) {
	rng := s.rng
	ok := func(id int) bool {
		_, in := s.model[id]
		return in == existing && (vn < 0 || int(s.w.vn[id]) == vn)
	}
	var cands []int
	switch rng.IntN(3) {
	case 0:
		cands = s.nearPositions(vn)
	case 1:
		cands = s.hot
	}
	for range 4 {
		if len(cands) == 0 {
			break
		}
		if id := cands[rng.IntN(len(cands))]; ok(id) {
			return id, true
		}
	}
	list := s.ids
	if vn >= 0 {
		list = s.w.byVnode[vn]
	}
	if len(list) == 0 {
		return 0, false
	}
	start := rng.IntN(len(list))
	for i := range list {
		if id := list[(start+i)%len(list)]; ok(id) {
			return id, true
		}
	}
	return 0, false
}

// nearPositions returns the pk ids around the position of an InProgress vnode (vn when
// vn >= 0, else a random one): the two at or below it and the two above.
func (s *bfSim) nearPositions(vn int) []int {
	v := -1
	if vn >= 0 {
		if s.exp[vn].State == vec.InProgress {
			v = vn
		}
	} else if n := len(s.jobList); n > 0 {
		start := s.rng.IntN(n)
		for i := range n {
			if c := s.jobList[(start+i)%n]; s.exp[c].State == vec.InProgress {
				v = int(c)
				break
			}
		}
	}
	if v < 0 {
		return nil
	}
	list := s.w.byVnode[v]
	pos := string(s.exp[v].Pos)
	i := sort.Search(len(list), func(j int) bool { return s.w.keys[list[j]] > pos })
	return list[max(0, i-2):min(len(list), i+2)]
}

// barrier ends the epoch at every actor: the at-least-one-row read (as the executor does
// it), the core's barrier, the MV, replicated view and progress table updated, then the
// checks: progress, replication, I2.
func (s *bfSim) barrier(paused, final, ckpt bool) {
	s.cnt.Barriers++
	if final {
		s.cnt.FinalBarriers++
	}
	s.logf("barrier (paused %v, checkpoint %v)", paused, ckpt)
	for _, a := range s.actors {
		nothing := a.core.Phase() == backfilling && a.core.epochRows == 0
		if nothing && a.above {
			s.cnt.NoProgressAhead++
		}
		if a.above && !ckpt {
			s.cnt.AboveNonCheckpoint++
		}
		// At least one row when the snapshot gave nothing, unless paused or no token.
		if nothing && !paused && (final || s.rng.IntN(4) != 0) {
			vs, ok := a.core.firstPending()
			if p := a.core.pending(); ok != (len(p) > 0) || (ok && (vs.Vnode != p[0].Vnode || !bytes.Equal(vs.After, p[0].After))) {
				s.fatalf("actor %d: firstPending %v %v, want the first of %v", a.id, vs, ok, p)
			}
			if ok {
				s.cnt.OneRowReads++
				s.feed(a, vs.Vnode, 1, "at least one row")
				if a.core.Phase() == finishing {
					s.cnt.OneRowEnd++
				}
			}
		}
		wasBackfilling := a.core.Phase() == backfilling
		emit, rep, prog, err := a.core.barrier()
		if err != nil {
			s.fatalf("barrier: actor %d: %v", a.id, err)
		}
		if !wasBackfilling && (len(emit) > 0 || len(rep) > 0) {
			s.fatalf("barrier: actor %d in phase finishing or done returned %d chunks to emit and %d to replicate", a.id, len(emit), len(rep))
		}
		s.emit(a, emit, "barrier")
		for i, ch := range rep {
			if err := s.replicate(a, ch); err != nil {
				s.fatalf("barrier: actor %d: replicated chunk %d of %d: %v", a.id, i, len(rep), err)
			}
			ch.Release()
		}
		if wasBackfilling {
			s.checkReplicated(a)
		}
		s.progress(a, prog)
		allDone := true
		newlyDone := false
		for _, v := range a.owned {
			allDone = allDone && s.exp[v].State == vec.Completed
			newlyDone = newlyDone || (s.exp[v].State == vec.Completed && s.start[v] != vec.Completed)
		}
		if newlyDone && !allDone {
			s.cnt.FinishAlone++
		}
		if want := map[bool]backfillPhase{false: backfilling, true: done}[allDone]; a.core.Phase() != want {
			s.fatalf("barrier: actor %d: phase %s, want %s", a.id, a.core.Phase(), want)
		}
		s.checkCore(a, "after barrier")
	}
	for _, p := range s.pairs {
		kf, okf := s.keeps(p.from)
		kt, okt := s.keeps(p.to)
		if okf && okt && kf != kt {
			if p.update {
				s.cnt.UpdateStraddle++
			} else {
				s.cnt.PKChangeAcross++
			}
		}
	}
	s.checkI2("after barrier")
}

// keeps is the marking oracle: whether a change of pk id is forwarded at the barrier
// (its vnode Completed, or InProgress at or past it); false for vnodes outside the job.
func (s *bfSim) keeps(id int) (keep, inJob bool) {
	v := s.w.vn[id]
	if !s.job[v] {
		return false, false
	}
	e := s.exp[v]
	return e.State == vec.Completed || (e.State == vec.InProgress && s.w.keys[id] <= string(e.Pos)), true
}

// replicate applies a chunk the core replicates to the actor's replicated view, which
// must stay a valid multiset.
func (s *bfSim) replicate(a *bfActor, ch *vec.Chunk) error {
	if err := vectest.ChangelogError(ch); err != nil {
		return fmt.Errorf("not a changelog: %w", err)
	}
	d := s.w.dec
	if err := d.rows(ch); err != nil {
		return err
	}
	ops := ch.Ops()
	for i := 0; i < ch.NumRows(); i++ {
		if !ch.Visible(i) {
			continue
		}
		id, ok := s.w.idOf[string(d.keys.At(i))]
		if !ok {
			return fmt.Errorf("row %d %s: no such pk", i, vectest.FormatRow(ch.Record(), i))
		}
		u, ok := s.w.uOf[string(d.vals.At(i))]
		if !ok {
			return fmt.Errorf("row %d %s: no such row", i, vectest.FormatRow(ch.Record(), i))
		}
		if s.owner[s.w.vn[id]] != a.id {
			return fmt.Errorf("row %d %s: vnode %d is not the actor's", i, vectest.FormatRow(ch.Record(), i), s.w.vn[id])
		}
		cur, present := a.rep[id]
		if ops[i].IsInsert() {
			if present {
				return fmt.Errorf("row %d %v %s: inserts a pk already replicated", i, ops[i], s.w.showRow(u))
			}
			a.rep[id] = u
		} else {
			if !present || s.w.s2v[cur] != s.w.s2v[u] {
				return fmt.Errorf("row %d %v %s: deletes a row not replicated", i, ops[i], s.w.showRow(u))
			}
			delete(a.rep, id)
		}
	}
	return nil
}

// checkReplicated checks that the actor's replicated view (committed + replicated
// epochs, what its next snapshot reads) is the upstream now, on its vnodes.
func (s *bfSim) checkReplicated(a *bfActor) {
	n := 0
	for id, u := range s.model {
		if s.owner[s.w.vn[id]] != a.id {
			continue
		}
		n++
		if r, ok := a.rep[id]; !ok || s.w.s2v[r] != s.w.s2v[u] {
			s.fatalf("actor %d: the replicated view lacks %s (vnode %d): the barrier did not replicate the whole buffer", a.id, s.w.showRow(u), s.w.vn[id])
		}
	}
	if n != len(a.rep) {
		for id, u := range a.rep {
			if _, ok := s.model[id]; !ok {
				s.fatalf("actor %d: the replicated view holds %s, deleted upstream", a.id, s.w.showRow(u))
			}
		}
	}
}

// progress checks the progress rows a barrier returned and writes them to the progress
// table: only owned vnodes, each at most once, only when changed, of a valid shape,
// equal to what the snapshot rows fed imply, never backwards; afterwards every owned
// vnode's persisted row is its progress.
func (s *bfSim) progress(a *bfActor, ups []progressUpdate) {
	seen := map[uint16]bool{}
	for _, up := range ups {
		v, p := up.Vnode, up.Progress
		if int(v) >= len(s.owner) || s.owner[v] != a.id {
			s.fatalf("actor %d: progress row of vnode %d, which it does not own", a.id, v)
		}
		if seen[v] {
			s.fatalf("actor %d: two progress rows of vnode %d in one barrier", a.id, v)
		}
		seen[v] = true
		switch p.State {
		case vec.InProgress:
			if p.Pos == nil || p.Rows <= 0 {
				s.fatalf("actor %d vnode %d: InProgress progress row without a position or rows: %s", a.id, v, p)
			}
		case vec.Completed:
			if (p.Rows == 0) != (p.Pos == nil) {
				s.fatalf("actor %d vnode %d: Completed progress row must have a position exactly when it has rows: %s", a.id, v, p)
			}
		default:
			s.fatalf("actor %d vnode %d: progress row in state %s", a.id, v, p.State)
		}
		if !p.Equal(s.exp[v]) {
			s.fatalf("actor %d vnode %d: progress row %s, want %s", a.id, v, p, s.exp[v])
		}
		old := s.prog[v]
		if p.Equal(old) {
			s.fatalf("actor %d vnode %d: progress row %s written without a change", a.id, v, p)
		}
		if p.State < old.State || p.Rows < old.Rows || (old.Pos != nil && bytes.Compare(p.Pos, old.Pos) < 0) {
			s.fatalf("actor %d vnode %d: progress went backwards: %s -> %s", a.id, v, old, p)
		}
		s.prog[v] = storage.VnodeProgress{State: p.State, Pos: bytes.Clone(p.Pos), Rows: p.Rows}
	}
	for _, v := range a.owned {
		if !s.prog[v].Equal(s.exp[v]) {
			s.fatalf("actor %d vnode %d: persisted progress %s, want %s (a change was not reported)", a.id, v, s.prog[v], s.exp[v])
		}
	}
}

// checkI2 checks invariant I2 on every actor (I1 once every vnode is Completed): for
// every vnode of the job, the MV holds exactly the upstream rows at or below its
// position (all of them once Completed, none while NotStarted), and nothing else.
func (s *bfSim) checkI2(when string) {
	n := 0
	for id, u := range s.model {
		in, inJob := s.keeps(id)
		if !inJob || !in {
			continue
		}
		n++
		if got, ok := s.down[s.w.keys[id]]; !ok || got != s.w.s2v[u] {
			s.fatalf("%s: I2 violated:\n%s", when, s.diff())
		}
	}
	s.cnt.Compared += len(s.down)
	if n != len(s.down) {
		s.fatalf("%s: I2 violated:\n%s", when, s.diff())
	}
}

// diff lists the differences between the MV and what I2 expects.
func (s *bfSim) diff() string {
	var b strings.Builder
	lines := 0
	line := func(format string, args ...any) {
		if lines < 20 {
			fmt.Fprintf(&b, "\t"+format+"\n", args...)
		}
		lines++
	}
	desc := func(id int) string {
		v := s.w.vn[id]
		return fmt.Sprintf("vnode %d (%s, actor %d)", v, s.exp[v], s.owner[v])
	}
	for id, u := range s.model {
		in, inJob := s.keeps(id)
		got, ok := s.down[s.w.keys[id]]
		switch {
		case inJob && in && !ok:
			line("missing %s in %s", s.w.showRow(u), desc(id))
		case inJob && in && got != s.w.s2v[u]:
			line("%s in %s, want %s", s.w.showS2(got), desc(id), s.w.showRow(u))
		case ok && !(inJob && in):
			line("%s in %s, beyond the position", s.w.showS2(got), desc(id))
		}
	}
	for key, got := range s.down {
		id, ok := s.w.idOf[key]
		if !ok {
			line("%s: pk not in the universe", s.w.showS2(got))
			continue
		}
		if _, ok := s.model[id]; !ok {
			line("%s in %s, deleted upstream", s.w.showS2(got), desc(id))
		}
	}
	if lines > 20 {
		fmt.Fprintf(&b, "\t... %d more\n", lines-20)
	}
	return b.String()
}

func (s *bfSim) checkpoint() {
	s.cnt.Checkpoints++
	s.ck = bfCheckpoint{model: bfClone(s.model), down: bfClone(s.down), prog: cloneProgress(s.prog), assign: s.assignment()}
}

// crash drops the actors and restores the last checkpoint: the upstream, the MV and
// the progress table roll back together; the actors restart from the persisted progress.
func (s *bfSim) crash(why string) {
	s.cnt.Crashes++
	for _, a := range s.actors {
		if a.core.Phase() != done {
			s.cnt.CrashMidBackfill++
			break
		}
	}
	s.logf("crash %s", why)
	s.stop()
	s.model, s.down, s.prog = bfClone(s.ck.model), bfClone(s.ck.down), cloneProgress(s.ck.prog)
	s.begin(s.ck.assign)
	s.checkI2("after recovery from a crash " + why)
}

// rescale replaces every actor after a checkpoint barrier (an Update barrier): the
// job's vnodes go to 1 to 4 new actors with random bitmaps, sometimes one actor with
// only Completed and NotStarted vnodes, sometimes one without vnodes.
func (s *bfSim) rescale() {
	rng := s.rng
	s.cnt.Rescales++
	old := s.assignment()
	oldOwner := slices.Clone(s.owner)
	n := 1 + rng.IntN(4)
	assign := make([][]uint16, n)
	for _, v := range s.jobList {
		i := rng.IntN(n)
		assign[i] = append(assign[i], v)
	}
	if n >= 2 && rng.IntN(2) == 0 {
		// Actor 0: Completed and NotStarted vnodes only.
		var keep []uint16
		for _, v := range assign[0] {
			if s.exp[v].State == vec.InProgress {
				i := 1 + rng.IntN(n-1)
				assign[i] = append(assign[i], v)
			} else {
				keep = append(keep, v)
			}
		}
		assign[0] = keep
		for _, want := range []vec.BackfillState{vec.Completed, vec.NotStarted} {
			if slices.ContainsFunc(assign[0], func(v uint16) bool { return s.exp[v].State == want }) {
				continue
			}
		move:
			for i := 1; i < n; i++ {
				for j, v := range assign[i] {
					if s.exp[v].State == want {
						assign[0] = append(assign[0], v)
						assign[i] = slices.Delete(assign[i], j, j+1)
						break move
					}
				}
			}
		}
	}
	if n >= 3 && rng.IntN(3) == 0 {
		assign[n-2] = append(assign[n-2], assign[n-1]...)
		assign[n-1] = nil
	}
	for i := range assign {
		slices.Sort(assign[i])
	}
	mid := false
	for _, a := range s.actors {
		mid = mid || a.core.Phase() != done
	}
	if mid && s.deletes > 0 {
		s.cnt.DeletesInRescale++
	}
	for _, vs := range assign {
		var st [3]int
		for _, v := range vs {
			st[s.exp[v].State]++
		}
		if len(vs) == 0 {
			s.cnt.EmptyActor++
		}
		if st[vec.Completed] > 0 && st[vec.NotStarted] > 0 && st[vec.InProgress] == 0 {
			s.cnt.OnlyDoneAndNew++
		}
	}
	for _, vs := range assign {
		for _, v := range vs {
			if s.exp[v].State == vec.InProgress && !slices.Equal(old[oldOwner[v]], vs) {
				s.cnt.RescaleInProgress++
			}
		}
	}
	s.logf("rescale %v -> %v", old, assign)
	s.stop()
	s.begin(assign)
	s.ck.assign = s.assignment()
	s.checkI2("after a rescale")
}

// finish runs epochs without faults that read every pending vnode to its end; every
// actor must be done within a bounded number of barriers (I5), and the MV then equals
// the upstream on the job's vnodes (I1), also over a few pass-through epochs.
func (s *bfSim) finish() {
	for round := 0; ; round++ {
		allDone := true
		for _, a := range s.actors {
			allDone = allDone && a.core.Phase() == done
		}
		if allDone {
			break
		}
		if round == 2 {
			s.fatalf("liveness: actors still backfilling after %d barriers reading every pending vnode to its end", round)
		}
		s.epoch(true, false)
	}
	for range 2 {
		s.epoch(false, true)
	}
	n := 0
	for id, u := range s.model {
		if !s.job[s.w.vn[id]] {
			continue
		}
		n++
		if got, ok := s.down[s.w.keys[id]]; !ok || got != s.w.s2v[u] {
			s.fatalf("I1 violated after the backfill:\n%s", s.diff())
		}
	}
	s.cnt.Compared += n
	if n != len(s.down) {
		s.fatalf("I1 violated after the backfill:\n%s", s.diff())
	}
}

var bfSeeds = flag.Int("backfill.seeds", 0, "seeds of TestBackfillCoreRandom (0: 2000, 500 with -short, 250 under -race), from -seed on")

// bfSeedFlag reports the -seed flag (vectest's) when it was given.
func bfSeedFlag() (uint64, bool) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "seed" })
	if !set {
		return 0, false
	}
	v, err := strconv.ParseUint(flag.Lookup("seed").Value.String(), 0, 64)
	return v, err == nil
}

// TestBackfillCoreRandom is layer 1 of docs/testing.md: thousands of seeded random runs of
// the backfill core over random, runtime and generated tables (1 to 256 vnodes, small
// colliding pk pools, hot vnodes), each a random sequence of epochs with upstream
// chunks (inserts, deletes, updates with and without pk changes, delete runs,
// invisible rows), snapshot batches of random sizes interleaved across vnodes, pauses,
// at-least-one-row reads, checkpoint and non-checkpoint barriers, crashes (rolling
// upstream, MV and progress back to the last checkpoint) and rescales (1 to 4 new actors
// loaded from the persisted progress), then a bounded end of the backfill. It checks I3
// on every emitted chunk, the progress rows, the replicated view and I2 at every
// barrier, and I1 at the end. With -seed=N it runs seed N alone, with a trace (-v);
// -backfill.seeds=M runs M seeds (from -seed=N when given): a longer soak.
func TestBackfillCoreRandom(t *testing.T) {
	base := vectest.Seed(t)
	seeds := 2000
	switch {
	case invariants.RaceEnabled:
		seeds = 250
	case testing.Short():
		seeds = 500
	}
	_, one := bfSeedFlag()
	switch {
	case *bfSeeds > 0:
		seeds, one = *bfSeeds, false
	case one:
		seeds = 1
	}
	var cnt bfCounters
	dir := t.TempDir()
	for i := 0; i < seeds; i++ {
		runBackfillSim(t, base+uint64(i), one, dir, &cnt)
	}
	fig, _ := json.Marshal(cnt)
	t.Logf("figures: %s", fig)
	if one {
		return
	}
	for name, n := range map[string]int{
		"seed with generated kernels":                                      cnt.GeneratedSeeds,
		"seed with generic kernels":                                        cnt.GenericSeeds,
		"range delete":                                                     cnt.RangeDeletes,
		"invisible row":                                                    cnt.InvisibleRows,
		"paused epoch":                                                     cnt.PausedEpochs,
		"paused epoch with upstream changes":                               cnt.PausedWithChanges,
		"update pair straddling a position":                                cnt.UpdateStraddle,
		"pk-changing update across positions":                              cnt.PKChangeAcross,
		"vnode finishing while others have not":                            cnt.FinishAlone,
		"at-least-one-row read hitting the end of the last vnode":          cnt.OneRowEnd,
		"crash mid-backfill":                                               cnt.CrashMidBackfill,
		"crash before a checkpoint's commit":                               cnt.CrashBeforeCommit,
		"rescale moving an InProgress vnode":                               cnt.RescaleInProgress,
		"actor with only Completed and NotStarted vnodes after a rescale":  cnt.OnlyDoneAndNew,
		"actor without vnodes after a rescale":                             cnt.EmptyActor,
		"epoch without snapshot rows while keys above a position change":   cnt.NoProgressAhead,
		"changes above a position carried across a non-checkpoint barrier": cnt.AboveNonCheckpoint,
		"deletes in the epoch of a rescale":                                cnt.DeletesInRescale,
	} {
		if n == 0 {
			t.Errorf("sometimes: no %s happened in %d seeds", name, cnt.Seeds)
		}
	}
}
