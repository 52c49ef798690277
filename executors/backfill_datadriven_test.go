package executors

// TestBackfillDataDriven runs the scripts under testdata/backfill against backfillCore,
// the arrangement backfill's state machine (docs/design.md §6). The harness plays what
// surrounds the core in the executor: the upstream change stream, the snapshot reader,
// the progress table, recovery and rescaling, and the downstream MV.
//
// The table is (g int16, k int32, v varchar NULL, x int64 NULL) with pk (g, k),
// distributed by g over 4 vnodes; the backfill's output columns (S2) are g, k and v.
// Scripts name a row by its vnode and k, written V/k: the harness picks one g per
// vnode, so that every row V/k lies in vnode V and the rows of a vnode are in k order.
// x is k in every upstream row and is never printed (S2 drops it). Values are single
// words; NULL is the SQL NULL.
//
// Commands:
//
//	init vnodes=(V,...) [spill]
//	    a fresh backfill (every vnode NotStarted) owning the given vnodes; spill gives
//	    the epoch buffer a budget of one byte, so that every buffered chunk goes to
//	    disk (barriers then print how many chunks have).
//	upstream
//	    one upstream chunk, a row per line: "op V/k [value] [hidden]", op one of + - U- U+.
//	    A delete without a value deletes the value the table holds. Prints what the
//	    core emits at once: "buffered" while it backfills.
//	snapshot vnode=V
//	    one snapshot batch of vnode V: a row per line, "k value", in k order above the
//	    vnode's position; a last line "end" ends the vnode's snapshot. Prints what the
//	    core emits.
//	barrier [checkpoint=false]
//	    ends the epoch; prints the rows emitted downstream, the rows written to the
//	    replicated table and the progress rows persisted, then the phase. A checkpoint
//	    barrier (the default) also commits them. The executor's "at least one row"
//	    read at a barrier that got no snapshot row is not modelled: a script feeds
//	    that row with snapshot before the barrier.
//	pause, resume
//	    the pause lives in the executor (it opens no snapshot read while paused), not
//	    in the core: the harness refuses snapshot batches while paused.
//	crash
//	    drops the core and what happened since the last checkpoint, and builds a new
//	    core from the committed progress rows of the same vnodes, as recovery does; the
//	    script then replays the lost epochs (the upstream replays its changes, the
//	    snapshot is read again from the committed positions).
//	rescale vnodes=(V,...)
//	    right after a checkpoint: a new core owning the given vnodes, from their
//	    progress rows.
//	mv
//	    prints the downstream MV.
//
// Rows print as "op V/k value", progress rows as "vnode=V state=S pos=V/k rows=N". After
// every barrier the harness checks that the MV holds, of each owned vnode, exactly the
// rows the table holds at or below the vnode's position (every row once Completed,
// none while NotStarted), and it checks every emitted chunk against the MV (no insert
// of a row present, no delete of a row absent); a violation fails the test. The
// harness also checks the script: snapshot rows must agree with the table as of the
// epoch's start, as the real snapshot read does.

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/datadriven"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

func TestBackfillDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/backfill", func(t *testing.T, path string) {
		h := newDDBackfill(t)
		// A violation is printed where it happens, so that the diff shows it, and fails
		// the test once the file is done, even with -rewrite.
		t.Cleanup(h.close)
		datadriven.RunTest(t, path, h.run)
	})
}

const ddVnodes = 4

// ddKey is a row's pk as scripts write it: vnode and k.
type ddKey struct {
	vn uint16
	k  int32
}

func (k ddKey) String() string { return fmt.Sprintf("%d/%d", k.vn, k.k) }

func ddCompare(a, b ddKey) int {
	if a.vn != b.vn {
		return int(a.vn) - int(b.vn)
	}
	return int(a.k) - int(b.k)
}

// ddVal is a value of v.
type ddVal struct {
	null bool
	s    string
}

func (v ddVal) String() string {
	if v.null {
		return "NULL"
	}
	return v.s
}

func parseDDVal(s string) ddVal {
	if s == "NULL" {
		return ddVal{null: true}
	}
	return ddVal{s: s}
}

type ddRow struct {
	op     vec.Op
	key    ddKey
	val    ddVal
	hidden bool
}

func (r ddRow) String() string { return fmt.Sprintf("%v %v %v", r.op, r.key, r.val) }

