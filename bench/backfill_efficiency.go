package bench

import (
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
)

// measureEfficiency runs the efficiency passes over the golden store.
func (b *backfillBench) measureEfficiency(ctx context.Context) (float64, BackfillEfficiency, error) {
	const workers = 2
	all := make([]int, len(b.table.Columns))
	for i := range all {
		all[i] = i
	}
	q0 := []int(Q0)
	sb := &SnapshotBench{Rows: b.o.Rows, store: b.golden, table: b.table, mem: b.mem, allocator: "pool"}
	for v := 0; v < b.table.VnodeCount; v++ {
		sb.vnodes = append(sb.vnodes, uint16(v))
	}
	res := BackfillEfficiency{Workers: workers, BatchSize: storage.DefaultSnapshotBatchSize, Reps: b.o.EfficiencyReps}
	type pass struct {
		raw  bool
		q0   bool
		read bool // the bare snapshot read of Q0
	}
	run := func(p pass) (st passStats, n int, err error) {
		// Each pass starts on a collected heap, so that no pass pays for collecting
		// the garbage of the one before it (on 2 cores the collector takes a quarter
		// of the CPU while it runs).
		runtime.GC()
		// Each pass runs under the profiler label weir_pass (its goroutines inherit
		// it): go tool pprof -tagfocus 'weir_pass=^executor$' FILE shows one pass.
		name := "executor"
		switch {
		case p.raw:
			name = "raw"
		case p.read:
			name = "read_q0"
		case p.q0:
			name = "executor_q0"
		}
		misses0 := b.golden.DB().Metrics().BlockCache.Misses
		defer func() { st.cacheMisses = b.golden.DB().Metrics().BlockCache.Misses - misses0 }()
		pprof.Do(ctx, pprof.Labels("weir_pass", name), func(ctx context.Context) {
			switch {
			case p.raw:
				st, err = sb.raw(workers)
			case p.read:
				st, err = sb.snapshot(workers, storage.DefaultSnapshotBatchSize)
			case p.q0:
				st, n, err = b.executorPass(ctx, q0, workers)
			default:
				st, n, err = b.executorPass(ctx, all, workers)
			}
		})
		return st, n, err
	}
	passes := []pass{{raw: true}, {}, {q0: true}, {read: true}}
	for _, p := range passes { // warm-up
		if _, _, err := run(p); err != nil {
			return 0, res, err
		}
	}
	var eff, effQ0, effRead, rate, rateQ0, rateRead, raw, barriers, ns, rawNs, cores, rawCores, misses, rawMisses []float64
	for rep := 0; rep < b.o.EfficiencyReps; rep++ {
		order := slices.Clone(passes)
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		st := map[pass]passStats{}
		for _, p := range order {
			ps, n, err := run(p)
			if err != nil {
				return 0, res, err
			}
			st[p] = ps
			if p == (pass{}) {
				barriers = append(barriers, float64(n))
			}
		}
		r, a, q, rd := st[pass{raw: true}], st[pass{}], st[pass{q0: true}], st[pass{read: true}]
		eff = append(eff, a.rate()/r.rate())
		effQ0 = append(effQ0, q.rate()/r.rate())
		effRead = append(effRead, rd.rate()/r.rate())
		rate, rateQ0, rateRead, raw = append(rate, a.rate()), append(rateQ0, q.rate()), append(rateRead, rd.rate()), append(raw, r.rate())
		ns = append(ns, float64(a.cpu.Nanoseconds())/float64(a.rows))
		rawNs = append(rawNs, float64(r.cpu.Nanoseconds())/float64(r.rows))
		cores = append(cores, a.cpu.Seconds()/a.wall.Seconds())
		rawCores = append(rawCores, r.cpu.Seconds()/r.wall.Seconds())
		misses, rawMisses = append(misses, float64(a.cacheMisses)), append(rawMisses, float64(r.cacheMisses))
	}
	res.CacheMisses, res.RawCacheMisses = median(misses), median(rawMisses)
	res.EfficiencyQ0 = median(effQ0)
	res.SnapshotReadEfficiencyQ0, res.SnapshotReadRowsPerSecQ0 = median(effRead), median(rateRead)
	res.RowsPerSec, res.RowsPerSecQ0, res.RawRowsPerSec = median(rate), median(rateQ0), median(raw)
	res.Barriers = median(barriers)
	res.NsPerRowCPU, res.RawNsPerRowCPU = median(ns), median(rawNs)
	res.CoresUsed, res.RawCoresUsed = median(cores), median(rawCores)
	return median(eff), res, nil
}

