// Package testschemas holds generated kernels for a set of test schemas
// (testschemas.yaml). Its tests check the generated kernels against vec's generic ones
// on seeded random data.
//
// The tables are a pairwise design over the pk columns rather than every combination:
// a pk column has a type (the 12 kinds), a key order (asc or desc, nulls first or
// last), a nullability and its table's pk width (1 to 4), and every pair of values of
// two of these is held by at least one pk column. At each width every kind is one pk
// column (t00..t02 have 4 pk columns; t03..t05 and p3 have 3; t06..t10 and p2 have 2;
// t11..t21 and p1 have 1, one table per kind), taking a different key order at each
// width and both nullabilities across them. Every type, nullable and not, is also a
// value column of some table. The tables further cover column names that are Go
// keywords or are not Go-like, distribution keys smaller than the pk and out of its
// order, vnode counts of 1, of powers of two and of other numbers, the generated
// marker's typed fast path at every width, value layouts with and without var-width
// columns and with null bitmaps of one and two bytes, and pk columns out of column
// order. The schema file's header says which table covers what; TestPairwiseCoverage
// checks all of it.
package testschemas

//go:generate go tool weirgen -schema testschemas.yaml -pkg testschemas -out .
