package storage

import (
	"bytes"
	"slices"
	"sort"
	"sync"
	"unsafe"

	"github.com/seed04fbb902/weir/vnode"
)

// entry is one write: a value, or a tombstone when del is set.
type entry struct {
	key   []byte // full storage key
	value []byte
	del   bool
	// before is whether the key existed before the epoch's first write of it, when
	// its writer knew (for the checkpoint's row counts).
	before before
}

// before is what a writer knew of a key's existence before it wrote it.
type before uint8

const (
	beforeUnknown before = iota // the checkpoint probes the committed data
	beforeAbsent
	beforeExisted
)

// run is a sealed epoch of one writer: its final write per key, sorted by key. A run
// is immutable once sealed, so readers share it without locks, and its entries and
// the arena they point into are never pooled or reused: views, iterators and a
// checkpoint's sstable writers (mergeRuns) read them with no count of their readers.
type run struct {
	table   uint32
	epoch   uint64
	entries []entry
	bytes   int // the memtable's size when sealed: key and value bytes
	// spans are the vnodes with entries, ascending, each with its entries' range.
	spans []vnodeSpan
	// owned are the vnodes of the table that the run's writer owned (nil: not
	// known): no other node writes them until the next checkpoint, so an export
	// may hold one of them without writes between two it holds (see exportCuts).
	owned *vnode.Bitmap
}

// vnodeSpan is where one vnode's entries lie in a run: entries[start:end].
type vnodeSpan struct {
	vnode      uint16
	start, end int
}

// span returns the range of the entries of vnode v (empty when it has none).
func (r *run) span(v uint16) (start, end int) {
	i := sort.Search(len(r.spans), func(i int) bool { return r.spans[i].vnode >= v })
	if i < len(r.spans) && r.spans[i].vnode == v {
		return r.spans[i].start, r.spans[i].end
	}
	return 0, 0
}

// memtable is a writer's current, unsealed epoch: the last write per key.
type memtable struct {
	// m maps key -> index in items for the vnodes whose keys were not all written in
	// ascending order (vnodeItems.mapped); the keys alias the arena.
	m map[string]int
	// blocks hold the items, in insertion order, itemBlockLen a block (item i is
	// item(i)); n is their number. Fixed-size blocks never copy their items as an
	// epoch grows, and are pooled (itemBlocks) from one seal to the next write, of
	// any table, however its epochs' sizes vary.
	blocks []*itemBlock
	n      int
	bytes  int
	// arena holds the keys and values written: blocks that are appended to, never
	// changed or reused, so that the entries (and the runs sealed from them) can
	// alias them. block is the size of the next block: it doubles from
	// minArenaBlock up to maxArenaBlock and is kept across seals, so a table that
	// writes a few rows an epoch (a progress table) holds small blocks.
	arena []byte
	block int
	// mhint sizes the map of the next epoch, made at its first use (see seal).
	mhint int
	// vnodes index items by the vnode of their key, with a sorted cache each (for
	// sortedVnode); an item's block holds its position in its vnode's list (at).
	vnodes map[uint16]*vnodeItems
	// scratch holds a vnode's keys written below its largest while a seal sorts them
	// (empty between seals).
	scratch []entry
}

// vnodeItems are the items of one vnode: their indexes in insertion order, and a sorted
// copy of the first cached of them, kept while only new keys are added (an iterator
// may still hold an older copy: copies are never changed in place); stale is set when a
// write changes a key the copy holds.
type vnodeItems struct {
	idx    []int
	cache  []entry
	cached int
	stale  bool
	max    []byte // the largest key written (an arena copy)
	// below is the positions in idx of the keys that were below max when written
	// (ascending): the other keys of idx are in key order, and a seal sorts only
	// these and merges them in.
	below []int
	// mapped: the vnode's keys are in the memtable's map. Until a key comes that is
	// not above max, the vnode's items are in key order and idx is searched instead.
	mapped bool
}

func newMemtable() *memtable { return &memtable{vnodes: map[uint16]*vnodeItems{}} }

// itemBlockLen is the number of items an itemBlock holds (56 KiB of entries).
const (
	itemBlockShift = 10
	itemBlockLen   = 1 << itemBlockShift
)

