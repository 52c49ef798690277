// Package engine is Weir's runtime: an embedded streaming engine over one directory.
//
//   - engine.go: the public API (Open, CreateTable, Insert/Upsert/Update/Delete,
//     CreateMV, DropMV, RescheduleMV, Pause, Resume, PauseMV, ResumeMV, SetRateLimit,
//     WaitCheckpoint, Progress, Close, Crash).
//   - options.go: Options, TableOptions and MVOptions, their defaults and the one
//     place that checks them.
//   - plan.go, planner.go: the logical plan of a materialized view (scan, filter,
//     project, aggregate, join) and its lowering: column pruning, the backfill node,
//     the view's table.
//   - plancheck.go: the shape checks of a plan before it is lowered (nil nodes,
//     cycles, depth).
//   - catalog.go: tables and views, persisted with the checkpoints.
//   - graph.go: fragments and actors (one goroutine each) wired by bounded channels.
//   - dispatch.go, dispatch_kinds.go, merge.go: hash, broadcast, simple and no-shuffle
//     dispatchers; the merge that aligns barriers and changes inputs at Update barriers.
//   - coordinator.go: barrier rounds, checkpoints, recovery.
//   - scan.go: consistent reads at the committed epoch as Arrow record readers.
package engine
