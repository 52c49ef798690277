package executors

import (
	"sync/atomic"
)

// DefaultStateCacheBytes is the memory a node's StateCache lets its executors' cached
// state hold when the engine is not told otherwise.
const DefaultStateCacheBytes = 256 << 20

// StateCache is the memory budget shared by the in-memory state of the executors of
// one node (the rows of a join's sides, an aggregate's groups): each executor keeps
// its own entries in a CLOCK ring (LRU's approximation) and, whenever the node's total
// is over the limit after it added some, evicts the ones not used since the hand last
// passed them until the total is under it again or it has none left. What is evicted
// is held by the state table as it is (a join writes through to its table at once; an
// aggregate evicts only groups a checkpoint barrier has written), so an eviction
// loses nothing: a later miss reads the rows again from the table. It is safe for
// concurrent use.
type StateCache struct {
	limit int64
	used  atomic.Int64

	hits, loads, absent, evictions atomic.Int64
	groupEvictions, groupLoads     atomic.Int64
}

// NewStateCache returns a budget of limit bytes (at least 1).
func NewStateCache(limit int64) *StateCache {
	return &StateCache{limit: max(limit, 1)}
}

// StateCacheStats counts what the executors sharing a StateCache did with it.
type StateCacheStats struct {
	// Limit is the budget, Used the bytes the cached state holds now.
	Limit, Used int64
	// Hits are lookups answered by a cached entry; Loads lookups that read the state
	// table (a miss, or a key evicted before) and cached what they read; Absent
	// lookups of keys known to have no row, answered without reading the table.
	Hits, Loads, Absent int64
	// Evictions are entries dropped to keep under the limit.
	Evictions int64
	// GroupEvictions are the aggregates' groups dropped to keep under the limit,
	// and GroupLoads the groups read back from their tables because their key was
	// evicted before (or shares a bit with one that was). The counters above are the
	// joins'.
	GroupEvictions, GroupLoads int64
}

// Stats returns the budget's counters.
func (c *StateCache) Stats() StateCacheStats {
	return StateCacheStats{
		Limit: c.limit, Used: c.used.Load(),
		Hits: c.hits.Load(), Loads: c.loads.Load(), Absent: c.absent.Load(), Evictions: c.evictions.Load(),
		GroupEvictions: c.groupEvictions.Load(), GroupLoads: c.groupLoads.Load(),
	}
}

// Add returns the sum of s and o, field by field (the limits too: the nodes' total).
func (s StateCacheStats) Add(o StateCacheStats) StateCacheStats {
	return StateCacheStats{
		Limit: s.Limit + o.Limit, Used: s.Used + o.Used,
		Hits: s.Hits + o.Hits, Loads: s.Loads + o.Loads, Absent: s.Absent + o.Absent, Evictions: s.Evictions + o.Evictions,
		GroupEvictions: s.GroupEvictions + o.GroupEvictions, GroupLoads: s.GroupLoads + o.GroupLoads,
	}
}

func (c *StateCache) over() bool { return c.used.Load() > c.limit }
