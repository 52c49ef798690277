package executors

import (
	"bytes"
	"encoding/binary"
	"sort"

	"github.com/cespare/xxhash/v2"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
)

// joinCache holds the rows of some join keys of one side of a HashJoin, a copy of
// what its state table holds for them (the state table's view as the actor reads it:
// committed, sealed and its own unsealed writes), under a node's StateCache budget.
// An entry is a join key's rows, all of them, in pk order: a cached key is answered
// without reading the table. The table holds every row, and every write to a cached
// key is applied to its entry too, so entries are dropped least recently used first
// when the node is over its budget, and read again on the next miss.
//
// A side whose table had no row in the actor's vnodes when the actor started (a
// join built by a backfill, or empty when recovered) knows every key it has not
// evicted: a key with no entry and not among those evicted has no row, and neither
// its lookup nor a write to it reads the table (the write creates its entry). The
// evicted keys are remembered by hash in a bitset, so a key that shares a bit with
// an evicted one is read from the table when missed: slower, never wrong.
type joinCache struct {
	budget *StateCache
	m      map[string]*jcEntry
	// head is the most recently used entry, tail the least; the list is circular
	// through a sentinel.
	lru    jcEntry
	bytes  int64 // this cache's share of budget.used
	known  bool  // the table was empty at the start: absent keys are known
	evict  []uint64
	keybuf []byte
}

// cacheWrites applies the rows side s just wrote (the visible ones of its chunk, bits)
// to its cached entries: a cached key's entry gets them, and so does a key known to
// have had no row (a new entry); other keys are left to be read on a miss.
func (h *HashJoin) cacheWrites(s int, bits []byte, n int, ops []vec.Op) {
	cache := h.cache[s]
	_, pks, vals := h.st[s].LastWrite()
	for i := 0; i < n; i++ {
		if bits[i>>3]&(1<<(i&7)) == 0 {
			continue
		}
		key := cache.key(h.vn[i], h.kbuf.At(i))
		e := cache.get(key)
		ins := ops[i].IsInsert()
		if e == nil {
			if !ins || !cache.absent(key) {
				continue
			}
			e = cache.add(key)
		}
		if ins {
			cache.put(e, pks.At(i), vals.At(i))
		} else {
			cache.del(e, pks.At(i))
		}
		cache.account(e)
	}
	cache.shrink(nil)
}

// checkEmpty finds out, once, which sides' tables have no row in the actor's vnodes:
// their caches know every key (see joinCache).
func (h *HashJoin) checkEmpty(view *storage.View) error {
	for s, st := range h.st {
		empty := true
		for _, v := range st.Vnodes().ToSlice() {
			if err := st.ReuseIter(view, uint16(v), storage.IterBounds{}, &h.probe); err != nil {
				h.probe.Close()
				return err
			}
			if h.probe.Next() {
				empty = false
			}
			if err := h.probe.Error(); err != nil {
				h.probe.Close()
				return err
			}
			if !empty {
				break
			}
		}
		h.cache[s].known = empty
	}
	h.checked = true
	return h.probe.Close()
}

// jcEvictBits is the size of a cache's bitset of evicted key hashes.
const jcEvictBits = 1 << 18

// jcEntryOverhead is what an entry costs beyond its key and buffers: the struct, the
// map's slot and the string header.
const jcEntryOverhead = 128

type jcEntry struct {
	key        string
	prev, next *jcEntry
	buf        []byte  // the rows' pks and values, back to back
	rows       []jcRow // in pk order
	garbage    int     // bytes of buf no row refers to
	size       int64   // what the entry is accounted for
}

// jcRow is one row of an entry: its pk is buf[off:off+pk], its value the val bytes
// after it.
type jcRow struct {
	off, pk, val int32
}

func (e *jcEntry) pk(r jcRow) []byte    { return e.buf[r.off : r.off+r.pk] }
func (e *jcEntry) value(r jcRow) []byte { return e.buf[r.off+r.pk : r.off+r.pk+r.val] }

