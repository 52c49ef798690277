package storage_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/storage/storetest"
	"github.com/seed04fbb902/weir/vnode"
)

// A partial store that applies every commit of a seeded log, and gains vnodes from the
// log's objects on the way, equals at every commit a whole store that applies the same
// commits restricted to the vnodes it holds: keys, values and row counts, whether the
// commits carry their row counts or the store counts them. So does a partial store
// that applies the whole log holding nothing and then gains everything at once.
func TestPartialStoreEquivalence(t *testing.T) {
	for seed := uint64(1); seed <= uint64(scale(4, 16)); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			fs := vfs.NewMem()
			partial := testOptions(fs)
			partial.Partial = true
			x := openStoreIn(t, "x", testOptions(fs))
			w := openStoreIn(t, "w", testOptions(fs))
			p := openStoreIn(t, "p", partial)
			if !p.Partial() || w.Partial() {
				t.Fatalf("partial: p %v, w %v", p.Partial(), w.Partial())
			}
			ids := []uint32{7, 9, 11}
			xNode := x.AddNode()
			xTabs := stateTables(t, xNode, ids)
			rng := rand.New(rand.NewPCG(seed, 0x401d))
			wr := &remoteWriter{rng: rng, tables: ids[:2], live: map[string]bool{}}
			mem := memory.NewGoAllocator()
			objs := remoteObjects{}
			type version struct {
				epoch uint64
				names []string
				ch    storage.Changes
			}
			var log []version
			// allNames are the objects of every version so far, oldest first.
			allNames := func() []string {
				var out []string
				for _, v := range log {
					out = append(out, v.names...)
				}
				return out
			}
			randomVnodes := func() *vnode.Bitmap {
				b := vnode.NewBitmap(8)
				for v := range 8 {
					if rng.IntN(3) == 0 {
						b.Add(vnode.Vnode(v))
					}
				}
				return b
			}
			gain := func(s *storage.Store, seq uint64, ranges map[uint32]*vnode.Bitmap) {
				t.Helper()
				missing, err := s.Missing(ranges)
				if err != nil {
					t.Fatal(err)
				}
				if missing == nil {
					return
				}
				if err := s.Gain(seq, missing, download(t, s, objs, allNames())); err != nil {
					t.Fatalf("gain %v at sequence %d: %v", missing, seq, err)
				}
				if again, err := s.Missing(ranges); err != nil || again != nil {
					t.Fatalf("after gaining %v: missing %v (%v)", ranges, again, err)
				}
			}
			gain(p, 0, map[uint32]*vnode.Bitmap{7: randomVnodes(), 11: randomVnodes()})
			tableBytes := 1 + int(seed%3)*2000
			for i := 1; i <= 12; i++ {
				e := ep(i)
				var ks []int64
				for k := range int64(200) {
					if rng.IntN(8) == 0 {
						ks = append(ks, k)
					}
				}
				if len(ks) > 0 {
					c := kvChunk(mem, xTabs[11].Table(), ks)
					if err := xTabs[11].Write(c); err != nil {
						t.Fatal(err)
					}
					c.Release()
				}
				writeOps(t, xTabs, wr.epoch(i), e)
				switch i {
				case 3:
					x.SetCatalog("view/q", []byte("plan 1"))
				case 7:
					if err := x.StageDropTable(9); err != nil {
						t.Fatal(err)
					}
					wr.tables = []uint32{7}
				}
				names, deltas := exportCounted(t, x, e, storage.ExportOptions{TableBytes: tableBytes}, objs)
				ch := x.Staged()
				ch.Sequence = uint64(i)
				log = append(log, version{e, names, ch})
				counted := ch
				counted.Counted, counted.RowDeltas = true, deltas
				applyChanges(t, x, e, objs, names, counted)
				applyChanges(t, w, e, objs, names, ch)
				pch := ch
				if seed%2 == 0 {
					pch = counted
				}
				applyChanges(t, p, e, objs, names, pch)
				switch i {
				case 4:
					gain(p, uint64(i), map[uint32]*vnode.Bitmap{7: randomVnodes(), 9: randomVnodes()})
				case 6:
					// Give up some vnodes, gained again (some of them) below.
					keep := map[uint32]*vnode.Bitmap{7: randomVnodes(), 11: randomVnodes()}
					before := p.Holds()
					gone, err := p.Keep(keep)
					if err != nil {
						t.Fatal(err)
					}
					for tb, b := range before {
						want := b
						if k := keep[tb]; k != nil {
							want, _ = b.And(k)
						} else {
							want = vnode.NewBitmap(b.Count())
						}
						got := p.Holds()[tb]
						if got == nil {
							got = vnode.NewBitmap(b.Count())
						}
						lost := gone[tb]
						if lost == nil {
							lost = vnode.NewBitmap(b.Count())
						}
						if again, _ := got.Or(lost); !got.Equal(want) || !again.Equal(b) {
							t.Fatalf("table %d held %v, kept %v: holds %v, gave up %v", tb, b, keep[tb], got, lost)
						}
					}
				case 9:
					gain(p, uint64(i), map[uint32]*vnode.Bitmap{11: vnode.Full(8)})
				}
				holds := p.Holds()
				if _, ok := holds[9]; ok && i >= 7 {
					t.Fatalf("epoch %d: p holds vnodes %v of table 9, which was dropped", e, holds[9])
				}
				want := storetest.Restrict(t, rawScan(t, w), holds)
				got := rawScan(t, p)
				sameScan(t, fmt.Sprintf("epoch %d: p holding %v", e, holds), want, storetest.Restrict(t, got, holds))
				// And it holds nothing else: no key or row count of another vnode.
				if stray := storetest.Stray(t, got, holds); len(stray) > 0 {
					t.Fatalf("epoch %d: p holding %v holds %d entries of other vnodes, the first %s", e, holds, len(stray), stray[0])
				}
			}
			// A partial store that starts empty applies the log holding nothing,
			// then gains what p holds from every object at once.
			q := openStoreIn(t, "q", partial)
			for _, v := range log {
				applyChanges(t, q, v.epoch, objs, v.names, v.ch)
			}
			if n := tableKeys(t, q, 7) + tableKeys(t, q, 11); n != 0 {
				t.Fatalf("q holds no vnode, yet %d keys", n)
			}
			gain(q, uint64(len(log)), p.Holds())
			sameScan(t, "q", rawScan(t, p), rawScan(t, q))
		})
	}
}

