// Package vectest holds helpers for the tests of vec and of the packages built on it:
// seeded random tables and chunks (RandomTable, RandomChunk), comparison of chunks and
// records that names the first differing column and row (ChunksEqual, RecordsEqual), a
// typed pk comparison that is independent of the key codec (ComparePK), builders and
// records for a table's columns (BuildersFor, FinishRecord, Project), and the -seed
// flag (Seed).
//
// Every randomized test takes its generator from Seed (or Rand) and names the seed in
// its failure messages, so that any failure reproduces with -seed=N.
//
// Files: random.go (random tables, chunks, ops and values), compare.go (comparisons
// and the changelog check), builders.go (builders and records of a table's columns),
// seed.go (the -seed flag).
package vectest
