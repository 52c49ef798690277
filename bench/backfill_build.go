package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2"
	"github.com/seed04fbb902/weir/engine"
)

// buildResult is one timed build.
type buildResult struct {
	seconds, cores float64
	snapshotRows   int64
	barrierBatches int64
	faults         int64   // minor page faults during the build
	gcs            uint32  // garbage collections during the build
	rate           float64 // the busy writer's target rows/s (0: idle)
	inserted       int64
	// checkpoints committed during the build, and the seconds their commits took
	checkpoints       int
	checkpointSeconds float64
	barrierSeconds    float64 // the rounds' barrier latencies, summed
	lsm               lsmDelta
}

// add records build r as the next rep of its kind and mode.
func (bb *BackfillBuilds) add(r buildResult) {
	bb.Seconds = append(bb.Seconds, r.seconds)
	bb.CoresUsed = append(bb.CoresUsed, r.cores)
	bb.SnapshotRows = append(bb.SnapshotRows, r.snapshotRows)
	bb.BarrierBatches = append(bb.BarrierBatches, r.barrierBatches)
	bb.Checkpoints = append(bb.Checkpoints, r.checkpoints)
	bb.CheckpointSeconds = append(bb.CheckpointSeconds, r.checkpointSeconds)
	bb.BarrierSeconds = append(bb.BarrierSeconds, r.barrierSeconds)
	bb.MinorFaults = append(bb.MinorFaults, r.faults)
	bb.GCs = append(bb.GCs, r.gcs)
	bb.IngestedTables = append(bb.IngestedTables, r.lsm.ingestedTables)
	bb.IngestedBytes = append(bb.IngestedBytes, r.lsm.ingestedBytes)
	bb.IngestedBytesL0 = append(bb.IngestedBytesL0, r.lsm.ingestedBytesL0)
	bb.FlushableIngests = append(bb.FlushableIngests, r.lsm.flushableIngests)
	bb.FlushedBytes = append(bb.FlushedBytes, r.lsm.flushedBytes)
	bb.CompactedBytes = append(bb.CompactedBytes, r.lsm.compactedBytes)
	bb.CacheHits = append(bb.CacheHits, r.lsm.cacheHits)
	bb.CacheMisses = append(bb.CacheMisses, r.lsm.cacheMisses)
	if r.rate > 0 {
		bb.Inserted = append(bb.Inserted, r.inserted)
		bb.InsertedPerSec = append(bb.InsertedPerSec, float64(r.inserted)/r.seconds)
	}
}

// lsmDelta is what a build did to the store's LSM (see BackfillBuilds).
type lsmDelta struct {
	ingestedTables, ingestedBytes, ingestedBytesL0, flushedBytes, compactedBytes uint64
	flushableIngests, cacheHits, cacheMisses                                     uint64
}

// lsmTotals reads the cumulative counters of m that lsmDelta differences. It sums
// the levels itself: pebble's Metrics.Total counts the WAL and ingests as flushed.
func lsmTotals(m *pebble.Metrics) lsmDelta {
	var d lsmDelta
	for i := range m.Levels {
		l := &m.Levels[i]
		d.ingestedTables += l.TablesIngested
		d.ingestedBytes += l.TableBytesIngested
		d.flushedBytes += l.TableBytesFlushed
		d.compactedBytes += l.TableBytesCompacted
	}
	d.ingestedBytesL0 = m.Levels[0].TableBytesIngested
	d.flushableIngests = m.Flush.AsIngestCount
	d.cacheHits, d.cacheMisses = uint64(m.BlockCache.Hits), uint64(m.BlockCache.Misses)
	return d
}

func (d lsmDelta) sub(o lsmDelta) lsmDelta {
	return lsmDelta{d.ingestedTables - o.ingestedTables, d.ingestedBytes - o.ingestedBytes,
		d.ingestedBytesL0 - o.ingestedBytesL0, d.flushedBytes - o.flushedBytes, d.compactedBytes - o.compactedBytes,
		d.flushableIngests - o.flushableIngests, d.cacheHits - o.cacheHits, d.cacheMisses - o.cacheMisses}
}

