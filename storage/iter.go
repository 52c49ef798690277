package storage

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Iter iterates the rows of one vnode of a table in pk order through a view: pebble's
// committed rows overlaid with sealed runs, the newest write of each key winning and
// deleted keys hidden. Key and Value are valid until the next call to Next, ReuseIter
// or Close (they may alias pebble's or a run's memory: copy what you keep). Not safe
// for concurrent use.
type Iter struct {
	pit   *pebble.Iterator
	pok   bool
	runs  []runCursor // oldest first; a later cursor wins ties
	key   []byte
	value []byte
	err   error
	// For ReuseIter: the view and table the pebble iterator reads, and the bounds.
	view   *View
	table  uint32
	lo, hi []byte
}

type runCursor struct {
	es []entry
	i  int
}

func (c *runCursor) cur() *entry {
	if c.i < len(c.es) {
		return &c.es[c.i]
	}
	return nil
}

// IterBounds selects a range of one vnode: pk > After, or pk >= From (or from the start
// when both are nil; at most one may be set), and pk < Before (or to the end when
// Before is nil). Bounds are memcomparable pks.
type IterBounds struct {
	After  []byte
	From   []byte
	Before []byte
}

// NewIter opens an iterator over table's vnode through the view, with the view's runs
// of that table and then extra (newer) runs on top.
func (v *View) newIter(table uint32, vnode uint16, b IterBounds, extra []*run) (*Iter, error) {
	lo, hi, err := appendBounds(nil, nil, table, vnode, b)
	if err != nil {
		return nil, fmt.Errorf("storage: iterate table %d vnode %d: %w", table, vnode, err)
	}
	it, err := v.rangeIter(table, lo, hi, extra)
	if err != nil {
		return nil, fmt.Errorf("storage: iterate table %d vnode %d: %w", table, vnode, err)
	}
	return it, nil
}

// rangeIter iterates table's keys in [lo, hi) (hi nil: no upper bound) through the
// view, with extra (newer) runs on top of the view's own.
func (v *View) rangeIter(table uint32, lo, hi []byte, extra []*run) (*Iter, error) {
	if v == nil || v.snap == nil {
		return nil, errors.New("the view is released")
	}
	if emptyRange(lo, hi) {
		return &Iter{}, nil
	}
	pit, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	it := &Iter{pit: pit}
	it.pok = pit.First()
	for _, rs := range [][]*run{v.runs[table], extra} {
		for _, r := range rs {
			it.overlay(r.entries, lo, hi)
		}
	}
	return it, nil
}

// overlay adds the entries of a sorted run within [lo, hi) (hi nil: no upper bound) on
// top of the iterator's sources.
func (it *Iter) overlay(es []entry, lo, hi []byte) {
	i, j := seekEntries(es, lo), len(es)
	if hi != nil {
		j = seekEntries(es, hi)
	}
	if i < j {
		it.runs = append(it.runs, runCursor{es: es[i:j]})
	}
}

// Next moves to the next live row; false at the end or on error (see Error).
func (it *Iter) Next() bool {
	if len(it.runs) == 0 {
		// Fast path: committed data only.
		if it.key != nil {
			it.pok = it.pit.Next()
		}
		if !it.pok {
			it.err = it.pitErr()
			it.key, it.value = nil, nil
			return false
		}
		it.key, it.value = it.pit.Key(), it.pit.Value()
		if it.key == nil {
			it.key = []byte{}
		}
		return true
	}
	if it.key != nil {
		it.advancePast(it.key)
	}
	for {
		var min []byte
		if it.pok {
			min = it.pit.Key()
		}
		for i := range it.runs {
			if e := it.runs[i].cur(); e != nil && (min == nil || bytes.Compare(e.key, min) < 0) {
				min = e.key
			}
		}
		if min == nil {
			it.err = it.pitErr()
			it.key, it.value = nil, nil
			return false
		}
		// The newest source holding min decides.
		var win *entry
		for i := len(it.runs) - 1; i >= 0 && win == nil; i-- {
			if e := it.runs[i].cur(); e != nil && bytes.Equal(e.key, min) {
				win = e
			}
		}
		if win == nil {
			it.key, it.value = it.pit.Key(), it.pit.Value()
			return true
		}
		if !win.del {
			it.key, it.value = win.key, win.value
			return true
		}
		it.advancePast(min)
	}
}

// pitErr is the pebble iterator's error (none when an empty range opened none).
func (it *Iter) pitErr() error {
	if it.pit == nil {
		return nil
	}
	return it.pit.Error()
}

// advancePast moves every source positioned at key to its next key. The runs move
// first, while key (which may alias pebble's buffer) is still valid, so nothing is
// copied.
func (it *Iter) advancePast(key []byte) {
	for i := range it.runs {
		if e := it.runs[i].cur(); e != nil && bytes.Equal(e.key, key) {
			it.runs[i].i++
		}
	}
	if it.pok && bytes.Equal(it.pit.Key(), key) {
		it.pok = it.pit.Next()
	}
}

