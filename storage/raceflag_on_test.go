//go:build race

package storage_test

// raceEnabled: the race detector slows pebble and the file-system clones down by an
// order of magnitude, so the heavy tests run smaller under it (see budget).
const raceEnabled = true