// itemBlock is one block of a memtable's items: the entries, and each one's position
// in its vnode's list.
type itemBlock struct {
	items [itemBlockLen]entry
	at    [itemBlockLen]int32
}

// itemBlocks keeps the blocks of sealed memtables, cleared, for the next epoch's
// writes. A sync.Pool lets go of what it holds within two garbage collections, so a
// store whose writes become small holds nothing for long.
var itemBlocks = sync.Pool{New: func() any { return new(itemBlock) }}

// item returns item i.
func (mt *memtable) item(i int) *entry {
	return &mt.blocks[i>>itemBlockShift].items[i&(itemBlockLen-1)]
}

// at returns item i's position in its vnode's list.
func (mt *memtable) at(i int) int {
	return int(mt.blocks[i>>itemBlockShift].at[i&(itemBlockLen-1)])
}

// releaseBlocks gives the memtable's blocks back to itemBlocks, cleared (their
// entries point into the arena, which the runs sealed from them keep using).
func (mt *memtable) releaseBlocks() {
	for i, b := range mt.blocks {
		clear(b.items[:min(itemBlockLen, mt.n-i*itemBlockLen)])
		itemBlocks.Put(b)
		mt.blocks[i] = nil
	}
	mt.blocks, mt.n = mt.blocks[:0], 0
}

// keyVnode is the vnode of a storage key (0 for a key too short to have one).
func keyVnode(key []byte) uint16 {
	if len(key) < KeyPrefixLen {
		return 0
	}
	return uint16(key[4])<<8 | uint16(key[5])
}

func (mt *memtable) put(key, value []byte, del bool) {
	mt.putKnown(key, value, del, beforeUnknown)
}

// putKnown writes key with what its writer knew of its existence before; an
// overwrite keeps what the epoch's first write of the key knew.
func (mt *memtable) putKnown(key, value []byte, del bool, b before) {
	v := keyVnode(key)
	vi := mt.vnodes[v]
	// A key above its vnode's largest is new (ascending writes, such as a view's
	// backfill, skip the map lookup).
	if vi != nil && bytes.Compare(key, vi.max) <= 0 {
		if !vi.mapped {
			mt.mapVnode(vi)
		}
		if i, ok := mt.m[string(key)]; ok {
			if mt.at(i) < vi.cached {
				vi.stale = true
			}
			e := mt.item(i)
			mt.bytes += len(value) - len(e.value)
			// An overwrite gets its own allocation: in the arena, a key rewritten
			// many times an epoch would hold every version until the seal.
			e.value = append([]byte(nil), value...)
			e.del = del
			return
		}
	}
	k := mt.copy(key)
	i := mt.n
	if vi != nil && vi.mapped {
		mt.mapPut(k, i)
	}
	if i&(itemBlockLen-1) == 0 {
		mt.blocks = append(mt.blocks, itemBlocks.Get().(*itemBlock))
	}
	if vi == nil {
		vi = &vnodeItems{}
		mt.vnodes[v] = vi
	}
	blk, j := mt.blocks[i>>itemBlockShift], i&(itemBlockLen-1)
	blk.items[j] = entry{key: k, value: mt.copy(value), del: del, before: b}
	blk.at[j] = int32(len(vi.idx))
	mt.n++
	mt.bytes += len(k) + len(value)
	if vi.max == nil || bytes.Compare(k, vi.max) > 0 {
		vi.max = k
	} else {
		vi.below = append(vi.below, len(vi.idx))
	}
	vi.idx = append(vi.idx, i)
}

// maxMemtableMapHint caps the keys a sealed memtable's map is sized for in the next
// epoch (about 3.5 MiB): a hint is what the epoch just sealed mapped, plus an eighth;
// the cap bounds what one huge epoch of rewrites makes its table allocate at its next
// epoch's first use of the map.
const maxMemtableMapHint = 1 << 16

// maxKeptScratch is the most entries of a seal's scratch slice kept for the next
// seal (3.5 MiB).
const maxKeptScratch = 1 << 16

