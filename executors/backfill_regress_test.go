package executors

// Layer 3 of docs/testing.md: one small deterministic test per known fault of arrangement
// backfill implementations, each a script of upstream chunks, snapshot batches and
// barriers fed to backfillCore by bfFix, which plays the executor, the replicated table,
// the progress table and the downstream MV, and checks I2 and I3 at every barrier.

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// fixVnodes is the vnode count of the fixture's table.
const fixVnodes = 4

// fixTable is (g int16, k int32, v varchar, x int64), pk (g, k), distributed by g; the
// backfill's S2 drops x. A test names rows by vnode and k: bfFix picks a g per vnode.
func fixTable() *schema.Table {
	t := &schema.Table{
		Name: "fix",
		Columns: []schema.Column{
			{Name: "g", Type: schema.Type{Kind: schema.Int16}},
			{Name: "k", Type: schema.Type{Kind: schema.Int32}},
			{Name: "v", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
			{Name: "x", Type: schema.Type{Kind: schema.Int64}, Nullable: true},
		},
		PK:         []schema.KeyColumn{{Column: 0}, {Column: 1}},
		DistKey:    []int{0},
		VnodeCount: fixVnodes,
	}
	if err := t.Validate(); err != nil {
		panic(err)
	}
	return t
}

var fixS2 = []int{0, 1, 2}

// fixRow is a row of the fixture's table: vnode, k and v (x is derived from k).
type fixRow struct {
	vn uint16
	k  int32
	v  string
}

func (r fixRow) String() string { return fmt.Sprintf("%d:%d=%s", r.vn, r.k, r.v) }

type fixOp struct {
	op     vec.Op
	row    fixRow
	hidden bool
}

// fixI, fixD, fixU, fixUK and fixHidden build upstream rows; D, U and UK take the old row from the
// model when the chunk is built.
func fixI(vn uint16, k int32, v string) []fixOp {
	return []fixOp{{op: vec.Insert, row: fixRow{vn, k, v}}}
}

func fixD(vn uint16, k int32) []fixOp {
	return []fixOp{{op: vec.Delete, row: fixRow{vn: vn, k: k}}}
}

// fixU updates (vn, k) to v: an UpdateDelete/UpdateInsert pair of one pk.
func fixU(vn uint16, k int32, v string) []fixOp {
	return []fixOp{{op: vec.UpdateDelete, row: fixRow{vn: vn, k: k}}, {op: vec.UpdateInsert, row: fixRow{vn, k, v}}}
}

// fixUK moves (vn, k) to (vn, k2) with value v: an update pair that changes the pk within
// the vnode.
func fixUK(vn uint16, k, k2 int32, v string) []fixOp {
	return []fixOp{{op: vec.UpdateDelete, row: fixRow{vn: vn, k: k}}, {op: vec.UpdateInsert, row: fixRow{vn, k2, v}}}
}

// fixHidden is an invisible row (it does not exist logically).
func fixHidden(op vec.Op, vn uint16, k int32, v string) []fixOp {
	return []fixOp{{op: op, row: fixRow{vn, k, v}, hidden: true}}
}

type fixActor struct {
	core  *backfillCore
	owned []uint16
	rep   map[string]fixRow // the replicated table's view of its vnodes: key -> row
}

// bfFix drives backfill cores by hand over fixTable.
type bfFix struct {
	t      *testing.T
	tab    *schema.Table
	k      *vec.Generic
	dec    *bfDecoder
	mem    *memory.CheckedAllocator
	g      []int16 // vnode -> a g value of that vnode
	vnOfG  map[int16]uint16
	model  map[string]fixRow // the upstream now: key -> row
	down   map[string]string // the MV: key -> S2 value
	show   map[string]string // S2 value -> the row rendered
	prog   []storage.VnodeProgress
	exp    []storage.VnodeProgress
	owner  []int
	actors []*fixActor
	ck     struct {
		model  map[string]fixRow
		down   map[string]string
		prog   []storage.VnodeProgress
		assign [][]uint16
	}
}

// newBFFix returns a fixture whose upstream holds rows (committed).
func newBFFix(t *testing.T, rows ...fixRow) *bfFix {
	t.Helper()
	f := &bfFix{t: t, tab: fixTable(), mem: memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true}),
		vnOfG: map[int16]uint16{}, model: map[string]fixRow{}, show: map[string]string{}}
	f.k = vec.NewGeneric(f.tab)
	f.dec = newBFDecoder(f.tab, fixS2)
	f.g = make([]int16, fixVnodes)
	for g := int16(1); len(f.vnOfG) < fixVnodes; g++ {
		if g > 1000 {
			t.Fatalf("no g value for every vnode")
		}
		if vn := f.vnodeOf(g); f.g[vn] == 0 {
			f.g[vn], f.vnOfG[g] = g, vn
		}
	}
	for _, r := range rows {
		f.model[f.key(r)] = r
	}
	t.Cleanup(func() {
		for _, a := range f.actors {
			a.core.release()
		}
		f.mem.AssertSize(t, 0)
	})
	return f
}

