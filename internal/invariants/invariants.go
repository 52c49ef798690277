// Package invariants holds build-time switches for tests and expensive checks, as
// pebble's internal/invariants does: constants, so that code behind them costs
// nothing when they are off. race_on.go and race_off.go set RaceEnabled by the race
// build tag.
package invariants

// RaceEnabled reports whether the binary was built with the race detector (-race),
// which slows the seeded simulations and loops down by an order of magnitude: they
// run fewer seeds or rounds under it.
const RaceEnabled = raceEnabled
