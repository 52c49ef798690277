package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/seed04fbb902/weir/vec/vectest"
)

// sortedVnode keeps a cache per vnode and merges new keys into it: after any mix of
// new keys, overwrites, deletes and reads it must equal a fresh sort of the vnode's
// entries, and a result handed out earlier must not change.
func TestMemtableSortedCache(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		mt := newMemtable()
		type held struct {
			got  []entry
			want []string
		}
		var kept []held
		for step := 0; step < 200; step++ {
			switch r := rng.IntN(10); {
			case r < 6:
				k := AppendKey(nil, 9, uint16(rng.IntN(3)), []byte{byte(rng.IntN(64)), byte(rng.IntN(4))})
				mt.put(k, []byte{byte(step)}, rng.IntN(5) == 0)
			default:
				v := uint16(rng.IntN(3))
				got := mt.sortedVnode(v)
				var want []entry
				for i := range mt.n {
					if e := *mt.item(i); e.key != nil && keyVnode(e.key) == v { // (nil: folded by a settle)
						want = append(want, e)
					}
				}
				slices.SortFunc(want, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
				if !slices.Equal(renderEntries(got), renderEntries(want)) {
					t.Fatalf("seed %d step %d: sortedVnode(%d) differs from a fresh sort", seed, step, v)
				}
				kept = append(kept, held{got, renderEntries(got)})
			}
		}
		for i, h := range kept {
			if !slices.Equal(renderEntries(h.got), h.want) {
				t.Fatalf("seed %d: result %d changed after later writes", seed, i)
			}
		}
	}
}

// TestMemtableArena checks the arena's block sizes: a memtable that writes a few small
// rows holds a small block, blocks double up to the maximum as writes go on (and the
// size is kept across a seal), and a key overwritten many times piles up no more of
// its old values in the arena than its vnode's settling allows.
func TestMemtableArena(t *testing.T) {
	mt := newMemtable()
	mt.put([]byte("key-0"), []byte("value"), false)
	if got := cap(mt.arena); got != minArenaBlock {
		t.Fatalf("first block of %d bytes, want %d", got, minArenaBlock)
	}
	for i := range 100 {
		mt.put(fmt.Appendf(nil, "key-%d", i), bytes.Repeat([]byte{'v'}, 1000), false)
	}
	if got := cap(mt.arena); got != maxArenaBlock {
		t.Fatalf("after 100 KB of writes the block has %d bytes, want %d", got, maxArenaBlock)
	}
	mt.seal(1, 1)
	mt.put([]byte("key-0"), []byte("value"), false)
	if got := cap(mt.arena); got != maxArenaBlock {
		t.Fatalf("after a seal the first block has %d bytes, want %d (the size is kept)", got, maxArenaBlock)
	}
	used := len(mt.arena)
	for i := range 10_000 {
		mt.put([]byte("key-0"), fmt.Appendf(nil, "value-%d", i), false)
	}
	if most := used + settleBelow*len("key-0value-9999"); len(mt.arena) > most {
		t.Fatalf("10,000 overwrites of one key grew the arena from %d to %d bytes, want at most %d", used, len(mt.arena), most)
	}
	if e, ok := mt.get([]byte("key-0")); !ok || string(e.value) != "value-9999" {
		t.Fatalf("key-0 = %q, %v", e.value, ok)
	}
	// Large values settle the vnode by their bytes: 100 rewrites of 100 KiB hold
	// about settleBelowBytes of them.
	big := bytes.Repeat([]byte{'b'}, 100<<10)
	mt.put([]byte("key-2"), big, false)
	mt.put([]byte("key-3"), big, false)
	from := mt.bytes
	for range 100 {
		mt.put([]byte("key-2"), big, false)
	}
	if grown := mt.bytes - from; grown > settleBelowBytes+2*len(big)+64 {
		t.Fatalf("100 rewrites of a 100 KiB value grew the memtable by %d bytes, want at most about %d", grown, settleBelowBytes+2*len(big))
	}
	// Another key's bytes in the arena are untouched by the overwrites.
	mt.put([]byte("key-1"), []byte("one"), false)
	if e, _ := mt.get([]byte("key-1")); string(e.value) != "one" || string(e.key) != "key-1" {
		t.Fatalf("key-1 = %q (key %q)", e.value, e.key)
	}
}

