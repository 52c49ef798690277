package storage_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/internal/invariants"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// BenchmarkLookup reads batches of 1,024 bid pks from a store of 200,000 committed
// bids on a real directory, one Get per row against one GetMany per batch:
//
//	go test -run XXX -bench Lookup ./storage/
//
// The batches: "empty", pks of a table with nothing committed (a view being
// built); "present", random committed pks; "absent", random pks past the committed
// ones in the same table; "compacted-present" and "compacted-absent", the same
// against a store whose rows were flushed and compacted into pebble's last level
// (where the rows of the others stay in pebble's memtable); each with the batch's
// rows in key order ("sorted", as a snapshot batch of one vnode arrives) or not.
func BenchmarkLookup(b *testing.B) {
	const rows, batch = 200_000, 1024
	node, st := committedBids(b, rows, 4)
	empty, err := storage.NewStateTable(node, bidTableID+1, bidT, vnode.Full(bidT.VnodeCount))
	if err != nil {
		b.Fatal(err)
	}
	view, err := node.View()
	if err != nil {
		b.Fatal(err)
	}
	defer view.Release()
	// The same rows flushed and compacted into pebble's last level, where a table's
	// data ends up (the rows above stay in pebble's memtable).
	cnode, cst := committedBids(b, rows, 4)
	compactAll(b, cnode.Store())
	cview, err := cnode.View()
	if err != nil {
		b.Fatal(err)
	}
	defer cview.Release()
	place := newBidPlacer()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name   string
		st     *storage.StateTable
		view   *storage.View
		lo, hi int64
	}{
		{"empty", empty, view, 0, rows}, {"present", st, view, 0, rows}, {"absent", st, view, rows, 2 * rows},
		{"compacted-present", cst, cview, 0, rows}, {"compacted-absent", cst, cview, rows, 2 * rows},
	} {
		view := c.view
		for _, sorted := range []bool{true, false} {
			type row struct {
				vn uint16
				pk []byte
			}
			rs := make([]row, batch)
			for i := range rs {
				rs[i].vn, rs[i].pk = place.place(c.lo + rng.Int64N(c.hi-c.lo))
			}
			if sorted {
				slices.SortFunc(rs, func(a, b row) int {
					return slices.Compare(storage.AppendKey(nil, 0, a.vn, a.pk), storage.AppendKey(nil, 0, b.vn, b.pk))
				})
			}
			vns := make([]uint16, batch)
			sel := make([]int32, batch)
			var pks vec.Bytes
			pks.Reset()
			for i, r := range rs {
				vns[i], sel[i] = r.vn, int32(i)
				pks.Append(r.pk)
			}
			name := fmt.Sprintf("%s/sorted=%v", c.name, sorted)
			b.Run(name+"/get", func(b *testing.B) {
				for range b.N {
					for i := range batch {
						if _, _, err := c.st.Get(view, vns[i], pks.At(i)); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/row")
			})
			b.Run(name+"/getmany", func(b *testing.B) {
				var l storage.Lookup
				for range b.N {
					if err := c.st.GetMany(view, vns, &pks, sel, &l); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/row")
			})
		}
	}
}

// TestGetManyAllocs checks that GetMany reuses its Lookup: reading a batch of
// committed and missing pks allocates nothing per row in steady state.
func TestGetManyAllocs(t *testing.T) {
	if invariants.RaceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector (sync.Pool drops items at random)")
	}
	node, st := committedBids(t, 2000, 1)
	view, err := node.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	place := newBidPlacer()
	var vns []uint16
	var pks vec.Bytes
	var sel []int32
	pks.Reset()
	for id := int64(1000); id < 3000; id += 2 { // half committed, half missing
		v, pk := place.place(id)
		vns, sel = append(vns, v), append(sel, int32(len(vns)))
		pks.Append(pk)
	}
	var l storage.Lookup
	found := 0
	allocs := testing.AllocsPerRun(20, func() {
		if err := st.GetMany(view, vns, &pks, sel, &l); err != nil {
			t.Fatal(err)
		}
		found = 0
		for i := range vns {
			if _, ok := l.Value(i); ok {
				found++
			}
		}
	})
	if found != 500 {
		t.Fatalf("found %d of the 1,000 pks, want the 500 committed ones", found)
	}
	if allocs >= 1 {
		t.Fatalf("GetMany of %d pks: %.1f allocations per batch, want none", len(vns), allocs)
	}
}

// compactAll flushes s's pebble memtable and compacts its whole key range, which
// leaves the data in the last level.
func compactAll(tb testing.TB, s *storage.Store) {
	tb.Helper()
	db := s.DB()
	if err := db.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := db.Compact(context.Background(), []byte{0}, []byte{0xff, 0xff, 0xff, 0xff, 0xff}, false); err != nil {
		tb.Fatal(err)
	}
	if m := db.Metrics(); m.Levels[6].TablesCount == 0 {
		tb.Fatalf("compactAll: nothing in L6:\n%s", m)
	}
}

// committedBids opens a store on a real directory (closed at the end of the test) with
// bids 0..rows-1 committed in the given number of checkpoints, and returns its node
// and the bid state table over every vnode.
func committedBids(tb testing.TB, rows, checkpoints int) (*storage.Node, *storage.StateTable) {
	tb.Helper()
	s, err := storage.Open(tb.TempDir(), storage.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	node := s.AddNode()
	st, err := storage.NewStateTable(node, bidTableID, bidT, vnode.Full(bidT.VnodeCount))
	if err != nil {
		tb.Fatal(err)
	}
	mem := memory.NewGoAllocator()
	for i := range checkpoints {
		lo, hi := int64(i*rows/checkpoints), int64((i+1)*rows/checkpoints)
		writeBids(tb, mem, st, inserts(idRange(lo, hi), bidVal{Price: int64(i), Channel: "web"}))
		if err := st.Seal(ep(i + 1)); err != nil {
			tb.Fatal(err)
		}
		mustCheckpoint(tb, s, ep(i+1))
	}
	return node, st
}

// TestGetManyLayers reads batches through every layer GetMany searches: committed
// rows compacted into pebble's last level (found and missing keys go through its
// bloom filters), committed rows still in pebble's memtable, three sealed runs whose
// vnodes differ (new keys below and above each vnode's committed ones, overwrites,
// deletes), and the actor's unsealed writes. Each batch, sorted by key across vnodes
// or shuffled, with repeated pks, must read what Get reads row by row.
func TestGetManyLayers(t *testing.T) {
	const rows = 3000
	node, st := committedBids(t, rows, 2)
	compactAll(t, node.Store())
	mem := memory.NewGoAllocator()
	// Committed after the compaction: in pebble's memtable.
	writeBids(t, mem, st, inserts(idRange(rows, rows+500), bidVal{Price: 7, Channel: "late"}))
	if err := st.Seal(ep(3)); err != nil {
		t.Fatal(err)
	}
	mustCheckpoint(t, node.Store(), ep(3))
	place := newBidPlacer()
	rng := rand.New(rand.NewPCG(5, 6))
	// Sealed runs, not committed: each writes the ids of some vnodes only.
	for e := 4; e <= 6; e++ {
		var ops []bidOp
		for id := int64(0); id < rows+1500; id++ {
			if vn, _ := place.place(id); int(vn)%3 != e%3 {
				continue
			}
			switch r := rng.IntN(10); {
			case r == 0:
				ops = append(ops, bidOp{Op: vec.Delete, ID: id})
			case r < 3:
				ops = append(ops, bidOp{Op: vec.Insert, ID: id, V: bidVal{Price: int64(e), Channel: "run"}})
			}
		}
		writeBids(t, mem, st, ops)
		if err := st.Seal(ep(e)); err != nil {
			t.Fatal(err)
		}
	}
	// Unsealed writes.
	var ops []bidOp
	for id := int64(rows - 100); id < rows+2000; id += 7 {
		ops = append(ops, bidOp{Op: vec.Insert, ID: id, V: bidVal{Price: 99, Channel: "memtable"}})
	}
	writeBids(t, mem, st, ops)
	view, err := node.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	var l storage.Lookup
	for batch := range 40 {
		type row struct {
			vn uint16
			pk []byte
		}
		rs := make([]row, 1+rng.IntN(800))
		for i := range rs {
			rs[i].vn, rs[i].pk = place.place(rng.Int64N(rows + 2500))
		}
		if batch%2 == 0 {
			slices.SortFunc(rs, func(a, b row) int {
				return slices.Compare(storage.AppendKey(nil, 0, a.vn, a.pk), storage.AppendKey(nil, 0, b.vn, b.pk))
			})
		}
		vns := make([]uint16, len(rs))
		var pks vec.Bytes
		pks.Reset()
		var sel []int32
		for i, r := range rs {
			vns[i] = r.vn
			pks.Append(r.pk)
			if rng.IntN(8) > 0 {
				sel = append(sel, int32(i))
			}
		}
		if err := st.GetMany(view, vns, &pks, sel, &l); err != nil {
			t.Fatal(err)
		}
		inSel := map[int32]bool{}
		for _, i := range sel {
			inSel[i] = true
		}
		found := 0
		for i := range rs {
			got, gok := l.Value(i)
			want, wok, err := st.Get(view, vns[i], pks.At(i))
			if err != nil {
				t.Fatal(err)
			}
			if !inSel[int32(i)] {
				want, wok = nil, false // rows not asked read as missing
			}
			if gok != wok || !slices.Equal(got, want) {
				t.Fatalf("batch %d row %d (vnode %d, pk %x): GetMany %x/%v, Get %x/%v", batch, i, vns[i], pks.At(i), got, gok, want, wok)
			}
			if gok {
				found++
			}
		}
		if len(sel) > 20 && (found == 0 || found == len(sel)) {
			t.Fatalf("batch %d: %d of %d rows found: the batch does not mix found and missing keys", batch, found, len(sel))
		}
	}
}
