// Package queries defines the five Nexmark queries Weir is measured on (q0, q4, q7, q8,
// q16): their output columns, their SQL for the PostgreSQL and DuckDB peers, a batch
// evaluation in plain Go (the oracle every engine's result is compared with), and the
// canonical row form and multiset comparison those comparisons use.
//
// Files:
//
//   - queries.go: Query (columns, SQL for each peer, float tolerance), All and ByName.
//   - oracle.go: Tables and Eval, the batch evaluation of each query in plain Go.
//   - rows.go: Row, Canon (Arrow records to canonical rows) and Diff, the multiset
//     comparison.
package queries