// TestSeekFrom checks the galloping seek of GetMany's run cursors against a binary
// search of the whole run, on seeded random runs, keys and starting points (any
// start at or before the answer is valid).
func TestSeekFrom(t *testing.T) {
	seed := vectest.Seed(t)
	rng := vectest.NewRand(seed)
	for round := 0; round < 2000; round++ {
		n := rng.IntN(70)
		set := map[uint16]bool{}
		for len(set) < n {
			set[uint16(rng.IntN(200))] = true
		}
		var es []entry
		for k := range set {
			es = append(es, entry{key: binary.BigEndian.AppendUint16(nil, k)})
		}
		slices.SortFunc(es, entryLess)
		key := binary.BigEndian.AppendUint16(nil, uint16(rng.IntN(202)))
		want := seekEntries(es, key)
		from := rng.IntN(want + 1)
		if got := seekFrom(es, from, key); got != want {
			t.Fatalf("seed %d round %d: seekFrom(%d entries, from %d, key %x) = %d, want %d", seed, round, len(es), from, key, got, want)
		}
	}
}

// TestMemtableBefore: what a key's first write of the epoch knew of its existence is
// kept through overwrites, into the sealed run, and back through an unseal.
func TestMemtableBefore(t *testing.T) {
	mt := newMemtable()
	mt.putKnown([]byte("a"), []byte("1"), false, beforeAbsent)
	mt.putKnown([]byte("a"), nil, true, beforeExisted)
	mt.putKnown([]byte("a"), []byte("2"), false, beforeExisted)
	mt.put([]byte("b"), []byte("1"), false)
	mt.putKnown([]byte("b"), []byte("2"), false, beforeAbsent)
	mt.putKnown([]byte("c"), nil, true, beforeExisted)
	want := map[string]before{"a": beforeAbsent, "b": beforeUnknown, "c": beforeExisted}
	check := func(what string, es []entry) {
		t.Helper()
		if len(es) != len(want) {
			t.Fatalf("%s: %d entries, want %d", what, len(es), len(want))
		}
		for _, e := range es {
			if e.before != want[string(e.key)] {
				t.Errorf("%s: key %s: before %d, want %d", what, e.key, e.before, want[string(e.key)])
			}
		}
	}
	r := mt.seal(1, 1)
	check("sealed", r.entries)
	mt.unseal(r)
	check("unsealed", mt.sortedAll())
}

