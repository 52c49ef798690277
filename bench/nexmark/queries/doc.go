// Package queries defines the five Nexmark queries Weir is measured on (q0, q4, q7, q8,
// q16): their output columns, their SQL for the PostgreSQL and DuckDB peers, a batch
// evaluation in plain Go (the oracle every engine's result is compared with), and the
// canonical row form and multiset comparison those comparisons use.
package queries