// vnodeOf computes the vnode of g.
func (f *bfFix) vnodeOf(g int16) uint16 {
	ch := f.chunk([]fixOp{{op: vec.Insert, row: fixRow{}}}, func(fixRow) int16 { return g })
	defer ch.Release()
	vn := make([]uint16, 1)
	f.k.Vnodes(ch, vn)
	return vn[0]
}

// chunk builds an S1 chunk of ops; gOf maps a row to its g.
func (f *bfFix) chunk(ops []fixOp, gOf func(fixRow) int16) *vec.Chunk {
	bs := vectest.BuildersFor(f.mem, f.tab, vectest.AllColumns(f.tab))
	opv := make([]vec.Op, len(ops))
	vis := make([]bool, len(ops))
	hidden := false
	for i, o := range ops {
		bs[0].(*array.Int16Builder).Append(gOf(o.row))
		bs[1].(*array.Int32Builder).Append(o.row.k)
		bs[2].(*array.StringBuilder).Append(o.row.v)
		bs[3].(*array.Int64Builder).Append(int64(o.row.k) * 10)
		opv[i], vis[i] = o.op, !o.hidden
		hidden = hidden || o.hidden
	}
	if !hidden {
		vis = nil
	}
	rec := vectest.FinishRecord(f.tab, vectest.AllColumns(f.tab), bs, len(ops))
	defer rec.Release()
	return vectest.ChunkOf(f.mem, rec, opv, vis)
}

func (f *bfFix) build(ops []fixOp) *vec.Chunk {
	return f.chunk(ops, func(r fixRow) int16 { return f.g[r.vn] })
}

// enc returns the memcomparable pk and S2 value of each row.
func (f *bfFix) enc(rows ...fixRow) (keys, vals []string) {
	ops := make([]fixOp, len(rows))
	for i, r := range rows {
		ops[i] = fixOp{op: vec.Insert, row: r}
	}
	ch := f.build(ops)
	defer ch.Release()
	r2 := vectest.Project(f.tab, ch.Record(), fixS2)
	defer r2.Release()
	c2 := vectest.ChunkOf(f.mem, r2, ch.Ops(), nil)
	defer c2.Release()
	if err := f.dec.rows(c2); err != nil {
		f.t.Fatal(err)
	}
	for i, r := range rows {
		keys = append(keys, string(f.dec.keys.At(i)))
		vals = append(vals, string(f.dec.vals.At(i)))
		f.show[vals[i]] = r.String()
	}
	return keys, vals
}

func (f *bfFix) key(r fixRow) string {
	keys, _ := f.enc(r)
	return keys[0]
}

// pos is the position of row (vn, k), for progress rows.
func (f *bfFix) pos(vn uint16, k int32) []byte { return []byte(f.key(fixRow{vn: vn, k: k})) }

// rowsOf renders the visible rows of an S2 chunk as "op vnode:k=v".
func (f *bfFix) rowsOf(ch *vec.Chunk) []string {
	rec := ch.Record()
	g, k, v := rec.Column(0).(*array.Int16), rec.Column(1).(*array.Int32), rec.Column(2).(*array.String)
	var out []string
	for i, op := range ch.Ops() {
		if ch.Visible(i) {
			out = append(out, fmt.Sprintf("%v %d:%d=%s", op, f.vnOfG[g.Value(i)], k.Value(i), v.Value(i)))
		}
	}
	return out
}

