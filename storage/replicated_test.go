package storage_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// randomS2 returns every pk column of ts plus a random subset of the others, in random
// order, and the S1 columns it keeps.
func randomS2(rng *rand.Rand, ts *tableSpec) ([]int, []bool) {
	keep := make([]bool, len(ts.t.Columns))
	var s2 []int
	for c := range ts.t.Columns {
		if ts.t.IsPK(c) || rng.IntN(2) == 0 {
			keep[c] = true
			s2 = append(s2, c)
		}
	}
	rng.Shuffle(len(s2), func(i, j int) { s2[i], s2[j] = s2[j], s2[i] })
	return s2, keep
}

// project returns c with only the columns s2 (sharing ops and visibility).
func project(ts *tableSpec, c *vec.Chunk, s2 []int) *vec.Chunk {
	rec := vectest.Project(ts.t, c.Record(), s2)
	defer rec.Release()
	return c.WithRecord(rec)
}

// anyUnowned reports whether a visible row of c is outside own.
func anyUnowned(ts *tableSpec, c *vec.Chunk, own *vnode.Bitmap) (uint16, bool) {
	vn := make([]uint16, c.NumRows())
	ts.k.Vnodes(c, vn)
	for i, v := range vn {
		if c.Visible(i) && !own.Contains(v) {
			return v, true
		}
	}
	return 0, false
}

type repActor struct {
	r        *storage.ReplicatedTable
	s2       []int
	keep     []bool
	unsealed rows
	private  []sealedRun // sealed epochs not yet dropped
}

// TestReplicatedTableRandomized drives an upstream state table and one or two
// backfill actors' replicated tables (random disjoint vnodes, random S2) through random
// epochs. The replicated tables receive S2 chunks (the upstream's changes or other
// rows); iteration after random positions must see exactly the committed upstream
// overlaid with the actor's own sealed epochs above the committed epoch, never the
// upstream's uncommitted epochs; private epochs are dropped once committed; columns
// outside S2 of replicated rows read as NULL; chunks with rows outside the actor's
// vnodes are refused whole.
func TestReplicatedTableRandomized(t *testing.T) {
	base := vectest.Seed(t)
	for i := 0; i < scale(12, 100); i++ {
		seed := base + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed=%d", seed)
			runReplicatedRandomized(t, seed, scale(30, 80))
		})
	}
}

