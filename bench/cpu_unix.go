//go:build unix

package bench

import (
	"syscall"
	"time"
)

// processUsage is the CPU time (user and system) the process has used so far, and
// the minor page faults it has taken: first touches of memory the kernel maps on
// demand (a heap that grew, or that the Go runtime gave back and uses again), each a
// trip into the kernel.
func processUsage() (cpu time.Duration, minorFaults int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), int64(ru.Minflt)
}
