package storage

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/cockroachdb/pebble/v2"

	"github.com/seed04fbb902/weir/vec"
)

// Lookup holds the results of StateTable.GetMany: for each row of a batch, the value
// its pk holds, or none. Its zero value is ready to use; reused from batch to batch it
// allocates nothing in steady state.
type Lookup struct {
	at   []int32   // per row of the batch: index into vals, or -1 (missing or not asked)
	vals vec.Bytes // the values found
	keys vec.Bytes // the storage keys asked, in the order of sel
	// wait is the positions in sel (and keys) still to be read from pebble, sorted
	// by key; hi the exclusive upper bound of their range.
	wait []int32
	hi   []byte
	opts pebble.IterOptions
	// cur is, per sealed run of the view (oldest first), an index at or before that
	// of the run's first entry at or after the current key (0 after keys out of
	// order): where the run's galloping seek starts.
	cur []int
	// span is, per sealed run, the range of its entries in the current key's vnode.
	span []vnodeSpan
	// absent counts the keys found absent without a read since the Lookup was made
	// (above everything the actor's vnode holds).
	absent int
}

// Absent is the number of keys GetMany settled as absent with no read of the memtable,
// the sealed runs or the committed data, since the Lookup was made: keys above every
// key their vnode holds, such as a view's rows being backfilled.
func (l *Lookup) Absent() int { return l.absent }

// found records val (copied) as the value of row i.
func (l *Lookup) found(i int32, val []byte) {
	l.at[i] = int32(l.vals.Len())
	l.vals.Append(val)
}

// Value is the value found for row i of the last GetMany, valid until the next one.
func (l *Lookup) Value(i int) ([]byte, bool) {
	if i >= len(l.at) || l.at[i] < 0 {
		return nil, false
	}
	return l.vals.At(int(l.at[i])), true
}

// GetMany reads, through the view, the value of the rows sel of a batch whose
// memcomparable pks are pks and whose vnodes are vns (both indexed by row), and
// leaves them in out (Value(row)); rows not in sel read as missing. Each row reads
// what Get would read before the batch is applied: the actor's own unsealed writes,
// else the view's sealed runs, else the committed data. A sealed run is searched only
// in the key's vnode, and not at all for a key above the run's last key of that vnode
// (the new pk of an ascending writer). The committed data is read with one pebble
// iterator, the keys in ascending order: a batch whose key range holds nothing
// committed (a view being built) costs one seek, and a key the table lacks is
// settled by the sstables' bloom filters (see readCommitted).
func (s *StateTable) GetMany(view *View, vns []uint16, pks *vec.Bytes, sel []int32, out *Lookup) error {
	n := pks.Len()
	if cap(out.at) < n {
		out.at = make([]int32, n)
	}
	out.at = out.at[:n]
	for i := range out.at {
		out.at[i] = -1
	}
	out.vals.Reset()
	out.keys.Reset()
	out.wait = out.wait[:0]
	if view == nil || view.snap == nil {
		return fmt.Errorf("storage: get: table %s: the view is released", s.t.Name)
	}
	for _, i := range sel {
		if !s.vnodes.Contains(vns[i]) {
			return fmt.Errorf("storage: get: table %s: vnode %d is not owned by this actor", s.t.Name, vns[i])
		}
		out.keys.Data = AppendKey(out.keys.Data, s.id, vns[i], pks.At(int(i)))
		out.keys.Commit()
	}
	runs := view.runs[s.id]
	out.cur = append(out.cur[:0], make([]int, len(runs))...)
	out.span = append(out.span[:0], make([]vnodeSpan, len(runs))...)
	sorted := true
	var vi *vnodeItems // the memtable's items of vnode viOf
	var top []byte     // s.top of vnode viOf
	viOf := -1
	for k, i := range sel {
		key := out.keys.At(k)
		if k > 0 && bytes.Compare(out.keys.At(k-1), key) > 0 {
			clear(out.cur) // keys out of order: the cursors start again
		}
		if v := int(vns[i]); v != viOf {
			vi, viOf = s.mt.vnode(vns[i]), v
			for r, run := range runs {
				out.span[r].start, out.span[r].end = run.span(vns[i])
			}
			if s.sole {
				var err error
				if top, err = s.vnodeTop(vns[i]); err != nil {
					return fmt.Errorf("storage: get: table %s vnode %d: %w", s.t.Name, v, err)
				}
			}
		}
		if s.sole && bytes.Compare(key, top) > 0 && (vi == nil || bytes.Compare(key, vi.max) > 0) {
			out.absent++ // above all the vnode holds: nothing to read
			continue
		}
		e, ok := s.mt.getIn(vi, key)
		for r := len(runs) - 1; r >= 0 && !ok; r-- {
			// Only the run's entries of the key's vnode, and none when the key is
			// above them all (a new pk of an ascending writer).
			sp := out.span[r]
			es := runs[r].entries[:sp.end]
			if sp.start == sp.end || bytes.Compare(key, es[sp.end-1].key) > 0 {
				continue
			}
			j := seekFrom(es, max(out.cur[r], sp.start), key)
			out.cur[r] = j
			if j < len(es) && bytes.Equal(es[j].key, key) {
				e, ok = es[j], true
			}
		}
		if !ok {
			if w := len(out.wait); w > 0 && bytes.Compare(out.keys.At(int(out.wait[w-1])), key) > 0 {
				sorted = false
			}
			out.wait = append(out.wait, int32(k))
			continue
		}
		if !e.del {
			out.found(i, e.value)
		}
	}
	if len(out.wait) == 0 {
		return nil
	}
	if !sorted {
		slices.SortFunc(out.wait, func(a, b int32) int { return bytes.Compare(out.keys.At(int(a)), out.keys.At(int(b))) })
	}
	if err := s.readCommitted(view, sel, out); err != nil {
		return fmt.Errorf("storage: get: table %s: %w", s.t.Name, err)
	}
	return nil
}

