package executors

import (
	"bytes"
	"encoding/binary"
	"slices"
	"sort"

	"github.com/cespare/xxhash/v2"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
)

// joinCache holds the rows of some join keys of one side of a HashJoin, a copy of
// what its state table holds for them (the state table's view as the actor reads it:
// committed, sealed and its own unsealed writes), under a node's StateCache budget.
// An entry is a join key's rows, all of them: a cached key is answered without
// reading the table. The rows are kept in pk order but for those inserted since the
// last lookup of one pk (a delete, an upsert), which go at the end: an insert known
// new (exact inputs) costs no search, and the probes do not need the order. The table holds every row, and every write to a cached
// key is applied to its entry too, so entries can be dropped when the node is over
// its budget, and are read again on the next miss. Which entry goes is chosen by
// CLOCK, the usual approximation of least recently used: a use sets the entry's
// reference bit, and the hand sweeping the entries clears the bits it passes and
// evicts the first entry whose bit is clear (a use costs a store, not a list move).
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
	ring   []*jcEntry // every entry, each at its slot; hand sweeps it
	hand   int
	bytes  int64 // this cache's share of budget.used
	known  bool  // the table was empty at the start: absent keys are known
	evict  []uint64
	keybuf []byte
	merge  []jcRow // scratch of sortRows
}

