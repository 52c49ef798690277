// Command weir is Weir's command line: the demo (the Nexmark views built by arrangement
// backfill while events flow, with rescales, throttles, pauses and a crash), the
// benchmarks, the whole-engine simulation, status and export of an engine directory,
// an engine served over Arrow Flight, and the schemas it knows (docs/operations.md, docs/benchmarking.md, docs/testing.md).
//
// Files:
//
//   - main.go: the root command.
//   - demo.go: weir demo; progress.go its progress bars and lines, metrics.go its
//     Prometheus metrics and pprof server (--metrics-addr), demo_log.go its commit
//     log (--meta, --bucket); transport.go the --exchange and --control of the demo and
//     of weir serve.
//   - bench.go: weir bench and its profiles, bench snapshot and bench backfill;
//     bench_nexmark.go: bench nexmark.
//   - sim.go: weir sim, the simulation of package tools/sim over a range of seeds.
//   - status.go: weir status, the jobs and per-vnode progress of a directory.
//   - export.go: weir export as CSV, Parquet or Arrow; csv.go the CSV writer in
//     PostgreSQL's convention.
//   - schemas.go: weir schemas, the tables this binary has generated kernels for.
//   - serve.go: weir serve, an engine directory served over Arrow Flight (a commit
//     log's, commitlog.go, or a replica of one).
//   - cluster.go: weir cluster up and down, a local cluster of those servers.
package main
