// Package vnode is Weir's data placement: which vnode a row belongs to, sets of vnodes,
// and which actor owns which vnode.
//
// # Hashing
//
// A table's rows are spread over its vnode count (DefaultCount unless declared, at most
// MaxCount) by OfKey: xxhash64 of the canonical encoding of the row's distribution key
// (the memcomparable encoding of package vec, every column ASC NULLS FIRST), mod the
// count. Persisted data is keyed by vnode, so this function never changes:
// testdata/golden.txt pins its output for keys of every shape, and the test fails if
// either the encoding or the hash moves. Generated and generic kernels (vec.Kernels.Vnodes)
// compute the same thing for whole chunks.
//
// # Bitmaps
//
// Bitmap is a set of vnodes over a fixed vnode count, backed by a roaring bitmap: what
// an actor owns, what a backfill has completed. Build once, then share read-only (see
// the type for the goroutine rules). MarshalBinary writes a version byte, the vnode
// count and the roaring portable format; UnmarshalBitmap checks all of it and returns an
// error, never a panic, on bad input (the FuzzUnmarshalBitmap target holds it to that).
//
// # Mappings
//
// Mapping gives each vnode its actor. EvenSplit makes the contiguous, balanced mapping of
// a new fragment; Rebalance moves a fragment from one actor count to another, keeping
// the result balanced while moving the fewest vnodes possible (the proof is on
// Rebalance, and the tests compare against brute force). Mapping.Bitmaps turns a
// mapping into each actor's bitmap: disjoint, covering every vnode.
//
// # Files
//
//   - hash.go: Vnode, DefaultCount, MaxCount, OfKey and CheckCount.
//   - bitmap.go: Bitmap and its set operations.
//   - codec.go: Bitmap's MarshalBinary and UnmarshalBitmap.
//   - mapping.go: Mapping, EvenSplit, Rebalance and Bitmaps.
package vnode
