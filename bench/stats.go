package bench

import (
	"math"
	"os"
	"runtime/debug"
	"time"
)

// RatioStats summarises the ratios of paired builds: rep i's arrangement seconds ÷ rep
// i's no-shuffle seconds, two builds run one after the other (their order alternating
// by rep), so that both met much the same load on the machine (in busy mode each
// kind's writer runs at its own rate unless --busy-rate sets one). Medians of each
// kind (the headline ratio) hide how much the pairs disagree; these figures show it.
type RatioStats struct {
	// Pairs is each rep's ratio, in rep order.
	Pairs []float64 `json:"pair_ratios"`
	// GeoMean is the geometric mean of Pairs.
	GeoMean float64 `json:"geomean"`
	// CI95 is the 95% confidence interval of GeoMean: Student's t over the pairs' log
	// ratios, taken back to ratios. Absent with fewer than two pairs. An interval
	// that holds 1.0 means these builds cannot tell the two kinds apart.
	CI95 *[2]float64 `json:"ci95,omitempty"`
}

// pairedRatios returns the statistics of a[i] ÷ b[i] over the pairs both slices hold,
// or nil when there is none or a time is not positive.
func pairedRatios(a, b []float64) *RatioStats {
	n := min(len(a), len(b))
	if n == 0 {
		return nil
	}
	s := &RatioStats{Pairs: make([]float64, n)}
	logs := make([]float64, n)
	var sum float64
	for i := range n {
		if !(a[i] > 0 && b[i] > 0) {
			return nil
		}
		s.Pairs[i] = a[i] / b[i]
		logs[i] = math.Log(s.Pairs[i])
		sum += logs[i]
	}
	mean := sum / float64(n)
	s.GeoMean = math.Exp(mean)
	if n < 2 {
		return s
	}
	var ss float64
	for _, l := range logs {
		ss += (l - mean) * (l - mean)
	}
	half := tQuantile975(n-1) * math.Sqrt(ss/float64(n-1)/float64(n))
	s.CI95 = &[2]float64{math.Exp(mean - half), math.Exp(mean + half)}
	return s
}

// t975 is the 0.975 quantile of Student's t distribution for 1 to 30 degrees of
// freedom (the two-sided 95% interval's factor).
var t975 = [...]float64{
	12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
}

// tQuantile975 is t975 for df degrees of freedom (df >= 1); past 30 it keeps 30's
// factor, which widens the interval slightly (the exact factor falls to 1.960).
func tQuantile975(df int) float64 {
	return t975[min(df, len(t975))-1]
}

// settleMemory collects the garbage and returns the freed heap to the operating system
// (debug.FreeOSMemory), so that every timed build starts from the same state of the
// process's memory. Without it a build inherited the pages of the one before: the Go
// runtime gives freed memory back only gradually, so a build after a larger one found
// its heap already mapped, and one after a smaller one took a page fault for each page
// it grew by, which made a build's time depend on which kind ran before it.
func settleMemory() { debug.FreeOSMemory() }

// processCPU is the CPU time (user and system) the process has used so far.
func processCPU() time.Duration {
	cpu, _ := processUsage()
	return cpu
}

// runtimeEnv returns those of GODEBUG, GOMEMLIMIT and GLIBC_TUNABLES that are set
// (nil when none is).
func runtimeEnv() map[string]string {
	var env map[string]string
	for _, k := range []string{"GODEBUG", "GOMEMLIMIT", "GLIBC_TUNABLES"} {
		if v, ok := os.LookupEnv(k); ok {
			if env == nil {
				env = map[string]string{}
			}
			env[k] = v
		}
	}
	return env
}

// PairedRatios is the statistics of a[i] ÷ b[i] over the pairs both slices hold (see
// RatioStats), or nil when there is none or a time is not positive: for a benchmark
// that pairs its own runs, such as weir bench cluster.
func PairedRatios(a, b []float64) *RatioStats { return pairedRatios(a, b) }