// build opens an engine on a fresh checkpoint of the golden store, times the
// creation of a pass-through view over bid by backfill kind (with a writer inserting
// rate rows/s meanwhile when rate > 0), checks its job, drops it and closes.
//
// The build runs under the profiler label weir_build (kind and mode, such as
// "arrangement_idle"), which the engine's goroutines and pebble's inherit, as the
// engine is opened inside it: go tool pprof -tagfocus 'weir_build=^arrangement_idle$'
// FILE shows those builds (warm-ups included) and nothing else.
func (b *backfillBench) build(ctx context.Context, kind engine.BackfillKind, rate float64) (res buildResult, err error) {
	mode := modeIdle
	if rate > 0 {
		mode = modeBusy
	}
	pprof.Do(ctx, pprof.Labels("weir_build", kindName(kind)+"_"+mode), func(ctx context.Context) {
		res, err = b.buildLabeled(ctx, kind, rate)
	})
	return res, err
}

func (b *backfillBench) buildLabeled(ctx context.Context, kind engine.BackfillKind, rate float64) (res buildResult, err error) {
	b.builds++
	settleMemory()
	dir := filepath.Join(b.dir, fmt.Sprintf("build-%d", b.builds))
	if err := b.golden.DB().Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return res, fmt.Errorf("bench: backfill: clone the store: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); err == nil && rerr != nil {
			err = rerr
		}
	}()
	// The checkpoints of the timed build: rounds that end while CreateMV runs.
	var ckMu sync.Mutex
	timing := false
	onBarrier := func(bs engine.BarrierStats) {
		ckMu.Lock()
		defer ckMu.Unlock()
		if timing {
			res.barrierSeconds += bs.Latency.Seconds()
		}
		if timing && bs.Checkpoint {
			res.checkpoints++
			res.checkpointSeconds += bs.CheckpointDuration.Seconds()
		}
	}
	e, err := engine.Open(ctx, dir, engine.Options{BarrierInterval: b.o.BarrierInterval, BackfillWorkers: b.o.Workers,
		BackfillMemoryBudget: b.o.MemoryBudget, Logger: b.log, OnBarrier: onBarrier, Mem: b.buildMem()})
	if err != nil {
		return res, fmt.Errorf("bench: backfill: %w", err)
	}
	defer func() {
		if cerr := e.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("bench: backfill: %w", cerr)
		}
	}()
	const view = "bid_view"
	var w *busyWriter
	if rate > 0 {
		w = startBusyWriter(ctx, e, b.o.Rows, rate)
	}
	ckMu.Lock()
	timing = true
	ckMu.Unlock()
	m0 := e.StorageMetrics()
	if m0 == nil {
		return res, fmt.Errorf("bench: backfill: %s build: the engine closed before the build", kindName(kind))
	}
	lsm0 := lsmTotals(m0)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0, faults0 := processUsage()
	t0 := time.Now()
	err = e.CreateMV(ctx, view, engine.Scan(b.table.Name), engine.MVOptions{Backfill: kind, Parallelism: b.o.Parallelism})
	wall := time.Since(t0)
	cpu1, faults1 := processUsage()
	cpu := cpu1 - cpu0
	runtime.ReadMemStats(&ms1)
	res.faults, res.gcs = faults1-faults0, ms1.NumGC-ms0.NumGC
	if m := e.StorageMetrics(); m != nil {
		res.lsm = lsmTotals(m).sub(lsm0)
	}
	ckMu.Lock()
	timing = false
	ckMu.Unlock()
	if w != nil {
		res.inserted, res.rate = w.stop(), rate
		if err == nil {
			err = w.err
		}
	}
	if err != nil {
		return res, fmt.Errorf("bench: backfill: %s build: %w", kindName(kind), err)
	}
	res.seconds, res.cores = wall.Seconds(), cpu.Seconds()/wall.Seconds()
	var job *engine.JobProgress
	for _, p := range e.Progress() {
		if p.Name == view {
			job = &p
		}
	}
	switch {
	case job == nil || !job.Done:
		return res, fmt.Errorf("bench: backfill: %s build: the job is not done after CreateMV: %+v", kindName(kind), job)
	case rate == 0 && job.RowsConsumed != int64(b.o.Rows), job.RowsConsumed < int64(b.o.Rows):
		// Idle, the snapshot is exactly the loaded rows: any other count means they
		// are not the engine's bid table (a wrong table id).
		return res, fmt.Errorf("bench: backfill: %s build read %d snapshot rows, want %d", kindName(kind), job.RowsConsumed, b.o.Rows)
	}
	res.snapshotRows = job.RowsConsumed
	for _, a := range job.Actors {
		res.barrierBatches += a.ReadyTaken + a.StopFlushed
	}
	if b.o.Verify {
		if err := verifyView(ctx, e, view, int64(b.o.Rows)+res.inserted); err != nil {
			return res, fmt.Errorf("bench: backfill: %s build: %w", kindName(kind), err)
		}
	}
	if err := e.DropMV(ctx, view); err != nil {
		return res, fmt.Errorf("bench: backfill: %w", err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		return res, fmt.Errorf("bench: backfill: %w", err)
	}
	return res, nil
}