func runReplicatedRandomized(t *testing.T, seed uint64, epochs int) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(seed)
	rc := &recorder{mem: mem}
	defer rc.release()
	s := openStore(t, vfs.NewMem())
	node := s.AddNode()
	ts := newTableSpec(rng, 21)
	full := vnode.Full(ts.t.VnodeCount)
	up, err := storage.NewStateTable(node, ts.id, ts.t, full)
	if err != nil {
		t.Fatal(err)
	}
	committed, upUnsealed := rows{}, rows{}
	var upRuns []sealedRun
	var committedEpoch uint64
	var actors []*repActor
	for _, b := range randomBitmaps(rng, ts.t.VnodeCount, 1+rng.IntN(2)) {
		s2, keep := randomS2(rng, ts)
		r, err := storage.NewReplicatedTable(s, ts.id, ts.t, s2, b, mem)
		if err != nil {
			t.Fatal(err)
		}
		actors = append(actors, &repActor{r: r, s2: s2, keep: keep, unsealed: rows{}})
	}
	t.Logf("table: %d columns, %d vnodes, generated kernels %v, %d actors", len(ts.t.Columns), ts.t.VnodeCount, ts.k.Generated(), len(actors))

	phase := ""
	check := func(a *repActor, ai int) {
		view, err := a.r.View()
		if err != nil {
			t.Fatal(err)
		}
		defer view.Release()
		if view.Epoch != committedEpoch {
			t.Fatalf("%s: view epoch %d, want %d", phase, view.Epoch, committedEpoch)
		}
		var keep []sealedRun
		for _, p := range a.private {
			if p.epoch > view.Epoch {
				keep = append(keep, p)
			}
		}
		a.private = keep
		if b := a.r.PrivateBytes(); (b == 0) != (len(a.private) == 0 && a.unsealed.empty()) {
			t.Fatalf("%s: actor %d holds %d private bytes with %d sealed epochs above %d in the model", phase, ai, b, len(a.private), view.Epoch)
		}
		layers := []rows{committed}
		for _, p := range a.private {
			layers = append(layers, p.rows)
		}
		for c := 0; c < 3; c++ {
			v, ok := pickVnode(rng, layers, a.r.Vnodes())
			if !ok {
				return
			}
			live := visible(layers, v)
			var after []byte
			if rng.IntN(2) == 0 {
				after = probeKey(rng, ts, live, v)
			}
			var want []liveKV
			for _, kv := range live {
				if inBounds(kv.pk, storage.IterBounds{After: after}) {
					want = append(want, kv)
				}
			}
			it, err := a.r.Iter(view, v, after)
			if err != nil {
				t.Fatal(err)
			}
			checkIter(t, rng, mem, ts, it, want, func() string {
				return fmt.Sprintf("%s: actor %d (S2 %v) vnode %d after %x", phase, ai, a.s2, v, after)
			})
		}
		for u := 0; u < ts.t.VnodeCount; u++ {
			if !a.r.Vnodes().Contains(uint16(u)) {
				if _, err := a.r.Iter(view, uint16(u), nil); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("vnode %d", u)) {
					t.Fatalf("%s: iter of unowned vnode %d: %v", phase, u, err)
				}
				break
			}
		}
	}

	last := 0
	for i := 1; i <= epochs; i++ {
		phase = fmt.Sprintf("epoch %d writes", i)
		var upChunks []*vec.Chunk
		for j := rng.IntN(3); j > 0; j-- {
			c := randomChunk(rng, rc, ts, full)
			if err := up.Write(c); err != nil {
				t.Fatalf("%s: upstream: %v", phase, err)
			}
			applyChunk(ts, upUnsealed, c, nil)
			upChunks = append(upChunks, c)
		}
		for ai, a := range actors {
			for j := rng.IntN(3); j > 0; j-- {
				var c *vec.Chunk
				switch r := rng.IntN(6); {
				case r < 2 && len(upChunks) > 0:
					c = restrict(mem, ts, upChunks[rng.IntN(len(upChunks))], a.r.Vnodes())
				case r == 5:
					c = vectest.RandomChunk(rng, mem, ts.t, 1+rng.IntN(8), 0.2) // may stray
					rc.keep(c.Record())
				default:
					c = randomChunk(rng, rc, ts, a.r.Vnodes())
				}
				c2 := project(ts, c, a.s2)
				before := a.r.PrivateBytes()
				err := a.r.WriteChunk(c2)
				if v, stray := anyUnowned(ts, c, a.r.Vnodes()); stray {
					if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("vnode %d,", v)) || !strings.Contains(err.Error(), ts.t.Name) {
						t.Fatalf("%s: actor %d: chunk with a row in unowned vnode %d: %v", phase, ai, v, err)
					}
					if a.r.PrivateBytes() != before {
						t.Fatalf("%s: a refused chunk changed the private bytes", phase)
					}
				} else if err != nil {
					t.Fatalf("%s: actor %d: %v", phase, ai, err)
				} else {
					applyChunk(ts, a.unsealed, c, a.keep)
				}
				c2.Release()
				c.Release()
			}
		}
		for _, c := range upChunks {
			c.Release()
		}
		phase = fmt.Sprintf("epoch %d sealed", i)
		up.Seal(ep(i))
		if !upUnsealed.empty() {
			upRuns = append(upRuns, sealedRun{epoch: ep(i), rows: upUnsealed})
		}
		upUnsealed = rows{}
		for _, a := range actors {
			if rng.IntN(10) == 0 {
				continue
			}
			a.r.Seal(ep(i))
			if !a.unsealed.empty() {
				a.private = append(a.private, sealedRun{epoch: ep(i), rows: a.unsealed})
			}
			a.unsealed = rows{}
		}
		if rng.IntN(2) == 0 {
			j := last + 1 + rng.IntN(i-last)
			mustCheckpoint(t, s, ep(j))
			var keep []sealedRun
			for _, r := range upRuns {
				if r.epoch <= ep(j) {
					r.rows.applyTo(committed)
				} else {
					keep = append(keep, r)
				}
			}
			upRuns, committedEpoch, last = keep, ep(j), j
			phase = fmt.Sprintf("epoch %d after checkpoint %d", i, j)
		}
		for ai, a := range actors {
			if rng.IntN(2) == 0 {
				check(a, ai)
			}
		}
	}
	phase = "end"
	for ai, a := range actors {
		check(a, ai)
	}
}

