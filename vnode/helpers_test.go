package vnode

import (
	"flag"
	"math/rand/v2"
	"testing"
)

var (
	rewrite  = flag.Bool("rewrite", false, "regenerate testdata/golden.txt from the current code (only for an intended change)")
	seedFlag = flag.Uint64("seed", 0, "seed of the randomized tests (0: the fixed default)")
)

// defaultSeed makes every run of the randomized tests the same unless -seed says
// otherwise.
const defaultSeed = 0x5EED_0F_0BB_902

// testRand returns the seeded generator of a randomized test and its seed, which the
// test logs and puts in every failure message.
func testRand(t testing.TB) (*rand.Rand, uint64) {
	t.Helper()
	seed := uint64(defaultSeed)
	if *seedFlag != 0 {
		seed = *seedFlag
	}
	t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15)), seed
}
