// Package vec is Weir's vector layer: the chunk (an Arrow record batch with an op per
// row and a visibility bitmap), the memcomparable key codec, the row value codec, the
// generic (run-time schema) kernels, and the registry through which generated kernels
// replace them.
//
// Encodings defined here decide where and how persisted data lives; they are pinned by
// golden tests and never change without a format version bump.
//
// # Files
//
//   - chunk.go: Op and Chunk (record, ops, visibility), reference counted.
//   - kernels.go: the Kernels interface (typed operations on one table's rows),
//     Positions and the Marker of a backfill, RowDecoder and BatchDecoder, and the
//     registry (Register, Lookup, For) through which generated kernels replace the
//     generic ones; CheckChunk.
//   - generic.go: Generic, the kernels of a table known only at run time.
//   - keycodec.go: the memcomparable key codec, column by column.
//   - value.go: the row value format: Layout, CheckValue, ValueWriter.
//   - builder.go: ChunkBuilder, which builds chunks of a run-time schema from Go values.
//   - varbuilder.go: the decode builders (Builder, NewBuilder) and VarBuilder, the
//     string and binary builder of generated decoders and builders.
//   - bytes.go: Bytes, a reusable arena of keys or values of a batch.
//   - split.go: SplitByDest (a chunk's rows by vnode → output) and RepairUpdatePairs.
//   - vnode.go: VnodeOf, the vnode of a distribution key's canonical encoding.
//   - pool.go: PoolAllocator, the pooled memory.Allocator of hot paths, and its Uninit
//     allocator.
//   - nullable.go: Nullable, the nullable field of a generated row struct.
//   - unsafe.go: the address of a byte slice, for the pool's alignment of buffers.
//
// Package vectest holds the test helpers built on this package.
//
// # Memcomparable keys
//
// A key is the concatenation of its columns' encodings, in key order. Each column is a
// marker byte, then (when not null) the value:
//
//   - marker: 0x01 for a value; 0x00 for NULL when nulls sort first, 0x02 when they sort
//     last. The marker is never inverted, so NULLS FIRST/LAST hold for either direction.
//   - boolean: one byte, 0 or 1.
//   - int16, int32, int64, date, timestamp, timestamptz: big-endian two's complement
//     with the sign bit flipped.
//   - float32, float64: IEEE bits; negative numbers have every bit inverted, others the
//     sign bit flipped. -0 is encoded as +0 and every NaN as the canonical NaN (bits
//     0x7FF8000000000001, float32 0x7FC00000), which sorts above +Inf, so keys that
//     compare equal encode equally; decoding rejects the encodings of -0 and of other
//     NaNs, which the encoder never writes.
//   - decimal: the 128-bit unscaled integer (the column has one fixed scale), high word
//     big-endian with the sign bit flipped, then the low word big-endian.
//   - varchar, bytea: groups of 8 bytes, each followed by a marker byte 0xFF - pad where
//     pad is the number of zero bytes that fill the last group; a full last group is
//     followed by an empty group (8 zero bytes, marker 0xF7). A prefix sorts first.
//   - DESC: every byte of the value (not the marker) is inverted.
//
// bytes.Compare of two keys equals comparing the typed rows column by column, and
// decoding returns exactly the values encoded (modulo -0 and NaN payloads).
//
// # Row values
//
// A row value holds every column of a row so that one column is reached without
// decoding the ones before it:
//
//	version (1 byte, ValueVersion) | null bitmap (ceil(ncols/8) bytes, bit set = NULL)
//	| fixed slots, one per column in column order | variable-width data
//
// Fixed-width columns take their width (schema.Type.Width) in little-endian; booleans
// one byte 0 or 1. A variable-width column's slot is a uint32 little-endian end offset
// into the variable area; its start is the end of the previous variable column (0 for the
// first). A NULL fixed column's slot is zero; a NULL variable column is empty. Every slot
// offset is a constant of the schema (see Layout), so a projected decode reads only the
// slots it needs.
package vec
