package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// snapRef is the expected row under one storage key: row row of rec, whose column
// cols[c] holds the table's column c (-1: not written, as in a replicated row).
type snapRef struct {
	rec  arrow.RecordBatch
	row  int
	cols []int
}

// snapModel is the reference a snapshot read is checked against: the last write of
// every key, applied in the order the engine applies them.
type snapModel struct {
	t       *schema.Table
	k       vec.Kernels
	rows    map[string]snapRef // storage key -> row
	recs    []arrow.RecordBatch
	byVnode map[string][]string // vnode prefix -> sorted keys; nil: to rebuild
}

func newSnapModel(t *schema.Table) *snapModel {
	return &snapModel{t: t, k: vec.NewGeneric(t), rows: map[string]snapRef{}}
}

func (m *snapModel) clone() *snapModel {
	c := &snapModel{t: m.t, k: m.k, rows: make(map[string]snapRef, len(m.rows))}
	for k, v := range m.rows {
		c.rows[k] = v
	}
	return c
}

func (m *snapModel) release() {
	for _, r := range m.recs {
		r.Release()
	}
}

// apply records the visible rows of full (a chunk with every column of the table, as
// written) in order; rec and cols say where the rows' values live for comparisons.
func (m *snapModel) apply(id uint32, full *vec.Chunk, rec arrow.RecordBatch, cols []int) {
	n := full.NumRows()
	vn := make([]uint16, n)
	m.k.Vnodes(full, vn)
	var keys vec.Bytes
	keys.Reset()
	m.k.EncodeKeys(full, &keys)
	rec.Retain()
	m.recs = append(m.recs, rec)
	m.byVnode = nil
	ops := full.Ops()
	for i := 0; i < n; i++ {
		if !full.Visible(i) {
			continue
		}
		key := string(AppendKey(nil, id, vn[i], keys.At(i)))
		if ops[i].IsInsert() {
			m.rows[key] = snapRef{rec: rec, row: i, cols: cols}
		} else {
			delete(m.rows, key)
		}
	}
}

// vnodeRows returns the pks (sorted) and rows of vnode v of table id after the pk after.
func (m *snapModel) vnodeRows(id uint32, v uint16, after []byte) ([][]byte, []snapRef) {
	if m.byVnode == nil {
		m.byVnode = map[string][]string{}
		for k := range m.rows {
			m.byVnode[k[:KeyPrefixLen]] = append(m.byVnode[k[:KeyPrefixLen]], k)
		}
		for _, ks := range m.byVnode {
			sort.Strings(ks)
		}
	}
	keys := m.byVnode[string(VnodePrefix(id, v))]
	if after != nil {
		keys = keys[sort.Search(len(keys), func(i int) bool { return bytes.Compare([]byte(keys[i][KeyPrefixLen:]), after) > 0 }):]
	}
	pks := make([][]byte, len(keys))
	refs := make([]snapRef, len(keys))
	for i, k := range keys {
		pks[i] = []byte(k[KeyPrefixLen:])
		refs[i] = m.rows[k]
	}
	return pks, refs
}

// vnodesWithRows lists the vnodes of table id that hold rows.
func (m *snapModel) vnodesWithRows() map[uint16]bool {
	out := map[uint16]bool{}
	for k := range m.rows {
		_, v, _, _ := SplitKey([]byte(k))
		out[v] = true
	}
	return out
}

// anyPK returns a random pk of the model (nil when empty).
func (m *snapModel) anyPK(rng *rand.Rand) []byte {
	for k := range m.rows {
		if rng.IntN(4) == 0 {
			return []byte(k[KeyPrefixLen:])
		}
	}
	for k := range m.rows {
		return []byte(k[KeyPrefixLen:])
	}
	return nil
}

