//go:build race

package sim

// raceEnabled: the race detector slows the simulation down by an order of magnitude,
// so TestSim runs fewer seeds under it.
const raceEnabled = true
