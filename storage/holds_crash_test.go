package storage_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/storage/storetest"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// holdsStep is what a crash clone taken during a partial store's gain, give-up or
// apply may find on reopening: the vnodes held before or after it, at the sequence
// the store applied before or after it.
type holdsStep struct {
	before, after map[uint32]*vnode.Bitmap
	seqs          []uint64
	every         bool // a clone before every write
}

// A partial store crashed at any write of a Gain, a Keep or an IngestFiles (crash
// clones before every file write, keeping none, some or all of the unsynced data)
// reopens holding the vnodes it held before the step or those after it, never a
// mix, at a sequence it applied, and equal to a whole store at that sequence
// restricted to them, with nothing of another vnode.
func TestPartialStoreCrash(t *testing.T) {
	for seed := uint64(1); seed <= uint64(scale(2, 8)); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 0xc4a5))
			fs := vfs.NewMem()
			cr := &crasher{mem: vfs.NewCrashableMem(), rng: vectest.NewRand(seed ^ 0xC4A5), limit: 1000}
			partial := testOptions(cr.fs())
			partial.Partial = true
			x := openStoreIn(t, "x", testOptions(fs))
			w := openStoreIn(t, "w", testOptions(fs))
			p := openStoreIn(t, "p", partial)
			ids := []uint32{7, 9}
			xTabs := stateTables(t, x.AddNode(), ids)
			wr := &remoteWriter{rng: rng, tables: ids, live: map[string]bool{}}
			objs := remoteObjects{}
			var names []string                   // every object so far, oldest first
			whole := map[uint64][]string{0: nil} // w's raw scan after each sequence
			var steps []holdsStep
			randomVnodes := func() *vnode.Bitmap {
				b := vnode.NewBitmap(8)
				for v := range 8 {
					if rng.IntN(2) == 0 {
						b.Add(vnode.Vnode(v))
					}
				}
				return b
			}
			// step runs f as crash step what, cloning before every write (every),
			// or one in four.
			step := func(what string, every bool, seqs []uint64, f func()) {
				t.Helper()
				steps = append(steps, holdsStep{before: p.Holds(), seqs: seqs, every: every})
				cr.set(what, every, uint64(len(steps)-1))
				cr.armed.Store(true)
				f()
				cr.armed.Store(false)
				steps[len(steps)-1].after = p.Holds()
				cr.clone("after it returned")
			}
			for i := 1; i <= 8; i++ {
				e, seq := ep(i), uint64(i)
				switch i {
				case 2, 5:
					ranges := map[uint32]*vnode.Bitmap{7: randomVnodes(), 9: randomVnodes()}
					missing, err := p.Missing(ranges)
					if err != nil {
						t.Fatal(err)
					}
					if missing != nil {
						step(fmt.Sprintf("gain %v at sequence %d", missing, seq-1), true, []uint64{seq - 1}, func() {
							if err := p.Gain(seq-1, missing, download(t, p, objs, names)); err != nil {
								t.Fatal(err)
							}
						})
					}
				case 7:
					step(fmt.Sprintf("keep at sequence %d", seq-1), true, []uint64{seq - 1}, func() {
						if _, err := p.Keep(map[uint32]*vnode.Bitmap{7: randomVnodes()}); err != nil {
							t.Fatal(err)
						}
					})
				}
				writeOps(t, xTabs, wr.epoch(i), e)
				epochNames, deltas := exportCounted(t, x, e, storage.ExportOptions{TableBytes: 1 + int(seed%2)*3000}, objs)
				ch := storage.Changes{Sequence: seq}
				counted := ch
				counted.Counted, counted.RowDeltas = true, deltas
				applyChanges(t, x, e, objs, epochNames, counted)
				applyChanges(t, w, e, objs, epochNames, ch)
				whole[seq] = storetest.RawScan(t, w)
				step(fmt.Sprintf("apply sequence %d", seq), false, []uint64{seq - 1, seq}, func() {
					applyChanges(t, p, e, objs, epochNames, counted)
				})
				names = append(names, epochNames...)
			}
			if len(cr.points) == 0 {
				t.Fatal("no crash point was taken")
			}
			for k, pt := range cr.points {
				st := steps[pt.allowed[0]]
				o := testOptions(pt.fs)
				s, err := storage.Open("p", o)
				if err != nil {
					t.Fatalf("crash point %d (%s): reopen: %v", k, pt.what, err)
				}
				holds := s.Holds()
				if !s.Partial() || (!sameHolds(holds, st.before) && !sameHolds(holds, st.after)) {
					s.Close()
					t.Fatalf("crash point %d (%s): reopened holding %v (partial %v), want %v or %v", k, pt.what, holds, s.Partial(), st.before, st.after)
				}
				seq, err := s.AppliedSequence()
				if err != nil || (seq != st.seqs[0] && seq != st.seqs[len(st.seqs)-1]) {
					s.Close()
					t.Fatalf("crash point %d (%s): reopened at sequence %d (%v), want one of %v", k, pt.what, seq, err, st.seqs)
				}
				got := storetest.RawScan(t, s)
				if stray := storetest.Stray(t, got, holds); len(stray) > 0 {
					s.Close()
					t.Fatalf("crash point %d (%s): holding %v, it holds %d entries of other vnodes, the first %s", k, pt.what, holds, len(stray), stray[0])
				}
				sameScan(t, fmt.Sprintf("crash point %d (%s) at sequence %d holding %v", k, pt.what, seq, holds),
					storetest.Restrict(t, whole[seq], holds), storetest.Restrict(t, got, holds))
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			per := map[uint64]int{}
			for _, pt := range cr.points {
				per[pt.allowed[0]]++
			}
			for k, st := range steps {
				// A gain or a give-up writes files: a clone before each of them,
				// and one after it returned.
				if st.every && per[uint64(k)] < 2 {
					t.Fatalf("step %d has %d crash points (of %d in all): the limit ran out before it", k, per[uint64(k)], len(cr.points))
				}
			}
			t.Logf("%d crash points over %d steps", len(cr.points), len(steps))
		})
	}
}

// sameHolds reports whether a and b hold the same vnodes (a table with none is as
// one that is absent).
func sameHolds(a, b map[uint32]*vnode.Bitmap) bool {
	for _, m := range []map[uint32]*vnode.Bitmap{a, b} {
		for t := range maps.Keys(m) {
			x, y := a[t], b[t]
			switch {
			case x == nil && y == nil:
			case x == nil:
				if y.Len() != 0 {
					return false
				}
			case y == nil:
				if x.Len() != 0 {
					return false
				}
			case !x.Equal(y):
				return false
			}
		}
	}
	return true
}
