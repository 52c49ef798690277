package storage

import (
	"bytes"
	"slices"
	"sort"
)

// entry is one write: a value, or a tombstone when del is set.
type entry struct {
	key   []byte // full storage key
	value []byte
	del   bool
}

// run is a sealed epoch of one writer: its final write per key, sorted by key. A run
// is immutable once sealed, so readers share it without locks.
type run struct {
	table   uint32
	epoch   uint64
	entries []entry
}

// memtable is a writer's current, unsealed epoch: the last write per key.
type memtable struct {
	m     map[string]int // key -> index in entries
	items []entry
	bytes int
	// cache is a sorted copy of items[:cached] for sorted(), kept while only new keys
	// are added (an iterator may still hold an older cache: caches are never changed
	// in place); stale is set when a write changes a key the cache holds.
	cache  []entry
	cached int
	stale  bool
}

func newMemtable() *memtable { return &memtable{m: map[string]int{}} }

func (mt *memtable) put(key, value []byte, del bool) {
	if i, ok := mt.m[string(key)]; ok {
		if i < mt.cached {
			mt.stale = true
		}
		e := &mt.items[i]
		mt.bytes += len(value) - len(e.value)
		e.value = append(e.value[:0:0], value...)
		e.del = del
		return
	}
	k := append([]byte(nil), key...)
	mt.m[string(k)] = len(mt.items)
	mt.items = append(mt.items, entry{key: k, value: append([]byte(nil), value...), del: del})
	mt.bytes += len(k) + len(value)
}

func (mt *memtable) get(key []byte) (entry, bool) {
	i, ok := mt.m[string(key)]
	if !ok {
		return entry{}, false
	}
	return mt.items[i], true
}

func (mt *memtable) len() int { return len(mt.items) }

// seal sorts the memtable into a run and leaves the memtable empty.
func (mt *memtable) seal(table uint32, epoch uint64) *run {
	items := mt.items
	sort.Slice(items, func(i, j int) bool { return bytes.Compare(items[i].key, items[j].key) < 0 })
	mt.items = nil
	mt.m = map[string]int{}
	mt.bytes = 0
	mt.cache, mt.cached, mt.stale = nil, 0, false
	return &run{table: table, epoch: epoch, entries: items}
}

// sorted returns the memtable's entries sorted by key, without sealing it. The result
// must not be modified. Readers that iterate between writes (a join probing per row)
// pay for the new keys only: they are sorted and merged into the cached result.
func (mt *memtable) sorted() []entry {
	less := func(a, b entry) int { return bytes.Compare(a.key, b.key) }
	switch {
	case mt.cache != nil && !mt.stale && mt.cached == len(mt.items):
		return mt.cache
	case mt.cache == nil || mt.stale:
		mt.cache = slices.SortedFunc(slices.Values(mt.items), less)
	default:
		add := slices.SortedFunc(slices.Values(mt.items[mt.cached:]), less)
		merged := make([]entry, 0, len(mt.cache)+len(add))
		i, j := 0, 0
		for i < len(mt.cache) && j < len(add) {
			if less(mt.cache[i], add[j]) < 0 {
				merged = append(merged, mt.cache[i])
				i++
			} else {
				merged = append(merged, add[j])
				j++
			}
		}
		merged = append(append(merged, mt.cache[i:]...), add[j:]...)
		mt.cache = merged
	}
	mt.cached, mt.stale = len(mt.items), false
	return mt.cache
}

// seek returns the index of the first entry with key >= k.
func seekEntries(es []entry, k []byte) int {
	return sort.Search(len(es), func(i int) bool { return bytes.Compare(es[i].key, k) >= 0 })
}

// get finds key in a sorted run.
func (r *run) get(key []byte) (entry, bool) {
	i := seekEntries(r.entries, key)
	if i < len(r.entries) && bytes.Equal(r.entries[i].key, key) {
		return r.entries[i], true
	}
	return entry{}, false
}

// unseal puts a run that could not be published back into an empty memtable.
func (mt *memtable) unseal(r *run) {
	for _, e := range r.entries {
		mt.put(e.key, e.value, e.del)
	}
}
