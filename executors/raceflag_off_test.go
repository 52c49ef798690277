//go:build !race

package executors

const raceEnabled = false
