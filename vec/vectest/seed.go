package vectest

import (
	"flag"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"testing"
)

const seedFlagName = "seed"

// The -seed flag is defined once per test binary, by whichever package gets there
// first; Seed reads it by name, so another definition of the same flag does not break
// the binary.
func init() {
	if flag.Lookup(seedFlagName) == nil {
		flag.Uint64(seedFlagName, 0, "seed of every randomized test (default: derived from each test's name)")
	}
}

// Seed returns the seed of a randomized test: the -seed flag when it was given, and
// otherwise a value derived from the test's name (stable from run to run, different
// from test to test). It logs "seed=N" so that a failure shows how to reproduce it:
// go test -run '^TestName$' -seed=N.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed, ok := flagSeed()
	if !ok {
		h := fnv.New64a()
		h.Write([]byte(t.Name()))
		seed = h.Sum64()
	}
	t.Logf("seed=%d", seed)
	return seed
}

// SeedGiven reports whether the -seed flag was given: every randomized test (and
// subtest) then replays that one seed, so checks that a case happened somewhere
// across many seeds do not apply.
func SeedGiven() bool {
	_, ok := flagSeed()
	return ok
}

func flagSeed() (uint64, bool) {
	if !flag.Parsed() {
		return 0, false
	}
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == seedFlagName {
			set = true
		}
	})
	if !set {
		return 0, false
	}
	v, err := strconv.ParseUint(flag.Lookup(seedFlagName).Value.String(), 0, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// NewRand returns the generator randomized tests use for a seed.
func NewRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
}

// Rand is Seed followed by NewRand: the seeded generator of a test, and its seed for
// failure messages.
func Rand(t testing.TB) (*rand.Rand, uint64) {
	t.Helper()
	seed := Seed(t)
	return NewRand(seed), seed
}