// snapCollect reads everything from r, keeping the batches per vnode in arrival order.
func snapCollect(t *testing.T, r *SnapshotReader) map[uint16][]SnapshotBatch {
	t.Helper()
	out := map[uint16][]SnapshotBatch{}
	for b := range r.Batches() {
		out[b.Vnode] = append(out[b.Vnode], b)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func snapRelease(got map[uint16][]SnapshotBatch) {
	for _, bs := range got {
		for i := range bs {
			bs[i].Release()
		}
	}
}

// snapCheck compares the batches of a read against the model: per vnode, the rows
// after its start in pk order, projected; batches full except the last, each with the
// pk of its last row; exactly one End, on the last batch (an empty one after the
// last row in a rate-limited read).
func snapCheck(t *testing.T, what string, m *snapModel, id uint32, req SnapshotRequest, got map[uint16][]SnapshotBatch) {
	t.Helper()
	batch := req.BatchSize
	if batch == 0 {
		batch = DefaultSnapshotBatchSize
	}
	if len(got) != len(req.Vnodes) {
		t.Fatalf("%s: batches for %d vnodes, requested %d", what, len(got), len(req.Vnodes))
	}
	for _, vs := range req.Vnodes {
		pks, refs := m.vnodeRows(id, vs.Vnode, vs.After)
		bs := got[vs.Vnode]
		row := 0
		for bi, b := range bs {
			where := fmt.Sprintf("%s: vnode %d batch %d/%d (%d rows, end %v)", what, vs.Vnode, bi, len(bs), b.Rows, b.End)
			if b.Vnode != vs.Vnode {
				t.Fatalf("%s: vnode %d", where, b.Vnode)
			}
			if b.End != (bi == len(bs)-1) {
				t.Fatalf("%s: End must be set on the last batch only", where)
			}
			if b.Rows == 0 {
				// The End of a vnode with no row left, alone; or, in a rate-limited read
				// (which moves past a batch's last row only once it holds the next
				// batch's tokens), the End after the batch that read the last row.
				alone := len(pks) == 0 && len(bs) == 1
				after := req.Limit != nil && bi > 0 && row == len(pks)
				if !alone && !after || b.Record != nil || b.LastPK != nil {
					t.Fatalf("%s: empty batch of a vnode with %d rows (record %v, last pk %x)", where, len(pks), b.Record != nil, b.LastPK)
				}
				continue
			}
			if b.Rows > batch || (!b.End && req.Limit == nil && b.Rows != batch) {
				t.Fatalf("%s: batch size %d", where, batch)
			}
			row = snapCheckRows(t, where, m, req.Projection, b, pks, refs, row)
		}
		if row != len(pks) {
			t.Fatalf("%s: vnode %d: %d rows read, want %d", what, vs.Vnode, row, len(pks))
		}
		if len(bs) == 0 {
			t.Fatalf("%s: vnode %d: no batch at all", what, vs.Vnode)
		}
	}
}

// snapCheckRows compares the rows of batch b (with rows) against the model's rows
// pks[row:] (refs alike), projected to proj, and its LastPK against the pk of its last
// row; it returns the index of the row after it.
func snapCheckRows(t *testing.T, where string, m *snapModel, proj vec.Projection, b SnapshotBatch, pks [][]byte, refs []snapRef, row int) int {
	t.Helper()
	if int(b.Record.NumRows()) != b.Rows || int(b.Record.NumCols()) != len(proj) {
		t.Fatalf("%s: record of %d rows and %d columns, projection %v", where, b.Record.NumRows(), b.Record.NumCols(), proj)
	}
	for i := 0; i < b.Rows; i++ {
		if row >= len(pks) {
			t.Fatalf("%s: more rows than the %d expected", where, len(pks))
		}
		ref := refs[row]
		for j, c := range proj {
			if b.Record.ColumnName(j) != m.t.Columns[c].Name {
				t.Fatalf("%s: column %d is %s, want %s", where, j, b.Record.ColumnName(j), m.t.Columns[c].Name)
			}
			if !vectest.ValuesEqual(b.Record.Column(j), i, ref.rec.Column(ref.cols[c]), ref.row) {
				t.Fatalf("%s row %d (pk %x): column %s: got %s, want %s", where, i, pks[row], m.t.Columns[c].Name,
					vectest.FormatValue(b.Record.Column(j), i), vectest.FormatValue(ref.rec.Column(ref.cols[c]), ref.row))
			}
		}
		row++
	}
	if !bytes.Equal(b.LastPK, pks[row-1]) {
		t.Fatalf("%s: last pk %x, want %x", where, b.LastPK, pks[row-1])
	}
	return row
}

// snapRequest picks vnodes (some with rows, some empty, random order) with random
// starts, a projection from cols, a batch size in 1..4096 and 1..4 workers.
func snapRequest(rng *rand.Rand, m *snapModel, id uint32, t *schema.Table, cols []int) SnapshotRequest {
	with := m.vnodesWithRows()
	var vnodes []uint16
	for v := range with {
		if rng.IntN(5) != 0 {
			vnodes = append(vnodes, v)
		}
	}
	for i := 0; i < 1+rng.IntN(4); i++ {
		v := uint16(rng.IntN(t.VnodeCount))
		if !with[v] {
			vnodes = append(vnodes, v)
		}
	}
	sort.Slice(vnodes, func(i, j int) bool { return vnodes[i] < vnodes[j] })
	vnodes = dedupVnodes(vnodes)
	rng.Shuffle(len(vnodes), func(i, j int) { vnodes[i], vnodes[j] = vnodes[j], vnodes[i] })
	req := SnapshotRequest{Workers: 1 + rng.IntN(4)}
	for _, v := range vnodes {
		vs := VnodeStart{Vnode: v}
		switch rng.IntN(4) {
		case 1: // mid-vnode, at an existing row
			if pks, _ := m.vnodeRows(id, v, nil); len(pks) > 0 {
				vs.After = pks[rng.IntN(len(pks))]
			}
		case 2: // any pk of the table (perhaps not in this vnode)
			vs.After = m.anyPK(rng)
		}
		req.Vnodes = append(req.Vnodes, vs)
	}
	perm := append([]int(nil), cols...)
	rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	req.Projection = vec.Projection(perm[:rng.IntN(len(perm)+1)])
	switch rng.IntN(4) {
	case 0:
		req.BatchSize = 1 + rng.IntN(3)
	case 1:
		req.BatchSize = 1 + rng.IntN(4096)
	default:
		req.BatchSize = 1 + rng.IntN(40)
	}
	return req
}

func dedupVnodes(vs []uint16) []uint16 {
	out := vs[:0]
	for i, v := range vs {
		if i == 0 || v != vs[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// snapTable is a random table with a vnode count that keeps reads of every vnode short.
func snapTable(rng *rand.Rand, name string) *schema.Table {
	for {
		t := vectest.RandomTable(rng, name)
		if t.VnodeCount <= 256 {
			return t
		}
	}
}

func snapOpenMem(t *testing.T) *Store {
	t.Helper()
	s, err := Open("", Options{FS: vfs.NewMem(), CacheSize: 8 << 20, MemTableSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSnapshotRandom checks snapshot reads against the model for random tables,
// writes with deletes, committed and sealed-but-uncommitted epochs, random vnodes,
// starts, projections, batch sizes and worker counts, through a committed view, a
// node's view and a replicated table.
func TestSnapshotRandom(t *testing.T) {
	rng, seed := vectest.Rand(t)
	rounds := 100
	if testing.Short() {
		rounds = 10
	}
	for round := 0; round < rounds; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			snapRandomRound(t, rng, seed, round)
		})
	}
}

func snapRandomRound(t *testing.T, rng *rand.Rand, seed uint64, round int) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	tbl := snapTable(rng, fmt.Sprintf("t%d", round))
	const id = 3
	s := snapOpenMem(t)
	node := s.AddNode()
	st, err := NewStateTable(node, id, tbl, vnode.Full(tbl.VnodeCount))
	if err != nil {
		t.Fatal(err)
	}
	all := newSnapModel(tbl)
	defer all.release()
	committed := all.clone()
	epochs := 1 + rng.IntN(5)
	uncommitted := rng.IntN(3)
	for e := 1; e <= epochs+uncommitted; e++ {
		for c := 0; c < 1+rng.IntN(3); c++ {
			ch := vectest.RandomChunk(rng, mem, tbl, 1+rng.IntN(200), 0.2)
			if err := st.Write(ch); err != nil {
				t.Fatal(err)
			}
			all.apply(id, ch, ch.Record(), vectest.AllColumns(tbl))
			ch.Release()
		}
		st.Seal(uint64(e))
		if e <= epochs {
			if _, err := s.Checkpoint(uint64(e)); err != nil {
				t.Fatal(err)
			}
			committed = all.clone()
		}
	}
	what := fmt.Sprintf("seed %d round %d table %s", seed, round, tbl.Canonical())
	pool := vec.NewPoolAllocator()
	read := func(name string, m *snapModel, src VnodeSource, req SnapshotRequest) {
		t.Helper()
		req.Mem = mem
		if rng.IntN(2) == 0 {
			req.Mem = pool // a pooled allocator hands out dirty buffers: they must be reset
		}
		r, err := OpenSnapshot(context.Background(), src, req)
		if err != nil {
			t.Fatal(err)
		}
		got := snapCollect(t, r)
		defer snapRelease(got)
		snapCheck(t, fmt.Sprintf("%s: %s: batch %d workers %d proj %v", what, name, req.BatchSize, req.Workers, req.Projection), m, id, req, got)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cols := vectest.AllColumns(tbl)
	for i := 0; i < 3; i++ {
		view, err := s.View()
		if err != nil {
			t.Fatal(err)
		}
		read("committed view", committed, ViewSource(view, id, tbl), snapRequest(rng, committed, id, tbl, cols))
		view.Release()
		nview, err := node.View()
		if err != nil {
			t.Fatal(err)
		}
		read("node view", all, ViewSource(nview, id, tbl), snapRequest(rng, all, id, tbl, cols))
		nview.Release()
	}

	// A replicated table over the committed state: S2 is the pk plus random columns;
	// replicated epochs above the committed one carry partial rows.
	s2 := tbl.PKColumns()
	for _, c := range rng.Perm(len(tbl.Columns)) {
		if !tbl.IsPK(c) && rng.IntN(2) == 0 {
			s2 = append(s2, c)
		}
	}
	rt, err := NewReplicatedTable(s, id, tbl, s2, vnode.Full(tbl.VnodeCount), mem)
	if err != nil {
		t.Fatal(err)
	}
	rep := committed.clone()
	defer rep.release()
	colsOf := make([]int, len(tbl.Columns)) // S1 column -> column of an S2 record
	for c := range colsOf {
		colsOf[c] = -1
	}
	for j, c := range s2 {
		colsOf[c] = j
	}
	top := uint64(epochs)
	for e := 0; e < 1+rng.IntN(3); e++ {
		full := vectest.RandomChunk(rng, mem, tbl, 1+rng.IntN(100), 0.2)
		proj := vectest.Project(tbl, full.Record(), s2)
		part := full.WithRecord(proj)
		if err := rt.WriteChunk(part); err != nil {
			t.Fatal(err)
		}
		rep.apply(id, full, proj, colsOf)
		proj.Release()
		part.Release()
		full.Release()
		top++
		rt.Seal(top)
	}
	view, err := rt.View()
	if err != nil {
		t.Fatal(err)
	}
	src := ReplicatedSource(rt, view)
	// Writes after the source was taken are not seen by it.
	later := vectest.RandomChunk(rng, mem, tbl, 20, 0)
	lp := vectest.Project(tbl, later.Record(), s2)
	lc := later.WithRecord(lp)
	if err := rt.WriteChunk(lc); err != nil {
		t.Fatal(err)
	}
	rt.Seal(top + 1)
	lc.Release()
	lp.Release()
	later.Release()
	for i := 0; i < 3; i++ {
		read("replicated", rep, src, snapRequest(rng, rep, id, tbl, s2))
	}
	view.Release()
}

// snapBidStore writes n bid rows into a store on the memory file system through a
// state table and one checkpoint, and returns it with its model.
func snapBidStore(t *testing.T, n int, seed uint64) (*Store, *snapModel) {
	t.Helper()
	s := snapOpenMem(t)
	tbl := tables.BidTable()
	st, err := NewStateTable(s.AddNode(), snapBidID, tbl, vnode.Full(tbl.VnodeCount))
	if err != nil {
		t.Fatal(err)
	}
	m := newSnapModel(tbl)
	t.Cleanup(m.release)
	mem := memory.NewGoAllocator()
	for start := 0; start < n; start += 4096 {
		c := snapBidChunk(mem, start, min(4096, n-start), seed)
		if err := st.Write(c); err != nil {
			t.Fatal(err)
		}
		m.apply(snapBidID, c, c.Record(), vectest.AllColumns(tbl))
		c.Release()
	}
	st.Seal(1)
	if _, err := s.Checkpoint(1); err != nil {
		t.Fatal(err)
	}
	return s, m
}

const snapBidID = 9

var snapQ0 = vec.Projection{tables.BidColAuction, tables.BidColBidder, tables.BidColPrice, tables.BidColDateTime}

// snapBidChunk makes n Nexmark-like bid rows, rows start... of a stream (unique pks).
func snapBidChunk(mem memory.Allocator, start, n int, seed uint64) *vec.Chunk {
	rng := rand.New(rand.NewPCG(seed, uint64(start)))
	b := tables.NewBidBuilder(mem)
	defer b.Release()
	for i := 0; i < n; i++ {
		r := tables.Bid{
			Auction:  1000 + int64(rng.IntN(100)),
			Bidder:   1000 + int64(rng.IntN(1000)),
			Price:    int64(100 + rng.IntN(1_000_000)),
			Channel:  []string{"Google", "Facebook", "Baidu", "Apple"}[rng.IntN(4)],
			URL:      fmt.Sprintf("https://www.nexmark.com/%d/item.htm?query=1", rng.IntN(1e6)),
			DateTime: arrow.Timestamp(1_700_000_000_000_000 + int64(start+i)*100),
			Extra:    strings.Repeat("x", 20+rng.IntN(20)),
		}
		b.Append(vec.Insert, &r)
	}
	return b.Build()
}

func snapAllVnodes(t *schema.Table) []VnodeStart {
	out := make([]VnodeStart, t.VnodeCount)
	for v := range out {
		out[v].Vnode = uint16(v)
	}
	return out
}

// TestSnapshotGeneratedMatchesGeneric reads bid rows with the generated kernels (their
// row decoder) and with the generic ones (the batch decode): both equal the model.
func TestSnapshotGeneratedMatchesGeneric(t *testing.T) {
	rng, seed := vectest.Rand(t)
	s, m := snapBidStore(t, 20000, seed)
	tbl := m.t
	if !vec.For(tbl).Generated() {
		t.Fatal("bid kernels are not registered")
	}
	view, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	for _, k := range []vec.Kernels{nil, vec.NewGeneric(tbl)} {
		for i := 0; i < 4; i++ {
			mem := memory.NewCheckedAllocator(vec.NewPoolAllocator())
			req := snapRequest(rng, m, snapBidID, tbl, vectest.AllColumns(tbl))
			switch i {
			case 0:
				req.Projection = snapQ0
			case 1: // a column twice: the generated kernels decode by batch, not by row
				req.Projection = vec.Projection{tables.BidColURL, tables.BidColPrice, tables.BidColURL}
			}
			req.Kernels, req.Mem = k, mem
			r, err := OpenSnapshot(context.Background(), ViewSource(view, snapBidID, tbl), req)
			if err != nil {
				t.Fatal(err)
			}
			got := snapCollect(t, r)
			snapCheck(t, fmt.Sprintf("seed %d kernels %T batch %d workers %d", seed, k, req.BatchSize, req.Workers), m, snapBidID, req, got)
			snapRelease(got)
			mem.AssertSize(t, 0)
		}
	}
}

// snapWaitGoroutines waits for the goroutine count to fall back to base.
func snapWaitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before the read:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSnapshotEarlyStop stops reads early, by Close after a random number of batches
// or by cancelling the context, with and without a blocking rate limiter: no Arrow
// memory and no goroutine is left behind.
func TestSnapshotEarlyStop(t *testing.T) {
	rng, seed := vectest.Rand(t)
	s, m := snapBidStore(t, 30000, seed)
	view, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	for i := 0; i < 60; i++ {
		mem := memory.NewCheckedAllocator(vec.NewPoolAllocator())
		base := runtime.NumGoroutine()
		ctx, cancel := context.WithCancel(context.Background())
		req := SnapshotRequest{Vnodes: snapAllVnodes(m.t), Projection: snapQ0, BatchSize: 1 + rng.IntN(300),
			Workers: 1 + rng.IntN(4), Buffer: rng.IntN(3), Mem: mem}
		if rng.IntN(3) == 0 {
			var granted atomic.Int64
			budget := int64(rng.IntN(2000))
			req.Limit = func(ctx context.Context, v uint16, want int) (int, error) {
				if granted.Add(int64(want)) > budget {
					<-ctx.Done() // out of tokens: block until stopped
					return 0, ctx.Err()
				}
				return want, nil
			}
		}
		r, err := OpenSnapshot(ctx, ViewSource(view, snapBidID, m.t), req)
		if err != nil {
			t.Fatal(err)
		}
		stopAfter := rng.IntN(50)
		byCancel := rng.IntN(2) == 0
		var kept []SnapshotBatch
		n := 0
	recv:
		for n < stopAfter {
			select {
			case b, ok := <-r.Batches():
				if !ok {
					break recv
				}
				if rng.IntN(2) == 0 {
					kept = append(kept, b) // still ours after the stop
				} else {
					b.Release()
				}
				n++
			case <-time.After(20 * time.Millisecond): // a limiter out of tokens
				break recv
			}
		}
		if byCancel {
			cancel()
			for b := range r.Batches() {
				b.Release()
			}
			if err := r.Err(); err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("seed %d: cancelled read: %v", seed, err)
			}
		}
		if err := r.Close(); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if err := r.Close(); err != nil && !errors.Is(err, context.Canceled) { // twice is harmless
			t.Fatal(err)
		}
		cancel()
		for i := range kept {
			if kept[i].Rows > 0 && kept[i].Record.NumRows() != int64(kept[i].Rows) {
				t.Fatal("a kept batch changed")
			}
			kept[i].Release()
		}
		mem.AssertSize(t, 0)
		snapWaitGoroutines(t, base)
	}
}

// TestSnapshotLimiter checks that batches hold at most the rows granted, and that a
// limiter's error ends the read with an error naming the table and vnode.
func TestSnapshotLimiter(t *testing.T) {
	_, seed := vectest.Rand(t)
	s, m := snapBidStore(t, 5000, seed)
	view, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	var calls atomic.Int64
	req := SnapshotRequest{Vnodes: snapAllVnodes(m.t), Projection: snapQ0, BatchSize: 64, Workers: 3,
		Limit: func(ctx context.Context, v uint16, want int) (int, error) {
			n := calls.Add(1)
			if want != 64 {
				return 0, fmt.Errorf("want %d", want)
			}
			return 1 + int(n*7%5), nil
		}}
	r, err := OpenSnapshot(context.Background(), ViewSource(view, snapBidID, m.t), req)
	if err != nil {
		t.Fatal(err)
	}
	got := snapCollect(t, r)
	defer snapRelease(got)
	snapCheck(t, fmt.Sprintf("seed %d", seed), m, snapBidID, req, got)
	for _, bs := range got {
		for _, b := range bs {
			if b.Rows > 5 {
				t.Fatalf("batch of %d rows, at most 5 granted", b.Rows)
			}
		}
	}
	if calls.Load() == 0 {
		t.Fatal("limiter never called")
	}

	req.Limit = func(ctx context.Context, v uint16, want int) (int, error) { return 0, errors.New("no tokens") }
	r, err = OpenSnapshot(context.Background(), ViewSource(view, snapBidID, m.t), req)
	if err != nil {
		t.Fatal(err)
	}
	for b := range r.Batches() {
		b.Release()
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "table bid vnode") || !strings.Contains(err.Error(), "no tokens") {
		t.Fatalf("limiter error: %v", err)
	}
}

// TestSnapshotReadOne reads single rows after random positions.
func TestSnapshotReadOne(t *testing.T) {
	rng, seed := vectest.Rand(t)
	s, m := snapBidStore(t, 3000, seed)
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	node := s.AddNode()
	view, err := node.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	src := ViewSource(view, snapBidID, m.t)
	for i := 0; i < 500; i++ {
		v := uint16(rng.IntN(m.t.VnodeCount))
		pks, _ := m.vnodeRows(snapBidID, v, nil)
		var after []byte
		switch k := rng.IntN(len(pks) + 2); {
		case k < len(pks):
			after = pks[k]
		case k == len(pks) && len(pks) > 0:
			after = pks[len(pks)-1]
		}
		want, wantRefs := m.vnodeRows(snapBidID, v, after)
		b, err := ReadOne(src, v, after, snapQ0, mem)
		if err != nil {
			t.Fatal(err)
		}
		where := fmt.Sprintf("seed %d vnode %d after %x", seed, v, after)
		if len(want) == 0 {
			if b.Rows != 0 || !b.End || b.Record != nil {
				t.Fatalf("%s: want the end, got %+v", where, b)
			}
			continue
		}
		if b.Rows != 1 || b.End != (len(want) == 1) || !bytes.Equal(b.LastPK, want[0]) || b.Record.NumRows() != 1 {
			t.Fatalf("%s: got rows %d end %v pk %x, want 1 row, end %v, pk %x", where, b.Rows, b.End, b.LastPK, len(want) == 1, want[0])
		}
		for j, c := range snapQ0 {
			if !vectest.ValuesEqual(b.Record.Column(j), 0, wantRefs[0].rec.Column(c), wantRefs[0].row) {
				t.Fatalf("%s: column %d differs", where, c)
			}
		}
		b.Release()
	}
}

// TestSnapshotErrors checks the errors: a malformed request starts nothing; a value
// that does not decode ends the read with an error naming the table and vnode; a
// replicated source refuses vnodes the actor does not own.
func TestSnapshotErrors(t *testing.T) {
	s, m := snapBidStore(t, 2000, 1)
	view, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	src := ViewSource(view, snapBidID, m.t)
	for name, req := range map[string]SnapshotRequest{
		"projection": {Vnodes: snapAllVnodes(m.t), Projection: vec.Projection{7}},
		"vnode":      {Vnodes: []VnodeStart{{Vnode: 256}}},
		"twice":      {Vnodes: []VnodeStart{{Vnode: 4}, {Vnode: 5}, {Vnode: 4, After: []byte{1}}}},
		"batch":      {Vnodes: snapAllVnodes(m.t), BatchSize: -1},
		"workers":    {Vnodes: snapAllVnodes(m.t), Workers: -2},
		"kernels":    {Vnodes: snapAllVnodes(m.t), Kernels: tables.PersonKernels()},
	} {
		if _, err := OpenSnapshot(context.Background(), src, req); err == nil || !strings.Contains(err.Error(), "table bid") {
			t.Errorf("%s: error %v", name, err)
		}
	}
	if _, err := ReadOne(src, 256, nil, snapQ0, nil); err == nil {
		t.Error("ReadOne of vnode 256: no error")
	}
	// No vnodes: the channel closes at once.
	r, err := OpenSnapshot(context.Background(), src, SnapshotRequest{Projection: snapQ0})
	if err != nil {
		t.Fatal(err)
	}
	if got := snapCollect(t, r); len(got) != 0 {
		t.Fatalf("%d vnodes read", len(got))
	}
	view.Release()

	// Corrupt one value of vnode 5.
	pks, _ := m.vnodeRows(snapBidID, 5, nil)
	if err := s.DB().Set(AppendKey(nil, snapBidID, 5, pks[len(pks)/2]), []byte{1, 2, 3}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	view, err = s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	// Both decode paths: the generated row decoder, and the generic kernels' batch decode.
	for _, k := range []vec.Kernels{nil, vec.NewGeneric(m.t)} {
		r, err = OpenSnapshot(context.Background(), ViewSource(view, snapBidID, m.t), SnapshotRequest{Vnodes: snapAllVnodes(m.t), Projection: snapQ0, Workers: 2, Mem: mem, Kernels: k})
		if err != nil {
			t.Fatal(err)
		}
		for b := range r.Batches() {
			b.Release()
		}
		if err := r.Err(); err == nil || !strings.Contains(err.Error(), "table bid vnode 5") {
			t.Fatalf("corrupt value, generic kernels %v: %v", k != nil, err)
		} else if k == nil && !strings.Contains(err.Error(), fmt.Sprintf("row of pk %x", pks[len(pks)/2])) {
			t.Fatalf("corrupt value: the error does not name the row's pk: %v", err)
		}
		mem.AssertSize(t, 0)
	}
	if b, err := ReadOne(ViewSource(view, snapBidID, m.t), 5, nil, snapQ0, mem); err != nil && len(pks) > 1 {
		t.Fatalf("ReadOne before the corrupt row: %v", err)
	} else {
		b.Release()
	}
	if _, err := ReadOne(ViewSource(view, snapBidID, m.t), 5, pks[len(pks)/2-1], snapQ0, mem); err == nil || !strings.Contains(err.Error(), "table bid vnode 5") {
		t.Fatalf("ReadOne of the corrupt row: %v", err)
	}
	mem.AssertSize(t, 0)

	rt, err := NewReplicatedTable(s, snapBidID, m.t, m.t.PKColumns(), vnode.FromRange(m.t.VnodeCount, 0, 10), nil)
	if err != nil {
		t.Fatal(err)
	}
	rv, err := rt.View()
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Release()
	r, err = OpenSnapshot(context.Background(), ReplicatedSource(rt, rv), SnapshotRequest{Vnodes: []VnodeStart{{Vnode: 3}, {Vnode: 20}}, Projection: vec.Projection{0}})
	if err != nil {
		t.Fatal(err)
	}
	for b := range r.Batches() {
		b.Release()
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "vnode 20 is not owned") {
		t.Fatalf("unowned vnode: %v", err)
	}
}

func snapRaceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// TestSnapshotAllocs checks the worker's steady state: reading and handing over a
// batch allocates a fixed number of Arrow headers, however many rows it holds, and
// nothing per row.
func TestSnapshotAllocs(t *testing.T) {
	if snapRaceEnabled() {
		t.Skip("allocation counts differ under -race")
	}
	// A block cache that holds every row: the steady state of a warm scan.
	s, err := Open("", Options{FS: vfs.NewMem(), CacheSize: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tbl := tables.BidTable()
	// Every row in vnode 0 (the reader does not check keys against the vnode hash).
	const runs = 20
	const rows = (runs + 2) * 4096
	k := tables.BidKernels()
	var keys, vals vec.Bytes
	b := s.DB().NewBatch()
	for start := 0; start < rows; start += 4096 {
		c := snapBidChunk(memory.NewGoAllocator(), start, 4096, 1)
		keys.Reset()
		vals.Reset()
		k.EncodeKeys(c, &keys)
		k.EncodeValues(c, &vals)
		for i := 0; i < keys.Len(); i++ {
			if err := b.Set(AppendKey(nil, snapBidID, 0, keys.At(i)), vals.At(i), nil); err != nil {
				t.Fatal(err)
			}
		}
		c.Release()
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	view, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	// Both decode paths (the generated row decoder and the generic kernels' batch
	// decode), of fixed-width columns only and of every column.
	for _, kern := range []vec.Kernels{k, vec.NewGeneric(tbl)} {
		for _, cols := range []vec.Projection{snapQ0, vectest.AllColumns(tbl)} {
			t.Run(fmt.Sprintf("generated=%v/columns=%d", kern.Generated(), len(cols)), func(t *testing.T) {
				snapAllocs(t, view, tbl, kern, cols, runs)
			})
		}
	}
}

func snapAllocs(t *testing.T, view *View, tbl *schema.Table, k vec.Kernels, cols vec.Projection, runs int) {
	_, proj, sch, err := snapshotSetup(ViewSource(view, snapBidID, tbl), k, cols)
	if err != nil {
		t.Fatal(err)
	}
	warm, err := ViewSource(view, snapBidID, tbl).Iter(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for warm.Next() {
	}
	warm.Close()
	pool := vec.NewPoolAllocator()
	perBatch := map[int]float64{}
	for _, size := range []int{256, 1024, 4096} {
		it, err := ViewSource(view, snapBidID, tbl).Iter(0, nil)
		if err != nil {
			t.Fatal(err)
		}
		w, err := newSnapWorker(tbl, k, proj, sch, pool)
		if err != nil {
			t.Fatal(err)
		}
		if _, batch := w.rd.(*vec.BatchDecoder); batch == k.Generated() {
			t.Fatalf("generated kernels %v, row decoder %v", k.Generated(), !batch)
		}
		if !it.Next() {
			t.Fatal("no rows")
		}
		allocs := testing.AllocsPerRun(runs, func() {
			b, ok, err := w.fill(it, 0, size, true)
			if err != nil || !ok || b.Rows != size {
				t.Fatalf("fill: %v, ok %v, %d rows", err, ok, b.Rows)
			}
			b.Release()
		})
		w.release()
		it.Close()
		perBatch[size] = allocs
		t.Logf("batch %d: %.1f allocs per batch, %.4f per row", size, allocs, allocs/float64(size))
	}
	if perBatch[4096] > perBatch[256]+1 {
		t.Errorf("allocations grow with the batch size: %v", perBatch)
	}
	// The Arrow headers of a batch: a few per column (array, data, buffers) and a
	// few for the record.
	if limit := float64(12 + 5*len(cols)); perBatch[1024] > limit {
		t.Errorf("%.1f allocations per batch of %d columns (at most %.0f)", perBatch[1024], len(cols), limit)
	}
}
