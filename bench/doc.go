// Package bench holds Weir's benchmarks: the snapshot read path (a bare snapshot
// read against a raw pebble scan), the kernels under it (projected decode, mark,
// vnode, the row builders and decoders), the backfill builds (a view over the bid
// table built by arrangement backfill against no-shuffle backfill, idle and under a
// writer, and the backfill executor against a raw scan), and the Nexmark builds (the
// views of package nexmark/views built both ways, each checked against its query's
// oracle, with PostgreSQL and DuckDB as peers). weir bench runs them; their results,
// and the commands that produced them, go to bench/RESULTS.md. Ratios are measured
// within one run, with the two sides interleaved, because these machines are noisy.
//
// Files:
//
//   - load.go: BidChunk, Nexmark-shaped bid rows, and the loaders that put them in a
//     store (LoadBids, BulkLoadBids, BulkLoadBidsTable).
//   - snapshot.go: SnapshotBench, the snapshot read against the raw scan.
//   - backfill.go: RunBackfillBench, the run: the golden store, the order of the
//     builds and the efficiency passes, the results put together.
//   - backfill_results.go: BackfillBenchOptions and the results, BackfillResult and
//     the types it holds (their JSON field names are the output's).
//   - backfill_build.go: one build of a kind and mode on a clone of the golden store,
//     and the busy writer that inserts bid rows meanwhile.
//   - backfill_efficiency.go: the efficiency passes, the backfill executor with no
//     engine (fed by barrierSource) against the raw scan.
//   - nexmark.go: RunNexmarkBench, the Nexmark builds, idle and busy, and the peers'
//     runs.
//   - nexmark_rounds.go: NexmarkRound and the log of an engine's barrier rounds that
//     gives each build its own, with the cores used during each.
//   - stats.go: RatioStats (paired ratios and their confidence interval) and the
//     process's CPU time, memory settling and runtime environment.
//   - cgo_on.go, cgo_off.go: whether the binary was built with cgo.
//   - cpu_unix.go, cpu_other.go: the process's CPU time and minor page faults.
//
// The kernel benchmarks are in kernels_test.go; the figure benchmarks of the snapshot
// read in snapshot_test.go.
package bench
