package storage

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Iter iterates the rows of one vnode of a table in pk order through a view: pebble's
// committed rows overlaid with sealed runs, the newest write of each key winning and
// deleted keys hidden. Key and Value are valid until the next call to Next (they may
// alias pebble's or a run's memory: copy what you keep). Not safe for concurrent use.
type Iter struct {
	pit   *pebble.Iterator
	pok   bool
	runs  []runCursor // oldest first; a later cursor wins ties
	hi    []byte
	key   []byte
	value []byte
	err   error
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
	prefix := VnodePrefix(table, vnode)
	lo := prefix
	switch {
	case b.After != nil && b.From != nil:
		return nil, fmt.Errorf("storage: iterate table %d vnode %d: both After and From bounds", table, vnode)
	case b.After != nil:
		lo = append(AppendKey(nil, table, vnode, b.After), 0) // the successor of After
	case b.From != nil:
		lo = AppendKey(nil, table, vnode, b.From)
	}
	hi := prefixEnd(prefix)
	if b.Before != nil {
		hi = AppendKey(nil, table, vnode, b.Before)
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
	pit, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	it := &Iter{pit: pit, hi: hi}
	it.pok = pit.First()
	for _, rs := range [][]*run{v.runs[table], extra} {
		for _, r := range rs {
			i, j := seekEntries(r.entries, lo), len(r.entries)
			if hi != nil {
				j = seekEntries(r.entries, hi)
			}
			if i < j {
				it.runs = append(it.runs, runCursor{es: r.entries[i:j]})
			}
		}
	}
	return it, nil
}

// Next moves to the next live row; false at the end or on error (see Error).
func (it *Iter) Next() bool {
	if len(it.runs) == 0 {
		// Fast path: committed data only.
		if it.key != nil {
			it.pok = it.pit.Next()
		}
		if !it.pok {
			it.err = it.pit.Error()
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
			it.err = it.pit.Error()
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

// Close releases the iterator.
func (it *Iter) Close() error {
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