// TestMemtableSeal writes runs of ascending keys per vnode mixed with keys below each
// vnode's largest, overwrites and deletes (the writes of a view backfilled under a busy
// upstream), with readers' sorted copies and lookups taken now and then (each as the
// writes so far say), then seals: the run must be the last write of every key in key
// order, with what the key's first write knew of its existence, and its spans each
// vnode's range of it. Half the seeds settle a vnode after a few keys below its
// largest, the others at the default. Seeded; a failure names its seed.
func TestMemtableSeal(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		mt := newMemtable()
		if seed%2 == 0 {
			mt.settleAt = 1 + rng.IntN(8)
		}
		for epoch := uint64(1); epoch <= 3; epoch++ {
			model := map[string]entry{}
			next := map[uint16]uint32{} // the next ascending pk per vnode
			vnodes := 1 + rng.IntN(5)
			for w := rng.IntN(400); w > 0; w-- {
				v := uint16(rng.IntN(vnodes) * 7)
				pk := binary.BigEndian.AppendUint32(nil, next[v])
				switch r := rng.IntN(10); {
				case r < 6: // ascending
					next[v] += 1 + uint32(rng.IntN(3))
				case r < 9 && next[v] > 0: // below the largest: new or overwritten
					pk = binary.BigEndian.AppendUint32(nil, uint32(rng.IntN(int(next[v]))))
				}
				key := AppendKey(nil, 9, v, pk)
				e := entry{key: key, value: []byte{byte(w)}, del: rng.IntN(6) == 0, before: before(rng.IntN(3))}
				mt.putKnown(e.key, e.value, e.del, e.before)
				if old, ok := model[string(key)]; ok {
					e.before = old.before // an overwrite keeps what the first write knew
				}
				model[string(key)] = e
				if rng.IntN(40) == 0 { // a reader's sorted copy, which the seal may reuse
					rv := uint16(rng.IntN(vnodes) * 7)
					got := mt.sortedVnode(rv)
					var want []entry
					for _, e := range model {
						if keyVnode(e.key) == rv {
							want = append(want, e)
						}
					}
					slices.SortFunc(want, entryLess)
					if len(got) != len(want) {
						t.Fatalf("seed %d epoch %d: sorted copy of vnode %d holds %d entries, want %d", seed, epoch, rv, len(got), len(want))
					}
					for i := range got {
						if !bytes.Equal(got[i].key, want[i].key) || !bytes.Equal(got[i].value, want[i].value) || got[i].del != want[i].del {
							t.Fatalf("seed %d epoch %d: sorted copy of vnode %d: entry %d is %x=%x/%v, want %x=%x/%v", seed, epoch, rv, i,
								got[i].key, got[i].value, got[i].del, want[i].key, want[i].value, want[i].del)
						}
					}
				}
				if rng.IntN(60) == 0 { // a lookup of a key written before (or not)
					pk := binary.BigEndian.AppendUint32(nil, uint32(rng.IntN(int(next[v])+2)))
					k := AppendKey(nil, 9, v, pk)
					got, ok := mt.get(k)
					want, wok := model[string(k)]
					if ok != wok || (ok && (!bytes.Equal(got.value, want.value) || got.del != want.del || got.before != want.before)) {
						t.Fatalf("seed %d epoch %d: get %x = %x/%v/%d %v, want %x/%v/%d %v", seed, epoch, k, got.value, got.del, got.before, ok, want.value, want.del, want.before, wok)
					}
				}
			}
			r := mt.seal(9, epoch)
			want := make([]entry, 0, len(model))
			for _, e := range model {
				want = append(want, e)
			}
			slices.SortFunc(want, entryLess)
			if len(r.entries) != len(want) {
				t.Fatalf("seed %d epoch %d: sealed %d entries, want %d", seed, epoch, len(r.entries), len(want))
			}
			for i, e := range r.entries {
				if !bytes.Equal(e.key, want[i].key) || !bytes.Equal(e.value, want[i].value) || e.del != want[i].del || e.before != want[i].before {
					t.Fatalf("seed %d epoch %d: entry %d is %x=%x/%v/%d, want %x=%x/%v/%d", seed, epoch, i,
						e.key, e.value, e.del, e.before, want[i].key, want[i].value, want[i].del, want[i].before)
				}
			}
			at := 0
			for _, sp := range r.spans {
				if sp.start != at || sp.end <= sp.start {
					t.Fatalf("seed %d epoch %d: span %+v after %d entries", seed, epoch, sp, at)
				}
				for _, e := range r.entries[sp.start:sp.end] {
					if keyVnode(e.key) != sp.vnode {
						t.Fatalf("seed %d epoch %d: key %x in the span of vnode %d", seed, epoch, e.key, sp.vnode)
					}
				}
				if s, e := r.span(sp.vnode); s != sp.start || e != sp.end {
					t.Fatalf("seed %d epoch %d: span(%d) = %d, %d, want %+v", seed, epoch, sp.vnode, s, e, sp)
				}
				at = sp.end
			}
			if at != len(r.entries) {
				t.Fatalf("seed %d epoch %d: spans cover %d of %d entries", seed, epoch, at, len(r.entries))
			}
			if s, e := r.span(1); s != e {
				t.Fatalf("seed %d epoch %d: span of a vnode with no entries is %d, %d", seed, epoch, s, e)
			}
		}
	}
}

// BenchmarkSeal seals a memtable of 64 vnodes × 1,024 keys written in ascending order
// per vnode, with a share of the keys written below their vnode's largest (as
// upstream rows forwarded into a view being backfilled are), against sortall, a
// sort of each vnode's items whole (the seal before):
//
//	go test -run XXX -bench Seal ./storage/
func BenchmarkSeal(b *testing.B) {
	const vnodes, perVnode = 64, 1024
	for _, below := range []int{0, 2, 10, 50} { // percent
		b.Run(fmt.Sprintf("below=%d%%", below), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, uint64(below)))
			type write struct{ key []byte }
			var ws []write
			for i := range perVnode {
				for v := range vnodes {
					pk := uint32(2 * i)
					if i > 0 && rng.IntN(100) < below {
						pk = uint32(2*rng.IntN(i) + 1) // odd: below the largest (new, or an earlier one again)
					}
					ws = append(ws, write{AppendKey(nil, 9, uint16(v), binary.BigEndian.AppendUint32(nil, pk))})
				}
			}
			val := make([]byte, 64)
			for _, how := range []string{"seal", "sortall"} {
				b.Run(how, func(b *testing.B) {
					for range b.N {
						b.StopTimer()
						mt := newMemtable()
						for _, w := range ws {
							mt.put(w.key, val, false)
						}
						runtime.GC() // the writes' garbage is not the seal's
						b.StartTimer()
						if how == "seal" {
							mt.seal(9, 1)
						} else {
							sealSortAll(mt)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ws)), "ns/key")
				})
			}
		})
	}
}

