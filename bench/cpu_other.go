//go:build !unix

package bench

import "time"

// processUsage is unknown here: CPU and fault figures are reported as 0.
func processUsage() (cpu time.Duration, minorFaults int64) { return 0, 0 }
