package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// The helpers of this file are prefixed prog so that they do not collide with other
// tests of the package.

const progName = "mv_progress"

func progCol(name string, kind schema.Kind, nullable bool) schema.Column {
	return schema.Column{Name: name, Type: schema.Type{Kind: kind}, Nullable: nullable}
}

func progTable(t testing.TB, name string, vnodes int, cols []schema.Column, pk ...schema.KeyColumn) *schema.Table {
	t.Helper()
	tab := &schema.Table{Name: name, Columns: cols, PK: pk, VnodeCount: vnodes}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	return tab
}

// progCase is an upstream schema with sample positions (valid memcomparable pks) in
// increasing order.
type progCase struct {
	name string
	up   *schema.Table
	pos  [][]byte
}

func progSingle(t testing.TB) progCase {
	up := progTable(t, "single", 16, []schema.Column{progCol("id", schema.Int64, false), progCol("v", schema.Varchar, true)},
		schema.KeyColumn{Column: 0})
	var pos [][]byte
	for _, x := range []int64{math.MinInt64, -7, 0, 42, math.MaxInt64} {
		pos = append(pos, vec.AppendKeyInt64(nil, x, false))
	}
	return progSorted(progCase{"single", up, pos})
}

// progMulti has a pk of every kind of column order: asc and desc, nulls first and last,
// NOT NULL and nullable, fixed and variable width.
func progMulti(t testing.TB) progCase {
	dec := schema.Type{Kind: schema.Decimal, Precision: 20, Scale: 3}
	up := progTable(t, "multi", 64, []schema.Column{
		progCol("region", schema.Varchar, false),
		progCol("ts", schema.Timestamp, true),
		progCol("seq", schema.Int16, true),
		progCol("score", schema.Float64, true),
		progCol("ok", schema.Boolean, true),
		{Name: "amount", Type: dec, Nullable: true},
		progCol("payload", schema.Bytea, true),
		progCol("day", schema.Date, false),
		progCol("note", schema.Varchar, true),
	},
		schema.KeyColumn{Column: 0},
		schema.KeyColumn{Column: 1, Desc: true, NullsFirst: true},
		schema.KeyColumn{Column: 2, NullsFirst: true},
		schema.KeyColumn{Column: 3, Desc: true},
		schema.KeyColumn{Column: 4},
		schema.KeyColumn{Column: 5, Desc: true, NullsFirst: true},
		schema.KeyColumn{Column: 6, Desc: true},
		schema.KeyColumn{Column: 7, Desc: true},
	)
	type row struct {
		region  string
		ts      *int64
		seq     *int16
		score   *float64
		ok      *bool
		amount  *decimal128.Num
		payload []byte // nil: NULL
		day     int32
	}
	i64 := func(x int64) *int64 { return &x }
	i16 := func(x int16) *int16 { return &x }
	f64 := func(x float64) *float64 { return &x }
	bl := func(x bool) *bool { return &x }
	dc := func(x int64) *decimal128.Num { n := decimal128.FromI64(x); return &n }
	rows := []row{
		{region: "eu", day: 3},
		{region: "eu-west-1-long-name", ts: i64(1_700_000_000_000_000), seq: i16(-3), score: f64(math.NaN()), ok: bl(true), amount: dc(-12345), payload: []byte("12345678"), day: -40},
		{region: "us", ts: i64(-5), seq: i16(7), score: f64(math.Inf(-1)), ok: bl(false), amount: dc(999), payload: []byte{}, day: 0},
		{region: "", ts: i64(0), score: f64(-1.5), payload: []byte{0, 0xff, 0}, day: 1},
	}
	var pos [][]byte
	for _, r := range rows {
		k := vec.AppendKeyString(nil, r.region, false)
		if r.ts == nil {
			k = vec.AppendKeyNull(k, true)
		} else {
			k = vec.AppendKeyInt64(k, *r.ts, true)
		}
		if r.seq == nil {
			k = vec.AppendKeyNull(k, true)
		} else {
			k = vec.AppendKeyInt16(k, *r.seq, false)
		}
		if r.score == nil {
			k = vec.AppendKeyNull(k, false)
		} else {
			k = vec.AppendKeyFloat64(k, *r.score, true)
		}
		if r.ok == nil {
			k = vec.AppendKeyNull(k, false)
		} else {
			k = vec.AppendKeyBool(k, *r.ok, false)
		}
		if r.amount == nil {
			k = vec.AppendKeyNull(k, true)
		} else {
			k = vec.AppendKeyDecimal(k, *r.amount, true)
		}
		if r.payload == nil {
			k = vec.AppendKeyNull(k, false)
		} else {
			k = vec.AppendKeyBytes(k, r.payload, true)
		}
		k = vec.AppendKeyInt32(k, r.day, true)
		pos = append(pos, k)
	}
	return progSorted(progCase{"multi", up, pos})
}

func progBid(t testing.TB) progCase {
	var pos [][]byte
	for _, k := range []tables.BidPK{{Auction: 1000, Bidder: 7, DateTime: 1}, {Auction: 1000, Bidder: 8, DateTime: 0}, {Auction: 1001, Bidder: -1, DateTime: 99}} {
		pos = append(pos, tables.AppendBidPK(nil, &k))
	}
	return progSorted(progCase{"bid", tables.BidTable(), pos})
}

