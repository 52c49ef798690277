package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
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
		render := func(es []entry) []string {
			out := make([]string, len(es))
			for i, e := range es {
				out[i] = fmt.Sprintf("%x=%x/%v", e.key, e.value, e.del)
			}
			return out
		}
		for step := 0; step < 200; step++ {
			switch r := rng.IntN(10); {
			case r < 6:
				k := AppendKey(nil, 9, uint16(rng.IntN(3)), []byte{byte(rng.IntN(64)), byte(rng.IntN(4))})
				mt.put(k, []byte{byte(step)}, rng.IntN(5) == 0)
			default:
				v := uint16(rng.IntN(3))
				got := mt.sortedVnode(v)
				var want []entry
				for _, e := range mt.items {
					if keyVnode(e.key) == v {
						want = append(want, e)
					}
				}
				slices.SortFunc(want, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
				if !slices.Equal(render(got), render(want)) {
					t.Fatalf("seed %d step %d: sortedVnode(%d) differs from a fresh sort", seed, step, v)
				}
				kept = append(kept, held{got, render(got)})
			}
		}
		for i, h := range kept {
			if !slices.Equal(render(h.got), h.want) {
				t.Fatalf("seed %d: result %d changed after later writes", seed, i)
			}
		}
	}
}

// TestMemtableArena checks the arena's block sizes: a memtable that writes a few small
// rows holds a small block, blocks double up to the maximum as writes go on (and the
// size is kept across a seal), and a key overwritten many times does not pile its old
// values up in the arena.
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
	if len(mt.arena) != used {
		t.Fatalf("10,000 overwrites of one key grew the arena from %d to %d bytes", used, len(mt.arena))
	}
	if e, ok := mt.get([]byte("key-0")); !ok || string(e.value) != "value-9999" {
		t.Fatalf("key-0 = %q, %v", e.value, ok)
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
	check("unsealed", mt.sorted())
}