type ddBackfill struct {
	t   *testing.T
	mem *memory.CheckedAllocator
	tab *schema.Table
	k   vec.Kernels
	gOf []int16          // vnode -> the g of its rows
	vOf map[int16]uint16 // g -> vnode
	s2  []int            // the backfill's columns
	out *strings.Builder // the command's output
	dir string           // spill directory

	core   *backfillCore
	owned  []uint16
	spill  bool
	paused bool
	busy   bool // something happened since the last barrier

	table map[ddKey]ddVal // the upstream table now, as far as the script has shown it
	start map[ddKey]ddVal // the table at the epoch's start: what the snapshot reads
	moved map[ddKey]bool  // rows changed by the upstream this epoch
	mv    map[ddKey]ddVal // the downstream MV
	prog  []storage.VnodeProgress

	// The state as of the last checkpoint.
	ckTable map[ddKey]ddVal
	ckMV    map[ddKey]ddVal
	ckProg  []storage.VnodeProgress
	ckBusy  bool // a barrier since the last checkpoint

	violations []string
}

func newDDBackfill(t *testing.T) *ddBackfill {
	tab := &schema.Table{
		Name: "dd",
		Columns: []schema.Column{
			{Name: "g", Type: schema.Type{Kind: schema.Int16}},
			{Name: "k", Type: schema.Type{Kind: schema.Int32}},
			{Name: "v", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
			{Name: "x", Type: schema.Type{Kind: schema.Int64}, Nullable: true},
		},
		PK:         []schema.KeyColumn{{Column: 0}, {Column: 1}},
		DistKey:    []int{0},
		VnodeCount: ddVnodes,
	}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	h := &ddBackfill{t: t, mem: memory.NewCheckedAllocator(memory.NewGoAllocator()), tab: tab, k: vec.For(tab),
		s2: []int{0, 1, 2}, vOf: map[int16]uint16{}, dir: t.TempDir()}
	// The smallest g of each vnode.
	h.gOf = make([]int16, ddVnodes)
	for g := int16(0); len(h.vOf) < ddVnodes; g++ {
		if g == 1000 {
			t.Fatalf("no g among 0..999 for some vnode: %v", h.vOf)
		}
		v := h.vnodeOfG(g)
		if slices.Contains(slices.Collect(maps.Values(h.vOf)), v) {
			continue
		}
		h.gOf[v] = g
		h.vOf[g] = v
	}
	h.reset()
	return h
}

// vnodeOfG computes the vnode of the rows with the given g, with the table's kernels.
func (h *ddBackfill) vnodeOfG(g int16) uint16 {
	ch := h.chunk([]ddRow{{key: ddKey{k: 0}}}, []int16{g})
	defer ch.Release()
	vn := make([]uint16, 1)
	h.k.Vnodes(ch, vn)
	return vn[0]
}

func (h *ddBackfill) reset() {
	if h.core != nil {
		h.core.release()
		h.core = nil
	}
	h.table, h.start, h.moved, h.mv = map[ddKey]ddVal{}, map[ddKey]ddVal{}, map[ddKey]bool{}, map[ddKey]ddVal{}
	h.prog = make([]storage.VnodeProgress, ddVnodes)
	h.ckTable, h.ckMV, h.ckProg = map[ddKey]ddVal{}, map[ddKey]ddVal{}, slices.Clone(h.prog)
	h.paused, h.busy, h.ckBusy = false, false, false
}

func (h *ddBackfill) close() {
	for _, v := range h.violations {
		h.t.Error(v)
	}
	if h.core != nil {
		h.core.release()
		h.core = nil
	}
	if !h.t.Failed() {
		h.mem.AssertSize(h.t, 0)
	}
}

// chunk builds an upstream chunk (S1) of rows; gs overrides each row's g when given.
func (h *ddBackfill) chunk(rows []ddRow, gs []int16) *vec.Chunk {
	gb, kb := array.NewInt16Builder(h.mem), array.NewInt32Builder(h.mem)
	vb, xb := array.NewStringBuilder(h.mem), array.NewInt64Builder(h.mem)
	ops := make([]vec.Op, len(rows))
	vis := make([]bool, len(rows))
	for i, r := range rows {
		var g int16
		if gs != nil {
			g = gs[i]
		} else {
			g = h.gOf[r.key.vn]
		}
		gb.Append(g)
		kb.Append(r.key.k)
		if r.val.null {
			vb.AppendNull()
		} else {
			vb.Append(r.val.s)
		}
		xb.Append(int64(r.key.k))
		ops[i], vis[i] = r.op, !r.hidden
	}
	cols := []arrow.Array{gb.NewArray(), kb.NewArray(), vb.NewArray(), xb.NewArray()}
	for _, b := range []array.Builder{gb, kb, vb, xb} {
		b.Release()
	}
	rec := array.NewRecordBatch(h.tab.ArrowSchema(), cols, int64(len(rows)))
	for _, a := range cols {
		a.Release()
	}
	defer rec.Release()
	return vectest.ChunkOf(h.mem, rec, ops, vis)
}

// rows decodes the visible rows of an S2 chunk.
func (h *ddBackfill) rows(ch *vec.Chunk) ([]ddRow, error) {
	rec := ch.Record()
	if !rec.Schema().Equal(h.core.Schema()) {
		return nil, fmt.Errorf("a chunk with columns %s, not S2 %s", rec.Schema(), h.core.Schema())
	}
	if err := vectest.ChangelogError(ch); err != nil {
		return nil, fmt.Errorf("not a changelog: %w", err)
	}
	gs, ks, vs := rec.Column(0).(*array.Int16), rec.Column(1).(*array.Int32), rec.Column(2).(*array.String)
	var out []ddRow
	for i, ops := 0, ch.Ops(); i < ch.NumRows(); i++ {
		if !ch.Visible(i) {
			continue
		}
		vn, ok := h.vOf[gs.Value(i)]
		if !ok {
			return nil, fmt.Errorf("row %d: g %d is no vnode's", i, gs.Value(i))
		}
		r := ddRow{op: ops[i], key: ddKey{vn, ks.Value(i)}, val: ddVal{null: vs.IsNull(i)}}
		if !r.val.null {
			r.val.s = vs.Value(i)
		}
		out = append(out, r)
	}
	return out, nil
}

// pos renders a position key as V/k.
func (h *ddBackfill) pos(key []byte) string {
	k, err := h.decodePos(key)
	if err != nil {
		return fmt.Sprintf("%x (%v)", key, err)
	}
	return k.String()
}

func (h *ddBackfill) decodePos(key []byte) (ddKey, error) {
	_, rest, err := vec.DecodeKeyMarker(key, false)
	var g int16
	var k int32
	if err == nil {
		g, rest, err = vec.DecodeKeyInt16(rest, false)
	}
	if err == nil {
		_, rest, err = vec.DecodeKeyMarker(rest, false)
	}
	if err == nil {
		k, rest, err = vec.DecodeKeyInt32(rest, false)
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("%d bytes after the pk", len(rest))
	}
	vn, ok := h.vOf[g]
	if err == nil && !ok {
		err = fmt.Errorf("g %d is no vnode's", g)
	}
	return ddKey{vn, k}, err
}

func (h *ddBackfill) printf(format string, args ...any) {
	fmt.Fprintf(h.out, format+"\n", args...)
}

// fail prints an invariant violation and records it, to fail the test.
func (h *ddBackfill) fail(td *datadriven.TestData, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.printf("%s", msg)
	h.violations = append(h.violations, fmt.Sprintf("%s: %s", td.Pos, strings.TrimSpace(msg)))
}

func (h *ddBackfill) run(t *testing.T, td *datadriven.TestData) string {
	var b strings.Builder
	h.out = &b
	var before backfillPhase
	if h.core != nil {
		before = h.core.Phase()
	}
	if td.Cmd != "init" && h.core == nil {
		td.Fatalf(t, "%s before init", td.Cmd)
	}
	switch td.Cmd {
	case "init":
		h.reset()
		h.spill = td.HasArg("spill")
		h.build(t, td, h.vnodesArg(t, td))
	case "upstream":
		h.upstream(t, td)
	case "snapshot":
		h.snapshot(t, td)
	case "barrier":
		h.barrier(t, td)
		return b.String()
	case "pause", "resume":
		h.paused = td.Cmd == "pause"
		h.printf("%s", map[bool]string{true: "paused", false: "resumed"}[h.paused])
	case "crash":
		h.core.release()
		h.core = nil
		h.table, h.mv, h.prog = maps.Clone(h.ckTable), maps.Clone(h.ckMV), slices.Clone(h.ckProg)
		h.build(t, td, h.owned)
	case "rescale":
		if h.busy || h.ckBusy {
			h.printf("error: a rescale happens at a checkpoint barrier")
			break
		}
		h.core.release()
		h.core = nil
		h.build(t, td, h.vnodesArg(t, td))
	case "mv":
		keys := slices.SortedFunc(maps.Keys(h.mv), ddCompare)
		for _, k := range keys {
			h.printf("%v %v", k, h.mv[k])
		}
		if len(keys) == 0 {
			h.printf("(empty)")
		}
	default:
		td.Fatalf(t, "unknown command %s", td.Cmd)
	}
	if h.core != nil && h.core.Phase() != before && td.Cmd != "init" && td.Cmd != "crash" && td.Cmd != "rescale" {
		h.printf("phase %s", h.core.Phase())
	}
	return b.String()
}

func (h *ddBackfill) vnodesArg(t *testing.T, td *datadriven.TestData) []uint16 {
	arg, ok := td.Arg("vnodes")
	if !ok {
		td.Fatalf(t, "%s needs vnodes=(...)", td.Cmd)
	}
	var out []uint16
	for _, s := range arg.Vals {
		v, err := strconv.ParseUint(s, 10, 16)
		if err != nil || v >= ddVnodes {
			td.Fatalf(t, "bad vnode %q", s)
		}
		out = append(out, uint16(v))
	}
	slices.Sort(out)
	return out
}

// build creates the core owning vnodes from the persisted progress rows, as the
// executor's init does from the progress table, and prints what it starts from.
func (h *ddBackfill) build(t *testing.T, td *datadriven.TestData, vnodes []uint16) {
	pos := vec.NewPositions(ddVnodes)
	rows := make([]int64, ddVnodes)
	for _, v := range vnodes {
		pos.State[v] = h.prog[v].State
		pos.Pos[v] = slices.Clone(h.prog[v].Pos)
		rows[v] = h.prog[v].Rows
	}
	core, err := newBackfillCore(h.tab, h.k, h.s2, vnode.NewBitmap(ddVnodes, vnodes...), pos, rows, h.mem)
	if err != nil {
		td.Fatalf(t, "new core: %v", err)
	}
	if h.spill {
		core.setBuffer(1, h.dir)
	}
	h.core, h.owned = core, vnodes
	h.start, h.moved = maps.Clone(h.table), map[ddKey]bool{}
	h.busy, h.ckBusy, h.paused = false, false, false
	h.printf("vnodes %v", vnodes)
	for _, v := range vnodes {
		h.printf("%s", h.progressRow(v, h.prog[v]))
	}
	h.printf("phase %s", core.Phase())
}

func (h *ddBackfill) progressRow(v uint16, p storage.VnodeProgress) string {
	s := fmt.Sprintf("vnode=%d state=%s", v, p.State)
	if p.Pos != nil {
		s += " pos=" + h.pos(p.Pos)
	}
	return s + fmt.Sprintf(" rows=%d", p.Rows)
}

// emit prints the rows of chunks (indented by ind), applies them to the MV when
// toMV, checking them against it, and releases the chunks.
func (h *ddBackfill) emit(t *testing.T, td *datadriven.TestData, chunks []*vec.Chunk, ind string, toMV bool) {
	n := 0
	for _, ch := range chunks {
		rows, err := h.rows(ch)
		ch.Release()
		if err != nil {
			h.fail(td, "%sbad chunk: %v", ind, err)
			continue
		}
		for _, r := range rows {
			n++
			h.printf("%s%v", ind, r)
			if !toMV {
				continue
			}
			old, ok := h.mv[r.key]
			switch {
			case r.op.IsInsert() && ok:
				h.fail(td, "%s  error: the MV already holds %v %v", ind, r.key, old)
			case r.op.IsInsert():
				h.mv[r.key] = r.val
			case !ok:
				h.fail(td, "%s  error: the MV holds no %v", ind, r.key)
			case old != r.val:
				h.fail(td, "%s  error: the MV holds %v %v", ind, r.key, old)
			default:
				delete(h.mv, r.key)
			}
		}
	}
	if n == 0 && ind != "" {
		h.printf("%s(none)", ind)
	}
}

func (h *ddBackfill) upstream(t *testing.T, td *datadriven.TestData) {
	var rows []ddRow
	next := maps.Clone(h.table)   // the table after the chunk
	revealed := map[ddKey]ddVal{} // rows the chunk deletes that the script had not shown
	for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		r := ddRow{}
		switch f[0] {
		case "+":
			r.op = vec.Insert
		case "-":
			r.op = vec.Delete
		case "U-":
			r.op = vec.UpdateDelete
		case "U+":
			r.op = vec.UpdateInsert
		default:
			td.Fatalf(t, "bad op in %q", line)
		}
		if n := len(f); n > 2 && f[n-1] == "hidden" {
			r.hidden, f = true, f[:n-1]
		}
		if len(f) < 2 || len(f) > 3 {
			td.Fatalf(t, "want \"op V/k [value] [hidden]\", got %q", line)
		}
		vs, ks, ok := strings.Cut(f[1], "/")
		v, err1 := strconv.ParseUint(vs, 10, 16)
		k, err2 := strconv.ParseInt(ks, 10, 32)
		if !ok || err1 != nil || err2 != nil || v >= ddVnodes {
			td.Fatalf(t, "bad row key %q", f[1])
		}
		r.key = ddKey{uint16(v), int32(k)}
		if !slices.Contains(h.owned, r.key.vn) {
			h.printf("error: %v: vnode %d is not this actor's (the dispatcher sends it elsewhere)", r.key, r.key.vn)
			return
		}
		old, had := next[r.key]
		switch {
		case len(f) == 3:
			r.val = parseDDVal(f[2])
		case r.op.IsInsert():
			td.Fatalf(t, "%q: an insert needs a value", line)
		case !had:
			td.Fatalf(t, "%q: the table holds no %v to delete", line, r.key)
		default:
			r.val = old
		}
		if !r.hidden {
			moved := h.moved[r.key] || slices.ContainsFunc(rows, func(o ddRow) bool { return o.key == r.key && !o.hidden })
			switch {
			case r.op.IsInsert() && had:
				td.Fatalf(t, "%q: the table already holds %v %v", line, r.key, old)
			case r.op.IsInsert():
				next[r.key] = r.val
			case !had && !moved && !h.read(r.key):
				// A row the snapshot has not reached yet: it was there at the epoch's start.
				revealed[r.key] = r.val
			case !had || old != r.val:
				td.Fatalf(t, "%q: the table holds %v %v (present: %v)", line, r.key, old, had)
			default:
				delete(next, r.key)
			}
		}
		rows = append(rows, r)
	}
	for _, r := range rows {
		if !r.hidden {
			h.moved[r.key] = true
		}
	}
	maps.Copy(h.start, revealed)
	h.table, h.busy = next, true
	out := h.core.upstream(h.chunk(rows, nil))
	if h.core.Phase() == backfilling {
		h.printf("buffered")
	}
	h.emit(t, td, out, "", true)
}

