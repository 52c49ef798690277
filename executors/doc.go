// Package executors holds Weir's streaming executors and their contract: the messages
// that flow between them (chunks, barriers with their mutations, watermarks) and the
// Executor interface (contract.go). Every executor documents what it does with each
// kind of message.
//
//   - simple.go: Values, Filter, Project (vectorized expressions over Arrow compute).
//   - dml.go: the chunks of a table's DML path (insert, upsert, update, delete).
//   - materialize.go: writes a table's or view's state with pk conflict handling and
//     emits the exact changelog.
//   - backfill_core.go: the arrangement backfill's decisions as a state machine without
//     goroutines, clocks or I/O (DESIGN.md §6); backfill.go: the executor that drives it
//     from its input, its snapshot reads, its replicated table and its progress table
//     (also the no-shuffle baseline); spill.go: the epoch buffer that spills to disk.
package executors
