// Package engine is Weir's runtime: an embedded streaming engine over one directory.
//
// The public API, by job:
//   - engine.go: Open, Close, Crash, barriers and checkpoints (Barrier,
//     WaitCheckpoint), Flush, StorageMetrics.
//   - tables.go: CreateTable, Table, and the writes (Insert, Upsert, Update, Delete).
//   - views.go: CreateMV, WaitBackfill, DropMV, RescheduleMV.
//   - controls.go: the controls of running backfills: Pause and Resume (the engine's),
//     PauseMV and ResumeMV (one view's), SetRateLimit.
//   - progress.go, vnodeprogress.go: Progress (every view's job) and VnodeProgress (one
//     view's per-vnode positions).
//   - options.go: Options, TableOptions and MVOptions, their defaults and the one place
//     that checks them.
//   - scan.go: consistent reads at the committed epoch as Arrow record readers.
//
// Planning:
//   - plan.go: the logical plan of a materialized view (scan, filter, project,
//     aggregate, join) and its JSON form, persisted in the catalog.
//   - plancheck.go: the shape checks of a plan before it is lowered (nil nodes,
//     cycles, depth).
//   - planner.go, planner_ops.go: the lowering: column pruning, the backfill node and
//     its kind, the aggregate and join nodes and their exchanges, the view's table.
//
// The runtime:
//   - catalog.go: tables and views, persisted with the checkpoints.
//   - graph.go: the coordinator's placement of fragments and actors, wired by bounded
//     channels; buildspec.go: the build specs it sends each node; node.go: a node's
//     side of a graph, which applies them and keeps the actors it built, and the
//     environment it takes from its process (nodeEnv);
//     nodebuild.go: an actor's build from its spec; actor.go: an actor's goroutine;
//     stall.go: what a slow barrier's missing actors are doing.
//   - dispatch.go, dispatch_kinds.go, merge.go: hash, broadcast, simple and no-shuffle
//     dispatchers; the merge that aligns barriers and changes inputs at Update barriers.
//   - coordinator.go: barrier rounds, checkpoints, recovery.
//   - commitlog.go: CommitLog, where checkpoints commit when the directory is a copy
//     (cluster mode's engine/cluster/commitlog); nodestores.go: a store per node
//     (Options.NodeStores), committed together through it.
package engine
