package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
)

// Q0 is Nexmark q0's projection of bid (auction, bidder, price, date_time): the S2 of
// the snapshot-read benchmark, 4 of bid's 7 columns.
var Q0 = vec.Projection{tables.BidColAuction, tables.BidColBidder, tables.BidColPrice, tables.BidColDateTime}

// SnapshotBench is a store of bid rows on the real disk, loaded once and measured
// many times: the snapshot read path (vnodes to decoded Q0 Arrow batches) against a
// raw pebble scan of the same vnodes.
type SnapshotBench struct {
	Rows        int
	LoadSeconds float64
	dir         string
	store       *storage.Store
	table       *schema.Table
	vnodes      []uint16
	mem         memory.Allocator
	allocator   string
	opts        SnapshotBenchOptions // as filled by NewSnapshotBench
}

// SnapshotBenchOptions configures NewSnapshotBench.
type SnapshotBenchOptions struct {
	Rows int    // bid rows to load (required)
	Dir  string // parent of the store's temporary directory; "": the system temp dir
	// CacheBytes is pebble's block cache; 0 means DefaultBenchCache, which holds
	// 2,000,000 decompressed bid rows, so that repeated scans run from a warm cache.
	CacheBytes int64
	// EngineLoad loads through state tables and checkpoints (LoadBids) instead of
	// BulkLoadBids: the same table contents, much slower.
	EngineLoad bool
	// GoAllocator builds batches with Arrow's Go allocator instead of a
	// vec.PoolAllocator, to show what allocation discipline is worth.
	GoAllocator bool
	// Compression and BlockSize are the store's (storage.Options; "" and 0: its
	// defaults, storage.DefaultCompression and DefaultBlockSize).
	Compression string
	BlockSize   int
}

// DefaultBenchCache is the benchmark store's default block cache.
const DefaultBenchCache = 1 << 30

// NewSnapshotBench loads bid rows (seed 1) into a new store in a new directory on disk,
// removed by Close.
func NewSnapshotBench(o SnapshotBenchOptions) (*SnapshotBench, error) {
	if o.Rows < 1 {
		return nil, fmt.Errorf("bench: snapshot: %d rows", o.Rows)
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultBenchCache
	}
	d, err := os.MkdirTemp(o.Dir, "weir-snapshot-bench-")
	if err != nil {
		return nil, err
	}
	store, err := storage.Open(d, storage.Options{CacheSize: o.CacheBytes, Compression: o.Compression, BlockSize: o.BlockSize})
	if err != nil {
		os.RemoveAll(d)
		return nil, err
	}
	if o.Compression == "" {
		o.Compression = storage.DefaultCompression
	}
	if o.BlockSize == 0 {
		o.BlockSize = storage.DefaultBlockSize
	}
	sb := &SnapshotBench{Rows: o.Rows, dir: d, store: store, table: tables.BidTable(), mem: vec.NewPoolAllocator(), allocator: "pool", opts: o}
	if o.GoAllocator {
		sb.mem, sb.allocator = memory.NewGoAllocator(), "go"
	}
	load := BulkLoadBids
	if o.EngineLoad {
		load = LoadBids
	}
	t0 := time.Now()
	if err := load(store, o.Rows, 1); err != nil {
		sb.Close()
		return nil, err
	}
	sb.LoadSeconds = time.Since(t0).Seconds()
	for v := 0; v < sb.table.VnodeCount; v++ {
		sb.vnodes = append(sb.vnodes, uint16(v))
	}
	return sb, nil
}

// Close closes the store and removes its directory.
func (sb *SnapshotBench) Close() error {
	err := sb.store.Close()
	if rerr := os.RemoveAll(sb.dir); err == nil {
		err = rerr
	}
	return err
}

