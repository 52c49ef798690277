package executors

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/seed04fbb902/weir/vec/vectest"
)

// The cache against a model: random puts (known new or upserts), deletes and lookups
// over a few keys with many pks, under budgets from one byte to plenty. A cached
// entry always holds exactly the model's rows of its key (compared as a set, and in
// pk order after any lookup by pk sorted the entry), an evicted key is never reported
// absent, and the bytes accounted go back to the budget on release.
func TestJoinCacheModel(t *testing.T) {
	seed := vectest.Seed(t)
	rng := vectest.NewRand(seed)
	for round := 0; round < 20; round++ {
		budget := NewStateCache([]int64{1, 600, 4 << 10, 1 << 30}[round%4])
		c := newJoinCache(budget)
		c.known = round%2 == 0 // the table started empty: absent keys are known
		model := map[string]map[string]string{}
		evicted := map[string]bool{}
		check := func(step int, k string) {
			t.Helper()
			e := c.m[k]
			if e == nil {
				if c.absent([]byte(k)) && (len(model[k]) > 0 || evicted[k] || !c.known) {
					t.Fatalf("seed %d round %d step %d: key %q reported absent with rows %v (evicted %v)", seed, round, step, k, model[k], evicted[k])
				}
				return
			}
			got := map[string]string{}
			for _, r := range e.rows {
				got[string(e.pk(r))] = string(e.value(r))
			}
			if len(got) != len(e.rows) || !maps.Equal(got, model[k]) {
				t.Fatalf("seed %d round %d step %d: entry %q holds %v (%d rows), the model %v", seed, round, step, k, got, len(e.rows), model[k])
			}
			if e.sorted == len(e.rows) && !slices.IsSortedFunc(e.rows, func(a, b jcRow) int { return cmpBytes(e.pk(a), e.pk(b)) }) {
				t.Fatalf("seed %d round %d step %d: entry %q says sorted but is not", seed, round, step, k)
			}
		}
		for step := 0; step < 2000; step++ {
			k := fmt.Sprintf("k%d", rng.IntN(6))
			pk := fmt.Sprintf("p%03d", rng.IntN(40))
			if model[k] == nil {
				model[k] = map[string]string{}
			}
			e := c.get([]byte(k))
			switch op := rng.IntN(10); {
			case op < 6: // insert or upsert
				val := fmt.Sprint(rng.IntN(1000))
				_, exists := model[k][pk]
				if e == nil {
					if !c.known || evicted[k] {
						// Unknown: a real join loads it before caching a write.
						e = c.add([]byte(k))
						for _, p := range slices.Sorted(maps.Keys(model[k])) {
							c.append(e, []byte(p), []byte(model[k][p]))
						}
					} else {
						e = c.add([]byte(k))
					}
				}
				c.put(e, []byte(pk), []byte(val), !exists && rng.IntN(2) == 0)
				model[k][pk] = val
			case op < 9:
				if e != nil {
					c.del(e, []byte(pk))
				}
				delete(model[k], pk)
			default: // a lookup by pk sorts the entry
				if e != nil {
					c.find(e, []byte(pk))
				}
			}
			if e != nil {
				c.account(e)
				c.shrink(e)
			}
			for key := range model {
				if _, ok := c.m[key]; !ok && evictedNow(c, key) {
					evicted[key] = true
				}
			}
			check(step, k)
		}
		if budget.Stats().Used != c.bytes {
			t.Fatalf("seed %d round %d: budget holds %d bytes, the cache %d", seed, round, budget.Stats().Used, c.bytes)
		}
		c.release()
		if u := budget.Stats().Used; u != 0 {
			t.Fatalf("seed %d round %d: %d bytes left in the budget after release", seed, round, u)
		}
	}
}

// evictedNow reports whether key's hash is in the cache's evicted bitset.
func evictedNow(c *joinCache, key string) bool {
	known := c.known
	c.known = true
	a := c.absent([]byte(key))
	c.known = known
	return !a
}

func cmpBytes(a, b []byte) int {
	return slices.Compare(a, b)
}
