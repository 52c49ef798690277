package storage

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// RowDelta is the change a commit makes to the row count of one vnode of one table.
type RowDelta struct {
	Table uint32
	Vnode uint16
	Delta int64
}

// vnodeKey names one vnode of one table.
type vnodeKey struct {
	table uint32
	vnode uint16
}

// maxPrefixSeeks bounds the prefix seeks a rowCounter makes between two seeks.
const maxPrefixSeeks = 64

// rowCounter adds up the row count changes of writes given in ascending key order,
// against the committed data a probe iterator reads, asking it only for the keys
// whose writer did not know whether they existed (beforeUnknown).
//
// A seek (SeekGE) leaves the probe on the first committed key at or after the key
// sought (the frontier): a later key before the frontier does not exist and one on
// it does, without a read (new keys of a view being built fall in ranges with
// nothing committed). A key past the frontier needs a read: a seek, or a prefix seek,
// which the sstables' bloom filters (the last level's included) answer without
// reading a block when the key is new, but which leaves no frontier. When a seek
// settles no later key, the next 1, 2, 4, ... (at most maxPrefixSeeks) reads are
// prefix seeks before the next seek: new keys among committed ones (random inserts)
// cost a filter probe each, and runs of keys between two committed ones still cost a
// seek per run.
type rowCounter struct {
	probe        *pebble.Iterator
	frontier     []byte // a copy of the key the last seek stood on
	haveFrontier bool   // a seek found a committed key at or after its key
	exhausted    bool   // the last seek found nothing committed at or after its key
	sought       bool   // the last read was a seek
	free         int    // keys the last seek settled since
	prefixSeeks  int
	backoff      int
	// The row count change of the vnode whose keys are being added (they come in key
	// order, so a vnode's together), added to deltas when the next vnode starts.
	cur      vnodeKey
	curDelta int64
	deltas   map[vnodeKey]int64
}

// newRowCounter returns a counter whose probe reads the committed data; the caller
// keeps and closes the probe.
func newRowCounter(probe *pebble.Iterator) *rowCounter {
	return &rowCounter{probe: probe, backoff: 1, deltas: map[vnodeKey]int64{}}
}

// restart starts another ascending sequence of keys (another file's), keeping the
// changes counted so far.
func (c *rowCounter) restart() {
	c.flush()
	c.frontier, c.haveFrontier, c.exhausted, c.sought = c.frontier[:0], false, false, false
	c.free, c.prefixSeeks, c.backoff = 0, 0, 1
}

// add counts a put (del false) or a delete of key, which follows the key added
// before it, with b, what its writer knew of the key's existence before.
func (c *rowCounter) add(key []byte, del bool, b before) error {
	var existed bool
	switch b {
	case beforeExisted: // the writer knew, from what it read before the write
		existed = true
	case beforeAbsent:
	default:
		var err error
		if existed, err = c.exists(key); err != nil {
			return err
		}
	}
	table, vnode, _, err := SplitKey(key)
	if err != nil {
		return err
	}
	if vk := (vnodeKey{table, vnode}); vk != c.cur {
		c.flush()
		c.cur = vk
	}
	switch {
	case del && existed:
		c.curDelta--
	case !del && !existed:
		c.curDelta++
	}
	return nil
}

// exists reports whether key is committed, reading as little as the keys before it
// allow.
func (c *rowCounter) exists(key []byte) (bool, error) {
	if c.exhausted {
		return false, nil // nothing committed at or after an earlier key
	}
	if c.haveFrontier {
		if r := bytes.Compare(key, c.frontier); r <= 0 {
			c.free++
			return r == 0, nil
		}
	}
	if c.sought && c.free == 0 {
		c.prefixSeeks, c.backoff = c.backoff, min(2*c.backoff, maxPrefixSeeks)
	} else if c.sought {
		c.backoff = 1
	}
	c.sought, c.free = false, 0
	if c.prefixSeeks > 0 {
		c.prefixSeeks--
		// The prefix is the whole key: a positioned probe stands on it.
		existed := c.probe.SeekPrefixGE(key) && bytes.Equal(c.probe.Key(), key)
		return existed, c.probe.Error()
	}
	c.sought, c.haveFrontier = true, c.probe.SeekGE(key)
	if err := c.probe.Error(); err != nil {
		return false, err
	}
	if !c.haveFrontier {
		c.exhausted = true
		return false, nil
	}
	c.frontier = append(c.frontier[:0], c.probe.Key()...)
	return bytes.Equal(c.frontier, key), nil
}

// flush adds the current vnode's change to deltas.
func (c *rowCounter) flush() {
	if c.curDelta != 0 {
		c.deltas[c.cur] += c.curDelta
	}
	c.curDelta = 0
}

// result returns the changes counted, without zeros, in table and vnode order.
func (c *rowCounter) result() []RowDelta {
	c.flush()
	out := make([]RowDelta, 0, len(c.deltas))
	for vk, d := range c.deltas {
		if d != 0 {
			out = append(out, RowDelta{Table: vk.table, Vnode: vk.vnode, Delta: d})
		}
	}
	sortRowDeltas(out)
	return out
}

// sortRowDeltas orders ds by table, then vnode.
func sortRowDeltas(ds []RowDelta) {
	slices.SortFunc(ds, func(a, b RowDelta) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), cmp.Compare(a.Vnode, b.Vnode))
	})
}

// rowCountWrites returns the metadata writes that apply the row count changes ds to
// the counts committed in s: each vnode's new count.
func (s *Store) rowCountWrites(ds []RowDelta) ([]entry, error) {
	out := make([]entry, 0, len(ds))
	for _, d := range ds {
		if d.Delta == 0 {
			continue
		}
		k := rowCountKey(d.Table, d.Vnode)
		cur, err := s.int64At(k)
		if err != nil {
			return nil, fmt.Errorf("row count of table %d vnode %d: %w", d.Table, d.Vnode, err)
		}
		out = append(out, entry{key: k, value: binary.BigEndian.AppendUint64(nil, uint64(cur+d.Delta))})
	}
	return out, nil
}

// SumRowDeltas returns the changes of every list in lists added up per table and
// vnode, without zeros, in table and vnode order: the row count changes of one commit
// whose parts several stores exported.
func SumRowDeltas(lists ...[]RowDelta) []RowDelta {
	sum := map[vnodeKey]int64{}
	for _, ds := range lists {
		for _, d := range ds {
			sum[vnodeKey{d.Table, d.Vnode}] += d.Delta
		}
	}
	out := make([]RowDelta, 0, len(sum))
	for vk, d := range sum {
		if d != 0 {
			out = append(out, RowDelta{Table: vk.table, Vnode: vk.vnode, Delta: d})
		}
	}
	sortRowDeltas(out)
	return out
}