// start creates one actor per bitmap of assign from the progress table (prog, which
// start sets when given), with replicated views of the upstream now. The first start
// also sets the MV to what I2 requires of that progress (a previous run's commit).
func (f *bfFix) start(assign [][]uint16, prog map[uint16]storage.VnodeProgress) {
	f.t.Helper()
	if f.prog == nil {
		f.prog = make([]storage.VnodeProgress, fixVnodes)
		for v, p := range prog {
			f.prog[v] = p
		}
	}
	for _, a := range f.actors {
		a.core.release()
	}
	f.actors = nil
	f.exp = slices.Clone(f.prog)
	f.owner = []int{-1, -1, -1, -1}
	for i, vs := range assign {
		pos := vec.NewPositions(fixVnodes)
		rows := make([]int64, fixVnodes)
		for _, v := range vs {
			f.owner[v] = i
			pos.State[v], pos.Pos[v], rows[v] = f.prog[v].State, bytes.Clone(f.prog[v].Pos), f.prog[v].Rows
		}
		core, err := newBackfillCore(f.tab, nil, fixS2, vnode.NewBitmap(fixVnodes, vs...), pos, rows, f.mem)
		if err != nil {
			f.t.Fatalf("new core: %v", err)
		}
		f.actors = append(f.actors, &fixActor{core: core, owned: slices.Sorted(slices.Values(vs)), rep: map[string]fixRow{}})
	}
	for key, r := range f.model {
		if o := f.owner[r.vn]; o >= 0 {
			f.actors[o].rep[key] = r
		}
	}
	if f.down == nil {
		f.down = map[string]string{}
		for key, r := range f.model {
			if f.keeps(key, r) {
				_, vals := f.enc(r)
				f.down[key] = vals[0]
			}
		}
		f.checkpoint()
	}
	f.checkI2("start")
}

func (f *bfFix) checkpoint() {
	f.ck.model, f.ck.down, f.ck.prog = bfClone(f.model), bfClone(f.down), slices.Clone(f.prog)
	f.ck.assign = nil
	for _, a := range f.actors {
		f.ck.assign = append(f.ck.assign, slices.Clone(a.owned))
	}
}

// keeps is the I2 oracle: whether the MV holds row r (its vnode in the job).
func (f *bfFix) keeps(key string, r fixRow) bool {
	if f.owner[r.vn] < 0 {
		return false
	}
	e := f.exp[r.vn]
	return e.State == vec.Completed || (e.State == vec.InProgress && key <= string(e.Pos))
}

func (f *bfFix) checkI2(when string) {
	f.t.Helper()
	want := map[string]string{}
	for key, r := range f.model {
		if f.keeps(key, r) {
			_, vals := f.enc(r)
			want[key] = vals[0]
		}
	}
	render := func(m map[string]string) string {
		var rows []string
		for _, v := range m {
			rows = append(rows, f.show[v])
		}
		slices.Sort(rows)
		return strings.Join(rows, " ")
	}
	if got, w := render(f.down), render(want); got != w || len(f.down) != len(want) {
		f.t.Fatalf("%s: I2 violated: the MV holds\n\t%s\nwant\n\t%s", when, got, w)
	}
}

// apply applies emitted chunks to the MV (checking I3), releases them and returns their
// rows rendered.
func (f *bfFix) apply(a int, out []*vec.Chunk, what string) []string {
	f.t.Helper()
	var rows []string
	for _, ch := range out {
		rows = append(rows, f.rowsOf(ch)...)
		if err := bfApply(f.down, f.dec, ch, func(v uint16) bool { return f.owner[v] == a }); err != nil {
			f.t.Fatalf("%s: actor %d emitted %v: %v", what, a, f.rowsOf(ch), err)
		}
		ch.Release()
	}
	return rows
}

// up sends an upstream chunk (dispatched to the actors by vnode), applies it to the
// model, and returns what the actors emitted at once.
func (f *bfFix) up(parts ...[]fixOp) []string {
	f.t.Helper()
	var ops []fixOp
	for _, p := range parts {
		for _, o := range p {
			if !o.hidden && !o.op.IsInsert() {
				old, ok := f.model[f.key(o.row)]
				if !ok {
					f.t.Fatalf("script: %v of a missing row %v", o.op, o.row)
				}
				o.row = old
			}
			ops = append(ops, o)
		}
		for _, o := range p {
			if o.hidden {
				continue
			}
			key := f.key(o.row)
			if o.op.IsInsert() {
				f.model[key] = o.row
			} else {
				delete(f.model, key)
			}
		}
	}
	var out []string
	for i, a := range f.actors {
		var mine []fixOp
		for _, o := range ops {
			if f.owner[o.row.vn] == i {
				mine = append(mine, o)
			}
		}
		if len(mine) == 0 {
			continue
		}
		out = append(out, f.apply(i, a.core.upstream(f.build(mine)), "upstream")...)
	}
	return out
}

