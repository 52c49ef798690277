package storage

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// mergeRuns yields each key once, in ascending order, with the write of its latest run
// and what its earliest run's write knew of the key before; checked against a map
// model over random runs (a seeded test: the seed is logged).
func TestMergeRuns(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs [][]entry // oldest first, each sorted
		want []string  // "key=value" or "key-" for a delete
	}{
		{name: "none"},
		{name: "one run", runs: [][]entry{{put("a", "1"), put("b", "2")}}, want: []string{"a=1", "b=2"}},
		{name: "later overrides", runs: [][]entry{{put("a", "1"), put("b", "1")}, {put("b", "2"), put("c", "2")}}, want: []string{"a=1", "b=2", "c=2"}},
		{name: "later delete", runs: [][]entry{{put("a", "1")}, {del("a")}, {}}, want: []string{"a-"}},
		{name: "delete then put", runs: [][]entry{{del("a")}, {put("a", "3")}}, want: []string{"a=3"}},
		{name: "three epochs of one key", runs: [][]entry{{put("k", "1")}, {put("k", "2")}, {put("k", "3")}}, want: []string{"k=3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := merged(t, tc.runs, false); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for range 200 {
		model := map[string]string{}
		first := map[string]before{} // what the key's earliest write knew
		var runs [][]entry
		for range rng.IntN(6) {
			m := map[string]entry{}
			for range rng.IntN(20) {
				k := fmt.Sprintf("%02d", rng.IntN(30))
				var e entry
				if rng.IntN(4) == 0 {
					e = del(k)
				} else {
					e = put(k, fmt.Sprint(rng.IntN(100)))
				}
				e.before = before(rng.IntN(3))
				m[k] = e
			}
			var es []entry
			for _, e := range m {
				es = append(es, e)
				k := string(e.key)
				if _, ok := first[k]; !ok {
					first[k] = e.before
				}
				model[k] = show(e)
			}
			slices.SortFunc(es, entryLess)
			runs = append(runs, es)
		}
		var want []string
		for _, k := range slices.Sorted(maps.Keys(model)) {
			want = append(want, fmt.Sprintf("%s before %d", model[k], first[k]))
		}
		if got := merged(t, runs, true); !slices.Equal(got, want) {
			t.Fatalf("seed %d: got %v, want %v", seed, got, want)
		}
	}
}

func put(k, v string) entry { return entry{key: []byte(k), value: []byte(v)} }
func del(k string) entry    { return entry{key: []byte(k), del: true} }

func show(e entry) string {
	if e.del {
		return string(e.key) + "-"
	}
	return string(e.key) + "=" + string(e.value)
}

func merged(t *testing.T, runs [][]entry, withBefore bool) []string {
	t.Helper()
	var rs []*run
	for i, es := range runs {
		rs = append(rs, &run{epoch: uint64(i + 1), entries: es})
	}
	var got []string
	err := mergeAll(t, rs, func(e entry, b before) error {
		if withBefore {
			got = append(got, fmt.Sprintf("%s before %d", show(e), b))
		} else {
			got = append(got, show(e))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// mergeAll is mergeRuns with a check that the writes it returns are those it passed to
// f, in the same order, and that it copies them into its buffer only when the runs
// overlap.
func mergeAll(t *testing.T, rs []*run, f func(entry, before) error) error {
	t.Helper()
	var seen []entry
	bufs := 0
	out, buf, err := mergeRuns(rs, func() []entry { bufs++; return make([]entry, 0, 1) }, func(e entry, b before) error {
		seen = append(seen, e)
		return f(e, b)
	})
	if err != nil {
		return err
	}
	_, disjoint := disjointRuns(rs)
	if disjoint && (bufs != 0 || buf != nil) || bufs > 1 || len(buf) > len(seen) {
		t.Fatalf("runs disjoint %v: %d buffers asked for, %d writes buffered of %d, %d slices returned", disjoint, bufs, len(buf), len(seen), len(out))
	}
	got := slices.Concat(out...)
	if !slices.EqualFunc(got, seen, func(a, b entry) bool { return show(a) == show(b) }) {
		t.Fatalf("mergeRuns returned %d writes, passed %d on: %v against %v", len(got), len(seen), got, seen)
	}
	for lo := 0; lo <= len(got) && len(got) <= 64; lo++ { // every span of a small merge
		for hi := lo; hi <= len(got); hi++ {
			sp := out.span(lo, hi)
			if slices.ContainsFunc(sp, func(es []entry) bool { return len(es) == 0 }) ||
				!slices.EqualFunc(slices.Concat(sp...), got[lo:hi], func(a, b entry) bool { return show(a) == show(b) }) {
				t.Fatalf("span(%d, %d) of %d writes in %d slices: %v, want %v", lo, hi, len(got), len(out), sp, got[lo:hi])
			}
		}
	}
	return nil
}

// disjointRuns returns the runs with entries in key order when each one's last key is
// below the next one's first, and false when two overlap: mergeRuns then copies
// nothing.
func disjointRuns(runs []*run) ([]*run, bool) {
	rs := make([]*run, 0, len(runs))
	for _, r := range runs {
		if len(r.entries) > 0 {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b *run) int { return bytes.Compare(a.entries[0].key, b.entries[0].key) })
	for i := 1; i < len(rs); i++ {
		prev := rs[i-1].entries
		if bytes.Compare(prev[len(prev)-1].key, rs[i].entries[0].key) >= 0 {
			return nil, false
		}
	}
	return rs, true
}

// TestMergeRunsByVnode checks the merge of runs cut into vnode pieces (as sealed runs
// are) against the heap merge of the whole runs: epochs in which some vnodes' keys
// ascend from epoch to epoch (a backfill: no copy) and others' are rewritten (a
// merge), over one table. When every vnode ascends, nothing is copied.
func TestMergeRunsByVnode(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	for it := range 300 {
		nv := 1 + rng.IntN(6)
		ascending := make([]bool, nv)
		for v := range ascending {
			ascending[v] = rng.IntN(2) == 0
		}
		if it%3 == 0 {
			for v := range ascending {
				ascending[v] = true
			}
		}
		next := make([]int, nv) // an ascending vnode's next pk
		var rs []*run
		for e := range 1 + rng.IntN(5) {
			var es []entry
			for v := range nv {
				if rng.IntN(4) == 0 {
					continue // the run has no key of this vnode
				}
				var pks []int
				if ascending[v] {
					for range 1 + rng.IntN(4) {
						pks = append(pks, next[v])
						next[v] += 1 + rng.IntN(3)
					}
				} else {
					pks = rng.Perm(8)[:1+rng.IntN(5)]
					slices.Sort(pks)
				}
				for _, pk := range pks {
					key := AppendKey(nil, 7, uint16(v), []byte(fmt.Sprintf("%03d", pk)))
					en := entry{key: key, value: []byte(fmt.Sprint(e, "-", rng.IntN(100))), before: before(rng.IntN(3))}
					if rng.IntN(5) == 0 {
						en = entry{key: key, del: true, before: en.before}
					}
					es = append(es, en)
				}
			}
			rs = append(rs, &run{table: 7, epoch: uint64(e + 1), entries: es, spans: spansOf(es)})
		}
		var got, want []string
		bufs := 0
		out, buf, err := mergeRuns(rs, func() []entry { bufs++; return make([]entry, 0, 2) }, func(e entry, b before) error {
			got = append(got, fmt.Sprintf("%x %s before %d", e.key, show(e), b))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := mergeRunsRef(rs, func(e entry, b before) error {
			want = append(want, fmt.Sprintf("%x %s before %d", e.key, show(e), b))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d iteration %d (ascending vnodes %v): got %v, want %v", seed, it, ascending, got, want)
		}
		if n := len(slices.Concat(out...)); n != len(got) {
			t.Fatalf("seed %d iteration %d: %d writes returned, %d passed on", seed, it, n, len(got))
		}
		if !slices.Contains(ascending, false) && (bufs != 0 || buf != nil) {
			t.Fatalf("seed %d iteration %d: every vnode ascends, yet %d writes were copied", seed, it, len(buf))
		}
	}
}

// spansOf is the vnode spans of sorted entries of one table (as seal makes them).
func spansOf(es []entry) []vnodeSpan {
	var sp []vnodeSpan
	for i, e := range es {
		v := keyVnode(e.key)
		if len(sp) == 0 || sp[len(sp)-1].vnode != v {
			sp = append(sp, vnodeSpan{vnode: v, start: i})
		}
		sp[len(sp)-1].end = i + 1
	}
	return sp
}

// TestMergeRunsDisjoint checks the pass over runs whose key ranges do not overlap
// (contiguous slices of sorted keys, given to the runs in a random epoch order)
// against the heap merge, and that runs that do overlap, by one shared or interleaved
// key, take the heap merge.
func TestMergeRunsDisjoint(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	viaMergeAll := func(rs []*run, f func(entry, before) error) error { return mergeAll(t, rs, f) }
	collect := func(merge func([]*run, func(entry, before) error) error, rs []*run) []string {
		var got []string
		if err := merge(rs, func(e entry, b before) error {
			got = append(got, fmt.Sprintf("%s before %d", show(e), b))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for range 200 {
		n := rng.IntN(40)
		keys := make([]entry, n)
		for i := range keys {
			if rng.IntN(5) == 0 {
				keys[i] = del(fmt.Sprintf("%03d", i))
			} else {
				keys[i] = put(fmt.Sprintf("%03d", i), fmt.Sprint(rng.IntN(100)))
			}
			keys[i].before = before(rng.IntN(3))
		}
		var parts [][]entry
		for len(keys) > 0 {
			k := 1 + rng.IntN(len(keys))
			parts = append(parts, keys[:k])
			keys = keys[k:]
		}
		rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
		var rs []*run
		for i, p := range parts {
			rs = append(rs, &run{epoch: uint64(i + 1), entries: p})
			if rng.IntN(4) == 0 {
				rs = append(rs, &run{epoch: uint64(i + 1)}) // empty runs are skipped
			}
		}
		if _, ok := disjointRuns(rs); !ok {
			t.Fatalf("seed %d: disjoint runs %v taken for overlapping", seed, parts)
		}
		if got, want := collect(viaMergeAll, rs), collect(mergeRunsRef, rs); !slices.Equal(got, want) {
			t.Fatalf("seed %d: got %v, want %v", seed, got, want)
		}
		if len(parts) < 2 {
			continue
		}
		// One run takes a key of another (the same key, a later epoch, or one inside
		// its range): overlapping.
		a, b := rs[rng.IntN(len(rs))], rs[rng.IntN(len(rs))]
		if a == b || len(a.entries) == 0 || len(b.entries) == 0 {
			continue
		}
		b.entries = slices.Clone(b.entries)
		b.entries = append(b.entries, a.entries[rng.IntN(len(a.entries))])
		slices.SortFunc(b.entries, entryLess)
		b.entries = slices.CompactFunc(b.entries, func(x, y entry) bool { return string(x.key) == string(y.key) })
		if _, ok := disjointRuns(rs); ok {
			t.Fatalf("seed %d: overlapping runs taken for disjoint", seed)
		}
		if got, want := collect(viaMergeAll, rs), collect(mergeRunsRef, rs); !slices.Equal(got, want) {
			t.Fatalf("seed %d: overlapping runs: got %v, want %v", seed, got, want)
		}
	}
}

// mergeRunsRef is the reference the tests hold mergeRuns, and its heap, to: every
// write of every run in one list, sorted by key and then latest run first, each key's
// first write passed on with its last write's before.
func mergeRunsRef(runs []*run, f func(entry, before) error) error {
	type ranked struct {
		e    entry
		rank int
	}
	var all []ranked
	for i, r := range runs {
		for _, e := range r.entries {
			all = append(all, ranked{e, i})
		}
	}
	slices.SortStableFunc(all, func(a, b ranked) int {
		if c := bytes.Compare(a.e.key, b.e.key); c != 0 {
			return c
		}
		return b.rank - a.rank
	})
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && bytes.Equal(all[j].e.key, all[i].e.key) {
			j++
		}
		if err := f(all[i].e, all[j-1].e.before); err != nil {
			return err
		}
		i = j
	}
	return nil
}
