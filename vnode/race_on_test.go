//go:build race

package vnode

// raceEnabled lets the heaviest randomized tests sample less under -race, which slows
// them tenfold; the race detector is there for the concurrency tests.
const raceEnabled = true
