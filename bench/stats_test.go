package bench

import (
	"maps"
	"math"
	"os"
	"runtime/debug"
	"testing"
)

func TestPairedRatios(t *testing.T) {
	for _, tc := range []struct {
		name   string
		a, b   []float64
		nil_   bool
		geo    float64
		lo, hi float64 // 0, 0: no interval
		pairs  []float64
	}{
		{name: "none", nil_: true},
		{name: "zero time", a: []float64{1, 0}, b: []float64{1, 1}, nil_: true},
		{name: "negative time", a: []float64{1}, b: []float64{-1}, nil_: true},
		{name: "one pair", a: []float64{3}, b: []float64{2}, geo: 1.5, pairs: []float64{1.5}},
		{name: "equal pairs", a: []float64{2, 4}, b: []float64{1, 2}, geo: 2, lo: 2, hi: 2, pairs: []float64{2, 2}},
		// Python: exp(mean(log r)) and exp(mean ± 3.182 * stdev / sqrt(4)).
		{name: "four pairs", a: []float64{5.31, 5.01, 4.44, 4.98}, b: []float64{5.35, 5.78, 5.16, 5.09},
			geo: 0.9225159078316382, lo: 0.8168463250702911, hi: 1.0418552108062655,
			pairs: []float64{5.31 / 5.35, 5.01 / 5.78, 4.44 / 5.16, 4.98 / 5.09}},
		{name: "unequal lengths use the pairs", a: []float64{3, 9}, b: []float64{2}, geo: 1.5, pairs: []float64{1.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := pairedRatios(tc.a, tc.b)
			if tc.nil_ {
				if s != nil {
					t.Fatalf("got %+v, want nil", s)
				}
				return
			}
			near := func(what string, got, want float64) {
				if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
					t.Errorf("%s = %.12g, want %.12g", what, got, want)
				}
			}
			near("geomean", s.GeoMean, tc.geo)
			if len(s.Pairs) != len(tc.pairs) {
				t.Fatalf("pairs %v, want %v", s.Pairs, tc.pairs)
			}
			for i := range s.Pairs {
				near("pair", s.Pairs[i], tc.pairs[i])
			}
			if tc.lo == 0 {
				if s.CI95 != nil {
					t.Fatalf("interval %v, want none", *s.CI95)
				}
				return
			}
			if s.CI95 == nil {
				t.Fatal("no interval")
			}
			near("ci95 low", s.CI95[0], tc.lo)
			near("ci95 high", s.CI95[1], tc.hi)
		})
	}
}

func TestTQuantile975(t *testing.T) {
	for df, want := range map[int]float64{1: 12.706, 2: 4.303, 10: 2.228, 30: 2.042, 31: 2.042, 1000: 2.042} {
		if got := tQuantile975(df); got != want {
			t.Errorf("df %d: %v, want %v", df, got, want)
		}
	}
}

// TestCgoEnabled checks the cgo setting the backfill bench reports (builtWithCgo,
// from the cgo build constraint) against the CGO_ENABLED the go command recorded in
// this test binary's build information.
func TestCgoEnabled(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build information in this binary")
	}
	got := false
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" {
			got = s.Value == "1"
		}
	}
	if got != builtWithCgo {
		t.Fatalf("the build information says cgo %v, but builtWithCgo is %v", got, builtWithCgo)
	}
}

// TestRuntimeEnv: the variables set are reported, the others left out.
func TestRuntimeEnv(t *testing.T) {
	t.Setenv("GODEBUG", "madvdontneed=0")
	t.Setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")
	t.Setenv("GOMEMLIMIT", "") // restores the variable at cleanup; then unset it
	os.Unsetenv("GOMEMLIMIT")
	got := runtimeEnv()
	want := map[string]string{"GODEBUG": "madvdontneed=0", "GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}
	if !maps.Equal(got, want) {
		t.Fatalf("runtimeEnv() = %v, want %v", got, want)
	}
}
