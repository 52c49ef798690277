package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2"
	"github.com/seed04fbb902/weir/bench/nexmark/gen"
	"github.com/seed04fbb902/weir/bench/nexmark/peers"
	"github.com/seed04fbb902/weir/bench/nexmark/queries"
	"github.com/seed04fbb902/weir/bench/nexmark/views"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/storage"
)

// NexmarkBenchOptions configure RunNexmarkBench. Zero values mean the defaults.
type NexmarkBenchOptions struct {
	Events      uint64 // events to load before the builds (required)
	Parallelism int    // actors of each table and each view (default 2)
	Seed        uint64 // the generator's run seed
	// BusyRate is the generator's rate in events/s while the busy builds run
	// (default 10,000, the Nexmark specification's default rate).
	BusyRate float64
	Dir      string   // parent of the temporary directory; "": the system temp dir
	Queries  []string // default: every query
	// Peers evaluate the queries on the same rows (idle mode): their seconds are
	// reported next to Weir's, and their rows must equal the views'.
	Peers []peers.Peer
	Log   io.Writer // a line per build (nil: none)
	// Reps builds each view this many times per kind and mode (default 1), the two
	// kinds' order alternating by rep; the result reports the median build.
	Reps int
	// Workers is the engine's Options.BackfillWorkers: the snapshot read goroutines
	// of each arrangement backfill actor (0: the engine's default,
	// engine.DefaultBackfillWorkers; a no-shuffle backfill always reads with one).
	Workers int
	// StateCacheBytes is the engine's Options.StateCacheBytes: the memory per node of
	// the joins' cached state (0: the engine's default; negative: no cache).
	StateCacheBytes int64
	// BackfillCheckpointInterval and BackfillCheckpointBytes are the engine's
	// options of those names (0: the engine's defaults).
	BackfillCheckpointInterval time.Duration
	BackfillCheckpointBytes    int64
	// NewExchange, when set, gives each build's engine an Exchange for the edges
	// between its nodes (nodes: the engine's Options.Nodes) and the function that
	// closes it after the engine; the load into the golden copy uses channels.
	NewExchange func(nodes int) (engine.Exchange, func() error, error)
}

// nexmarkNodes is the engines' node count (the engine's default, made explicit for
// NewExchange).
const nexmarkNodes = 2

// NexmarkBuild is one query's view built by one backfill kind in one upstream mode.
type NexmarkBuild struct {
	Seconds float64 `json:"seconds"`
	// SnapshotRows is the rows the backfill read from the upstreams' snapshots, and
	// SnapshotRowsPerSec that ÷ Seconds.
	SnapshotRows       int64   `json:"snapshot_rows"`
	SnapshotRowsPerSec float64 `json:"snapshot_rows_per_sec"`
	// UpstreamRowsPerSec is the rows the busy generator wrote per second during the
	// build (0 when idle).
	UpstreamRowsPerSec float64 `json:"upstream_rows_per_sec"`
	// PeakHeapMB is the Go heap in use at its highest during the build (sampled every
	// 50ms), less what it was before.
	PeakHeapMB float64 `json:"peak_heap_mb"`
	Rows       int     `json:"rows"`
	Verified   bool    `json:"verified"`
	Mismatches int     `json:"mismatches"`
	// Barriers and Checkpoints are the barrier rounds that ended during the build
	// and those of them that committed a checkpoint.
	Barriers    int64 `json:"barriers"`
	Checkpoints int64 `json:"checkpoints"`
	// CollectSeconds and CommitSeconds are those rounds' time from a barrier's
	// injection until every actor passed it, and their checkpoints' commits,
	// summed: where a short build's time goes between its snapshot reads.
	CollectSeconds float64 `json:"collect_seconds"`
	CommitSeconds  float64 `json:"commit_seconds"`
	// Rounds are those rounds one by one, in the order they ended, with the cores
	// used during each: how the build's time falls over them (its last checkpoint's
	// commit, with a core idle, against the commits that run beside the actors).
	Rounds []NexmarkRound `json:"rounds"`
	// StateEvictions and StateLoads are the joins' rows and aggregates' groups the
	// nodes' state budgets (Options.StateCacheBytes) evicted, and the lookups that
	// read their state tables, during the build.
	StateEvictions int64 `json:"state_evictions"`
	StateLoads     int64 `json:"state_loads"`
	// LSM is what the engine's store wrote for the build: from an empty memtable
	// and no compaction running before it to the same after it.
	LSM LSMWrites `json:"lsm"`
}