// verifyView takes a checkpoint and counts the rows of view.
func verifyView(ctx context.Context, e *engine.Engine, view string, want int64) error {
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		return err
	}
	rr, err := e.Scan(ctx, view)
	if err != nil {
		return err
	}
	defer rr.Release()
	var n int64
	for rr.Next() {
		n += rr.RecordBatch().NumRows()
	}
	if err := rr.Err(); err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("view %s holds %d rows, want %d (loaded and inserted)", view, n, want)
	}
	return nil
}

// busyWriter inserts new bid rows at a fixed rate, paced by the wall clock.
type busyWriter struct {
	done     chan struct{}
	finished chan struct{}
	inserted int64
	err      error
}

// busyTick is how often the busy writer inserts the rows due.
const busyTick = 10 * time.Millisecond

// busyMaxBatch is the most rows of one insert; a writer behind its rate inserts
// several batches in a row.
const busyMaxBatch = 1024

// startBusyWriter inserts rows from start on (BidChunk, seed 1: new pks for a table
// loaded with start rows, among the loaded ones in key order) at rate rows/s until
// stop.
func startBusyWriter(ctx context.Context, e *engine.Engine, start int, rate float64) *busyWriter {
	w := &busyWriter{done: make(chan struct{}), finished: make(chan struct{})}
	mem := memory.NewGoAllocator()
	go func() {
		defer close(w.finished)
		tick := time.NewTicker(busyTick)
		defer tick.Stop()
		t0 := time.Now()
		for {
			select {
			case <-w.done:
				return
			case <-ctx.Done():
				w.err = ctx.Err()
				return
			case <-tick.C:
			}
			due := int64(rate*time.Since(t0).Seconds()) - w.inserted
			for due > 0 {
				n := int(min(due, busyMaxBatch))
				c := BidChunk(mem, start+int(w.inserted), n, 1)
				err := e.Insert(ctx, "bid", c.Record())
				c.Release()
				if err != nil {
					w.err = fmt.Errorf("busy writer: %w", err)
					return
				}
				w.inserted += int64(n)
				due -= int64(n)
				select {
				case <-w.done:
					return
				default:
				}
			}
		}
	}()
	return w
}

// stop stops the writer and returns the rows it inserted.
func (w *busyWriter) stop() int64 {
	close(w.done)
	<-w.finished
	return w.inserted
}