// Gain refuses a whole store, a sequence the store is not at, vnodes it holds
// already, and another vnode count than the held ones', changing nothing.
func TestPartialStoreGainRefuses(t *testing.T) {
	fs := vfs.NewMem()
	partial := testOptions(fs)
	partial.Partial = true
	w := openStoreIn(t, "w", testOptions(fs))
	if err := w.Gain(0, map[uint32]*vnode.Bitmap{7: vnode.Full(8)}, nil); err == nil || !strings.Contains(err.Error(), "whole") {
		t.Fatalf("gain on a whole store: %v", err)
	}
	p := openStoreIn(t, "p", partial)
	if err := p.Gain(0, map[uint32]*vnode.Bitmap{7: vnode.NewBitmap(8, 1, 2)}, nil); err != nil {
		t.Fatal(err)
	}
	before := rawScan(t, p)
	for _, c := range []struct {
		name   string
		seq    uint64
		ranges map[uint32]*vnode.Bitmap
		want   string
	}{
		{"sequence", 3, map[uint32]*vnode.Bitmap{7: vnode.NewBitmap(8, 3)}, "applied sequence 0"},
		{"held", 0, map[uint32]*vnode.Bitmap{7: vnode.NewBitmap(8, 2, 3)}, "holds some"},
		{"count", 0, map[uint32]*vnode.Bitmap{7: vnode.NewBitmap(16, 9)}, "16 vnodes"},
		{"meta", 0, map[uint32]*vnode.Bitmap{storage.MetaTable: vnode.NewBitmap(8, 0)}, "reserved"},
		{"last table", 0, map[uint32]*vnode.Bitmap{math.MaxUint32: vnode.NewBitmap(8, 0)}, "reserved"},
	} {
		if err := p.Gain(c.seq, c.ranges, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	sameScan(t, "after refused gains", before, rawScan(t, p))
	// What assumes a whole store refuses a partial one.
	if _, _, err := p.ExportCommitted(storage.ExportOptions{}, nil); err == nil || !strings.Contains(err.Error(), "partial") {
		t.Errorf("a base of a partial store: %v", err)
	}
	if _, err := p.Checkpoint(ep(1)); err == nil || !strings.Contains(err.Error(), "partial") {
		t.Errorf("a local checkpoint of a partial store: %v", err)
	}
	v, err := p.View()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.ExportView(v, storage.ExportOptions{}, nil); err == nil || !strings.Contains(err.Error(), "partial") {
		t.Errorf("a base of a partial store's view: %v", err)
	}
	v.Release()
	// The refusal leaves nothing locked: a commit publishes its epoch under the
	// lock a view's export takes.
	if err := p.IngestFiles(nil, ep(2), storage.Changes{Sequence: 1}); err != nil {
		t.Fatalf("a commit after the refused export: %v", err)
	}
	if h := p.Holds(); len(h) != 1 || !h[7].Equal(vnode.NewBitmap(8, 1, 2)) {
		t.Fatalf("holds %v", h)
	}
	// The holds survive a reopen, and so does being partial.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = openStoreIn(t, "p", testOptions(fs))
	if h := p.Holds(); !p.Partial() || len(h) != 1 || !h[7].Equal(vnode.NewBitmap(8, 1, 2)) {
		t.Fatalf("reopened: partial %v, holds %v", p.Partial(), h)
	}
	for _, c := range []struct {
		lo, hi []byte
		want   bool
	}{
		{storage.AppendKey(nil, 7, 0, nil), storage.AppendKey(nil, 7, 0, []byte("z")), false},
		{storage.AppendKey(nil, 7, 0, nil), storage.AppendKey(nil, 7, 1, nil), true},
		{storage.AppendKey(nil, 7, 3, nil), storage.AppendKey(nil, 7, 7, nil), false},
		{storage.AppendKey(nil, 6, 5, nil), storage.AppendKey(nil, 8, 0, nil), true},
		{storage.AppendKey(nil, 8, 0, nil), storage.AppendKey(nil, 9, 0, nil), false},
	} {
		if got := p.MayHold(c.lo, c.hi); got != c.want {
			t.Errorf("MayHold(%x, %x) = %v, want %v", c.lo, c.hi, got, c.want)
		}
	}
}