// LSMWrites are the bytes a store's pebble wrote between two of its metrics, in MiB:
// to its WAL, in sstables flushed from memtables, in sstables compactions wrote, and
// in sstables ingested (the checkpoints that commit their runs as sstables).
// RewrittenOverIngested is (flushed + compacted) ÷ ingested, when anything was
// ingested: issue 31 asks for at most 0.10 during a build.
type LSMWrites struct {
	WALMB                 float64  `json:"wal_mb"`
	FlushedMB             float64  `json:"flushed_mb"`
	CompactedMB           float64  `json:"compacted_mb"`
	IngestedMB            float64  `json:"ingested_mb"`
	RewrittenOverIngested *float64 `json:"rewritten_over_ingested"`
	// Unsettled says the store still ran a flush or compaction 10 s after the flush
	// before or after the build: the figures then miss some of the build's writes
	// or hold some of another's.
	Unsettled bool `json:"unsettled,omitempty"`
}

// lsmWrites returns the writes between pebble metrics a and b, summed over the
// levels (pebble's Total counts the WAL and the ingests as flushed too).
func lsmWrites(a, b *pebble.Metrics) LSMWrites {
	var flushed, compacted, ingested uint64
	for i := range b.Levels {
		la, lb := &a.Levels[i], &b.Levels[i]
		flushed += lb.TableBytesFlushed - la.TableBytesFlushed
		compacted += lb.TableBytesCompacted - la.TableBytesCompacted
		ingested += lb.TableBytesIngested - la.TableBytesIngested
	}
	mb := func(x uint64) float64 { return float64(x) / (1 << 20) }
	w := LSMWrites{
		WALMB:       mb(b.WAL.BytesWritten - a.WAL.BytesWritten),
		FlushedMB:   mb(flushed),
		CompactedMB: mb(compacted),
		IngestedMB:  mb(ingested),
	}
	if w.IngestedMB > 0 {
		r := (w.FlushedMB + w.CompactedMB) / w.IngestedMB
		w.RewrittenOverIngested = &r
	}
	return w
}

