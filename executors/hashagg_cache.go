package executors

import (
	"github.com/cespare/xxhash/v2"
)

// A hash aggregate's groups under a node's StateCache budget (HashAggConfig.Cache):
// the groups are kept in a CLOCK ring, as a join's cached rows are (joinCache). Only a
// group the state tables hold as it is can go: none touched since the last
// checkpoint barrier (their changes are not written yet: the state is written
// behind). So the aggregate evicts right after a checkpoint barrier has written its
// groups, while the node is over its budget; a group used since the hand last passed
// it gets another round. An evicted group is read back from the tables, with its
// multisets, when its key comes again. When the tables were empty at the start
// (HashAgg.known), the keys evicted are remembered by hash in a bitset, so that a key
// absent from the tables still reads nothing unless it shares a bit with an evicted
// one.

// hgGroupOverhead and hgEntryOverhead are what a group and a multiset entry cost
// beyond their keys: the structs, their map slots and the ring's.
const (
	hgGroupOverhead = 192
	hgEntryOverhead = 112
)

// hgSize is what g is accounted for.
func (h *HashAgg) hgSize(g *hgGroup) int64 {
	n := int64(hgGroupOverhead + len(g.key) + 48*len(g.aggs) + 40*cap(g.old))
	for _, o := range g.old {
		n += int64(len(o.s))
	}
	for _, set := range g.sets {
		n += int64(len(set.fixed)+len(set.byKey))*hgEntryOverhead + int64(set.keys)
	}
	return n
}

// cacheAdd puts a new group into the ring.
func (h *HashAgg) cacheAdd(g *hgGroup) {
	if h.cfg.Cache == nil {
		return
	}
	g.slot, g.ref = len(h.ring), true
	h.ring = append(h.ring, g)
}

// cacheDrop takes g out of the ring and the groups, giving its bytes back.
func (h *HashAgg) cacheDrop(g *hgGroup) {
	delete(h.groups, g.key)
	if h.cfg.Cache == nil {
		return
	}
	last := h.ring[len(h.ring)-1]
	h.ring[g.slot], last.slot = last, g.slot
	h.ring[len(h.ring)-1] = nil
	h.ring = h.ring[:len(h.ring)-1]
	h.bytes -= g.size
	h.cfg.Cache.used.Add(-g.size)
	g.size = 0
}

// account brings g's accounted size up to date.
func (h *HashAgg) account(g *hgGroup) {
	if h.cfg.Cache == nil {
		return
	}
	size := h.hgSize(g)
	if d := size - g.size; d != 0 {
		g.size = size
		h.bytes += d
		h.cfg.Cache.used.Add(d)
	}
}

// evicted reports whether key may be a group evicted before (when the tables were
// known to be empty at the start, only such a key is read from them).
func (h *HashAgg) evicted(key []byte) bool {
	if h.evict == nil {
		return false
	}
	b := xxhash.Sum64(key) % jcEvictBits
	return h.evict[b/64]&(1<<(b%64)) != 0
}

// shrink evicts groups the state tables hold as they are while the node is over its
// budget (after a checkpoint barrier wrote the unsaved ones).
func (h *HashAgg) shrink() {
	c := h.cfg.Cache
	if c == nil {
		return
	}
	for passes := 0; c.over() && len(h.ring) > 0; {
		if h.hand >= len(h.ring) {
			h.hand = 0
			if passes++; passes > 2 {
				return // every group is in use (unsaved) or used twice since
			}
		}
		g := h.ring[h.hand]
		if g.ref || g.unsaved || g.dirty {
			g.ref = false
			h.hand++
			continue
		}
		if h.evict == nil {
			h.evict = make([]uint64, jcEvictBits/64)
		}
		b := xxhash.Sum64String(g.key) % jcEvictBits
		h.evict[b/64] |= 1 << (b % 64)
		h.cacheDrop(g) // the last group moves into the hand's slot: look at it next
		c.groupEvictions.Add(1)
	}
}

// releaseCache gives the groups' bytes back to the budget (the executor closes).
func (h *HashAgg) releaseCache() {
	if h.cfg.Cache != nil {
		h.cfg.Cache.used.Add(-h.bytes)
	}
	h.bytes, h.ring = 0, nil
}
