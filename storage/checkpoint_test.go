package storage_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/internal/invariants"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

func inserts(ids []int64, v bidVal) []bidOp {
	out := make([]bidOp, len(ids))
	for i, id := range ids {
		out[i] = bidOp{Op: vec.Insert, ID: id, V: v}
	}
	return out
}

func idRange(lo, hi int64) []int64 {
	var out []int64
	for id := lo; id < hi; id++ {
		out = append(out, id)
	}
	return out
}

func writeBids(t testing.TB, mem memory.Allocator, st *storage.StateTable, ops []bidOp) {
	t.Helper()
	c := bidChunk(mem, ops)
	defer c.Release()
	if err := st.Write(c); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func mustCheckpoint(t testing.TB, s *storage.Store, epoch uint64) storage.CheckpointStats {
	t.Helper()
	st, err := s.Checkpoint(epoch)
	if err != nil {
		t.Fatalf("checkpoint %d: %v", epoch, err)
	}
	if got := s.CommittedEpoch(); got != epoch {
		t.Fatalf("committed epoch %d after checkpoint %d", got, epoch)
	}
	return st
}

func expectState(t testing.TB, what string, want, got bidState) {
	t.Helper()
	if d := want.diff(got); d != "" {
		t.Fatalf("%s: %s", what, d)
	}
}

// TestCheckpointBasics walks one table through epochs: what each kind of view sees
// before and after a checkpoint, that checkpointed runs leave the nodes, and exact
// row counts through inserts, deletes (of present and of missing keys), updates and
// pk-changing updates.
func TestCheckpointBasics(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	n0, n1 := s.AddNode(), s.AddNode()
	w := fullBidTable(t, n0)
	r0, r1 := fullBidTable(t, n0), fullBidTable(t, n1) // readers, never written
	p := newBidPlacer()

	if got := s.CommittedEpoch(); got != 0 {
		t.Fatalf("fresh store at epoch %d", got)
	}
	committed := bidState{}
	sealed := bidState{} // committed plus n0's sealed epochs

	// Epoch 1: 200 inserts.
	ops := inserts(idRange(0, 200), bidVal{Price: 1, Channel: "web"})
	writeBids(t, mem, w, ops)
	sealed.apply(ops)
	// Unsealed writes are the writer's alone.
	got, _ := readBidsAt(t, s, n0, w, p)
	expectState(t, "writer before seal", sealed, got)
	got, _ = readBidsAt(t, s, n0, r0, p)
	expectState(t, "same node before seal", committed, got)
	if w.UnsealedBytes() == 0 {
		t.Fatal("no unsealed bytes after a write")
	}
	w.Seal(ep(1))
	if w.UnsealedBytes() != 0 || n0.UncommittedBytes() == 0 {
		t.Fatalf("after seal: unsealed %d, node uncommitted %d", w.UnsealedBytes(), n0.UncommittedBytes())
	}
	got, e := readBidsAt(t, s, n0, r0, p)
	expectState(t, "same node after seal", sealed, got)
	if e != 0 {
		t.Fatalf("view epoch %d before any checkpoint", e)
	}
	got, _ = readBidsAt(t, s, n1, r1, p)
	expectState(t, "other node after seal", committed, got)
	got, _ = readBidsAt(t, s, nil, r1, p)
	expectState(t, "store view after seal", committed, got)
	checkRowCounts(t, s, bidTableID, p.counts(committed), bidT.VnodeCount)

	// A view taken before the checkpoint keeps its state.
	before, err := n0.View()
	if err != nil {
		t.Fatal(err)
	}
	st := mustCheckpoint(t, s, ep(1))
	committed = sealed.clone()
	if st.Runs != 1 || st.Keys != 200 || st.Epoch != ep(1) {
		t.Fatalf("stats %+v", st)
	}
	if b := n0.UncommittedBytes(); b != 0 {
		t.Fatalf("node keeps %d uncommitted bytes after the checkpoint", b)
	}
	for _, c := range []struct {
		name string
		n    *storage.Node
		st   *storage.StateTable
	}{{"writer node", n0, r0}, {"other node", n1, r1}, {"store", nil, r1}} {
		got, e := readBidsAt(t, s, c.n, c.st, p)
		expectState(t, c.name+" after checkpoint", committed, got)
		if e != ep(1) {
			t.Fatalf("%s: view epoch %d, want %d", c.name, e, ep(1))
		}
	}
	expectState(t, "old view after checkpoint", sealed, readBids(t, r0, before, p))
	before.Release()
	checkRowCounts(t, s, bidTableID, p.counts(committed), bidT.VnodeCount)

	// Epoch 2: every kind of change, several in one chunk and across chunks.
	ops = nil
	for id := int64(0); id < 40; id++ { // deletes of present keys
		ops = append(ops, bidOp{Op: vec.Delete, ID: id})
	}
	for id := int64(1000); id < 1020; id++ { // deletes of keys never written
		ops = append(ops, bidOp{Op: vec.Delete, ID: id})
	}
	for id := int64(40); id < 60; id++ { // updates in place
		ops = append(ops, bidOp{Op: vec.UpdateDelete, ID: id, V: bidVal{Price: 1, Channel: "web"}},
			bidOp{Op: vec.UpdateInsert, ID: id, V: bidVal{Price: 2, Channel: "app"}})
	}
	for id := int64(60); id < 80; id++ { // pk-changing updates: id -> id+500
		ops = append(ops, bidOp{Op: vec.UpdateDelete, ID: id, V: bidVal{Price: 1, Channel: "web"}},
			bidOp{Op: vec.UpdateInsert, ID: id + 500, V: bidVal{Price: 2, Channel: "moved"}})
	}
	for id := int64(0); id < 10; id++ { // re-insert keys deleted earlier in the epoch
		ops = append(ops, bidOp{Op: vec.Insert, ID: id, V: bidVal{Price: 2, Channel: "again"}})
	}
	for id := int64(2000); id < 2010; id++ { // insert then delete within the epoch
		ops = append(ops, bidOp{Op: vec.Insert, ID: id, V: bidVal{Price: 2}}, bidOp{Op: vec.Delete, ID: id})
	}
	writeBids(t, mem, w, ops[:len(ops)/2])
	writeBids(t, mem, w, ops[len(ops)/2:])
	sealed.apply(ops)
	w.Seal(ep(2))
	got, _ = readBidsAt(t, s, n0, r0, p)
	expectState(t, "node view of epoch 2", sealed, got)
	got, _ = readBidsAt(t, s, nil, r0, p)
	expectState(t, "store view before checkpoint 2", committed, got)
	mustCheckpoint(t, s, ep(2))
	committed = sealed.clone()
	got, _ = readBidsAt(t, s, nil, r0, p)
	expectState(t, "store view after checkpoint 2", committed, got)
	checkRowCounts(t, s, bidTableID, p.counts(committed), bidT.VnodeCount)

	// Epochs 3 and 4 sealed, only 3 checkpointed: 4 stays on the node.
	ops3 := inserts(idRange(3000, 3050), bidVal{Price: 3})
	writeBids(t, mem, w, ops3)
	w.Seal(ep(3))
	ops4 := []bidOp{{Op: vec.Delete, ID: 3000}, {Op: vec.Delete, ID: 100}, {Op: vec.Insert, ID: 4000, V: bidVal{Price: 4}}}
	writeBids(t, mem, w, ops4)
	w.Seal(ep(4))
	mustCheckpoint(t, s, ep(3))
	committed.apply(ops3)
	sealed.apply(ops3)
	sealed.apply(ops4)
	got, _ = readBidsAt(t, s, nil, r0, p)
	expectState(t, "store view after checkpoint 3", committed, got)
	got, e = readBidsAt(t, s, n0, r0, p)
	expectState(t, "node view with epoch 4 sealed", sealed, got)
	if e != ep(3) {
		t.Fatalf("node view epoch %d, want %d", e, ep(3))
	}
	if n0.UncommittedBytes() == 0 {
		t.Fatal("epoch 4 left the node before its checkpoint")
	}
	checkRowCounts(t, s, bidTableID, p.counts(committed), bidT.VnodeCount)

	// Epochs must increase; a refused checkpoint changes nothing.
	for _, bad := range []uint64{ep(3), ep(2), 0} {
		_, err := s.Checkpoint(bad)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprint(bad)) || !strings.Contains(err.Error(), fmt.Sprint(ep(3))) {
			t.Fatalf("checkpoint %d at committed %d: %v, want an error naming both epochs", bad, ep(3), err)
		}
		if s.CommittedEpoch() != ep(3) {
			t.Fatalf("refused checkpoint moved the committed epoch to %d", s.CommittedEpoch())
		}
	}
	got, _ = readBidsAt(t, s, n0, r0, p)
	expectState(t, "node view after refused checkpoints", sealed, got)
	mustCheckpoint(t, s, ep(4))
	committed = sealed.clone()
	got, _ = readBidsAt(t, s, nil, r0, p)
	expectState(t, "store view after checkpoint 4", committed, got)
	checkRowCounts(t, s, bidTableID, p.counts(committed), bidT.VnodeCount)
	if n0.UncommittedBytes() != 0 {
		t.Fatal("runs left after the last checkpoint")
	}

	// A checkpoint without data still commits its epoch.
	st = mustCheckpoint(t, s, ep(6))
	if st.Runs != 0 || st.Keys != 0 {
		t.Fatalf("empty checkpoint stats %+v", st)
	}
	got, _ = readBidsAt(t, s, nil, r0, p)
	expectState(t, "after an empty checkpoint", committed, got)
}