// The sizes of a memtable's arena blocks (a larger key or value gets a block of its
// own size).
const (
	minArenaBlock = 512
	maxArenaBlock = 64 << 10
)

// copy copies b into the arena (nil when empty). The copy is never written again.
func (mt *memtable) copy(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	if cap(mt.arena)-len(mt.arena) < len(b) {
		mt.block = min(max(2*mt.block, minArenaBlock), maxArenaBlock)
		mt.arena = make([]byte, 0, max(mt.block, len(b)))
	}
	n := len(mt.arena)
	mt.arena = append(mt.arena, b...)
	return mt.arena[n : n+len(b) : n+len(b)]
}

// mapVnode puts the keys of vi, written in ascending order so far, into the map.
func (mt *memtable) mapVnode(vi *vnodeItems) {
	for _, i := range vi.idx {
		mt.mapPut(mt.item(i).key, i)
	}
	vi.mapped = true
}

// mapPut maps k, an arena key, to item i, making the map at the epoch's first use.
func (mt *memtable) mapPut(k []byte, i int) {
	if mt.m == nil {
		mt.m = make(map[string]int, mt.mhint)
	}
	mt.m[unsafe.String(unsafe.SliceData(k), len(k))] = i
}

func (mt *memtable) get(key []byte) (entry, bool) {
	return mt.getIn(mt.vnodes[keyVnode(key)], key)
}

// getIn is get with the items of key's vnode already looked up (nil: none).
func (mt *memtable) getIn(vi *vnodeItems, key []byte) (entry, bool) {
	if vi == nil || bytes.Compare(key, vi.max) > 0 {
		return entry{}, false
	}
	if !vi.mapped { // idx is in key order
		j := sort.Search(len(vi.idx), func(j int) bool { return bytes.Compare(mt.item(vi.idx[j]).key, key) >= 0 })
		if j < len(vi.idx) && bytes.Equal(mt.item(vi.idx[j]).key, key) {
			return *mt.item(vi.idx[j]), true
		}
		return entry{}, false
	}
	i, ok := mt.m[string(key)]
	if !ok {
		return entry{}, false
	}
	return *mt.item(i), true
}

func (mt *memtable) len() int { return mt.n }

// seal sorts the memtable into a run and leaves the memtable empty. Keys sort by
// vnode first, so the run is each vnode's items in vnode order, each vnode sorted on
// its own, however the writes of different vnodes interleave: a vnode whose keys were
// written in ascending order (a snapshot read, a sequential load) costs a copy, and
// only the keys written below their vnode's largest are sorted, then merged in
// (appendSorted).
func (mt *memtable) seal(table uint32, epoch uint64) *run {
	size := mt.bytes
	vns := make([]uint16, 0, len(mt.vnodes))
	for v := range mt.vnodes {
		vns = append(vns, v)
	}
	slices.Sort(vns)
	items := make([]entry, 0, mt.n)
	spans := make([]vnodeSpan, 0, len(vns))
	for _, v := range vns {
		vi := mt.vnodes[v]
		from := len(items)
		if vi.cache != nil && !vi.stale && vi.cached == len(vi.idx) {
			items = append(items, vi.cache...)
		} else {
			items = mt.appendSorted(items, vi)
		}
		spans = append(spans, vnodeSpan{vnode: v, start: from, end: len(items)})
	}
	// The next epoch of a table usually writes as many keys as this one, in the same
	// way: a map sized for the keys that needed it is not rehashed at every doubling
	// while it fills. It is made at the epoch's first use (a table that stops writing
	// holds none), and capped, so that one large epoch does not make every later one
	// allocate a large one.
	mt.mhint = min(len(mt.m)+len(mt.m)/8, maxMemtableMapHint)
	mt.releaseBlocks()
	mt.m, mt.arena = nil, nil
	mt.bytes = 0
	mt.vnodes = map[uint16]*vnodeItems{}
	return &run{table: table, epoch: epoch, entries: items, bytes: size, spans: spans}
}

// slicePool keeps empty slices for reuse across tables and stores. A sync.Pool lets
// go of what it holds within two garbage collections (it may hold some per P until
// then), so a table or store whose work becomes small holds nothing for long.
type slicePool[T any] struct{ p sync.Pool }