// SnapshotResult is one measurement of the snapshot read path. Ratios are medians of
// per-repetition ratios, each from passes run back to back; rates are medians.
type SnapshotResult struct {
	Rows        int    `json:"rows"`
	Vnodes      int    `json:"vnodes"`
	Workers     int    `json:"workers"`
	BatchSize   int    `json:"batch_size"`
	Repetitions int    `json:"repetitions"`
	Kernels     string `json:"kernels"`
	Allocator   string `json:"allocator"`
	GOMAXPROCS  int    `json:"gomaxprocs"`
	// CacheMB, Compression and BlockSize are the store's block cache, block
	// compression and data block size.
	CacheMB     int64  `json:"cache_mb"`
	Compression string `json:"compression"`
	BlockSize   int    `json:"block_size"`
	// Efficiency is snapshot rows/s ÷ raw pebble scan rows/s, both with Workers.
	Efficiency float64 `json:"efficiency"`
	// ParallelEfficiency is snapshot rows/s with Workers ÷ (Workers × rows/s with 1).
	ParallelEfficiency float64 `json:"parallel_efficiency"`
	RowsPerSec         float64 `json:"rows_per_sec"`
	RawRowsPerSec      float64 `json:"raw_rows_per_sec"`
	// AllocsPerRow is Go heap allocations (every goroutine) per row over the snapshot
	// passes with Workers, after warm-up passes.
	AllocsPerRow float64 `json:"allocs_per_row"`

	// The same figures with one worker, and the raw scan's own parallel efficiency:
	// what the machine allowed during the run.
	RowsPerSec1    float64 `json:"rows_per_sec_1_worker"`
	RawRowsPerSec1 float64 `json:"raw_rows_per_sec_1_worker"`
	Efficiency1    float64 `json:"efficiency_1_worker"`
	RawParallel    float64 `json:"raw_parallel_efficiency"`
	// CoresUsed is process CPU time ÷ wall time of the snapshot passes with Workers
	// (RawCoresUsed: of the raw scans): below Workers when other processes took CPU.
	CoresUsed    float64 `json:"cores_used"`
	RawCoresUsed float64 `json:"raw_cores_used"`
	// CPUParallelEfficiency is snapshot rows per CPU-second with Workers ÷ with 1
	// worker: the work parallelism adds per row, independent of CPU availability.
	CPUParallelEfficiency float64 `json:"cpu_parallel_efficiency"`
	// NsPerRowCPU and RawNsPerRowCPU are CPU nanoseconds per row with Workers.
	NsPerRowCPU    float64 `json:"cpu_ns_per_row"`
	RawNsPerRowCPU float64 `json:"raw_cpu_ns_per_row"`

	// CacheMisses and RawCacheMisses are the block cache misses of a snapshot pass
	// and of a raw scan with Workers (medians; their warm-up passes load the cache,
	// which holds every block at the default CacheBytes).
	CacheMisses    float64 `json:"cache_misses"`
	RawCacheMisses float64 `json:"raw_cache_misses"`

	BytesPerRow float64 `json:"kv_bytes_per_row"` // stored key and value bytes per row
	Seconds     float64 `json:"seconds"`          // measuring, warm-up included
	LoadSeconds float64 `json:"load_seconds"`
}