// snap feeds the actor owning vn a snapshot batch of at most n rows of vn after its
// position, read from its replicated view, and returns what it emitted.
func (f *bfFix) snap(vn uint16, n int) []string {
	f.t.Helper()
	i := f.owner[vn]
	a := f.actors[i]
	var keys []string
	for key, r := range a.rep {
		if r.vn == vn && (f.exp[vn].State == vec.NotStarted || key > string(f.exp[vn].Pos)) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	end := len(keys) <= n
	keys = keys[:min(n, len(keys))]
	b := storage.SnapshotBatch{Vnode: vn, Rows: len(keys), End: end}
	if len(keys) > 0 {
		var ops []fixOp
		for _, key := range keys {
			ops = append(ops, fixOp{op: vec.Insert, row: a.rep[key]})
		}
		ch := f.build(ops)
		b.Record = vectest.Project(f.tab, ch.Record(), fixS2)
		ch.Release()
		b.LastPK = []byte(keys[len(keys)-1])
		e := &f.exp[vn]
		e.State, e.Pos, e.Rows = vec.InProgress, b.LastPK, e.Rows+int64(len(keys))
	}
	if end {
		f.exp[vn].State = vec.Completed
	}
	out, err := a.core.snapshot(b)
	if err != nil {
		f.t.Fatalf("snapshot of vnode %d: %v", vn, err)
	}
	return f.apply(i, out, "snapshot")
}

type fixBarrier struct {
	paused bool // no at-least-one-row read
	ckpt   bool
}

// barrier ends the epoch at every actor as the executor does (the at-least-one-row
// read unless paused, then the core's barrier), replicates, persists progress, checks
// progress and I2, and returns what the actors emitted, in actor order.
func (f *bfFix) barrier(o fixBarrier) []string {
	f.t.Helper()
	var out []string
	for i, a := range f.actors {
		if a.core.Phase() == backfilling && a.core.epochRows == 0 && !o.paused {
			if vs, ok := a.core.firstPending(); ok {
				out = append(out, f.snap(vs.Vnode, 1)...)
			}
		}
		emit, rep, prog, err := a.core.barrier()
		if err != nil {
			f.t.Fatalf("barrier: %v", err)
		}
		out = append(out, f.apply(i, emit, "barrier")...)
		for _, ch := range rep {
			f.replicate(a, ch)
			ch.Release()
		}
		for _, p := range prog {
			if f.owner[p.Vnode] != i || !p.Progress.Equal(f.exp[p.Vnode]) || p.Progress.Equal(f.prog[p.Vnode]) {
				f.t.Fatalf("barrier: actor %d: progress row of vnode %d: %s; persisted %s, want %s", i, p.Vnode, p.Progress, f.prog[p.Vnode], f.exp[p.Vnode])
			}
			f.prog[p.Vnode] = p.Progress
		}
		for _, v := range a.owned {
			if !f.prog[v].Equal(f.exp[v]) {
				f.t.Fatalf("barrier: actor %d vnode %d: persisted %s, want %s", i, v, f.prog[v], f.exp[v])
			}
		}
	}
	f.checkI2("barrier")
	if o.ckpt {
		f.checkpoint()
	}
	return out
}

// replicate applies a replicated chunk to the actor's view.
func (f *bfFix) replicate(a *fixActor, ch *vec.Chunk) {
	f.t.Helper()
	rec := ch.Record()
	g, k, v := rec.Column(0).(*array.Int16), rec.Column(1).(*array.Int32), rec.Column(2).(*array.String)
	for i, op := range ch.Ops() {
		if !ch.Visible(i) {
			continue
		}
		r := fixRow{f.vnOfG[g.Value(i)], k.Value(i), strings.Clone(v.Value(i))} // the chunk's buffer goes back to the pool
		key := f.key(r)
		if op.IsInsert() {
			a.rep[key] = r
		} else {
			delete(a.rep, key)
		}
	}
}

// rescale replaces the actors after a checkpoint barrier (an Update barrier).
func (f *bfFix) rescale(assign ...[]uint16) {
	f.t.Helper()
	f.start(assign, nil)
	f.checkpoint()
}

// crash restores the last checkpoint and restarts its actors from the persisted progress.
func (f *bfFix) crash() {
	f.t.Helper()
	f.model, f.down, f.prog = bfClone(f.ck.model), bfClone(f.ck.down), slices.Clone(f.ck.prog)
	f.start(f.ck.assign, nil)
}

// finish reads every pending vnode to its end, then checks that every actor is done
// and that the MV is the upstream on the job's vnodes (I1).
func (f *bfFix) finish() {
	f.t.Helper()
	for _, a := range f.actors {
		for _, vs := range a.core.pending() {
			f.snap(vs.Vnode, 1<<20)
		}
	}
	f.barrier(fixBarrier{ckpt: true})
	for i, a := range f.actors {
		if a.core.Phase() != done {
			f.t.Fatalf("actor %d: phase %s after reading everything, want done", i, a.core.Phase())
		}
	}
}

func (f *bfFix) phase(i int) backfillPhase { return f.actors[i].core.Phase() }

func fixWant(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: emitted %q, want %q", what, got, want)
	}
}