// get returns an empty pooled slice with room for n to most elements, or nil (the
// pool's next slice, outside those bounds, is kept).
func (sp *slicePool[T]) get(n, most int) []T {
	p, _ := sp.p.Get().(*[]T)
	if p == nil {
		return nil
	}
	if c := cap(*p); c >= n && c <= most {
		return (*p)[:0]
	}
	sp.p.Put(p)
	return nil
}

// put keeps s, cleared (its elements may point into memory that must not stay
// reachable through it).
func (sp *slicePool[T]) put(s []T) {
	clear(s)
	s = s[:0]
	sp.p.Put(&s)
}

func entryLess(a, b entry) int { return bytes.Compare(a.key, b.key) }

// appendSorted appends the items of vi to items in key order. The keys written above
// the vnode's largest key at the time are already in order; only those written below
// it (vi.below) are sorted, and merged in.
func (mt *memtable) appendSorted(items []entry, vi *vnodeItems) []entry {
	if len(vi.below) == 0 {
		for _, i := range vi.idx {
			items = append(items, *mt.item(i))
		}
		return items
	}
	// The ascending keys go first, then the others, sorted, which a merge from the
	// back moves into place: the write position stays past the ascending keys not yet
	// merged, so it overwrites only keys already moved (or copied to o).
	from := len(items)
	b := 0
	for p, i := range vi.idx {
		if b < len(vi.below) && vi.below[b] == p {
			b++
			continue
		}
		items = append(items, *mt.item(i))
	}
	asc := len(items) - from
	o := mt.scratch[:0]
	for _, p := range vi.below {
		o = append(o, *mt.item(vi.idx[p]))
	}
	slices.SortFunc(o, entryLess)
	items = append(items, o...)
	i, j := from+asc-1, len(o)-1
	for w := len(items) - 1; j >= 0; w-- {
		if i >= from && entryLess(items[i], o[j]) > 0 {
			items[w], i = items[i], i-1
		} else {
			items[w], j = o[j], j-1
		}
	}
	clear(o) // kept for the next vnode and seal, holding no key or value
	if cap(o) <= maxKeptScratch {
		mt.scratch = o[:0]
	} else {
		mt.scratch = nil // not a large epoch's slice for good
	}
	return items
}

// sorted returns the memtable's entries sorted by key, without sealing it.
func (mt *memtable) sorted() []entry {
	out := make([]entry, mt.n)
	for i := range out {
		out[i] = *mt.item(i)
	}
	slices.SortFunc(out, entryLess)
	return out
}

// sortedVnode returns the entries of vnode v sorted by key. The result must not be
// modified. Readers that iterate between writes (a join probing per row) pay for what
// changed since their last call: new keys are sorted and merged into the cached copy;
// a changed key rebuilds the copy of its vnode only.
func (mt *memtable) sortedVnode(v uint16) []entry {
	vi := mt.vnodes[v]
	if vi == nil {
		return nil
	}
	fresh := func(idx []int) []entry {
		out := make([]entry, len(idx))
		for k, i := range idx {
			out[k] = *mt.item(i)
		}
		slices.SortFunc(out, entryLess)
		return out
	}
	switch {
	case vi.cache != nil && !vi.stale && vi.cached == len(vi.idx):
		return vi.cache
	case vi.cache == nil || vi.stale:
		vi.cache = fresh(vi.idx)
	default:
		add := fresh(vi.idx[vi.cached:])
		merged := make([]entry, 0, len(vi.cache)+len(add))
		i, j := 0, 0
		for i < len(vi.cache) && j < len(add) {
			if entryLess(vi.cache[i], add[j]) < 0 {
				merged = append(merged, vi.cache[i])
				i++
			} else {
				merged = append(merged, add[j])
				j++
			}
		}
		vi.cache = append(append(merged, vi.cache[i:]...), add[j:]...)
	}
	vi.cached, vi.stale = len(vi.idx), false
	return vi.cache
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
		mt.putKnown(e.key, e.value, e.del, e.before)
	}
}
