//go:build race

package executors

// raceEnabled: the race detector slows the seeded simulations down by an order of
// magnitude, so they run fewer seeds under it.
const raceEnabled = true