// vnodeTop returns s.top of vnode v (of a sole writer), finding it at the vnode's first
// lookup: the
// largest key of the vnode in the store's committed data and in the node's sealed runs
// of the table, as they are now (not as a view saw them: the run a pebble ingest
// commits is dropped from the node only after, under the lock held here, so no key is
// in neither). The vnode's earlier owners' writes were committed before the actor
// read (its first barrier waits for that), and from then on only the actor writes it,
// each seal raising top (Seal).
func (s *StateTable) vnodeTop(v uint16) ([]byte, error) {
	if t, ok := s.top[v]; ok {
		return t, nil
	}
	st := s.node.store
	st.viewMu.RLock()
	defer st.viewMu.RUnlock()
	if err := st.usable(); err != nil {
		return nil, err
	}
	lo := AppendKey(nil, s.id, v, nil)
	it, err := st.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return nil, err
	}
	var top []byte
	if it.Last() {
		top = append([]byte(nil), it.Key()...)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, err
	}
	for _, r := range s.node.runs[s.id] {
		if start, end := r.span(v); end > start && bytes.Compare(r.entries[end-1].key, top) > 0 {
			top = r.entries[end-1].key
		}
	}
	if s.top == nil {
		s.top = map[uint16][]byte{}
	}
	s.top[v] = top
	return top, nil
}

// seekFrom returns the index of the first of the sorted entries es at or after key,
// given that every entry before from sorts before key: it gallops from from, so that
// ascending keys cost a comparison each where they fall between two entries, and a
// binary search of the gap they skip otherwise.
func seekFrom(es []entry, from int, key []byte) int {
	if from >= len(es) || bytes.Compare(es[from].key, key) >= 0 {
		return from
	}
	lo, step := from, 1 // es[lo] < key
	hi := lo + step
	for hi < len(es) && bytes.Compare(es[hi].key, key) < 0 {
		lo, step = hi, 2*step
		hi = lo + step
	}
	hi = min(hi, len(es)) // the answer is in (lo, hi]
	return lo + 1 + sort.Search(hi-lo-1, func(i int) bool { return bytes.Compare(es[lo+1+i].key, key) >= 0 })
}

// readCommitted reads the keys of out.wait (sorted) from the view's pebble snapshot,
// with one iterator over their range.
//
// The iterator first stands on the first committed key of the range (the frontier):
// the keys before it are missing and a key on it is found, without another read, so a
// batch whose range holds nothing committed (a view being built) costs one seek. Each
// key past the frontier is then a prefix seek, which consults the bloom filters of
// every level's sstables, the last level's included (pebble's Get skips those, and
// reads a data block for each key it lacks): a missing key, such as the new pk of an
// insert, is settled without reading a block. Seeking each key with SeekGE instead
// would read a block per level and step over every key the snapshot does not see
// (those committed since), between the key and the next one it sees.
func (s *StateTable) readCommitted(view *View, sel []int32, out *Lookup) error {
	lo := out.keys.At(int(out.wait[0]))
	out.hi = append(append(out.hi[:0], out.keys.At(int(out.wait[len(out.wait)-1]))...), 0)
	out.opts = pebble.IterOptions{LowerBound: lo, UpperBound: out.hi, UseL6Filters: true}
	it, err := view.snap.NewIter(&out.opts)
	if err != nil {
		return err
	}
	defer func() { out.opts = pebble.IterOptions{} }()
	if !it.First() {
		return errors.Join(it.Error(), it.Close()) // nothing committed in the range
	}
	w := out.wait
	for ; len(w) > 0; w = w[1:] {
		c := bytes.Compare(out.keys.At(int(w[0])), it.Key())
		if c > 0 {
			break
		}
		if c == 0 {
			val, err := it.ValueAndErr()
			if err != nil {
				return errors.Join(err, it.Close())
			}
			out.found(sel[w[0]], val)
		}
	}
	for _, k := range w {
		key := out.keys.At(int(k))
		// The prefix is the whole key: a positioned iterator stands on it.
		if !it.SeekPrefixGE(key) || !bytes.Equal(it.Key(), key) {
			if err := it.Error(); err != nil {
				return errors.Join(err, it.Close())
			}
			continue
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return errors.Join(err, it.Close())
		}
		out.found(sel[k], val)
	}
	return errors.Join(it.Error(), it.Close())
}
