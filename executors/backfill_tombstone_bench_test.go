//go:build unix

package executors_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/seed04fbb902/weir/executors"
)

// processCPU is the CPU time (user and system) the process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBackfillThrottledTombstoneRuns: an arrangement backfill throttled to 1 row/s
// over 400,000 keys of which one in 25,000 is live, so that each of the 8 vnodes is
// runs of thousands of deleted keys between one to four live ones. The deletes are
// sealed on the node and not committed, so that the read merges them as a run: with
// them committed, pebble's compaction of the deletes takes most of the CPU during the
// timed barriers instead. An op is a barrier after 30ms of reading; the CPU the whole
// process used, per barrier, is the read's work while it waits for tokens
// (cpu-ns/barrier). A read that moved past its last row before it waited skipped a
// run of deleted keys that a stop in the wait then threw away, and the next epoch's
// read skipped it again:
//
//	go test -run '^$' -bench ThrottledTombstone -benchtime 100x -count 3 ./executors/
func BenchmarkBackfillThrottledTombstoneRuns(b *testing.B) {
	mem := memory.NewGoAllocator()
	tab := fairTable()
	store, node := tombstoneUpstream(b, mem, tab, 400_000, 25_000, false)
	defer store.Close()
	in := &scripted{tab: tab, c: make(chan executors.Message, 4)}
	one := int64(1)
	bf := localBackfill(b, in, tab, node, mem, &one)
	defer bf.Close()
	ctx := context.Background()
	passBarrier(b, ctx, bf, in, 1, nil, nil) // passed on, then progress is loaded
	passBarrier(b, ctx, bf, in, 2, nil, nil) // the reads from here on see the deletes
	prev := executors.Epoch(3)
	var cpu0 time.Duration
	for i := 0; b.Loop(); i++ {
		if i == 0 {
			cpu0 = processCPU(b)
		}
		time.Sleep(30 * time.Millisecond)
		passBarrier(b, ctx, bf, in, prev, nil, nil)
		prev++
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/barrier")
	b.ReportMetric(float64(bf.Stats().Rows), "rows")
}
