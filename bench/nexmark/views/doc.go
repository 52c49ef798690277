// Package views holds the Nexmark queries Weir builds as materialized views (q0, q4,
// q7, q8 and q16), as engine plans over the tables person, auction and bid, and the
// check of a built view against its query's oracle (queries.Eval over the tables as
// committed). The benchmarks of package bench and weir demo build these views and
// check them with Verify.
//
// Files:
//
//   - plans.go: Queries, Tables, Window and Plan, each query's plan.
//   - verify.go: Rows (the committed tables), Compare and Verify, the checks.
//   - events.go: WriteEvents and PaceEvents, which write generated events into an
//     engine, at once or paced by the wall clock.
package views