// read reports whether the snapshot has read past key (so that the script has shown
// the row if the table holds it).
func (h *ddBackfill) read(key ddKey) bool {
	switch h.core.pos.State[key.vn] {
	case vec.Completed:
		return true
	case vec.InProgress:
		p, err := h.decodePos(h.core.pos.Pos[key.vn])
		return err != nil || key.k <= p.k
	}
	return false
}

func (h *ddBackfill) snapshot(t *testing.T, td *datadriven.TestData) {
	var v int
	td.ScanArgs(t, "vnode", &v)
	if v < 0 || v >= ddVnodes {
		td.Fatalf(t, "bad vnode %d", v)
	}
	if h.paused {
		h.printf("error: paused: the executor opens no snapshot read")
		return
	}
	vn := uint16(v)
	// The read starts after the vnode's position; have reports that it has one. The
	// harness checks the batch against the table unless the core is to refuse it (a
	// vnode not pending).
	after, have, pending := int32(0), false, false
	for _, p := range h.core.pending() {
		if p.Vnode != vn {
			continue
		}
		pending = true
		if p.After != nil {
			k, err := h.decodePos(p.After)
			if err != nil {
				td.Fatalf(t, "position of vnode %d: %v", vn, err)
			}
			after, have = k.k, true
		}
	}
	above := func(k int32) bool { return pending && (!have || k > after) }
	var rows []ddRow
	end := false
	for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case end:
			td.Fatalf(t, "%q after end", line)
		case len(f) == 1 && f[0] == "end":
			end = true
			continue
		case len(f) != 2:
			td.Fatalf(t, "want \"k value\" or \"end\", got %q", line)
		}
		k, err := strconv.ParseInt(f[0], 10, 32)
		if err != nil {
			td.Fatalf(t, "bad k in %q", line)
		}
		if pending && !above(int32(k)) {
			td.Fatalf(t, "%q: the read is past k %d", line, after)
		}
		r := ddRow{op: vec.Insert, key: ddKey{vn, int32(k)}, val: parseDDVal(f[1])}
		// The snapshot reads the table as of the epoch's start.
		for key, val := range h.start {
			if key.vn == vn && above(key.k) && key.k < r.key.k {
				td.Fatalf(t, "%q: the snapshot skips %v %v", line, key, val)
			}
		}
		if old, ok := h.start[r.key]; pending && ok && old != r.val {
			td.Fatalf(t, "%q: the snapshot holds %v %v", line, r.key, old)
		}
		rows = append(rows, r)
		after, have = r.key.k, true
	}
	if end {
		for key, val := range h.start {
			if key.vn == vn && above(key.k) {
				td.Fatalf(t, "the snapshot of vnode %d ends before %v %v", vn, key, val)
			}
		}
	}
	b := storage.SnapshotBatch{Vnode: vn, Rows: len(rows), End: end}
	if len(rows) > 0 {
		ch := h.chunk(rows, nil)
		var keys vec.Bytes
		keys.Reset()
		h.k.EncodeKeys(ch, &keys)
		b.LastPK = slices.Clone(keys.At(len(rows) - 1))
		b.Record = array.NewRecordBatch(h.core.Schema(), ch.Record().Columns()[:3], int64(len(rows)))
		ch.Release()
	}
	h.busy = true
	out, err := h.core.snapshot(b)
	if err != nil {
		h.printf("error: %v", err)
		return
	}
	for _, r := range rows {
		h.start[r.key] = r.val
		if !h.moved[r.key] {
			h.table[r.key] = r.val
		}
	}
	h.emit(t, td, out, "", true)
}