// TestReplicatedOldView: a view taken before a checkpoint must keep seeing the
// replicated epochs above its own epoch even after a newer view has dropped them.
func TestReplicatedOldView(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	kv := kvTable(1)
	up, err := storage.NewStateTable(s.AddNode(), 5, kv, vnode.Full(1))
	if err != nil {
		t.Fatal(err)
	}
	r, err := storage.NewReplicatedTable(s, 5, kv, []int{1, 0, 2}, vnode.Full(1), mem)
	if err != nil {
		t.Fatal(err)
	}
	write := func(ks ...int64) {
		c := kvChunk(mem, kv, ks)
		defer c.Release()
		if err := up.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	rep := func(ks ...int64) {
		c := kvChunk(mem, kv, ks)
		defer c.Release()
		rec := vectest.Project(kv, c.Record(), []int{1, 0, 2})
		defer rec.Release()
		c2 := c.WithRecord(rec)
		defer c2.Release()
		if err := r.WriteChunk(c2); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(v *storage.View) string {
		it, err := r.Iter(v, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for it.Next() {
			out = append(out, fmt.Sprint(kvDecodeK(t, kv, it.PK())))
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, " ")
	}
	rep(1, 2)
	r.Seal(ep(1))
	old, err := r.View()
	if err != nil {
		t.Fatal(err)
	}
	defer old.Release()
	if got := keys(old); got != "1 2" {
		t.Fatalf("old view: %q", got)
	}
	write(1, 2)
	up.Seal(ep(1))
	mustCheckpoint(t, s, ep(1))
	rep(3)
	r.Seal(ep(2))
	cur, err := r.View()
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Release()
	if got := keys(cur); got != "1 2 3" {
		t.Fatalf("new view: %q", got)
	}
	if got := keys(old); got != "1 2 3" {
		t.Fatalf("old view after a newer one dropped epoch 1: %q, want %q", got, "1 2 3")
	}
}

// A snapshot source built on an older replicated view sees the private epochs that
// view covered, as ReplicatedTable.Iter does, even after a newer view dropped them.
func TestReplicatedSourceOlderView(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	s.AddNode()
	kt := kvTable(1)
	r, err := storage.NewReplicatedTable(s, 5, kt, []int{0, 1, 2, 3}, vnode.Full(1), mem)
	if err != nil {
		t.Fatal(err)
	}
	c := kvChunk(mem, kt, []int64{1, 2, 3})
	defer c.Release()
	if err := r.WriteChunk(c); err != nil {
		t.Fatal(err)
	}
	r.Seal(ep(1))
	v1, err := r.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v1.Release()
	if _, err := s.Checkpoint(ep(1)); err != nil {
		t.Fatal(err)
	}
	v2, err := r.View() // drops private epoch 1: the committed epoch covers it
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Release()
	count := func(src storage.VnodeSource) int {
		it, err := src.Iter(0, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		n := 0
		for it.Next() {
			n++
		}
		return n
	}
	if n := count(storage.ReplicatedSource(r, v1)); n != 3 {
		t.Fatalf("source on the older view sees %d rows, want 3", n)
	}
	if _, err := storage.ReplicatedSource(r, nil).Iter(0, nil); err == nil {
		t.Fatal("a source on a nil view iterated")
	}
	if _, err := r.Iter(nil, 0, nil); err == nil {
		t.Fatal("Iter on a nil view succeeded")
	}
}