func newJoinCache(budget *StateCache) *joinCache {
	c := &joinCache{budget: budget, m: map[string]*jcEntry{}, evict: make([]uint64, jcEvictBits/64)}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

// key returns the cache key of a join key (its encoding) in vnode v, in a buffer
// reused by the next call.
func (c *joinCache) key(v uint16, prefix []byte) []byte {
	c.keybuf = binary.BigEndian.AppendUint16(c.keybuf[:0], v)
	return append(c.keybuf, prefix...)
}

// get returns the entry of key, made the most recently used, or nil.
func (c *joinCache) get(key []byte) *jcEntry {
	e := c.m[string(key)]
	if e != nil {
		c.unlink(e)
		c.pushFront(e)
	}
	return e
}

// absent reports whether key is known to have no row (it has no entry).
func (c *joinCache) absent(key []byte) bool {
	if !c.known {
		return false
	}
	h := xxhash.Sum64(key) % jcEvictBits
	return c.evict[h/64]&(1<<(h%64)) == 0
}

// add caches a new, empty entry for key (which has none) and returns it.
func (c *joinCache) add(key []byte) *jcEntry {
	e := &jcEntry{key: string(key)}
	c.m[e.key] = e
	c.pushFront(e)
	c.account(e)
	return e
}

// append adds a row after the entry's others (a load, in pk order).
func (c *joinCache) append(e *jcEntry, pk, val []byte) {
	e.rows = append(e.rows, jcRow{off: int32(len(e.buf)), pk: int32(len(pk)), val: int32(len(val))})
	e.buf = append(append(e.buf, pk...), val...)
}

// put writes the row pk of entry e: its value replaced, or a new row in pk order.
func (c *joinCache) put(e *jcEntry, pk, val []byte) {
	i, found := e.find(pk)
	if found {
		e.garbage += int(e.rows[i].pk + e.rows[i].val)
	} else {
		e.rows = append(e.rows, jcRow{})
		copy(e.rows[i+1:], e.rows[i:])
	}
	e.rows[i] = jcRow{off: int32(len(e.buf)), pk: int32(len(pk)), val: int32(len(val))}
	e.buf = append(append(e.buf, pk...), val...)
	e.compact()
}

// del deletes the row pk of entry e, if it has one.
func (c *joinCache) del(e *jcEntry, pk []byte) {
	i, found := e.find(pk)
	if !found {
		return
	}
	e.garbage += int(e.rows[i].pk + e.rows[i].val)
	e.rows = append(e.rows[:i], e.rows[i+1:]...)
	e.compact()
}

func (e *jcEntry) find(pk []byte) (int, bool) {
	i := sort.Search(len(e.rows), func(i int) bool { return bytes.Compare(e.pk(e.rows[i]), pk) >= 0 })
	return i, i < len(e.rows) && bytes.Equal(e.pk(e.rows[i]), pk)
}

// compact rewrites the buffer once most of it is garbage.
func (e *jcEntry) compact() {
	if e.garbage < 64 || e.garbage*2 < len(e.buf) {
		return
	}
	buf := make([]byte, 0, len(e.buf)-e.garbage)
	for i, r := range e.rows {
		off := int32(len(buf))
		buf = append(buf, e.buf[r.off:r.off+r.pk+r.val]...)
		e.rows[i].off = off
	}
	e.buf, e.garbage = buf, 0
}

// account brings e's accounted size up to date with its buffers, in the cache's and
// the budget's totals.
func (c *joinCache) account(e *jcEntry) {
	size := int64(jcEntryOverhead + len(e.key) + cap(e.buf) + cap(e.rows)*12)
	d := size - e.size
	e.size = size
	c.bytes += d
	c.budget.used.Add(d)
}

// shrink evicts the least recently used entries, keeping keep, while the node is over
// its budget.
func (c *joinCache) shrink(keep *jcEntry) {
	for c.budget.over() {
		e := c.lru.prev
		if e == &c.lru {
			return
		}
		if e == keep {
			if e.prev == &c.lru {
				return
			}
			e = e.prev
		}
		c.drop(e)
	}
}

// drop evicts e, remembering its key as one that may have rows.
func (c *joinCache) drop(e *jcEntry) {
	c.unlink(e)
	delete(c.m, e.key)
	h := xxhash.Sum64String(e.key) % jcEvictBits
	c.evict[h/64] |= 1 << (h % 64)
	c.bytes -= e.size
	c.budget.used.Add(-e.size)
	c.budget.evictions.Add(1)
}

// release gives the cache's bytes back to the budget (the executor closes).
func (c *joinCache) release() {
	c.budget.used.Add(-c.bytes)
	c.bytes = 0
	c.m = nil
	c.lru.prev, c.lru.next = &c.lru, &c.lru
}

func (c *joinCache) unlink(e *jcEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *joinCache) pushFront(e *jcEntry) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}