func fixRows(vn uint16, v string, ks ...int32) []fixRow {
	var out []fixRow
	for _, k := range ks {
		out = append(out, fixRow{vn, k, v})
	}
	return out
}

// ---- the regressions ---------------------------------------------------------------

// An epoch with no snapshot progress while keys ahead of the position change: the
// changes ahead are dropped (the next snapshot reads them from the replicated table),
// the changes behind are forwarded; with the at-least-one-row read, the row read and
// the changes to it agree.
func TestBackfillRegressNoSnapshotProgressKeysAheadChange(t *testing.T) {
	for _, paused := range []bool{true, false} {
		t.Run(fmt.Sprintf("paused=%v", paused), func(t *testing.T) {
			f := newBFFix(t, fixRows(0, "a", 1, 2, 3, 4, 5)...)
			f.start([][]uint16{{0}}, nil)
			fixWant(t, "snapshot", f.snap(0, 2), "+ 0:1=a", "+ 0:2=a")
			f.barrier(fixBarrier{ckpt: true})

			fixWant(t, "upstream", f.up(fixU(0, 3, "b"), fixD(0, 4), fixI(0, 6, "n"), fixU(0, 1, "z")))
			got := f.barrier(fixBarrier{paused: paused})
			if paused {
				fixWant(t, "barrier", got, "U- 0:1=a", "U+ 0:1=z")
			} else {
				// The row read is the epoch's start (3=a); the buffered update of 3 applies.
				fixWant(t, "barrier", got, "+ 0:3=a", "U- 0:3=a", "U+ 0:3=b", "U- 0:1=a", "U+ 0:1=z")
			}
			if f.phase(0) != backfilling {
				t.Fatalf("phase %s, want backfilling", f.phase(0))
			}
			next := f.snap(0, 10)
			if paused {
				fixWant(t, "snapshot", next, "+ 0:3=b", "+ 0:5=a", "+ 0:6=n")
			} else {
				fixWant(t, "snapshot", next, "+ 0:5=a", "+ 0:6=n")
			}
			f.finish()
		})
	}
}

// Updates above the position across non-checkpoint barriers: each barrier replicates
// them (they are not committed yet), so a later snapshot reads their latest values; a
// crash drops them together with the upstream.
func TestBackfillRegressUpdatesAboveAcrossNonCheckpointBarriers(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			f := newBFFix(t, fixRows(0, "a", 1, 2, 3, 4, 5)...)
			f.start([][]uint16{{0}}, nil)
			f.snap(0, 1)
			f.barrier(fixBarrier{ckpt: true})
			steps := [][][]fixOp{{fixU(0, 4, "b")}, {fixU(0, 4, "c"), fixI(0, 7, "n")}, {fixD(0, 5), fixU(0, 2, "d")}}
			for i, s := range steps {
				fixWant(t, "upstream", f.up(s...))
				fixWant(t, fmt.Sprintf("barrier %d", i), f.barrier(fixBarrier{paused: true}))
			}
			if r, ok := f.actors[0].rep[f.key(fixRow{vn: 0, k: 4})]; !ok || r.v != "c" {
				t.Fatalf("replicated view holds %v for 0:4, want 0:4=c", r)
			}
			if crash {
				f.crash()
				fixWant(t, "snapshot after the crash", f.snap(0, 10), "+ 0:2=a", "+ 0:3=a", "+ 0:4=a", "+ 0:5=a")
			} else {
				fixWant(t, "snapshot", f.snap(0, 10), "+ 0:2=d", "+ 0:3=a", "+ 0:4=c", "+ 0:7=n")
			}
			f.finish()
		})
	}
}