// cacheWrites applies the rows side s just wrote (the visible ones of its chunk, bits)
// to its cached entries: a cached key's entry gets them, and so does a key known to
// have had no row (a new entry); other keys are left to be read on a miss.
func (h *HashJoin) cacheWrites(s int, bits []byte, n int, ops []vec.Op) {
	cache := h.cache[s]
	_, pks, vals := h.st[s].LastWrite()
	prev := -1 // the row before, when it had an entry: e
	var e *jcEntry
	for i := 0; i < n; i++ {
		if bits[i>>3]&(1<<(i&7)) == 0 {
			continue
		}
		ins := ops[i].IsInsert()
		// A row of the key of the row before goes to the same entry (rows of a
		// snapshot come in pk order, and the pk often leads with the join key).
		if prev < 0 || h.vn[i] != h.vn[prev] || !bytes.Equal(h.kbuf.At(i), h.kbuf.At(prev)) {
			prev = -1
			key := cache.key(h.vn[i], h.kbuf.At(i))
			if e = cache.get(key); e == nil {
				if !ins || !cache.absent(key) {
					continue
				}
				e = cache.add(key)
			}
			prev = i
		}
		if ins {
			cache.put(e, pks.At(i), vals.At(i), h.cfg.ExactInputs)
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
		empty, err := st.Empty(view)
		if err != nil {
			return err
		}
		h.cache[s].known = empty
	}
	h.checked = true
	return nil
}

// jcEvictBits is the size of a cache's bitset of evicted key hashes.
const jcEvictBits = 1 << 18

// jcEntryOverhead is what an entry costs beyond its key and buffers: the struct, the
// map's slot, the ring's and the string header.
const jcEntryOverhead = 128

type jcEntry struct {
	key     string
	slot    int     // in the ring
	ref     bool    // used since the hand last passed
	buf     []byte  // the rows' pks and values, back to back
	rows    []jcRow // in pk order
	sorted  int     // rows[:sorted] are in pk order; the others were appended
	garbage int     // bytes of buf no row refers to
	size    int64   // what the entry is accounted for
}

// jcRow is one row of an entry: its pk is buf[off:off+pk], its value the val bytes
// after it.
type jcRow struct {
	off, pk, val int32
}

func (e *jcEntry) pk(r jcRow) []byte    { return e.buf[r.off : r.off+r.pk] }
func (e *jcEntry) value(r jcRow) []byte { return e.buf[r.off+r.pk : r.off+r.pk+r.val] }

func newJoinCache(budget *StateCache) *joinCache {
	return &joinCache{budget: budget, m: map[string]*jcEntry{}, evict: make([]uint64, jcEvictBits/64)}
}

// key returns the cache key of a join key (its encoding) in vnode v, in a buffer
// reused by the next call.
func (c *joinCache) key(v uint16, prefix []byte) []byte {
	c.keybuf = append(binary.BigEndian.AppendUint16(c.keybuf[:0], v), prefix...)
	return c.keybuf
}

// get returns the entry of key, marked used, or nil.
func (c *joinCache) get(key []byte) *jcEntry {
	e := c.m[string(key)]
	if e != nil {
		e.ref = true
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
	e := &jcEntry{key: string(key), slot: len(c.ring), ref: true}
	c.m[e.key] = e
	c.ring = append(c.ring, e)
	c.account(e)
	return e
}

// append adds a row after the entry's others: a load, in pk order, or an insert of a
// pk known not to be there.
func (c *joinCache) append(e *jcEntry, pk, val []byte) {
	inOrder := e.sorted == len(e.rows) && (e.sorted == 0 || bytes.Compare(e.pk(e.rows[e.sorted-1]), pk) < 0)
	e.rows = append(e.rows, jcRow{off: int32(len(e.buf)), pk: int32(len(pk)), val: int32(len(val))})
	e.buf = append(append(e.buf, pk...), val...)
	if inOrder {
		e.sorted = len(e.rows)
	}
}

// put writes the row pk of entry e: its value replaced, or a new row. fresh says the
// pk is known not to be there (an exact changelog's insert): it is appended without
// a search.
func (c *joinCache) put(e *jcEntry, pk, val []byte, fresh bool) {
	if fresh {
		c.append(e, pk, val)
		return
	}
	i, found := c.find(e, pk)
	if found {
		e.garbage += int(e.rows[i].pk + e.rows[i].val)
	} else {
		e.rows = append(e.rows, jcRow{})
		copy(e.rows[i+1:], e.rows[i:])
		e.sorted++
	}
	e.rows[i] = jcRow{off: int32(len(e.buf)), pk: int32(len(pk)), val: int32(len(val))}
	e.buf = append(append(e.buf, pk...), val...)
	e.compact()
}

// del deletes the row pk of entry e, if it has one.
func (c *joinCache) del(e *jcEntry, pk []byte) {
	i, found := c.find(e, pk)
	if !found {
		return
	}
	e.garbage += int(e.rows[i].pk + e.rows[i].val)
	e.rows = append(e.rows[:i], e.rows[i+1:]...)
	e.sorted--
	e.compact()
}

// find returns where pk is or would go in the entry's rows, sorting the appended
// ones into place first. A pk after the last row's costs one comparison.
func (c *joinCache) find(e *jcEntry, pk []byte) (int, bool) {
	if e.sorted < len(e.rows) {
		c.sortRows(e)
	}
	n := len(e.rows)
	if n == 0 || bytes.Compare(e.pk(e.rows[n-1]), pk) < 0 {
		return n, false
	}
	i := sort.Search(n, func(i int) bool { return bytes.Compare(e.pk(e.rows[i]), pk) >= 0 })
	return i, i < n && bytes.Equal(e.pk(e.rows[i]), pk)
}

// sortRows sorts the rows appended since the entry was last in order and merges them
// with the others.
func (c *joinCache) sortRows(e *jcEntry) {
	less := func(a, b jcRow) int { return bytes.Compare(e.pk(a), e.pk(b)) }
	tail := e.rows[e.sorted:]
	slices.SortFunc(tail, less)
	c.merge = append(c.merge[:0], e.rows[:e.sorted]...)
	head := c.merge
	out := e.rows[:0]
	for len(head) > 0 && len(tail) > 0 {
		// out never overtakes tail: it has taken fewer rows than head and tail held.
		if less(head[0], tail[0]) <= 0 {
			out = append(out, head[0])
			head = head[1:]
		} else {
			out = append(out, tail[0])
			tail = tail[1:]
		}
	}
	out = append(out, head...)
	out = append(out, tail...) // in place already when head ran out first
	e.rows = out
	e.sorted = len(out)
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
	if d == 0 {
		return
	}
	e.size = size
	c.bytes += d
	c.budget.used.Add(d)
}

// shrink evicts entries, never keep, while the node is over its budget and the
// cache has others.
func (c *joinCache) shrink(keep *jcEntry) {
	for c.budget.over() && len(c.ring) > 0 {
		if len(c.ring) == 1 && c.ring[0] == keep {
			return
		}
		if c.hand >= len(c.ring) {
			c.hand = 0
		}
		e := c.ring[c.hand]
		if e == keep || e.ref {
			e.ref = false
			c.hand++
			continue
		}
		c.drop(e) // the last entry moves into the hand's slot: look at it next
	}
}

// drop evicts e, remembering its key as one that may have rows.
func (c *joinCache) drop(e *jcEntry) {
	last := c.ring[len(c.ring)-1]
	c.ring[e.slot], last.slot = last, e.slot
	c.ring[len(c.ring)-1] = nil
	c.ring = c.ring[:len(c.ring)-1]
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
	c.m, c.ring = nil, nil
}
