package vec

import "github.com/cespare/xxhash/v2"

// VnodeOf maps the canonical encoding of a row's distribution key to its vnode:
// xxhash64(canonical) mod count. The canonical encoding is the memcomparable key of the
// distribution-key columns in distribution-key order, each ASC NULLS FIRST whatever the
// pk's order (so a row's vnode depends only on its values). This decides where
// persisted data lives: golden vectors in package vnode pin it.
func VnodeOf(canonical []byte, count int) uint16 {
	return uint16(xxhash.Sum64(canonical) % uint64(count))
}
