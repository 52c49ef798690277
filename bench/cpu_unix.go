//go:build unix

package bench

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) the process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processFaults is the minor page faults the process has taken so far: first touches
// of memory the kernel maps on demand (a heap that grew, or that the Go runtime gave
// back and uses again), each a trip into the kernel.
func processFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Minflt)
}