// executorPass drives an ArrangementBackfill over every vnode of the golden store's
// bid table with no engine: a fresh node and progress table, an input of barriers
// only (barrierSource), and a sink that counts and releases every chunk until the
// executor reports Done. It returns the rows, wall and CPU time, and the barriers the
// input gave. The pass's uncommitted progress is dropped afterwards.
func (b *backfillBench) executorPass(ctx context.Context, s2 []int, workers int) (st passStats, barriers int, err error) {
	b.passes++
	store := b.golden
	defer store.DropUncommitted()
	node := store.AddNode()
	full := vnode.Full(b.table.VnodeCount)
	// Ids far above the engine's objects: nothing is committed under them.
	prog, err := storage.NewProgressTable(node, 1<<20+b.passes, "bench_progress", b.table, full)
	if err != nil {
		return st, 0, err
	}
	in := &barrierSource{schema: b.table.ArrowSchema(), prev: executors.Epoch(store.CommittedEpoch()), interval: b.o.BarrierInterval, rowsSeen: make(chan struct{})}
	bf, err := executors.NewArrangementBackfill(in, executors.BackfillConfig{
		Actor: 1, Fragment: 1, Upstream: b.table, UpstreamID: EngineBidTableID, S2: s2, Vnodes: full,
		Node: node, Progress: prog, Workers: workers, Mem: b.mem,
	})
	if err != nil {
		return st, 0, err
	}
	in.bf = bf
	defer func() {
		if cerr := bf.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	cpu0, t0 := processCPU(), time.Now()
	for {
		m, err := bf.Next(ctx)
		if err != nil {
			return st, 0, fmt.Errorf("bench: backfill executor: %w", err)
		}
		if m.Chunk != nil {
			before := st.rows
			st.rows += int64(m.Chunk.NumRows())
			if before < int64(b.o.Rows) && st.rows >= int64(b.o.Rows) {
				close(in.rowsSeen)
			}
		}
		done := m.Barrier != nil && bf.Stats().Done
		m.Release()
		if done {
			break
		}
	}
	st.wall, st.cpu = time.Since(t0), processCPU()-cpu0
	if st.rows != int64(b.o.Rows) {
		return st, 0, fmt.Errorf("bench: backfill executor emitted %d rows, want %d", st.rows, b.o.Rows)
	}
	return st, in.count(), nil
}

// barrierSource is the input of an engine-less backfill: no upstream changes, only
// barriers. The first comes at once, with Prev the store's committed epoch (the
// executor waits for Prev to commit); the next ones every interval, and one as soon
// as every vnode is Completed once the sink has closed rowsSeen, so that the executor
// finishes without waiting out an interval. Next is called from the executor's
// goroutines, one at a time.
type barrierSource struct {
	schema   *arrow.Schema
	interval time.Duration
	bf       *executors.ArrangementBackfill

	mu        sync.Mutex
	prev      executors.Epoch
	n         int
	last      time.Time
	completed bool // a barrier was given after every vnode was Completed
	// rowsSeen is closed by the sink when it has every row: then the last vnodes'
	// End batches are due, and Next polls for them. Without it (nil) Next notices the
	// completion only at the next interval.
	rowsSeen chan struct{}
}

// barrierPoll is how often barrierSource looks at the executor's progress once the sink
// has seen every row.
const barrierPoll = 100 * time.Microsecond

func (s *barrierSource) Schema() *arrow.Schema { return s.schema }

func (s *barrierSource) Close() error { return nil }

func (s *barrierSource) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *barrierSource) barrier() executors.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &executors.Barrier{Prev: s.prev, Curr: s.prev + 1, Kind: executors.Checkpoint}
	if s.n > 0 {
		b.Kind = executors.Plain
	}
	s.prev = b.Curr
	s.n++
	s.last = time.Now()
	return executors.BarrierMessage(b)
}

func (s *barrierSource) Next(ctx context.Context) (executors.Message, error) {
	s.mu.Lock()
	first := s.n == 0
	s.mu.Unlock()
	if first {
		return s.barrier(), nil
	}
	seen, polling := s.rowsSeen, false
	for {
		st := s.bf.Stats()
		s.mu.Lock()
		wait := s.interval - time.Since(s.last)
		due := wait <= 0
		if st.Started && st.Completed == st.Owned && !s.completed {
			s.completed, due = true, true
		}
		s.mu.Unlock()
		if due {
			return s.barrier(), nil
		}
		// Sleep until the interval is out, or until the sink has seen every row;
		// from then on poll for the vnodes' End batches, which follow their last rows
		// at once. (A source that woke every millisecond all along took the
		// executor's goroutines off their cores ~10% of the time, which an engine's
		// barrier input, a channel, does not.)
		if polling {
			wait = min(wait, barrierPoll)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return executors.Message{}, ctx.Err()
		case <-t.C:
		case <-seen:
			t.Stop()
			seen, polling = nil, true
		}
	}
}

var _ executors.Executor = (*barrierSource)(nil)