func (h *ddBackfill) barrier(t *testing.T, td *datadriven.TestData) {
	checkpoint := true
	td.MaybeScanArgs(t, "checkpoint", &checkpoint)
	emit, replicate, progress, err := h.core.barrier()
	if err != nil {
		h.printf("error: %v", err)
		return
	}
	h.printf("emit")
	h.emit(t, td, emit, "  ", true)
	h.printf("replicate")
	h.emit(t, td, replicate, "  ", false)
	h.printf("progress")
	for _, p := range progress {
		h.printf("  %s", h.progressRow(p.Vnode, p.Progress))
		p.Progress.Pos = slices.Clone(p.Progress.Pos)
		h.prog[p.Vnode] = p.Progress
	}
	if len(progress) == 0 {
		h.printf("  (none)")
	}
	h.printf("phase %s", h.core.Phase())
	if h.spill {
		h.printf("spilled %d chunks so far", h.core.buf.spills)
	}
	h.checkMV(t, td)
	h.start, h.moved, h.busy = maps.Clone(h.table), map[ddKey]bool{}, false
	h.ckBusy = !checkpoint
	if checkpoint {
		h.ckTable, h.ckMV, h.ckProg = maps.Clone(h.table), maps.Clone(h.mv), slices.Clone(h.prog)
	}
}

// checkMV checks that the MV holds, of every owned vnode, the rows of the table at or
// below the vnode's persisted position.
func (h *ddBackfill) checkMV(t *testing.T, td *datadriven.TestData) {
	seen := maps.Clone(h.mv)
	maps.Copy(seen, h.table)
	keys := slices.SortedFunc(maps.Keys(seen), ddCompare)
	for _, key := range keys {
		if !slices.Contains(h.owned, key.vn) {
			continue
		}
		p := h.prog[key.vn]
		want := p.State == vec.Completed
		if p.State == vec.InProgress {
			pk, err := h.decodePos(p.Pos)
			want = err == nil && key.k <= pk.k
		}
		val, inTable := h.table[key]
		got, inMV := h.mv[key]
		switch {
		case want && inTable && !inMV:
			h.fail(td, "error: the MV lacks %v %v", key, val)
		case want && inMV && !inTable:
			h.fail(td, "error: the MV holds %v %v, the table no such row", key, got)
		case want && inMV && got != val:
			h.fail(td, "error: the MV holds %v %v, the table %v", key, got, val)
		case !want && inMV:
			h.fail(td, "error: the MV holds %v %v, above the position of its vnode", key, got)
		}
	}
}