// Measure runs reps repetitions (at least 5) of: a raw scan and a snapshot read with
// workers, then (when workers > 1) both with one worker, the order reversed every
// other repetition, after one warm-up pass of each. batch 0 means
// storage.DefaultSnapshotBatchSize.
func (sb *SnapshotBench) Measure(workers, batch, reps int) (SnapshotResult, error) {
	if workers < 1 {
		workers = 1
	}
	if batch < 1 {
		batch = storage.DefaultSnapshotBatchSize
	}
	reps = max(reps, 5)
	res := SnapshotResult{Rows: sb.Rows, Vnodes: len(sb.vnodes), Workers: workers, BatchSize: batch, Repetitions: reps,
		CacheMB: sb.opts.CacheBytes >> 20, Compression: sb.opts.Compression, BlockSize: sb.opts.BlockSize,
		Kernels: "generic", Allocator: sb.allocator, GOMAXPROCS: runtime.GOMAXPROCS(0), LoadSeconds: sb.LoadSeconds}
	if vec.For(sb.table).Generated() {
		res.Kernels = "generated"
	}
	t0 := time.Now()
	type pass struct {
		raw     bool
		workers int
	}
	run := func(p pass) (passStats, error) {
		misses := sb.store.DB().Metrics().BlockCache.Misses
		var ps passStats
		var err error
		if p.raw {
			ps, err = sb.raw(p.workers)
		} else {
			ps, err = sb.snapshot(p.workers, batch)
		}
		ps.cacheMisses = sb.store.DB().Metrics().BlockCache.Misses - misses
		return ps, err
	}
	passes := []pass{{true, workers}, {false, workers}}
	if workers > 1 {
		passes = append(passes, pass{true, 1}, pass{false, 1})
	}
	// Warm up: the block cache, the pool's free lists, the goroutines' stacks.
	for _, p := range passes {
		if _, err := run(p); err != nil {
			return res, err
		}
	}
	var eff, par, rawPar, eff1, cpuPar, snapW, rawW, snap1, raw1, allocs, cores, rawCores, ns, rawNs, misses, rawMisses []float64
	for rep := 0; rep < reps; rep++ {
		order := slices.Clone(passes)
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		st := map[pass]passStats{}
		for _, p := range order {
			ps, err := run(p)
			if err != nil {
				return res, err
			}
			st[p] = ps
		}
		sw, rw := st[pass{false, workers}], st[pass{true, workers}]
		s1, r1 := sw, rw
		if workers > 1 {
			s1, r1 = st[pass{false, 1}], st[pass{true, 1}]
		}
		snapW, rawW, snap1, raw1 = append(snapW, sw.rate()), append(rawW, rw.rate()), append(snap1, s1.rate()), append(raw1, r1.rate())
		eff = append(eff, sw.rate()/rw.rate())
		eff1 = append(eff1, s1.rate()/r1.rate())
		par = append(par, sw.rate()/(float64(workers)*s1.rate()))
		rawPar = append(rawPar, rw.rate()/(float64(workers)*r1.rate()))
		allocs = append(allocs, float64(sw.mallocs)/float64(sw.rows))
		cores = append(cores, sw.cpu.Seconds()/sw.wall.Seconds())
		rawCores = append(rawCores, rw.cpu.Seconds()/rw.wall.Seconds())
		ns = append(ns, float64(sw.cpu.Nanoseconds())/float64(sw.rows))
		rawNs = append(rawNs, float64(rw.cpu.Nanoseconds())/float64(rw.rows))
		if sw.cpu > 0 && s1.cpu > 0 {
			cpuPar = append(cpuPar, s1.cpu.Seconds()/sw.cpu.Seconds())
		}
		misses, rawMisses = append(misses, float64(sw.cacheMisses)), append(rawMisses, float64(rw.cacheMisses))
		res.BytesPerRow = float64(rw.bytes) / float64(rw.rows)
	}
	res.CacheMisses, res.RawCacheMisses = median(misses), median(rawMisses)
	res.Efficiency, res.ParallelEfficiency = median(eff), median(par)
	res.RowsPerSec, res.RawRowsPerSec = median(snapW), median(rawW)
	res.AllocsPerRow = median(allocs)
	res.RowsPerSec1, res.RawRowsPerSec1 = median(snap1), median(raw1)
	res.Efficiency1, res.RawParallel = median(eff1), median(rawPar)
	res.CoresUsed, res.RawCoresUsed = median(cores), median(rawCores)
	res.CPUParallelEfficiency = median(cpuPar)
	res.NsPerRowCPU, res.RawNsPerRowCPU = median(ns), median(rawNs)
	res.Seconds = time.Since(t0).Seconds()
	return res, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

type passStats struct {
	rows    int64
	bytes   int64 // raw scans: key and value bytes
	wall    time.Duration
	cpu     time.Duration // process CPU time
	mallocs uint64        // snapshot reads: Go heap allocations
	// cacheMisses is the block cache misses of the store read during the pass
	cacheMisses int64
}

func (p passStats) rate() float64 { return float64(p.rows) / p.wall.Seconds() }

// snapshot reads every vnode through the snapshot read path with workers, the
// receiving goroutine counting rows and releasing batches as a consumer would. The
// Go heap allocations made during the pass are counted too.
func (sb *SnapshotBench) snapshot(workers, batch int) (passStats, error) {
	view, err := sb.store.View()
	if err != nil {
		return passStats{}, err
	}
	defer view.Release()
	starts := make([]storage.VnodeStart, len(sb.vnodes))
	for i, v := range sb.vnodes {
		starts[i].Vnode = v
	}
	src := storage.ViewSource(view, BidTableID, sb.table)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs := ms.Mallocs
	cpu0, t0 := processCPU(), time.Now()
	r, err := storage.OpenSnapshot(context.Background(), src, storage.SnapshotRequest{
		Vnodes: starts, Projection: Q0, BatchSize: batch, Workers: workers, Mem: sb.mem,
	})
	if err != nil {
		return passStats{}, err
	}
	var st passStats
	ended := 0
	for b := range r.Batches() {
		st.rows += int64(b.Rows)
		if b.End {
			ended++
		}
		b.Release()
	}
	st.wall, st.cpu = time.Since(t0), processCPU()-cpu0
	runtime.ReadMemStats(&ms)
	st.mallocs = ms.Mallocs - mallocs
	if err := r.Err(); err != nil {
		return st, err
	}
	if st.rows != int64(sb.Rows) || ended != len(sb.vnodes) {
		return st, fmt.Errorf("bench: snapshot read %d rows and %d vnode ends, want %d and %d", st.rows, ended, sb.Rows, len(sb.vnodes))
	}
	return st, nil
}

// raw scans every vnode with a pebble iterator per vnode on workers goroutines, as the
// snapshot path's workers take them, touching each key's and value's length: the least
// work a reader of the same rows can do.
func (sb *SnapshotBench) raw(workers int) (passStats, error) { return sb.scan(workers, false) }

// rawCopy is raw plus copying every value into a reused arena (what the snapshot
// path does before decoding): the cost of reading the value bytes, which the raw scan
// never touches.
func (sb *SnapshotBench) rawCopy(workers int) (passStats, error) { return sb.scan(workers, true) }

func (sb *SnapshotBench) scan(workers int, copyValues bool) (passStats, error) {
	snap := sb.store.DB().NewSnapshot()
	defer snap.Close()
	var next atomic.Int64
	var rows, bytes atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	cpu0, t0 := processCPU(), time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n, nb int64
			var arena vec.Bytes
			for {
				i := int(next.Add(1)) - 1
				if i >= len(sb.vnodes) {
					break
				}
				v := sb.vnodes[i]
				lo := storage.VnodePrefix(BidTableID, v)
				hi := storage.VnodePrefix(BidTableID, v+1)
				if v == 0xFFFF {
					hi = storage.VnodePrefix(BidTableID+1, 0)
				}
				it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
				if err == nil {
					for ok := it.First(); ok; ok = it.Next() {
						n++
						nb += int64(len(it.Key()) + len(it.Value()))
						if copyValues {
							if arena.Len() == 1024 {
								arena.Reset()
							}
							arena.Append(it.Value())
						}
					}
					err = it.Close()
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					break
				}
			}
			rows.Add(n)
			bytes.Add(nb)
		}()
	}
	wg.Wait()
	st := passStats{rows: rows.Load(), bytes: bytes.Load(), wall: time.Since(t0), cpu: processCPU() - cpu0}
	if firstErr != nil {
		return passStats{}, fmt.Errorf("bench: raw scan: %w", firstErr)
	}
	if st.rows != int64(sb.Rows) {
		return st, fmt.Errorf("bench: raw scan read %d rows, want %d", st.rows, sb.Rows)
	}
	return st, nil
}
