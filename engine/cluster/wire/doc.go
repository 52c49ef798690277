// Package wire is the binary encoding of executors.Message on a cluster exchange edge
// (docs/design.md §8): what an upstream actor's process sends a downstream actor's
// process over one Arrow Flight DoExchange stream.
//
// Every Flight message of an edge carries app metadata that starts with a two-byte
// header: the format version (Version) and the kind (Kind). A chunk's metadata holds
// its row count, ops and visibility, and its columns are the Arrow IPC record of the
// same Flight message; a barrier (with its mutation) and a watermark are metadata
// alone, with no record (or one of 0 rows). End closes an edge and Ack acknowledges a
// barrier, both metadata alone. Each Append function documents its layout.
//
// Decoding is for input from another process: an unknown version or kind, truncated
// input, a list longer than the rest of the input could hold, an out-of-range id or
// enum byte, and trailing bytes are errors naming the field, never a panic, and no
// length field makes the decoder allocate more than a constant times the input. The
// fuzz targets hold the decoders to that.
//
// # Files
//
//   - wire.go: Version, Kind and the header; AppendMessage and DecodeMessage; the
//     watermark, End and Ack; Reader, the bounds-checking field reader every decoder
//     uses (the control stream's too).
//   - chunk.go: a chunk's metadata (AppendChunkMeta, DecodeChunkMeta) and DecodeChunk,
//     which joins it to the record.
//   - barrier.go: barriers and every mutation (AppendBarrier, DecodeBarrier).
package wire