// An update pair split by the position must become a Delete (old row kept, new row
// dropped) or an Insert (the reverse), also with an invisible row inside the pair;
// pairs on one side stay pairs or vanish.
func TestBackfillRegressUpdatePairSplitByPosition(t *testing.T) {
	f := newBFFix(t, fixRows(0, "a", 1, 2, 3, 8, 9)...)
	f.start([][]uint16{{0}}, nil)
	f.snap(0, 3) // position 0:3
	f.barrier(fixBarrier{ckpt: true})
	f.up(fixUK(0, 2, 7, "m"), // old below, new above: Delete
		fixUK(0, 8, 0, "p"),  // old above, new below: Insert
		fixUK(0, 3, 2, "q"),  // both below: the pair
		fixUK(0, 9, 10, "r"), // both above: nothing
	)
	f.up([]fixOp{{op: vec.UpdateDelete, row: fixRow{vn: 0, k: 1}}}, fixHidden(vec.Insert, 0, 1, "junk"),
		[]fixOp{{op: vec.UpdateInsert, row: fixRow{0, 11, "s"}}}) // split, with a hidden row inside
	fixWant(t, "barrier", f.barrier(fixBarrier{paused: true}), "- 0:2=a", "+ 0:0=p", "U- 0:3=a", "U+ 0:2=q", "- 0:1=a")
	f.finish()
}

// A vnode that finishes while others have not: it is Completed at once (its later
// changes are all forwarded) while the others are still marked by position, and the
// buffer is not forwarded whole.
func TestBackfillRegressVnodeFinishesWhileOthersHaveNot(t *testing.T) {
	f := newBFFix(t, append(fixRows(0, "a", 1, 2), fixRows(1, "a", 1, 2, 3)...)...)
	f.start([][]uint16{{0, 1}}, nil)
	fixWant(t, "upstream", f.up(fixI(0, 9, "n"), fixU(1, 2, "b")))
	fixWant(t, "snapshot of vnode 0", f.snap(0, 5), "+ 0:1=a", "+ 0:2=a")
	fixWant(t, "snapshot of vnode 1", f.snap(1, 1), "+ 1:1=a")
	if f.phase(0) != backfilling {
		t.Fatalf("phase %s after one vnode of two ended, want backfilling", f.phase(0))
	}
	fixWant(t, "upstream", f.up(fixI(1, 0, "z"), fixD(0, 1)))
	fixWant(t, "barrier", f.barrier(fixBarrier{}), "+ 0:9=n", "+ 1:0=z", "- 0:1=a")
	if p := f.prog[0]; p.State != vec.Completed || p.Rows != 2 || !bytes.Equal(p.Pos, f.pos(0, 2)) {
		t.Fatalf("vnode 0 progress %s, want Completed at 0:2 with 2 rows", p)
	}
	if p := f.prog[1]; p.State != vec.InProgress || p.Rows != 1 {
		t.Fatalf("vnode 1 progress %s, want InProgress with 1 row", p)
	}
	fixWant(t, "snapshot of vnode 1", f.snap(1, 5), "+ 1:2=b", "+ 1:3=a")
	f.finish()
}

// An actor owning only Completed and NotStarted vnodes after a rescale: it backfills
// (it is not done), keeps the Completed vnode's changes, drops the NotStarted one's;
// an actor with only Completed vnodes and one without vnodes are done at once.
func TestBackfillRegressOnlyCompletedAndNotStartedAfterRescale(t *testing.T) {
	f := newBFFix(t, append(append(fixRows(0, "a", 1, 2), fixRows(1, "a", 1, 2)...), fixRows(2, "a", 1, 2)...)...)
	f.start([][]uint16{{0, 1, 2, 3}}, nil)
	f.snap(0, 5) // Completed
	f.snap(1, 1) // InProgress
	f.snap(3, 1) // empty: Completed with no rows
	f.barrier(fixBarrier{ckpt: true})
	f.rescale([]uint16{0, 2}, []uint16{1}, []uint16{}, []uint16{3})
	if f.phase(0) != backfilling {
		t.Fatalf("actor with Completed and NotStarted vnodes: phase %s, want backfilling", f.phase(0))
	}
	if p := f.actors[0].core.pending(); len(p) != 1 || p[0].Vnode != 2 || p[0].After != nil {
		t.Fatalf("actor 0 pending %v, want vnode 2 from its start", p)
	}
	if f.phase(2) != done || f.phase(3) != done {
		t.Fatalf("actors without vnodes or with only Completed ones: phases %s, %s, want done", f.phase(2), f.phase(3))
	}
	fixWant(t, "upstream", f.up(fixI(0, 7, "x"), fixD(2, 1), fixU(0, 1, "b"), fixI(2, 9, "y"), fixU(1, 1, "c"), fixI(1, 9, "z"), fixI(3, 1, "w")),
		"+ 3:1=w")
	fixWant(t, "barrier", f.barrier(fixBarrier{paused: true}), "+ 0:7=x", "U- 0:1=a", "U+ 0:1=b", "U- 1:1=a", "U+ 1:1=c")
	fixWant(t, "snapshot of vnode 2", f.snap(2, 10), "+ 2:2=a", "+ 2:9=y")
	if f.phase(0) != finishing {
		t.Fatalf("actor 0: phase %s after its last vnode ended, want finishing", f.phase(0))
	}
	// Finishing: upstream chunks are forwarded at once, not buffered.
	fixWant(t, "upstream while finishing", f.up(fixI(0, 8, "f"), fixD(2, 2)), "+ 0:8=f", "- 2:2=a")
	f.finish()
}

