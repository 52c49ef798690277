// Package engine is Weir's runtime: actors, exchange and dispatchers, the barrier
// coordinator, checkpoints, recovery, rescaling, pause/resume/throttle and progress.
// It is being built up (issue 4); dispatch.go holds the dispatchers.
package engine