// progAllNull has only nullable pk columns, so the all-NULL pk is a real position.
func progAllNull(t testing.TB) progCase {
	up := progTable(t, "allnull", 16, []schema.Column{progCol("a", schema.Int32, true), progCol("b", schema.Varchar, true)},
		schema.KeyColumn{Column: 0, NullsFirst: true}, schema.KeyColumn{Column: 1, Desc: true})
	pos := [][]byte{
		vec.AppendKeyNull(vec.AppendKeyNull(nil, true), false),
		vec.AppendKeyNull(vec.AppendKeyInt32(nil, 5, false), false),
		vec.AppendKeyString(vec.AppendKeyInt32(nil, 5, false), "x", true),
	}
	return progSorted(progCase{"allnull", up, pos})
}

func progSorted(c progCase) progCase {
	slices.SortFunc(c.pos, bytes.Compare)
	return c
}

func progCases(t testing.TB) []progCase {
	return []progCase{progSingle(t), progMulti(t), progBid(t), progAllNull(t)}
}

func progOpen(t testing.TB, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open("db", Options{FS: fs, CacheSize: 1 << 20, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func progNew(t testing.TB, n *Node, up *schema.Table, vnodes *vnode.Bitmap) *ProgressTable {
	t.Helper()
	p, err := NewProgressTable(n, 7, progName, up, vnodes)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func progLoad(t testing.TB, p *ProgressTable, view *View) (*vec.Positions, []int64) {
	t.Helper()
	defer view.Release()
	pos, rows, err := p.Load(view)
	if err != nil {
		t.Fatal(err)
	}
	return pos, rows
}

func progNodeView(t testing.TB, n *Node) *View {
	t.Helper()
	v, err := n.View()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func progStoreView(t testing.TB, s *Store) *View {
	t.Helper()
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// progCheck compares loaded positions with the expected progress per vnode (missing
// vnodes: NotStarted).
func progCheck(t testing.TB, what string, pos *vec.Positions, rows []int64, want map[uint16]VnodeProgress) {
	t.Helper()
	if len(pos.State) != len(rows) || len(pos.Pos) != len(rows) {
		t.Fatalf("%s: %d states, %d positions, %d row counts", what, len(pos.State), len(pos.Pos), len(rows))
	}
	for v := range rows {
		got := VnodeProgress{State: pos.State[v], Pos: pos.Pos[v], Rows: rows[v]}
		w := want[uint16(v)]
		if !got.Equal(w) || (w.Pos == nil) != (got.Pos == nil) {
			t.Errorf("%s: vnode %d: got %s, want %s", what, v, got, w)
		}
	}
}

// progStates are the states a vnode can be written in, from a case's positions.
func progStates(c progCase) []VnodeProgress {
	out := []VnodeProgress{{State: vec.Completed}}
	for i, p := range c.pos {
		out = append(out,
			VnodeProgress{State: vec.InProgress, Pos: p, Rows: int64(i + 1)},
			VnodeProgress{State: vec.Completed, Pos: p, Rows: int64(1000 + i)})
	}
	out = append(out, VnodeProgress{State: vec.InProgress, Pos: c.pos[0], Rows: 0}) // allowed: no count yet
	return out
}

// TestProgressRoundTrip writes every state of every upstream schema, and reads it back
// through the writer's own unsealed writes, the node's sealed epoch, and the committed
// store; the stored rows hold the decoded pk columns.
func TestProgressRoundTrip(t *testing.T) {
	for _, c := range progCases(t) {
		t.Run(c.name, func(t *testing.T) {
			s := progOpen(t, vfs.NewMem())
			n := s.AddNode()
			full := vnode.Full(c.up.VnodeCount)
			p := progNew(t, n, c.up, full)
			pos, rows := progLoad(t, p, progNodeView(t, n))
			progCheck(t, "empty", pos, rows, nil)

			want := map[uint16]VnodeProgress{}
			states := progStates(c)
			if len(states) > c.up.VnodeCount-1 {
				t.Fatalf("%d states for %d vnodes", len(states), c.up.VnodeCount)
			}
			for i, vp := range states {
				v := uint16(c.up.VnodeCount - 1 - i) // the last vnodes, leaving vnode 0 NotStarted
				if err := p.Set(v, vp); err != nil {
					t.Fatalf("Set(%d, %s): %v", v, vp, err)
				}
				want[v] = vp
			}
			if p.Changed() != len(states) {
				t.Fatalf("Changed() = %d, want %d", p.Changed(), len(states))
			}
			pos, rows = progLoad(t, p, progNodeView(t, n))
			progCheck(t, "unsealed", pos, rows, want)

			p.Seal(5)
			if p.Changed() != 0 {
				t.Fatalf("Changed() = %d after Seal", p.Changed())
			}
			pos, rows = progLoad(t, progNew(t, n, c.up, full), progNodeView(t, n))
			progCheck(t, "sealed", pos, rows, want)
			other := s.AddNode()
			pos, rows = progLoad(t, progNew(t, other, c.up, full), progNodeView(t, other))
			progCheck(t, "another node before the checkpoint", pos, rows, nil)

			if _, err := s.Checkpoint(5); err != nil {
				t.Fatal(err)
			}
			pos, rows = progLoad(t, progNew(t, other, c.up, full), progStoreView(t, s))
			progCheck(t, "committed", pos, rows, want)
			if n, err := s.TableRowCount(7); err != nil || n != int64(len(states)) {
				t.Fatalf("progress table row count %d (%v), want %d", n, err, len(states))
			}
			progCheckInspectable(t, s, p, c.up, want)
		})
	}
}

// progCheckInspectable decodes the committed progress rows with the generic value codec
// of the derived schema and checks every column against the progress written.
func progCheckInspectable(t *testing.T, s *Store, p *ProgressTable, up *schema.Table, want map[uint16]VnodeProgress) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	pt := p.Schema()
	if pt.Name != progName || len(pt.Columns) != len(up.PK)+3 {
		t.Fatalf("derived schema:\n%s", pt.Canonical())
	}
	for i, k := range up.PK {
		c := pt.Columns[1+i]
		if c.Name != "pos_"+up.Columns[k.Column].Name || c.Type != up.Columns[k.Column].Type || !c.Nullable {
			t.Fatalf("position column %d is %+v", i, c)
		}
	}
	it, err := s.DB().NewIter(&pebble.IterOptions{LowerBound: []byte{0, 0, 0, 7}, UpperBound: []byte{0, 0, 0, 8}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var vals vec.Bytes
	var order []uint16
	for ok := it.First(); ok; ok = it.Next() {
		v := binary.BigEndian.Uint16(it.Key()[4:])
		order = append(order, v)
		vals.Append(it.Value())
	}
	if len(order) != len(want) {
		t.Fatalf("%d rows stored, want %d", len(order), len(want))
	}
	all := vectest.AllColumns(pt)
	bs := vectest.ValueBuildersFor(mem, pt, all)
	if err := vec.NewGeneric(pt).DecodeValues(&vals, all, bs); err != nil {
		vectest.ReleaseBuilders(bs)
		t.Fatal(err)
	}
	rec := vectest.FinishRecord(pt, all, bs, len(order))
	defer rec.Release()
	// The rows are the value codec's own: the generic encoder writes them byte for byte.
	ch := vectest.ChunkOf(mem, rec, make([]vec.Op, len(order)), nil)
	var again vec.Bytes
	vec.NewGeneric(pt).EncodeValues(ch, &again)
	ch.Release()
	for r := range order {
		if !bytes.Equal(again.At(r), vals.At(r)) {
			t.Errorf("vnode %d: stored value %x, the generic encoder writes %x", order[r], vals.At(r), again.At(r))
		}
	}
	for r, v := range order {
		w := want[v]
		gotV := rec.Column(0).(*array.Int32).Value(r)
		gotFin := rec.Column(len(up.PK) + 1).(*array.Boolean).Value(r)
		gotRows := rec.Column(len(up.PK) + 2).(*array.Int64).Value(r)
		if gotV != int32(v) || gotFin != (w.State == vec.Completed) || gotRows != w.Rows {
			t.Errorf("vnode %d: row %s, want %s", v, vectest.FormatRow(rec, r), w)
		}
		// The position columns hold the upstream pk, decoded.
		if w.Pos == nil {
			for i := range up.PK {
				if !rec.Column(1 + i).IsNull(r) {
					t.Errorf("vnode %d: empty Completed vnode has %s in %s", v, vectest.FormatValue(rec.Column(1+i), r), pt.Columns[1+i].Name)
				}
			}
			continue
		}
		var one vec.Bytes
		one.Append(w.Pos)
		kb := vectest.BuildersFor(mem, up, up.PKColumns())
		if err := vec.NewGeneric(up).DecodeKeys(&one, kb); err != nil {
			vectest.ReleaseBuilders(kb)
			t.Fatal(err)
		}
		pk := vectest.FinishRecord(up, up.PKColumns(), kb, 1)
		for i := range up.PK {
			if !vectest.ValuesEqual(rec.Column(1+i), r, pk.Column(i), 0) {
				t.Errorf("vnode %d: %s = %s, the position's pk column is %s", v, pt.Columns[1+i].Name,
					vectest.FormatValue(rec.Column(1+i), r), vectest.FormatValue(pk.Column(i), 0))
			}
		}
		pk.Release()
	}
}

// TestProgressReopen: progress survives a checkpoint and a reopen of the store exactly;
// progress sealed but not checkpointed does not.
func TestProgressReopen(t *testing.T) {
	c := progMulti(t)
	fs := vfs.NewMem()
	s := progOpen(t, fs)
	n := s.AddNode()
	full := vnode.Full(c.up.VnodeCount)
	p := progNew(t, n, c.up, full)
	progLoad(t, p, progNodeView(t, n))
	committed := map[uint16]VnodeProgress{
		1:  {State: vec.InProgress, Pos: c.pos[0], Rows: 3},
		2:  {State: vec.Completed, Pos: c.pos[2], Rows: 9},
		3:  {State: vec.Completed},
		63: {State: vec.InProgress, Pos: c.pos[3], Rows: 1},
	}
	for v, vp := range committed {
		if err := p.Set(v, vp); err != nil {
			t.Fatal(err)
		}
	}
	p.Seal(10)
	if _, err := s.Checkpoint(10); err != nil {
		t.Fatal(err)
	}
	// Progress of a later epoch, sealed but never committed.
	if err := p.Set(1, VnodeProgress{State: vec.InProgress, Pos: c.pos[1], Rows: 4}); err != nil {
		t.Fatal(err)
	}
	if err := p.Set(4, VnodeProgress{State: vec.Completed}); err != nil {
		t.Fatal(err)
	}
	p.Seal(11)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = progOpen(t, fs)
	if s.CommittedEpoch() != 10 {
		t.Fatalf("committed epoch %d after reopen, want 10", s.CommittedEpoch())
	}
	n = s.AddNode()
	p = progNew(t, n, c.up, full)
	pos, rows := progLoad(t, p, progNodeView(t, n))
	progCheck(t, "reopened", pos, rows, committed)

	// The reopened table carries on from what it loaded, and only forwards.
	if err := p.Set(1, VnodeProgress{State: vec.InProgress, Pos: c.pos[0], Rows: 2}); err == nil {
		t.Fatal("row count 3 -> 2 after reopen accepted")
	}
	committed[1] = VnodeProgress{State: vec.Completed, Pos: c.pos[3], Rows: 20}
	if err := p.Set(1, committed[1]); err != nil {
		t.Fatal(err)
	}
	p.Seal(12)
	if _, err := s.Checkpoint(12); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = progOpen(t, fs)
	pos, rows = progLoad(t, progNew(t, s.AddNode(), c.up, full), progStoreView(t, s))
	progCheck(t, "reopened twice", pos, rows, committed)
}

// TestProgressWrittenOnlyWhenChanged counts the rows written per epoch.
func TestProgressWrittenOnlyWhenChanged(t *testing.T) {
	c := progBid(t)
	fs := vfs.NewMem()
	s := progOpen(t, fs)
	n := s.AddNode()
	full := vnode.Full(c.up.VnodeCount)
	p := progNew(t, n, c.up, full)
	progLoad(t, p, progNodeView(t, n))
	set := func(v uint16, vp VnodeProgress, wantChanged int) {
		t.Helper()
		if err := p.Set(v, vp); err != nil {
			t.Fatal(err)
		}
		if p.Changed() != wantChanged {
			t.Fatalf("after Set(%d, %s): Changed() = %d, want %d", v, vp, p.Changed(), wantChanged)
		}
	}
	checkpoint := func(epoch uint64, wantKeys int) {
		t.Helper()
		p.Seal(epoch)
		st, err := s.Checkpoint(epoch)
		if err != nil {
			t.Fatal(err)
		}
		if st.Keys != wantKeys {
			t.Fatalf("checkpoint %d wrote %d keys, want %d", epoch, st.Keys, wantKeys)
		}
	}
	ip := func(i int, rows int64) VnodeProgress {
		return VnodeProgress{State: vec.InProgress, Pos: c.pos[i], Rows: rows}
	}
	empty := VnodeProgress{State: vec.Completed}

	set(0, VnodeProgress{}, 0) // NotStarted stays without a row
	set(0, ip(0, 1), 1)
	set(0, ip(0, 1), 1)
	set(1, empty, 2)
	set(0, ip(1, 2), 2) // a vnode rewritten in one epoch is one row
	checkpoint(1, 2)

	set(0, ip(1, 2), 0)
	set(1, empty, 0)
	set(2, VnodeProgress{}, 0)
	set(0, VnodeProgress{State: vec.InProgress, Pos: bytes.Clone(c.pos[1]), Rows: 2}, 0) // equal, not the same slice
	checkpoint(2, 0)

	set(0, ip(1, 3), 1)
	checkpoint(3, 1)

	// After a reopen, Load seeds the comparison: unchanged progress writes nothing.
	s.Close()
	s = progOpen(t, fs)
	n = s.AddNode()
	p = progNew(t, n, c.up, full)
	progLoad(t, p, progNodeView(t, n))
	set(0, ip(1, 3), 0)
	set(1, empty, 0)
	set(0, VnodeProgress{State: vec.Completed, Pos: c.pos[2], Rows: 4}, 1)
	checkpoint(4, 1)
}

// TestProgressMovesForwardOnly: every Set that would move progress backwards, or that
// is not well formed, is an error naming the table and vnode, and writes nothing.
func TestProgressMovesForwardOnly(t *testing.T) {
	c := progMulti(t)
	ip := func(i int, rows int64) VnodeProgress {
		return VnodeProgress{State: vec.InProgress, Pos: c.pos[i], Rows: rows}
	}
	done := func(i int, rows int64) VnodeProgress {
		return VnodeProgress{State: vec.Completed, Pos: c.pos[i], Rows: rows}
	}
	empty := VnodeProgress{State: vec.Completed}
	withPos := func(b []byte, rows int64) VnodeProgress {
		return VnodeProgress{State: vec.InProgress, Pos: b, Rows: rows}
	}
	nullRegion := append(vec.AppendKeyNull(nil, false), progFullPos(c)[len(vec.AppendKeyString(nil, "eu-west-1-long-name", false)):]...)
	for _, tc := range []struct {
		name   string
		before []VnodeProgress // Set in order on vnode 5 first, each sealed
		v      uint16
		vp     VnodeProgress
		want   string // "" = accepted
	}{
		{"forward", []VnodeProgress{ip(0, 1), ip(1, 2)}, 5, ip(2, 3), ""},
		{"same position, more rows", []VnodeProgress{ip(1, 2)}, 5, ip(1, 5), ""},
		{"InProgress to Completed", []VnodeProgress{ip(1, 2)}, 5, done(1, 2), ""},
		{"InProgress without rows", nil, 5, ip(0, 0), ""},
		{"Completed rewritten unchanged", []VnodeProgress{done(1, 2)}, 5, done(1, 2), ""},
		{"position backwards", []VnodeProgress{ip(2, 5)}, 5, ip(1, 6), "position moves backwards"},
		{"row count decreases", []VnodeProgress{ip(1, 5)}, 5, ip(2, 4), "row count decreases (from 5 to 4)"},
		{"NotStarted after progress", []VnodeProgress{ip(0, 1)}, 5, VnodeProgress{}, "cannot go back to NotStarted"},
		{"NotStarted with a position", nil, 5, VnodeProgress{Pos: c.pos[0]}, "NotStarted has no position and no rows"},
		{"Completed to InProgress", []VnodeProgress{done(1, 3)}, 5, ip(2, 4), "a Completed vnode never changes"},
		{"Completed moves on", []VnodeProgress{done(1, 3)}, 5, done(2, 4), "a Completed vnode never changes"},
		{"empty Completed gains rows", []VnodeProgress{empty}, 5, done(0, 1), "a Completed vnode never changes"},
		{"InProgress to empty Completed", []VnodeProgress{ip(0, 1)}, 5, empty, "position moves backwards"},
		{"not owned", nil, 40, ip(0, 1), "vnode not owned by this actor"},
		{"out of range", nil, 64, ip(0, 1), "vnode not owned by this actor"},
		{"InProgress without position", nil, 5, VnodeProgress{State: vec.InProgress, Rows: 1}, "an InProgress vnode needs a position"},
		{"Completed with rows without position", nil, 5, VnodeProgress{State: vec.Completed, Rows: 2}, "a Completed vnode with 2 rows needs the position of its last row"},
		{"Completed without rows with position", nil, 5, done(0, 0), "a Completed vnode with 0 rows has a position"},
		{"negative rows", nil, 5, ip(0, -1), "negative row count -1"},
		{"bad state", nil, 5, VnodeProgress{State: 7, Pos: c.pos[0], Rows: 1}, "bad backfill state BackfillState(7)"},
		{"position with a trailing byte", nil, 5, withPos(append(bytes.Clone(c.pos[0]), 0), 1), "1 bytes left after the last pk column"},
		{"truncated position", nil, 5, withPos(c.pos[1][:len(c.pos[1])-1], 1), "pk column day: key truncated"},
		{"NULL in a NOT NULL pk column", nil, 5, withPos(nullRegion, 1), "pk column region: NULL in a NOT NULL column"},
		{"position of another schema", nil, 5, withPos(vec.AppendKeyInt64(nil, 1, false), 1), "pk column region: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := progOpen(t, vfs.NewMem())
			n := s.AddNode()
			p := progNew(t, n, c.up, vnode.FromRange(c.up.VnodeCount, 0, 32))
			if tc.name == "not owned" {
				if err := p.Set(5, ip(0, 1)); err == nil || !strings.Contains(err.Error(), "Set before Load") {
					t.Fatalf("Set before Load: %v", err)
				}
			}
			progLoad(t, p, progNodeView(t, n))
			for i, vp := range tc.before {
				if err := p.Set(5, vp); err != nil {
					t.Fatal(err)
				}
				p.Seal(uint64(i + 1))
			}
			err := p.Set(tc.v, tc.vp)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			prefix := "storage: progress table mv_progress vnode " + strconv.Itoa(int(tc.v)) + ": "
			if err == nil || !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Set(%d, %s) = %v, want %q...%q", tc.v, tc.vp, err, prefix, tc.want)
			}
			if p.Changed() != 0 {
				t.Fatalf("a rejected Set wrote %d rows", p.Changed())
			}
			want := map[uint16]VnodeProgress{}
			if len(tc.before) > 0 {
				want[5] = tc.before[len(tc.before)-1]
			}
			pos, rows := progLoad(t, p, progNodeView(t, n))
			progCheck(t, "after the rejected Set", pos, rows, want)
		})
	}
}

// progFullPos is the position of c with no NULL column (the longest one).
func progFullPos(c progCase) []byte {
	return slices.MaxFunc(c.pos, func(a, b []byte) int { return len(a) - len(b) })
}

// TestProgressCorruptRows: every malformed row is "corrupt backfill state: table T
// vnode V: reason" from DecodeProgressRow and from Load, never a panic; an actor that
// does not own the row's vnode is not stopped by it, unless the key names no vnode or
// one out of range.
func TestProgressCorruptRows(t *testing.T) {
	multi, single := progMulti(t), progSingle(t)
	mc, err := newProgressCodec(progName, multi.up)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := newProgressCodec(progName, single.up)
	if err != nil {
		t.Fatal(err)
	}
	l := mc.layout
	col := func(name string) int {
		i, ok := mc.t.ColumnIndex(name)
		if !ok {
			t.Fatalf("no column %s", name)
		}
		return i
	}
	full := progFullPos(multi)
	key := func(v uint16) []byte { return mc.appendKey(nil, 7, v) }
	val := func(c *progressCodec, v uint16, vp VnodeProgress) []byte {
		b, err := c.appendValue(nil, v, vp)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ip := val(mc, 3, VnodeProgress{State: vec.InProgress, Pos: full, Rows: 5})
	done := val(mc, 3, VnodeProgress{State: vec.Completed, Pos: full, Rows: 5})
	empty := val(mc, 3, VnodeProgress{State: vec.Completed})
	mut := func(b []byte, f func(b []byte)) []byte {
		b = bytes.Clone(b)
		f(b)
		return b
	}
	setNull := func(c int) func(b []byte) { return func(b []byte) { b[1+c>>3] |= 1 << (c & 7) } }
	setRows := func(n int64) func(b []byte) {
		return func(b []byte) { binary.LittleEndian.PutUint64(b[l.Slot[col("row_count")]:], uint64(n)) }
	}
	// A value whose region is NULL though region is a NOT NULL pk column: encoded for a
	// copy of the upstream where region is nullable (the progress rows have the same
	// layout), with the rest of the position set.
	upNullable := progMulti(t).up
	upNullable.Columns[0].Nullable = true
	nc, err := newProgressCodec(progName, upNullable)
	if err != nil {
		t.Fatal(err)
	}
	regionLen := len(vec.AppendKeyString(nil, "eu-west-1-long-name", false))
	partly := val(nc, 3, VnodeProgress{State: vec.InProgress, Pos: append(vec.AppendKeyNull(nil, false), full[regionLen:]...), Rows: 1})

	const at3 = "corrupt backfill state: table mv_progress vnode 3: "
	for _, tc := range []struct {
		name     string
		c        *progressCodec
		key, val []byte
		want     string
		anyActor bool // the error stops every actor, not only the vnode's owner
	}{
		{"empty value", mc, key(3), nil, at3 + "empty value", false},
		{"unknown format version", mc, key(3), mut(ip, func(b []byte) { b[0] = 2 }), at3 + "unknown value format version 2 (want 1)", false},
		{"wrong arity: short value", mc, key(3), ip[:10], at3 + "wrong arity: value of 10 bytes is shorter than the", false},
		{"wrong arity: a row of fewer columns", mc, key(3), val(sc, 3, VnodeProgress{State: vec.InProgress, Pos: single.pos[1], Rows: 1}), at3 + "wrong arity: value of 23 bytes is shorter than", false},
		{"wrong arity: a row of more columns", sc, key(3), ip, at3 + "wrong arity: value has", false},
		{"wrong arity: trailing bytes", sc, key(3), append(val(sc, 3, VnodeProgress{State: vec.Completed}), 1, 2, 3), at3 + "wrong arity: value has 3 bytes of variable-width data, its offsets say 0", false},
		{"wrong arity: null bits past the columns", mc, key(3), mut(ip, func(b []byte) { b[l.NullBytes] |= 0x80 }), at3 + "wrong arity: null bitmap marks columns past the 11", false},
		{"truncated key without a vnode", mc, key(3)[:5], ip, "corrupt backfill state: table mv_progress vnode unknown: truncated key: 5 bytes", true},
		{"truncated key", mc, key(3)[:8], ip, at3 + "truncated key: pk of 2 bytes", false},
		{"key too long", mc, append(key(3), 0), ip, at3 + "key has 6 bytes after", false},
		{"key pk of another vnode", mc, AppendKey(nil, 7, 3, vec.AppendKeyInt32(nil, 4, false)), ip, at3 + "key's pk", false},
		{"vnode out of range", mc, AppendKey(nil, 7, 64, vec.AppendKeyInt32(nil, 64, false)), mut(ip, func(b []byte) { b[l.Slot[0]] = 64 }), "corrupt backfill state: table mv_progress vnode 64: vnode out of range: upstream multi has 64 vnodes", true},
		{"value of another vnode", mc, key(3), val(mc, 4, VnodeProgress{State: vec.Completed}), at3 + "value's vnode column is 4, the key's vnode 3", false},
		{"NULL row_count", mc, key(3), mut(ip, setNull(col("row_count"))), at3 + "column row_count is NULL", false},
		{"NULL vnode", mc, key(3), mut(ip, setNull(0)), at3 + "column vnode is NULL", false},
		{"finished not a boolean", mc, key(3), mut(ip, func(b []byte) { b[l.Slot[col("backfill_finished")]] = 2 }), at3 + "column backfill_finished holds byte 2", false},
		{"negative row_count", mc, key(3), mut(ip, setRows(-1)), at3 + "negative row_count -1", false},
		{"InProgress with a NULL position", mc, key(3), mut(empty, func(b []byte) { b[l.Slot[col("backfill_finished")]] = 0 }), at3 + "InProgress (backfill_finished false) with a NULL position", false},
		{"empty Completed with rows", mc, key(3), mut(empty, setRows(5)), at3 + "Completed with row_count 5 and a NULL position", false},
		{"Completed without rows with a position", mc, key(3), mut(done, setRows(0)), at3 + "Completed with row_count 0 has a position in pos_region", false},
		{"position partly NULL", mc, key(3), partly, at3 + "position is partly NULL: pos_region is NULL (a NOT NULL pk column) but pos_ts is not", false},
		{"NULL column with data", mc, key(3), mut(ip, setNull(col("pos_seq"))), at3 + "malformed value: NULL column pos_seq has data", false},
		{"NULL varchar with data", mc, key(3), mut(ip, setNull(col("pos_payload"))), at3 + "malformed value: NULL column pos_payload has data", false},
		{"variable offsets backwards", mc, key(3), mut(ip, func(b []byte) { binary.LittleEndian.PutUint32(b[l.Slot[col("pos_region")]:], 1000) }), at3 + "malformed value: variable-width offsets go backwards", false},
		{"non-canonical NaN", mc, key(3), mut(ip, func(b []byte) { binary.LittleEndian.PutUint64(b[l.Slot[col("pos_score")]:], 0x7ff8000000000002) }), at3 + "position does not re-encode: column pos_score: non-canonical float64", false},
		{"negative zero", mc, key(3), mut(ip, func(b []byte) { binary.LittleEndian.PutUint64(b[l.Slot[col("pos_score")]:], 1<<63) }), at3 + "position does not re-encode: column pos_score: non-canonical float64", false},
		{"position boolean not 0 or 1", mc, key(3), mut(ip, func(b []byte) { b[l.Slot[col("pos_ok")]] = 2 }), at3 + "position does not re-encode: column pos_ok: boolean byte 2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := tc.c.up
			_, _, err := DecodeProgressRow(progName, up, tc.key, tc.val)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.Is(err, ErrCorruptProgress) {
				t.Fatalf("DecodeProgressRow: %v\nwant prefix %q", err, tc.want)
			}
			s := progOpen(t, vfs.NewMem())
			if err := s.DB().Set(tc.key, tc.val, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			n := s.AddNode()
			p := progNew(t, n, up, vnode.Full(up.VnodeCount))
			view := progNodeView(t, n)
			pos, _, lerr := p.Load(view)
			view.Release()
			if lerr == nil || lerr.Error() != err.Error() || pos != nil {
				t.Fatalf("Load: %v, want %v", lerr, err)
			}
			if err := p.Set(3, VnodeProgress{State: vec.Completed}); err == nil || !strings.Contains(err.Error(), "Set before Load") {
				t.Fatalf("Set after a failed Load: %v", err)
			}
			// An actor that does not own vnode 3.
			others := vnode.FromRange(up.VnodeCount, 4, up.VnodeCount)
			view = progNodeView(t, n)
			_, _, lerr = progNew(t, n, up, others).Load(view)
			view.Release()
			if tc.anyActor != (lerr != nil) {
				t.Fatalf("Load by an actor owning %s: %v", others, lerr)
			}
		})
	}
}

// TestProgressRescale: progress written by two actors is loaded by actors owning other
// splits, each seeing exactly its own vnodes, and carries on from there.
func TestProgressRescale(t *testing.T) {
	c := progSingle(t) // 16 vnodes
	count := c.up.VnodeCount
	fs := vfs.NewMem()
	s := progOpen(t, fs)
	want := map[uint16]VnodeProgress{}
	progressOf := func(v uint16, step int) VnodeProgress {
		switch (int(v) + step) % 4 {
		case 1:
			return VnodeProgress{State: vec.InProgress, Pos: c.pos[(int(v)+step)%3], Rows: int64(10*step + 1)}
		case 2:
			return VnodeProgress{State: vec.Completed, Pos: c.pos[4], Rows: int64(100 + v)}
		case 3:
			return VnodeProgress{State: vec.Completed}
		}
		return VnodeProgress{}
	}
	m, err := vnode.EvenSplit(count, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, bm := range m.Bitmaps(2) {
		n := s.AddNode() // each actor on its own node
		p := progNew(t, n, c.up, bm)
		progLoad(t, p, progNodeView(t, n))
		bm.Iterate(func(v uint16) bool {
			vp := progressOf(v, 0)
			if err := p.Set(v, vp); err != nil {
				t.Fatal(err)
			}
			if vp.State != vec.NotStarted {
				want[v] = vp
			}
			return true
		})
		p.Seal(100)
	}
	if _, err := s.Checkpoint(100); err != nil {
		t.Fatal(err)
	}

	// New splits: three actors by minimal-move rebalance, odd and even vnodes, one actor
	// with nothing and one with everything (in separate rescales).
	m3, _, err := vnode.Rebalance(m, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	odd, even := vnode.NewBitmap(count), vnode.NewBitmap(count)
	for v := range uint16(count) {
		if v%2 == 1 {
			odd.Add(v)
		} else {
			even.Add(v)
		}
	}
	for _, split := range [][]*vnode.Bitmap{m3.Bitmaps(3), {odd, even}, {vnode.NewBitmap(count), vnode.Full(count)}} {
		for _, bm := range split {
			n := s.AddNode()
			p := progNew(t, n, c.up, bm)
			pos, rows := progLoad(t, p, progNodeView(t, n))
			mine := map[uint16]VnodeProgress{}
			bm.Iterate(func(v uint16) bool {
				if vp, ok := want[v]; ok {
					mine[v] = vp
				}
				return true
			})
			progCheck(t, "actor owning "+bm.String(), pos, rows, mine)
		}
	}

	// The three new actors carry on, then one actor owning everything sees it all.
	for _, bm := range m3.Bitmaps(3) {
		n := s.AddNode()
		p := progNew(t, n, c.up, bm)
		progLoad(t, p, progNodeView(t, n))
		for v := range uint16(count) {
			vp := progressOf(v, 1)
			if !bm.Contains(v) {
				if err := p.Set(v, vp); err == nil || !strings.Contains(err.Error(), "not owned") {
					t.Fatalf("Set of vnode %d by an actor owning %s: %v", v, bm, err)
				}
				continue
			}
			err := p.Set(v, vp)
			old := want[v]
			backwards := old.State == vec.Completed && !old.Equal(vp) || old.State != vec.NotStarted && vp.State == vec.NotStarted ||
				old.State == vec.InProgress && (bytes.Compare(vp.Pos, old.Pos) < 0 || vp.Rows < old.Rows)
			if backwards != (err != nil) {
				t.Fatalf("vnode %d: %s -> %s: %v", v, old, vp, err)
			}
			if err == nil && vp.State != vec.NotStarted {
				want[v] = vp
			}
		}
		p.Seal(200)
	}
	if _, err := s.Checkpoint(200); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = progOpen(t, fs)
	pos, rows := progLoad(t, progNew(t, s.AddNode(), c.up, vnode.Full(count)), progStoreView(t, s))
	progCheck(t, "everything after the second rescale", pos, rows, want)
}

// TestProgressRandomPositions round-trips positions of random tables of every type
// through the row codec, byte for byte.
func TestProgressRandomPositions(t *testing.T) {
	rng, seed := vectest.Rand(t)
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	for i := range 60 {
		up := vectest.RandomTable(rng, "rnd")
		c, err := newProgressCodec(progName, up)
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, up.Canonical())
		}
		ch := vectest.RandomChunk(rng, mem, up, 20, 0.3)
		var keys vec.Bytes
		vec.NewGeneric(up).EncodeKeys(ch, &keys)
		ch.Release()
		for r := range keys.Len() {
			v := uint16(rng.IntN(up.VnodeCount))
			vp := VnodeProgress{State: vec.InProgress, Pos: bytes.Clone(keys.At(r)), Rows: rng.Int64N(1 << 40)}
			if r%2 == 1 {
				vp.State, vp.Rows = vec.Completed, vp.Rows+1
			}
			val, err := c.appendValue(nil, v, vp)
			if err != nil {
				t.Fatalf("seed %d table %d: %s: %v\n%s", seed, i, vp, err, up.Canonical())
			}
			gv, got, err := c.decode(c.appendKey(nil, 9, v), val)
			if err != nil || gv != v || !got.Equal(vp) {
				t.Fatalf("seed %d table %d: %s at vnode %d decodes as %s at vnode %d (%v)\n%s", seed, i, vp, v, got, gv, err, up.Canonical())
			}
		}
	}
}

func TestProgressNewErrors(t *testing.T) {
	c := progSingle(t)
	s := progOpen(t, vfs.NewMem())
	n := s.AddNode()
	noPK := &schema.Table{Name: "nopk", Columns: []schema.Column{progCol("a", schema.Int64, false)}, VnodeCount: 16}
	for _, tc := range []struct {
		name    string
		id      uint32
		table   string
		up      *schema.Table
		vnodes  *vnode.Bitmap
		wantErr string
	}{
		{"metadata id", MetaTable, progName, c.up, vnode.Full(16), "reserved for metadata"},
		{"bitmap of another count", 7, progName, c.up, vnode.Full(256), "upstream single has 16 vnodes, the bitmap 256"},
		{"bad name", 7, "9lives", c.up, vnode.Full(16), "progress table 9lives of upstream single"},
		{"upstream without pk", 7, progName, noPK, vnode.Full(16), "the upstream has no primary key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewProgressTable(n, tc.id, tc.table, tc.up, tc.vnodes)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want %q", err, tc.wantErr)
			}
		})
	}
	if _, _, err := DecodeProgressRow("9lives", c.up, nil, nil); err == nil || errors.Is(err, ErrCorruptProgress) {
		t.Fatalf("DecodeProgressRow with a bad table name: %v", err)
	}
}
