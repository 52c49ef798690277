package storage

import (
	"bytes"
	"cmp"
	"encoding/binary"
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
	// bytes is the memtable's size when sealed: the key and value bytes of its writes,
	// a key written again before its vnode was settled counted at each write (the
	// arena the entries point into holds each version), so at least the entries'.
	bytes int
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

// memtable is a writer's current, unsealed epoch: its writes, which reads and the
// seal see as the last write per key.
type memtable struct {
	// m maps key -> index in items for the vnodes that are mapped (vnodeItems.mapped);
	// the keys alias the arena.
	m map[string]int
	// blocks hold the items, in insertion order, itemBlockLen a block (item i is
	// item(i)); n is their number. Fixed-size blocks never copy their items as an
	// epoch grows, and are pooled (itemBlocks) from one seal to the next write, of
	// any table, however its epochs' sizes vary.
	blocks []*itemBlock
	n      int
	dead   int // items that settle folded into an earlier one (not in any vnode's list)
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
	// vnodes index items by the vnode of their key (nil for a vnode with none), with a
	// sorted cache each (for sortedVnode); an item's block holds its position in its
	// vnode's list (at). used lists the vnodes with items, in order of first write.
	vnodes []*vnodeItems
	used   []uint16
	// settleAt is the keys written below their vnode's largest from which an unmapped
	// vnode is settled (settleBelow; tests lower it).
	settleAt int
	// scratch and sorted hold a vnode's keys written below its largest while a seal
	// sorts them, by their sortKeys (empty between seals).
	scratch, sorted []entry
	sortKeys        []sealKey
}

// vnodeItems are the items of one vnode: their indexes in insertion order, and a sorted
// copy of the first cached of them, kept while only new keys are added (an iterator
// may still hold an older copy: copies are never changed in place); stale is set when a
// write changes a key the copy holds, or a settle renumbers the items.
//
// A key written above the vnode's largest is new. One written below it may be a key
// written before in the epoch: until the vnode is mapped it is appended as an item of
// its own all the same (no map insert or lookup per write: a join's or an aggregate's
// state writes keys in no order, and most are new), and the seal folds the writes of
// one key into one entry as it sorts them. The vnode is settled (its writes of a key
// folded, its keys mapped) at the first read of it in the epoch, or once settleAt keys
// or settleBelowBytes were written below its largest (which bounds the versions of a
// rewritten key held until the seal); from then on a write of a key it holds
// overwrites it.
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
	// belowBytes is the key and value bytes of below's writes while unmapped.
	belowBytes int
	// mapped: the vnode is settled, its keys distinct and in the memtable's map.
	// Until then its items may hold a key more than once (in below), and while below
	// is empty they are in key order, and idx is searched.
	mapped bool
}

// settleBelow is memtable.settleAt's default, and settleBelowBytes the bytes written
// below an unmapped vnode's largest key from which it is settled too: together they
// bound what versions of rewritten keys the arena holds (per vnode, about 256 KiB and
// one write).
const (
	settleBelow      = 4096
	settleBelowBytes = 256 << 10
)

func newMemtable() *memtable { return &memtable{settleAt: settleBelow} }

// vnode returns the items of vnode v, nil when it has none.
func (mt *memtable) vnode(v uint16) *vnodeItems {
	if int(v) < len(mt.vnodes) {
		return mt.vnodes[v]
	}
	return nil
}