// The at-least-one-row read that reaches the end of the last pending vnode must forward
// the whole buffer, unfiltered (docs/design.md §6, fault 1): with a last row, and with no row
// left after the position.
func TestBackfillRegressOneRowReadReachingEndForwardsBuffer(t *testing.T) {
	t.Run("last row", func(t *testing.T) {
		f := newBFFix(t, append(fixRows(0, "a", 1, 2), fixRows(1, "a", 1, 2)...)...)
		f.start([][]uint16{{0, 1}}, nil)
		f.snap(0, 5)
		f.snap(1, 1)
		f.barrier(fixBarrier{ckpt: true})
		fixWant(t, "upstream", f.up(fixU(1, 2, "b"), fixI(1, 5, "n"), fixI(0, 3, "m"), fixD(1, 1)))
		fixWant(t, "barrier", f.barrier(fixBarrier{}),
			"+ 1:2=a", "U- 1:2=a", "U+ 1:2=b", "+ 1:5=n", "+ 0:3=m", "- 1:1=a")
		if f.phase(0) != done {
			t.Fatalf("phase %s, want done", f.phase(0))
		}
		if p := f.prog[1]; p.State != vec.Completed || p.Rows != 2 || !bytes.Equal(p.Pos, f.pos(1, 2)) {
			t.Fatalf("vnode 1 progress %s, want Completed at 1:2 with 2 rows", p)
		}
		fixWant(t, "upstream after the end", f.up(fixD(1, 5)), "- 1:5=n")
	})
	t.Run("no row left", func(t *testing.T) {
		f := newBFFix(t, fixRows(1, "a", 1, 2, 3)...)
		f.start([][]uint16{{1}}, nil)
		f.snap(1, 2) // position 1:2
		f.up(fixD(1, 3))
		f.barrier(fixBarrier{paused: true, ckpt: true}) // 1:3 is gone from the replicated view
		fixWant(t, "upstream", f.up(fixI(1, 5, "n"), fixU(1, 2, "b")))
		fixWant(t, "barrier", f.barrier(fixBarrier{}), "+ 1:5=n", "U- 1:2=a", "U+ 1:2=b")
		if f.phase(0) != done {
			t.Fatalf("phase %s, want done", f.phase(0))
		}
		if p := f.prog[1]; p.State != vec.Completed || p.Rows != 2 || !bytes.Equal(p.Pos, f.pos(1, 2)) {
			t.Fatalf("vnode 1 progress %s, want Completed at 1:2 with 2 rows", p)
		}
	})
}

