package vnode

import (
	"fmt"

	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// Vnode is a virtual node: the unit of data placement, ownership and backfill progress.
// A table with vnode count c has the vnodes 0..c-1.
type Vnode = uint16

// DefaultCount is the vnode count of a table that does not declare one.
const DefaultCount = schema.DefaultVnodeCount

// MaxCount is the largest vnode count a table may have. Every vnode below it fits a
// Vnode, and so does the count itself.
const MaxCount = schema.MaxVnodeCount

// OfKey returns the vnode of a row from the canonical encoding of its distribution key:
// the memcomparable encoding (package vec) of the distribution-key columns in
// distribution-key order, each ASC NULLS FIRST whatever the pk's order. It is
// xxhash64(canonical) mod count (vec.VnodeOf) and decides where persisted data lives,
// so it never changes: testdata/golden.txt pins it.
//
// count must be in 1..MaxCount (see CheckCount); OfKey does not check it.
func OfKey(canonical []byte, count int) Vnode {
	return vec.VnodeOf(canonical, count)
}

// CheckCount returns an error unless count is a valid vnode count (1..MaxCount).
func CheckCount(count int) error {
	if count < 1 || count > MaxCount {
		return fmt.Errorf("vnode count %d out of range 1..%d", count, MaxCount)
	}
	return nil
}
