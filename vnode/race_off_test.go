//go:build !race

package vnode

// raceEnabled: see race_on_test.go.
const raceEnabled = false