// sealSortAll is BenchmarkSeal's baseline: each vnode's items copied and sorted
// whole unless already in order, as seal did before it sorted only the keys written
// below their vnode's largest.
func sealSortAll(mt *memtable) []entry {
	vns := slices.Sorted(slices.Values(mt.used))
	items := make([]entry, 0, mt.n)
	for _, v := range vns {
		from := len(items)
		for _, i := range mt.vnodes[v].idx {
			items = append(items, *mt.item(i))
		}
		if part := items[from:]; !slices.IsSortedFunc(part, entryLess) {
			slices.SortFunc(part, entryLess)
		}
	}
	return items
}

// BenchmarkBackfillEpochs writes epochs of a view being backfilled into one memtable,
// each 100,000 new keys in ascending order (what an actor's materialize writes in an
// idle build's epoch) then sealed, as one actor's state table does epoch after epoch:
//
//	go test -run XXX -bench BackfillEpochs ./storage/
func BenchmarkBackfillEpochs(b *testing.B) {
	const perEpoch = 100_000
	val := make([]byte, 170)
	key := make([]byte, 0, 32)
	mt := newMemtable()
	next := uint64(0)
	for i := range b.N {
		for range perEpoch {
			key = AppendKey(key[:0], 9, uint16(next/8_000), binary.BigEndian.AppendUint64(nil, next%8_000))
			mt.putKnown(key, val, false, beforeAbsent)
			next++
		}
		mt.seal(9, uint64(i+1))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perEpoch), "ns/key")
}

// Epochs of one to four item blocks, which later epochs reuse (itemBlocks): across
// seals of a table writing new keys, overwrites and keys below earlier ones, every run
// holds exactly its epoch's entries in order, runs sealed earlier do not change when
// later epochs fill reused blocks, and a block given back holds no entry (no pointer
// into a sealed arena).
func TestMemtableItemBlocksReused(t *testing.T) {
	seed := vectest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 11))
	mt := newMemtable()
	type sealed struct {
		r    *run
		want []string
	}
	var runs []sealed
	for epoch := 0; epoch < 6; epoch++ {
		n := 1 + rng.IntN(4*itemBlockLen)
		want := map[string]entry{}
		for i := 0; i < n; i++ {
			var id [4]byte
			binary.BigEndian.PutUint32(id[:], uint32(rng.IntN(3*n)))
			k := AppendKey(nil, 9, uint16(rng.IntN(4)), id[:])
			v := []byte(fmt.Sprintf("e%d-%d", epoch, i))
			del := rng.IntN(9) == 0
			mt.put(k, v, del)
			want[string(k)] = entry{key: k, value: v, del: del}
		}
		if mt.n > n || len(mt.blocks) != (mt.n+itemBlockLen-1)/itemBlockLen {
			t.Fatalf("seed %d: epoch %d: %d items in %d blocks after %d writes", seed, epoch, mt.n, len(mt.blocks), n)
		}
		if mt.len() != len(want) {
			t.Fatalf("seed %d: epoch %d: %d keys written, want %d", seed, epoch, mt.len(), len(want))
		}
		ours := map[*itemBlock]int{}
		for bi, b := range mt.blocks {
			ours[b] = bi
		}
		r := mt.seal(9, uint64(epoch))
		// The blocks are the pool's now: take back what it gives (each one ours alone
		// until it is put back, whatever else runs) and check those that came from
		// this memtable. The pool may give others first, or drop some (it does at
		// random under the race detector), but a single goroutine that puts and then
		// gets normally gets its own last block back.
		var got []*itemBlock
		seen := 0
		for range len(ours) {
			b := itemBlocks.Get().(*itemBlock)
			got = append(got, b)
			bi, ok := ours[b]
			if !ok {
				continue
			}
			seen++
			for j := range b.items {
				if e := b.items[j]; e.key != nil || e.value != nil {
					t.Fatalf("seed %d: epoch %d: block %d given back holds %q=%q at %d", seed, epoch, bi, e.key, e.value, j)
				}
			}
		}
		for _, b := range got {
			itemBlocks.Put(b)
		}
		if seen == 0 {
			t.Logf("seed %d: epoch %d: the pool gave back none of the %d blocks", seed, epoch, len(ours))
		}
		keys := slices.Sorted(maps.Keys(want))
		es := make([]entry, len(keys))
		for i, k := range keys {
			es[i] = want[k]
		}
		runs = append(runs, sealed{r, renderEntries(es)})
		for i, s := range runs {
			if got := renderEntries(s.r.entries); !slices.Equal(got, s.want) {
				t.Fatalf("seed %d: after epoch %d, run %d holds %d entries, want %d (first difference at %d)", seed, epoch, i, len(got), len(s.want), firstDiff(got, s.want))
			}
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// renderEntries is es as "key=value/del" lines, hex.
func renderEntries(es []entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%x=%x/%v", e.key, e.value, e.del)
	}
	return out
}