// addVnode returns new items for vnode v, which has none.
func (mt *memtable) addVnode(v uint16) *vnodeItems {
	if int(v) >= len(mt.vnodes) {
		mt.vnodes = slices.Grow(mt.vnodes, int(v)+1-len(mt.vnodes))[:int(v)+1]
	}
	vi := &vnodeItems{}
	mt.vnodes[v] = vi
	mt.used = append(mt.used, v)
	return vi
}

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
	mt.blocks, mt.n, mt.dead = mt.blocks[:0], 0, 0
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
	vi := mt.vnode(v)
	// A key above its vnode's largest is new (ascending writes, such as a view's
	// backfill, skip the map lookup); one below it is looked up only in a settled
	// vnode.
	if vi != nil && bytes.Compare(key, vi.max) <= 0 {
		if !vi.mapped && (len(vi.below) >= mt.settleAt || vi.belowBytes >= settleBelowBytes) {
			mt.settle(vi)
		}
		if vi.mapped {
			if i, ok := mt.m[string(key)]; ok {
				if mt.at(i) < vi.cached {
					vi.stale = true
				}
				e := mt.item(i)
				mt.bytes += len(value) - len(e.value)
				// An overwrite gets its own allocation: in the arena, a key
				// rewritten many times an epoch would hold every version until the
				// seal.
				e.value = append([]byte(nil), value...)
				e.del = del
				return
			}
		}
		// New, or in an unmapped vnode: appended (the seal, or the vnode's settling,
		// folds it into an earlier write of the key).
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
		vi = mt.addVnode(v)
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
		if !vi.mapped {
			vi.belowBytes += len(k) + len(value)
		}
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

// settle folds the writes of each key of vi, an unmapped vnode, into its first item
// (the last write's value and tombstone; the first write's before) and maps the keys:
// the later items leave the vnode's list, their arena bytes stay until the seal (and
// are counted in the memtable's size until then). The positions in the list, the
// keys below the largest and a sorted copy (rebuilt at its next use) are made anew.
func (mt *memtable) settle(vi *vnodeItems) {
	all := vi.idx
	vi.idx, vi.below = vi.idx[:0], vi.below[:0] // overwritten behind the reads of all
	var top []byte
	for _, i := range all {
		e := mt.item(i)
		k := unsafe.String(unsafe.SliceData(e.key), len(e.key))
		if j, ok := mt.m[k]; ok {
			first := mt.item(j)
			first.value, first.del = e.value, e.del
			*e = entry{} // no longer an item of the vnode
			mt.dead++
			continue
		}
		mt.mapPut(e.key, i)
		mt.blocks[i>>itemBlockShift].at[i&(itemBlockLen-1)] = int32(len(vi.idx))
		if top != nil && bytes.Compare(e.key, top) <= 0 {
			vi.below = append(vi.below, len(vi.idx))
		} else {
			top = e.key
		}
		vi.idx = append(vi.idx, i)
	}
	vi.mapped = true
	if vi.cache != nil {
		vi.stale = true
	}
}

// mapPut maps k, an arena key, to item i, making the map at the epoch's first use.
func (mt *memtable) mapPut(k []byte, i int) {
	if mt.m == nil {
		mt.m = make(map[string]int, mt.mhint)
	}
	mt.m[unsafe.String(unsafe.SliceData(k), len(k))] = i
}

func (mt *memtable) get(key []byte) (entry, bool) {
	return mt.getIn(mt.vnode(keyVnode(key)), key)
}

// getIn is get with the items of key's vnode already looked up (nil: none).
func (mt *memtable) getIn(vi *vnodeItems, key []byte) (entry, bool) {
	if vi == nil || bytes.Compare(key, vi.max) > 0 {
		return entry{}, false
	}
	if !vi.mapped && len(vi.below) > 0 {
		mt.settle(vi)
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

// empty reports whether nothing was written since the last seal.
func (mt *memtable) empty() bool { return mt.n == 0 }

// len is the number of keys written since the last seal (every vnode settled).
func (mt *memtable) len() int {
	for _, v := range mt.used {
		if vi := mt.vnodes[v]; !vi.mapped && len(vi.below) > 0 {
			mt.settle(vi)
		}
	}
	return mt.n - mt.dead
}

// seal sorts the memtable into a run and leaves the memtable empty. Keys sort by
// vnode first, so the run is each vnode's items in vnode order, each vnode sorted on
// its own, however the writes of different vnodes interleave: a vnode whose keys were
// written in ascending order (a snapshot read, a sequential load) costs a copy, and
// only the keys written below their vnode's largest are sorted, then merged in
// (appendSorted).
func (mt *memtable) seal(table uint32, epoch uint64) *run {
	size := mt.bytes
	vns := mt.used
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
	for _, v := range vns {
		mt.vnodes[v] = nil
	}
	mt.used = vns[:0]
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

// appendSorted appends the items of vi to items in key order, one entry per key. The
// keys written above the vnode's largest key at the time are already in order and
// distinct; only those written below it (vi.below) are sorted (sortBelow), and merged
// in, the writes of one key folded into one entry: the last write's value and
// tombstone, the first write's before.
func (mt *memtable) appendSorted(items []entry, vi *vnodeItems) []entry {
	if len(vi.below) == 0 {
		for _, i := range vi.idx {
			items = append(items, *mt.item(i))
		}
		return items
	}
	// The ascending keys go first, then the others, sorted, which a merge from the
	// back moves into place: the write position stays past the ascending keys not yet
	// merged, so it overwrites only keys already moved (or copied to o). Of equal
	// keys the later write is met first: one written above the largest precedes every
	// write of it below (the largest only grows), and the sort keeps the order of the
	// writes below. An earlier write of the key written last only gives its before.
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
	o := mt.sortBelow(vi)
	items = append(items, o...)
	i, j := from+asc-1, len(o)-1
	w := len(items) - 1
	for j >= 0 || i >= from {
		if j < 0 && w == i && !bytes.Equal(items[i].key, items[w+1].key) {
			w = from - 1 // the ascending keys left, items[from:i+1], are in place
			break
		}
		var e entry
		if j < 0 || (i >= from && entryLess(items[i], o[j]) > 0) {
			e, i = items[i], i-1
		} else {
			e, j = o[j], j-1
		}
		if w < len(items)-1 && bytes.Equal(items[w+1].key, e.key) {
			items[w+1].before = e.before // an earlier write of the key written at w+1
			continue
		}
		items[w] = e
		w--
	}
	if gap := w + 1 - from; gap > 0 { // keys written more than once: fewer entries
		copy(items[from:], items[w+1:])
		clear(items[len(items)-gap:])
		items = items[:len(items)-gap]
	}
	clear(o) // kept for the next vnode and seal, holding no key or value
	if cap(o) <= maxKeptScratch {
		mt.sorted = o[:0]
	} else {
		mt.sorted = nil // not a large epoch's slice for good
	}
	return items
}

// sealKey orders a vnode's keys written below its largest in a seal: by the 8 bytes
// after the keys' shared table and vnode prefix (KeyPrefixLen), as one integer, then
// (on a tie) by the whole key, then by the order of the writes.
type sealKey struct {
	head uint64
	at   int32 // the entry's index in the writes' order
}

// keyHead is the 8 bytes of key after its table and vnode prefix as one big-endian
// integer, zeros past its end: keys of one vnode compare as their heads do unless
// the heads are equal.
func keyHead(key []byte) uint64 {
	if len(key) >= KeyPrefixLen+8 {
		return binary.BigEndian.Uint64(key[KeyPrefixLen:])
	}
	var h uint64
	for i := KeyPrefixLen; i < KeyPrefixLen+8; i++ {
		h <<= 8
		if i < len(key) {
			h |= uint64(key[i])
		}
	}
	return h
}

// sortBelow returns the items of vi written below its largest key, sorted by key, the
// writes of one key in the order written (in mt.sorted, kept for the next vnode).
func (mt *memtable) sortBelow(vi *vnodeItems) []entry {
	o := mt.scratch[:0]
	ks := mt.sortKeys[:0]
	for n, p := range vi.below {
		e := mt.item(vi.idx[p])
		o = append(o, *e)
		ks = append(ks, sealKey{head: keyHead(e.key), at: int32(n)})
	}
	slices.SortFunc(ks, func(a, b sealKey) int {
		if a.head != b.head {
			return cmp.Compare(a.head, b.head)
		}
		if c := bytes.Compare(o[a.at].key, o[b.at].key); c != 0 {
			return c
		}
		return cmp.Compare(a.at, b.at)
	})
	out := mt.sorted[:0]
	for _, k := range ks {
		out = append(out, o[k.at])
	}
	clear(o)
	if cap(o) <= maxKeptScratch {
		mt.scratch = o[:0]
	} else {
		mt.scratch = nil
	}
	if cap(ks) <= maxKeptScratch {
		mt.sortKeys = ks[:0]
	} else {
		mt.sortKeys = nil
	}
	return out
}

// sortedAll returns the memtable's entries sorted by key, without sealing it (every
// vnode settled).
func (mt *memtable) sortedAll() []entry {
	out := make([]entry, 0, mt.n)
	for _, v := range mt.used {
		vi := mt.vnodes[v]
		if !vi.mapped && len(vi.below) > 0 {
			mt.settle(vi)
		}
		for _, i := range vi.idx {
			out = append(out, *mt.item(i))
		}
	}
	slices.SortFunc(out, entryLess)
	return out
}

// sortedVnode returns the entries of vnode v sorted by key. The result must not be
// modified. Readers that iterate between writes (a join probing per row) pay for what
// changed since their last call: new keys are sorted and merged into the cached copy;
// a changed key rebuilds the copy of its vnode only.
func (mt *memtable) sortedVnode(v uint16) []entry {
	vi := mt.vnode(v)
	if vi == nil {
		return nil
	}
	if !vi.mapped && len(vi.below) > 0 {
		mt.settle(vi)
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
	// The size the writes were counted at (see run.bytes), which the node's unsealed
	// bytes still hold and the next seal takes off.
	mt.bytes = r.bytes
}