// Marking is per row even when no vnode is InProgress (docs/design.md §6, fault 2): the rows
// of NotStarted vnodes are dropped and those of Completed vnodes kept, also when every
// vnode is NotStarted; an actor whose vnodes are all Completed passes everything on.
func TestBackfillRegressMarkingWithoutInProgress(t *testing.T) {
	t.Run("completed and not started", func(t *testing.T) {
		f := newBFFix(t, append(fixRows(0, "a", 1, 2), fixRows(1, "a", 1, 2)...)...)
		f.start([][]uint16{{0, 1, 2}}, map[uint16]storage.VnodeProgress{
			0: {State: vec.Completed, Pos: f.pos(0, 2), Rows: 2},
			2: {State: vec.Completed}, // empty
		})
		fixWant(t, "upstream", f.up(fixI(1, 5, "n"), fixI(0, 5, "m"), fixU(0, 1, "b"), fixD(1, 1), fixI(2, 1, "x"), fixUK(1, 2, 3, "y")))
		fixWant(t, "barrier", f.barrier(fixBarrier{paused: true}), "+ 0:5=m", "U- 0:1=a", "U+ 0:1=b", "+ 2:1=x")
		f.finish()
	})
	t.Run("all not started", func(t *testing.T) {
		f := newBFFix(t, fixRows(1, "a", 1, 2)...)
		f.start([][]uint16{{1, 2}}, nil)
		f.up(fixI(1, 5, "n"), fixU(1, 1, "b"), fixI(2, 1, "x"))
		fixWant(t, "barrier", f.barrier(fixBarrier{paused: true}))
		f.finish()
	})
	t.Run("all completed", func(t *testing.T) {
		f := newBFFix(t, fixRows(1, "a", 1, 2)...)
		f.start([][]uint16{{1, 2}}, map[uint16]storage.VnodeProgress{
			1: {State: vec.Completed, Pos: f.pos(1, 2), Rows: 2},
			2: {State: vec.Completed},
		})
		if f.phase(0) != done {
			t.Fatalf("phase %s, want done", f.phase(0))
		}
		fixWant(t, "upstream", f.up(fixU(1, 1, "b"), fixI(2, 1, "x"), fixHidden(vec.Delete, 1, 2, "a")), "U- 1:1=a", "U+ 1:1=b", "+ 2:1=x")
		fixWant(t, "barrier", f.barrier(fixBarrier{}))
	})
}

// Deletes during a rescale: deletes below and above the position and in a Completed
// vnode in the epoch that ends with the rescale barrier; the new actors read the
// committed upstream after it and must not bring deleted rows back, nor lose the ones
// behind the position; also after a crash right after the rescale.
func TestBackfillRegressDeletesDuringRescale(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			f := newBFFix(t, append(fixRows(0, "a", 1, 2, 3, 4, 5, 6), fixRows(1, "a", 1, 2, 3, 4)...)...)
			f.start([][]uint16{{0, 1}}, nil)
			f.snap(0, 3)
			f.snap(1, 4)
			f.barrier(fixBarrier{ckpt: true})
			fixWant(t, "upstream", f.up(fixD(0, 2), fixD(0, 5), fixD(1, 3), fixD(0, 4), fixD(0, 6)))
			fixWant(t, "rescale barrier", f.barrier(fixBarrier{paused: true, ckpt: true}), "- 0:2=a", "- 1:3=a")
			f.rescale([]uint16{1}, []uint16{0})
			fixWant(t, "upstream", f.up(fixD(0, 1), fixD(1, 4)), "- 1:4=a")
			if crash {
				f.crash()
			}
			got := f.barrier(fixBarrier{})
			if crash {
				fixWant(t, "barrier after the crash", got)
			} else {
				fixWant(t, "barrier", got, "- 0:1=a")
			}
			if f.phase(1) != done {
				t.Fatalf("vnode 0's actor: phase %s, want done (no row left after 0:3)", f.phase(1))
			}
			f.finish()
		})
	}
}

// A progress of the wrong shape never panics: positions over another vnode count are
// refused, an InProgress position that does not decode fails the barrier naming table
// and vnode, and snapshot batches of vnodes not owned or already Completed are refused.
func TestBackfillRegressBadProgressShape(t *testing.T) {
	tab := fixTable()
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	if _, err := newBackfillCore(tab, nil, fixS2, vnode.Full(fixVnodes), vec.NewPositions(fixVnodes+1), make([]int64, fixVnodes+1), mem); err == nil {
		t.Fatalf("positions over %d vnodes of a %d-vnode table accepted", fixVnodes+1, fixVnodes)
	}
	pos := vec.NewPositions(fixVnodes)
	pos.State[1], pos.Pos[1] = vec.InProgress, []byte{0x01}
	pos.State[2] = vec.Completed
	rows := make([]int64, fixVnodes)
	rows[1] = 1
	c, err := newBackfillCore(tab, nil, fixS2, vnode.NewBitmap(fixVnodes, 1, 2), pos, rows, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer c.release()
	for _, v := range []uint16{0, 2, fixVnodes} {
		if _, err := c.snapshot(storage.SnapshotBatch{Vnode: v, End: true}); err == nil {
			t.Errorf("snapshot batch of vnode %d accepted", v)
		}
	}
	f := newBFFix(t)
	ch := f.build(fixI(1, 1, "a"))
	c.upstream(ch)
	_, _, _, err = c.barrier()
	if err == nil || !strings.Contains(err.Error(), "fix") || !strings.Contains(err.Error(), "vnode 1") {
		t.Fatalf("barrier with a truncated position: %v, want an error naming table fix and vnode 1", err)
	}
}
