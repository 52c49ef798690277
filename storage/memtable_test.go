package storage

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
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
