//go:build !unix

package bench

import "time"

// processCPU is unknown here: CPU figures are reported as 0.
func processCPU() time.Duration { return 0 }

// processFaults is unknown here: reported as 0.
func processFaults() int64 { return 0 }
