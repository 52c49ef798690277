// Package executors holds Weir's streaming executors and their contract: the messages
// that flow between them (chunks, barriers with their mutations, watermarks) and the
// Executor interface (contract.go). Every executor documents what it does with each
// kind of message.
//
// The contract and what every executor shares:
//   - contract.go: the Executor interface; message.go: messages, barriers and their
//     mutations; epoch.go: epochs.
//   - state.go: what a stateful executor does with its state tables across barriers
//     (seal, view per epoch, the first barrier's commit wait); closeonce.go: the
//     idempotent Close; rowkeys.go: the key columns of a chunk encoded as a key, with
//     their vnodes.
//
// Expressions:
//   - expr.go: columns, literals, calls of Arrow compute functions; scalar.go: the
//     timestamp functions and BETWEEN that Arrow compute lacks; window.go: the
//     tumbling window bounds.
//
// Executors:
//   - simple.go: Values, Filter, Project (vectorized expressions over Arrow compute).
//   - dml.go: the chunks of a table's DML path (insert, upsert, update, delete).
//   - materialize.go: writes a table's or view's state with pk conflict handling and
//     emits the exact changelog.
//   - hashagg.go: the retractable GROUP BY (HashAgg): its configuration,
//     construction and message loop, and the chunks folded into their groups (cached,
//     or read back from its state); hashagg_state.go: its checks, state tables, multiset slots and output schema;
//     hashagg_funcs.go: the aggregate functions, their per-group states and
//     multisets; hashagg_barrier.go: its barrier (changelog, state writes, output
//     chunks).
//   - hashjoin.go: the inner equi-join of two inputs (HashJoin); hashjoin_state.go:
//     its state tables and output schema.
//   - backfill_core.go: the arrangement backfill's decisions as a state machine without
//     goroutines, clocks or I/O (docs/design.md §6); backfill.go: the executor that
//     drives it (its configuration, stats, construction and message loop; also the
//     no-shuffle baseline); backfill_read.go: its snapshot reads, its upstream and
//     its rate limiter; backfill_barrier.go: its barrier (the read's ready batches,
//     replication, progress, mutations); spill.go: the epoch buffer that spills to
//     disk.
package executors