// Key is the current row's storage key.
func (it *Iter) Key() []byte { return it.key }

// PK is the current row's memcomparable pk.
func (it *Iter) PK() []byte { return it.key[KeyPrefixLen:] }

// Value is the current row's value.
func (it *Iter) Value() []byte { return it.value }

// Error is the error that ended the iteration, if any.
func (it *Iter) Error() error { return it.err }

// Close releases the iterator, and what it holds of its view.
func (it *Iter) Close() error {
	clear(it.runs)
	it.runs = it.runs[:0]
	it.view, it.key, it.value = nil, nil, nil
	if it.pit == nil {
		return it.err
	}
	err := it.pit.Close()
	it.pit = nil
	if it.err != nil {
		return it.err
	}
	return err
}

// Empty reports whether the table has no row in any of its vnodes, as its iterators
// see them through view (committed, sealed and its own unsealed rows). An operator whose
// state starts empty, as a backfilled view's does, knows every key it did not write is
// absent.
func (s *StateTable) Empty(view *View) (bool, error) {
	var it Iter
	for _, v := range s.vnodes.ToSlice() {
		if err := s.ReuseIter(view, uint16(v), IterBounds{}, &it); err != nil {
			it.Close()
			return false, err
		}
		if it.Next() {
			return false, it.Close()
		}
		if err := it.Error(); err != nil {
			it.Close()
			return false, err
		}
	}
	return true, it.Close()
}

// ReuseIter points it at vnode v within b, as Iter does, keeping its pebble iterator
// open when it is one ReuseIter opened on this table through view before (any other
// iterator, or a zero Iter, gets a new pebble iterator). A reader that iterates many
// small ranges of one view (a join probing the other side once per row) opens one
// pebble iterator instead of one per range. Key and Value are valid until the next
// Next, ReuseIter or Close. Close it when done.
func (s *StateTable) ReuseIter(view *View, v uint16, b IterBounds, it *Iter) error {
	if !s.vnodes.Contains(v) {
		return fmt.Errorf("storage: iterate: table %s: vnode %d is not owned by this actor", s.t.Name, v)
	}
	if view == nil || view.snap == nil {
		return fmt.Errorf("storage: iterate: table %s vnode %d: the view is released", s.t.Name, v)
	}
	lo, hi, err := appendBounds(it.lo[:0], it.hi[:0], s.id, v, b)
	if err != nil {
		return fmt.Errorf("storage: iterate: table %s vnode %d: %w", s.t.Name, v, err)
	}
	it.lo, it.hi = lo, hi
	it.key, it.value, it.err = nil, nil, nil
	clear(it.runs)
	it.runs = it.runs[:0]
	if it.pit != nil && (it.view != view || it.table != s.id) {
		if err := it.pit.Close(); err != nil {
			it.pit = nil
			return fmt.Errorf("storage: iterate: table %s vnode %d: %w", s.t.Name, v, err)
		}
		it.pit = nil
	}
	if emptyRange(lo, hi) {
		// Nothing to read, and the pebble iterator keeps its bounds: given a lower
		// bound above its upper one, it would stay positioned past the next bounds
		// it takes while taking them to have moved forward, and skip rows.
		it.pok = false
		return nil
	}
	if it.pit == nil {
		pit, err := view.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi}) // pebble copies the bounds
		if err != nil {
			return fmt.Errorf("storage: iterate: table %s vnode %d: %w", s.t.Name, v, err)
		}
		it.pit, it.view, it.table = pit, view, s.id
	} else {
		it.pit.SetBounds(lo, hi) // pebble copies them
	}
	it.pok = it.pit.First()
	for _, r := range view.runs[s.id] {
		it.overlay(r.entries, lo, hi)
	}
	it.overlay(s.mt.sortedVnode(v), lo, hi) // the actor's unsealed writes, newest
	return nil
}

// emptyRange reports whether [lo, hi) holds no key (hi nil: no upper bound): bounds
// such as From above Before. Pebble is never given such bounds.
func emptyRange(lo, hi []byte) bool {
	return hi != nil && bytes.Compare(lo, hi) >= 0
}

// appendBounds appends to lo and hi the storage-key bounds [lo, hi) of vnode v of a
// table within b (hi nil: none).
func appendBounds(lo, hi []byte, table uint32, v uint16, b IterBounds) ([]byte, []byte, error) {
	switch {
	case b.After != nil && b.From != nil:
		return nil, nil, fmt.Errorf("both After and From bounds")
	case b.After != nil:
		lo = append(AppendKey(lo, table, v, b.After), 0) // the successor of After
	case b.From != nil:
		lo = AppendKey(lo, table, v, b.From)
	default:
		lo = AppendKey(lo, table, v, nil)
	}
	if b.Before != nil {
		return lo, AppendKey(hi, table, v, b.Before), nil
	}
	return lo, toPrefixEnd(AppendKey(hi, table, v, nil)), nil // the end of the vnode
}