// settleLSM flushes e's store's memtable and waits, up to limit, until it runs no
// flush or compaction (those a build started are its writes too). It returns the
// store's metrics then, and whether it settled within limit.
func settleLSM(e *engine.Engine, limit time.Duration) (*pebble.Metrics, bool, error) {
	if err := e.Flush(); err != nil {
		return nil, false, err
	}
	deadline := time.Now().Add(limit)
	for {
		m := e.StorageMetrics()
		if m.Compact.NumInProgress == 0 && m.Flush.NumInProgress == 0 {
			return m, true, nil
		}
		if time.Now().After(deadline) {
			return m, false, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// NexmarkResult is one query in one upstream mode: the fields the issue names, and the
// builds in detail.
type NexmarkResult struct {
	Query              string   `json:"query"`
	Upstream           string   `json:"upstream"`
	ArrangementSeconds float64  `json:"arrangement_seconds"`
	NoShuffleSeconds   *float64 `json:"noshuffle_seconds"`
	Ratio              *float64 `json:"ratio"`
	Verified           bool     `json:"verified"`
	// PeerSeconds are each peer's median time to create the query's result (idle
	// mode; the peer runs it once after each rep of Weir's builds), PeerRepSeconds
	// every run's, WeirOverPeer the arrangement seconds ÷ the peer's (medians), and
	// WeirOverPeerStats the ratios paired by rep (Weir's arrangement build of a rep ÷
	// the peer's run right after it). PeerVerified: every run's rows were the oracle's.
	PeerSeconds       map[string]float64     `json:"peer_seconds,omitempty"`
	PeerRepSeconds    map[string][]float64   `json:"peer_rep_seconds,omitempty"`
	WeirOverPeer      map[string]float64     `json:"weir_over_peer,omitempty"`
	WeirOverPeerStats map[string]*RatioStats `json:"weir_over_peer_stats,omitempty"`
	PeerVerified      map[string]bool        `json:"peer_verified,omitempty"`
	Arrangement       NexmarkBuild           `json:"arrangement"`
	NoShuffle         *NexmarkBuild          `json:"noshuffle,omitempty"`
	// ArrangementRepSeconds and NoShuffleRepSeconds list every rep's seconds (the
	// builds above are the medians).
	ArrangementRepSeconds []float64 `json:"arrangement_rep_seconds,omitempty"`
	NoShuffleRepSeconds   []float64 `json:"noshuffle_rep_seconds,omitempty"`
	// RatioStats is the ratios of the builds paired by rep (nil without no-shuffle
	// builds).
	RatioStats *RatioStats `json:"ratio_stats,omitempty"`
}

// RunNexmarkBench loads Events generated events into the tables person, auction and
// bid of an engine on disk (a temporary directory, removed at the end; every table has
// Parallelism actors, so every query can be co-located) and closes it: the golden
// copy. Then it creates each query's view by arrangement backfill and by no-shuffle
// backfill at the same parallelism, timing CreateMV (which returns once the backfill is
// done), checks the view against the query's oracle (queries.Eval over the tables as
// committed), and drops it:
//
//   - idle: on one engine opened on a checkpoint of the golden copy, nothing writing;
//     the peers, if any, load the same rows and run the same query;
//   - busy: each build on a fresh checkpoint of the golden copy, with the generator
//     writing events Events, Events+1, ... at BusyRate during the build (the same
//     events for every build), stopped when CreateMV returns; the oracle then reads
//     the tables with those events.
func RunNexmarkBench(ctx context.Context, o NexmarkBenchOptions) ([]NexmarkResult, error) {
	if o.Events == 0 {
		return nil, errors.New("bench: nexmark: no events")
	}
	if o.Parallelism == 0 {
		o.Parallelism = 2
	}
	if o.Reps < 0 {
		return nil, fmt.Errorf("bench: nexmark: %d reps, want >= 0 (0: 1)", o.Reps)
	}
	if o.Workers < 0 {
		return nil, fmt.Errorf("bench: nexmark: %d workers, want >= 0", o.Workers)
	}
	if o.BusyRate == 0 {
		o.BusyRate = 10_000
	}
	if len(o.Queries) == 0 {
		o.Queries = views.Queries
	}
	for _, q := range o.Queries {
		if _, err := views.Plan(q); err != nil {
			return nil, fmt.Errorf("bench: nexmark: %w", err)
		}
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", args...)
		}
	}
	dir, err := os.MkdirTemp(o.Dir, "weir-nexmark-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The generator's batches (written, then released by the engine's DML path) come
	// from the Go heap; the engines take their default allocator, a pool each.
	mem := memory.NewGoAllocator()
	var rounds roundLog
	opts := engine.Options{OnBarrier: rounds.onBarrier, Nodes: nexmarkNodes, BackfillWorkers: o.Workers, StateCacheBytes: o.StateCacheBytes,
		BackfillCheckpointInterval: o.BackfillCheckpointInterval, BackfillCheckpointBytes: o.BackfillCheckpointBytes, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	// The golden copy: the loaded tables, from which every build's engine starts.
	goldenDir := filepath.Join(dir, "golden")
	e, err := engine.Open(ctx, goldenDir, opts)
	if err != nil {
		return nil, err
	}
	for _, t := range views.Tables() {
		if err := e.CreateTable(ctx, t, engine.TableOptions{Parallelism: o.Parallelism}); err != nil {
			e.Close()
			return nil, err
		}
	}
	g := gen.New(gen.Config{Seed: o.Seed})
	t0 := time.Now()
	err = views.WriteEvents(ctx, e, g, mem, 0, o.Events)
	if cerr := e.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	logf("loaded %d events in %.1fs", o.Events, time.Since(t0).Seconds())
	golden, err := storage.Open(goldenDir, storage.Options{})
	if err != nil {
		return nil, err
	}
	defer golden.Close()
	clones := 0
	clone := func() (*engine.Engine, func() error, error) {
		clones++
		d := filepath.Join(dir, fmt.Sprintf("build-%d", clones))
		if err := golden.DB().Checkpoint(d, pebble.WithFlushedWAL()); err != nil {
			return nil, nil, fmt.Errorf("bench: nexmark: clone the store: %w", err)
		}
		eo := opts
		closeEx := func() error { return nil }
		if o.NewExchange != nil {
			ex, c, err := o.NewExchange(eo.Nodes)
			if err != nil {
				return nil, nil, fmt.Errorf("bench: nexmark: exchange: %w", err)
			}
			eo.Exchange, closeEx = ex, c
		}
		e, err := engine.Open(ctx, d, eo)
		if err != nil {
			closeEx()
			return nil, nil, err
		}
		return e, func() error {
			err := e.Close()
			if cerr := closeEx(); err == nil {
				err = cerr
			}
			if rerr := os.RemoveAll(d); err == nil {
				err = rerr
			}
			return err
		}, nil
	}

	var out []NexmarkResult
	loaded := map[peers.Peer]bool{}
	oracle := &goOracle{}
	// Idle: one engine for every build (nothing changes the tables).
	idle, closeIdle, err := clone()
	if err != nil {
		return nil, err
	}
	idleTabs, err := views.ReadRows(ctx, idle)
	if err != nil {
		closeIdle()
		return nil, err
	}
	defer idleTabs.Release()
	for _, q := range o.Queries {
		r := NexmarkResult{Query: q, Upstream: modeIdle}
		// The peers' runs of the query, and the Go batch oracle's, after each rep.
		runs, err := newPeerRuns(ctx, append(slices.Clone(o.Peers), oracle), loaded, q, idleTabs, logf)
		if err != nil {
			closeIdle()
			return out, err
		}
		err = r.repeat(o.Reps, runs.rep, func(kind engine.BackfillKind) (NexmarkBuild, error) {
			b, err := nexmarkBuild(ctx, idle, q, kind, o.Parallelism, &rounds)
			if err == nil {
				err = verifyNexmarkView(ctx, idle, q, idleTabs, &b)
			}
			if err == nil {
				err = idle.DropMV(ctx, q)
			}
			if err == nil {
				logf("idle %s %s: %.2fs, %d snapshot rows, %d rows, verified %v", q, kindName(kind), b.Seconds, b.SnapshotRows, b.Rows, b.Verified)
			}
			return b, err
		})
		if err != nil {
			closeIdle()
			return out, err
		}
		runs.finish(&r)
		out = append(out, r)
	}
	if err := closeIdle(); err != nil {
		return out, err
	}
	// Busy: every build on a fresh clone, with the generator writing events
	// Events, Events+1, ... at BusyRate (the same events for every build).
	for _, q := range o.Queries {
		r := NexmarkResult{Query: q, Upstream: modeBusy}
		err := r.repeat(o.Reps, nil, func(kind engine.BackfillKind) (NexmarkBuild, error) {
			e, closeE, err := clone()
			if err != nil {
				return NexmarkBuild{}, err
			}
			w := startEventWriter(e, g, mem, o.Events, o.BusyRate)
			b, err := nexmarkBuild(ctx, e, q, kind, o.Parallelism, &rounds)
			w.halt()
			b.UpstreamRowsPerSec = float64(w.rows.Load()) / b.Seconds
			var tabs *views.Rows
			if err == nil {
				tabs, err = views.ReadRows(ctx, e)
			}
			if err == nil {
				err = verifyNexmarkView(ctx, e, q, tabs, &b)
				tabs.Release()
			}
			if cerr := closeE(); err == nil {
				err = cerr
			}
			if err == nil {
				logf("busy %s %s: %.2fs, %d snapshot rows, %d rows written meanwhile, %d rows, verified %v", q, kindName(kind), b.Seconds, b.SnapshotRows, w.rows.Load(), b.Rows, b.Verified)
			}
			return b, err
		})
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// repeat builds the view reps times per kind (at least once), the kinds' order
// alternating by rep, calls afterRep (when set) after each rep's builds, and records
// each kind's median build (verified only when every build was) and every rep's
// seconds.
func (r *NexmarkResult) repeat(reps int, afterRep func() error, build func(engine.BackfillKind) (NexmarkBuild, error)) error {
	builds := map[engine.BackfillKind][]NexmarkBuild{}
	for rep := 0; rep < max(1, reps); rep++ {
		kinds := slices.Clone(benchKinds)
		if rep%2 == 1 {
			slices.Reverse(kinds)
		}
		for _, kind := range kinds {
			b, err := build(kind)
			if err != nil {
				return err
			}
			builds[kind] = append(builds[kind], b)
		}
		if afterRep != nil {
			if err := afterRep(); err != nil {
				return err
			}
		}
	}
	for _, kind := range benchKinds {
		bs := builds[kind]
		secs := make([]float64, len(bs))
		verified := true
		for i, b := range bs {
			secs[i] = b.Seconds
			verified = verified && b.Verified
		}
		sorted := slices.Clone(bs)
		slices.SortFunc(sorted, func(a, b NexmarkBuild) int { return cmp.Compare(a.Seconds, b.Seconds) })
		med := sorted[(len(sorted)-1)/2]
		med.Verified = verified
		r.set(kind, med)
		if kind == engine.ArrangementBackfill {
			r.ArrangementRepSeconds = secs
		} else {
			r.NoShuffleRepSeconds = secs
		}
	}
	r.RatioStats = pairedRatios(r.ArrangementRepSeconds, r.NoShuffleRepSeconds)
	return nil
}

// set records build b of kind and derives the summary fields.
func (r *NexmarkResult) set(kind engine.BackfillKind, b NexmarkBuild) {
	if kind == engine.ArrangementBackfill {
		r.Arrangement = b
	} else {
		r.NoShuffle = &b
	}
	r.ArrangementSeconds = r.Arrangement.Seconds
	r.Verified = r.Arrangement.Verified
	if r.NoShuffle != nil {
		s, ratio := r.NoShuffle.Seconds, r.Arrangement.Seconds/r.NoShuffle.Seconds
		r.NoShuffleSeconds, r.Ratio = &s, &ratio
		r.Verified = r.Verified && r.NoShuffle.Verified
	}
}

// eventWriter writes events at a rate, in 10ms steps by wall clock.
type eventWriter struct {
	stop chan struct{}
	done chan struct{}
	next uint64
	rows atomic.Int64
}

func startEventWriter(e *engine.Engine, g *gen.Generator, mem memory.Allocator, from uint64, rate float64) *eventWriter {
	w := &eventWriter{stop: make(chan struct{}), done: make(chan struct{}), next: from}
	go func() {
		defer close(w.done)
		_ = views.PaceEvents(w.stop, from, rate, 10*time.Millisecond, func(lo, hi uint64) error {
			if err := views.WriteEvents(context.Background(), e, g, mem, lo, hi); err != nil {
				return err
			}
			w.rows.Add(int64(hi - lo))
			w.next = hi
			return nil
		})
	}()
	return w
}

// halt stops the writer and returns the next event number.
func (w *eventWriter) halt() uint64 {
	close(w.stop)
	<-w.done
	return w.next
}

// nexmarkBuild creates query q's view with backfill kind and times it.
func nexmarkBuild(ctx context.Context, e *engine.Engine, q string, kind engine.BackfillKind, p int, rounds *roundLog) (NexmarkBuild, error) {
	plan, err := views.Plan(q)
	if err != nil {
		return NexmarkBuild{}, err
	}
	settleMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	st0 := e.StateCacheStats()
	// The build starts on an empty memtable and no compaction running, and its
	// figures are read once the memtable it leaves is flushed and the compactions
	// settle after it: what the store wrote between is the build's.
	m0, settled0, err := settleLSM(e, 10*time.Second)
	if err != nil {
		return NexmarkBuild{}, fmt.Errorf("bench: nexmark: flush before %s: %w", q, err)
	}
	t0, cpu0 := rounds.reset()
	err = e.CreateMV(ctx, q, plan, engine.MVOptions{Backfill: kind, Parallelism: p})
	t1 := time.Now()
	secs := t1.Sub(t0).Seconds()
	built := rounds.within(t0, t1, cpu0)
	close(stop)
	wg.Wait()
	if err != nil {
		return NexmarkBuild{}, fmt.Errorf("bench: nexmark: create %s by %s backfill: %w", q, kind, err)
	}
	st1 := e.StateCacheStats()
	m1, settled1, err := settleLSM(e, 10*time.Second)
	if err != nil {
		return NexmarkBuild{}, fmt.Errorf("bench: nexmark: flush after %s: %w", q, err)
	}
	b := NexmarkBuild{Seconds: secs, Rounds: built,
		StateEvictions: st1.Evictions + st1.GroupEvictions - st0.Evictions - st0.GroupEvictions, StateLoads: st1.Loads + st1.GroupLoads - st0.Loads - st0.GroupLoads,
		LSM: lsmWrites(m0, m1)}
	b.LSM.Unsettled = !settled0 || !settled1
	for _, r := range built {
		b.Barriers++
		b.CollectSeconds += r.CollectSeconds
		if r.Checkpoint {
			b.Checkpoints++
			b.CommitSeconds += r.CommitSeconds
		}
	}
	if pk := peak.Load(); pk > base {
		b.PeakHeapMB = float64(pk-base) / (1 << 20)
	}
	for _, p := range e.Progress() {
		if p.Name == q {
			b.SnapshotRows = p.RowsConsumed
		}
	}
	b.SnapshotRowsPerSec = float64(b.SnapshotRows) / secs
	return b, nil
}

// verifyNexmarkView takes a checkpoint and records view q's check in b.
func verifyNexmarkView(ctx context.Context, e *engine.Engine, q string, tabs *views.Rows, b *NexmarkBuild) error {
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		return err
	}
	c, err := views.Compare(ctx, e, q, tabs)
	b.Rows, b.Verified, b.Mismatches = c.Rows, c.Verified, c.Mismatches
	return err
}

// goOracle is the Go batch oracle (queries.Eval) as a peer, "go-oracle": what a
// Go program evaluating the query over the rows in memory, in one pass, takes.
type goOracle struct{ tables queries.Tables }

func (g *goOracle) Name() string { return "go-oracle" }
func (g *goOracle) Close() error { return nil }
func (g *goOracle) Load(_ context.Context, t queries.Tables) error {
	g.tables = t
	return nil
}
func (g *goOracle) Run(_ context.Context, q queries.Query) (time.Duration, []queries.Row, error) {
	start := time.Now()
	rows, err := queries.Eval(q.Name, g.tables)
	return time.Since(start), rows, err
}

// peerRuns times one query on each peer, once per rep of Weir's builds, checking
// every run's rows against the oracle.
type peerRuns struct {
	ctx   context.Context
	ps    []peers.Peer
	spec  queries.Query
	want  []queries.Row
	logf  func(string, ...any)
	secs  map[string][]float64
	valid map[string]bool
}

// newPeerRuns loads tabs into each peer (once per peer, as loaded records) and
// prepares the runs of query q.
func newPeerRuns(ctx context.Context, ps []peers.Peer, loaded map[peers.Peer]bool, q string, tabs *views.Rows, logf func(string, ...any)) (*peerRuns, error) {
	spec, _ := queries.ByName(q)
	want, err := queries.Eval(q, tabs.Tables)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if !loaded[p] {
			if err := p.Load(ctx, tabs.Tables); err != nil {
				return nil, fmt.Errorf("bench: nexmark: load %s: %w", p.Name(), err)
			}
			loaded[p] = true
		}
	}
	return &peerRuns{ctx: ctx, ps: ps, spec: spec, want: want, logf: logf, secs: map[string][]float64{}, valid: map[string]bool{}}, nil
}

// rep runs the query once on each peer.
func (p *peerRuns) rep() error {
	for _, peer := range p.ps {
		d, rows, err := peer.Run(p.ctx, p.spec)
		if err != nil {
			return fmt.Errorf("bench: nexmark: %s on %s: %w", p.spec.Name, peer.Name(), err)
		}
		name := peer.Name()
		ok := queries.Diff(p.want, rows, p.spec.RelTol).OK()
		prev, seen := p.valid[name]
		p.valid[name] = ok && (prev || !seen)
		p.secs[name] = append(p.secs[name], d.Seconds())
		p.logf("idle %s %s: %.3fs, verified %v", p.spec.Name, name, d.Seconds(), ok)
	}
	return nil
}

// finish records the runs in r, whose arrangement builds are done.
func (p *peerRuns) finish(r *NexmarkResult) {
	r.PeerSeconds, r.PeerRepSeconds = map[string]float64{}, map[string][]float64{}
	r.WeirOverPeer, r.WeirOverPeerStats, r.PeerVerified = map[string]float64{}, map[string]*RatioStats{}, map[string]bool{}
	for name, secs := range p.secs {
		med := median(secs)
		r.PeerSeconds[name], r.PeerRepSeconds[name] = med, secs
		r.WeirOverPeer[name] = r.ArrangementSeconds / med
		r.WeirOverPeerStats[name] = pairedRatios(r.ArrangementRepSeconds, secs)
		r.PeerVerified[name] = p.valid[name]
	}
}