// TestCatalogCommitsWithCheckpoint checks that staged catalog entries are invisible
// until the checkpoint commits them with its data, survive a refused checkpoint, and
// survive a reopen; staged entries that no checkpoint committed do not.
func TestCatalogCommitsWithCheckpoint(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	fs := vfs.NewMem()
	s, err := storage.Open("db", testOptions(fs))
	if err != nil {
		t.Fatal(err)
	}
	n := s.AddNode()
	w := fullBidTable(t, n)
	p := newBidPlacer()
	catalog := func(s *storage.Store) map[string]string {
		t.Helper()
		c, err := s.Catalog()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for k, v := range c {
			out[k] = fmt.Sprintf("%q", v)
		}
		return out
	}
	expectCatalog := func(what string, got map[string]string, want ...string) {
		t.Helper()
		w := map[string]string{}
		for i := 0; i < len(want); i += 2 {
			w[want[i]] = fmt.Sprintf("%q", want[i+1])
		}
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Fatalf("%s: catalog %v, want %v", what, got, w)
		}
	}

	s.SetCatalog("table/bid", []byte("v1"))
	s.SetCatalog("mv/q1", []byte("plan"))
	s.SetCatalog("empty", []byte{})
	ops := inserts(idRange(0, 50), bidVal{Price: 1})
	writeBids(t, mem, w, ops)
	w.Seal(ep(1))
	expectCatalog("staged", catalog(s))
	st := mustCheckpoint(t, s, ep(1))
	if st.Catalog != 3 {
		t.Fatalf("checkpoint wrote %d catalog entries, want 3", st.Catalog)
	}
	expectCatalog("committed", catalog(s), "table/bid", "v1", "mv/q1", "plan", "empty", "")

	// A refused checkpoint keeps the staged entries for the next one.
	s.SetCatalog("mv/q1", nil) // delete
	s.SetCatalog("table/bid", []byte("v2"))
	if _, err := s.Checkpoint(ep(1)); err == nil {
		t.Fatal("checkpoint at the committed epoch succeeded")
	}
	expectCatalog("after refused checkpoint", catalog(s), "table/bid", "v1", "mv/q1", "plan", "empty", "")
	mustCheckpoint(t, s, ep(2))
	expectCatalog("after checkpoint 2", catalog(s), "table/bid", "v2", "empty", "")

	// Staged but never committed, and sealed but never committed: both gone on reopen.
	s.SetCatalog("lost", []byte("x"))
	writeBids(t, mem, w, inserts(idRange(100, 110), bidVal{Price: 3}))
	w.Seal(ep(3))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.View(); err == nil {
		t.Fatal("view of a closed store")
	}
	if _, err := s.Checkpoint(ep(9)); err == nil {
		t.Fatal("checkpoint of a closed store")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}

	s, err = storage.Open("db", testOptions(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.CommittedEpoch() != ep(2) {
		t.Fatalf("reopened at epoch %d, want %d", s.CommittedEpoch(), ep(2))
	}
	expectCatalog("after reopen", catalog(s), "table/bid", "v2", "empty", "")
	want := bidState{}
	want.apply(ops)
	got, _ := readBidsAt(t, s, nil, fullBidTable(t, s.AddNode()), p)
	expectState(t, "rows after reopen", want, got)
	checkRowCounts(t, s, bidTableID, p.counts(want), bidT.VnodeCount)
}

// TestGetReturnsCopy: a value read from a sealed run must not alias the run, which
// every reader of the node shares.
func TestGetReturnsCopy(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	n := s.AddNode()
	w := fullBidTable(t, n)
	p := newBidPlacer()
	writeBids(t, mem, w, inserts([]int64{1}, bidVal{Price: 1, Channel: "web"}))
	v1, pk := p.place(1)
	read := func(what string) []byte {
		view, err := n.View()
		if err != nil {
			t.Fatal(err)
		}
		defer view.Release()
		val, ok, err := w.Get(view, v1, pk)
		if err != nil || !ok {
			t.Fatalf("%s: get: %v %v", what, ok, err)
		}
		return val
	}
	for _, stage := range []string{"unsealed", "sealed", "committed"} {
		switch stage {
		case "sealed":
			w.Seal(ep(1))
		case "committed":
			mustCheckpoint(t, s, ep(1))
		}
		a := read(stage)
		orig := append([]byte(nil), a...)
		for i := range a {
			a[i] ^= 0xFF
		}
		if b := read(stage); !bytes.Equal(b, orig) {
			t.Fatalf("%s: changing a value returned by Get changed the stored value", stage)
		}
	}
}

func TestIterBounds(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	n := s.AddNode()
	kv := kvTable(1)
	w, err := storage.NewStateTable(n, 9, kv, vnode.Full(1))
	if err != nil {
		t.Fatal(err)
	}
	// Keys k = 0..9 with s = "x": committed evens, sealed odds, unsealed 10.
	write := func(ks ...int64) {
		c := kvChunk(mem, kv, ks)
		defer c.Release()
		if err := w.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	write(0, 2, 4, 6, 8)
	w.Seal(ep(1))
	mustCheckpoint(t, s, ep(1))
	write(1, 3, 5, 7, 9)
	w.Seal(ep(2))
	write(10)
	pk := func(k int64) []byte { return kvPK(kv, k) }
	view, err := n.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	for _, c := range []struct {
		after, before []byte
		want          string
	}{
		{nil, nil, "0 1 2 3 4 5 6 7 8 9 10"},
		{pk(3), nil, "4 5 6 7 8 9 10"},
		{nil, pk(3), "0 1 2"},
		{pk(2), pk(7), "3 4 5 6"},
		{pk(2), pk(3), ""},
		{pk(3), pk(3), ""},
		{pk(7), pk(2), ""},
		{pk(10), nil, ""},
		{[]byte{}, nil, "0 1 2 3 4 5 6 7 8 9 10"}, // every pk is above the empty key
		{nil, []byte{}, ""},
	} {
		it, err := w.Iter(view, 0, storage.IterBounds{After: c.after, Before: c.before})
		if err != nil {
			t.Fatal(err)
		}
		g := kvKs(t, kv, it)
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		if g != c.want {
			t.Errorf("iter (%x, %x): %q, want %q", c.after, c.before, g, c.want)
		}
	}
}

// kvKs reads it to its end and returns the k of each kv row, space-separated.
func kvKs(t *testing.T, kv *schema.Table, it *storage.Iter) string {
	t.Helper()
	var got []string
	for it.Next() {
		got = append(got, fmt.Sprint(kvDecodeK(t, kv, it.PK())))
	}
	return strings.Join(got, " ")
}

// TestReuseIterEmptyRange is the regression test of a reused iterator that skipped
// rows: ReuseIter gave pebble a range whose lower bound was above its upper one (From
// above Before), pebble's sstable iterator stood at the first key at or above that
// lower bound, and, taking the next bounds (above the old upper one) to have moved
// forward, pebble stepped on from there and skipped the rows before it. An empty
// range now leaves pebble's iterator alone.
func TestReuseIterEmptyRange(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	n := s.AddNode()
	kv := kvTable(1)
	w, err := storage.NewStateTable(n, 9, kv, vnode.Full(1))
	if err != nil {
		t.Fatal(err)
	}
	c := kvChunk(mem, kv, []int64{10, 20, 30, 40, 50})
	err = w.Write(c)
	c.Release()
	if err != nil {
		t.Fatal(err)
	}
	w.Seal(ep(1))
	mustCheckpoint(t, s, ep(1))
	if err := s.DB().Flush(); err != nil { // the rows in one sstable
		t.Fatal(err)
	}
	pk := func(k int64) []byte { return kvPK(kv, k) }
	view, err := n.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	var it storage.Iter
	defer it.Close()
	for _, c := range []struct {
		b    storage.IterBounds
		want string
	}{
		{storage.IterBounds{From: pk(45), Before: pk(5)}, ""},
		{storage.IterBounds{After: pk(15)}, "20 30 40 50"},
		{storage.IterBounds{From: pk(35), Before: pk(25)}, ""},
		{storage.IterBounds{From: pk(30)}, "30 40 50"},
		{storage.IterBounds{After: pk(45), Before: pk(45)}, ""},
		{storage.IterBounds{}, "10 20 30 40 50"},
	} {
		if err := w.ReuseIter(view, 0, c.b, &it); err != nil {
			t.Fatal(err)
		}
		g := kvKs(t, kv, &it)
		if err := it.Error(); err != nil {
			t.Fatal(err)
		}
		if g != c.want {
			t.Errorf("reused iter %+v: %q, want %q", c.b, g, c.want)
		}
	}
}

// TestConstructorsAndOptions covers the checks of NewStateTable and Open's options.
func TestConstructorsAndOptions(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	n := s.AddNode()
	if _, err := storage.NewStateTable(n, storage.MetaTable, bidT, vnode.Full(256)); err == nil {
		t.Error("state table on the metadata table id")
	}
	if _, err := storage.NewStateTable(n, 3, bidT, vnode.Full(128)); err == nil || !strings.Contains(err.Error(), "bid") {
		t.Errorf("bitmap over the wrong vnode count: %v", err)
	}
	if _, err := storage.Open("x", storage.Options{FS: vfs.NewMem(), Compression: "lz77"}); err == nil || !strings.Contains(err.Error(), "lz77") {
		t.Errorf("unknown compression: %v", err)
	}
	for _, c := range []string{"snappy", "zstd", "minlz", "none"} {
		fs := vfs.NewMem()
		o := testOptions(fs)
		o.Compression = c
		s, err := storage.Open("db", o)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		n := s.AddNode()
		w := fullBidTable(t, n)
		writeBids(t, mem, w, inserts(idRange(0, 100), bidVal{Price: 1, Channel: strings.Repeat("c", 100)}))
		w.Seal(ep(1))
		mustCheckpoint(t, s, ep(1))
		if err := s.DB().Flush(); err != nil {
			t.Fatal(err)
		}
		got, _ := readBidsAt(t, s, nil, w, newBidPlacer())
		if len(got) != 100 {
			t.Fatalf("%s: %d rows after a flush", c, len(got))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNodePendingBytes follows Node.PendingBytes through writes, seals (a move, not a
// change), a checkpoint that commits some epochs and not others (and closes
// CommitSignal's channel), writers on two nodes, a progress table's runs, and
// DropUncommitted.
func TestNodePendingBytes(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	n0, n1 := s.AddNode(), s.AddNode()
	w0, w1 := fullBidTable(t, n0), fullBidTable(t, n1)
	want := func(what string, b0, b1 int64) {
		t.Helper()
		if g0, g1 := n0.PendingBytes(), n1.PendingBytes(); g0 != b0 || g1 != b1 {
			t.Fatalf("%s: pending %d and %d, want %d and %d", what, g0, g1, b0, b1)
		}
	}
	want("fresh", 0, 0)
	writeBids(t, mem, w0, inserts(idRange(0, 100), bidVal{Price: 1, Channel: "web"}))
	a := int64(w0.UnsealedBytes())
	if a == 0 {
		t.Fatal("no unsealed bytes after a write")
	}
	want("after a write", a, 0)
	if err := w0.Seal(ep(1)); err != nil {
		t.Fatal(err)
	}
	want("after its seal", a, 0)
	if int64(n0.UncommittedBytes()) != a {
		t.Fatalf("UncommittedBytes %d, want the sealed %d", n0.UncommittedBytes(), a)
	}
	// Epoch 2 on both nodes. A key written again in an epoch whose vnode no read
	// settled counts both writes until the seal (the memtable holds both), and its run
	// holds the last: rewritten with a shorter value, fewer bytes than the first.
	writeBids(t, mem, w0, inserts(idRange(100, 150), bidVal{Price: 2, Channel: "a much longer channel name"}))
	long := int64(w0.UnsealedBytes())
	writeBids(t, mem, w0, inserts(idRange(100, 150), bidVal{Price: 2, Channel: "app"}))
	writeBids(t, mem, w1, inserts(idRange(1000, 1010), bidVal{Price: 3, Channel: "web"}))
	b, c := int64(w0.UnsealedBytes()), int64(w1.UnsealedBytes())
	if b <= long {
		t.Fatalf("rewriting 50 rows: %d unsealed bytes, %d before", b, long)
	}
	want("epoch 2 unsealed", a+b, c)
	for _, w := range []*storage.StateTable{w0, w1} {
		if err := w.Seal(ep(2)); err != nil {
			t.Fatal(err)
		}
	}
	if got := int64(n0.UncommittedBytes()) - a; got >= long {
		t.Fatalf("50 rows rewritten with shorter values: their run holds %d bytes, the first writes %d", got, long)
	}
	prog, err := storage.NewProgressTable(n0, 900, "p", bidT, vnode.Full(bidT.VnodeCount))
	if err != nil {
		t.Fatal(err)
	}
	view, err := n0.View()
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = prog.Load(view)
	view.Release()
	if err != nil {
		t.Fatal(err)
	}
	if err := prog.Set(3, storage.VnodeProgress{State: vec.Completed}); err != nil {
		t.Fatal(err)
	}
	if err := prog.Seal(ep(2)); err != nil {
		t.Fatal(err)
	}
	p := n0.PendingBytes() - (a + b)
	if p <= 0 {
		t.Fatalf("a sealed progress run adds %d bytes", p)
	}
	want("epoch 2 sealed", a+b+p, c)
	writeBids(t, mem, w0, inserts(idRange(200, 210), bidVal{Price: 4, Channel: "web"}))
	d := int64(w0.UnsealedBytes())
	if err := w0.Seal(ep(3)); err != nil {
		t.Fatal(err)
	}
	sig := s.CommitSignal()
	select {
	case <-sig:
		t.Fatal("CommitSignal closed before a commit")
	default:
	}
	mustCheckpoint(t, s, ep(2)) // epochs 1 and 2; epoch 3 stays
	want("after checkpoint 2", d, 0)
	select {
	case <-sig:
	default:
		t.Fatal("CommitSignal still open after a commit")
	}
	// A refused seal (at the committed epoch) keeps its writes unsealed, counted once,
	// rewritten keys included, and nothing of them is left once they are committed.
	writeBids(t, mem, w0, inserts(idRange(300, 305), bidVal{Price: 6, Channel: "web"}))
	writeBids(t, mem, w0, inserts(idRange(300, 305), bidVal{Price: 7, Channel: "app"}))
	f := int64(w0.UnsealedBytes())
	if err := w0.Seal(ep(2)); err == nil {
		t.Fatal("a seal at the committed epoch was accepted")
	}
	want("after a refused seal", d+f, 0)
	if err := w0.Seal(ep(4)); err != nil {
		t.Fatal(err)
	}
	want("after sealing them at epoch 4", d+f, 0)
	mustCheckpoint(t, s, ep(4))
	want("after checkpoint 4", 0, 0)
	writeBids(t, mem, w1, inserts(idRange(2000, 2005), bidVal{Price: 5, Channel: "web"}))
	e := int64(w1.UnsealedBytes())
	want("unsealed on n1", 0, e)
	s.DropUncommitted()
	want("after DropUncommitted", 0, 0)
}

// Checkpoints large enough for their merge buffers to go through the shared pool
// (more than 65,536 entries), the second with inserts, overwrites of committed rows
// and deletes: the committed state and its row counts are exact, and a view taken
// before the second checkpoint keeps its state after that checkpoint reused a buffer.
// (Not under -race: the cost is the helpers' row placement, not concurrency.)
func TestCheckpointLargeMergeBuffers(t *testing.T) {
	if invariants.RaceEnabled {
		t.Skip("large single-goroutine checkpoints; run without -race")
	}
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	n := s.AddNode()
	w, p := fullBidTable(t, n), newBidPlacer()
	const perEpoch = 70_000
	committed := bidState{}
	ops := inserts(idRange(0, perEpoch), bidVal{Price: 1, Channel: "e1"})
	writeBids(t, mem, w, ops)
	w.Seal(ep(1))
	mustCheckpoint(t, s, ep(1))
	committed.apply(ops)

	ops = inserts(idRange(perEpoch, 2*perEpoch), bidVal{Price: 2, Channel: "e2"})
	for id := int64(0); id < perEpoch; id += 7 { // overwrite committed rows
		ops = append(ops, bidOp{Op: vec.Insert, ID: id, V: bidVal{Price: -2, Channel: "upd"}})
	}
	for id := int64(3); id < perEpoch; id += 11 { // delete committed rows
		ops = append(ops, bidOp{Op: vec.Delete, ID: id})
	}
	writeBids(t, mem, w, ops)
	w.Seal(ep(2))
	before, err := n.View()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Release()
	mustCheckpoint(t, s, ep(2))
	committed.apply(ops)
	got, _ := readBidsAt(t, s, nil, w, p)
	expectState(t, "after the second checkpoint", committed, got)
	checkRowCounts(t, s, bidTableID, p.counts(committed), bidT.VnodeCount)
	expectState(t, "view taken before the second checkpoint", committed, readBids(t, w, before, p))
}
