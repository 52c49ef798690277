// Package sim is Weir's whole-engine simulation (docs/testing.md layer 2): seeded random
// workloads against a real engine on a crashable in-memory file system, with faults
// between steps, and an oracle that checks invariants I1 to I6 at every checkpoint.
// `weir sim` and the package's tests run the same harness.
//
// One seed is one run. Its generator decides the configuration (vnode counts 8 to 256,
// nodes, checkpoints every 1 to 5 barriers, chunk and batch sizes; the seed alone picks
// the backfill memory budget, 1 byte or 64 KiB in half of the seeds), the data and
// every step: writes (insert, update, pk-changing update, delete, range delete; keys
// skewed to a few vnodes, some vnodes left empty, keys near the backfill positions),
// barriers, views of five shapes (pass-through, filter, aggregate, join, a view over a
// view) built by arrangement backfill, rescales, pause and resume, throttle changes,
// crashes at named points (mid-epoch, before a checkpoint commits, after it commits,
// during a rescale; the image of the file system at that point is reopened, keeping a
// random share of unsynced data), pause on bootstrap, and I/O errors (disk full on a
// WAL write, EIO on a WAL sync) injected through pebble's errorfs into one checkpoint.
//
// Barriers are injected only by the simulation (a negative BarrierInterval), and the
// schedule (configuration, steps, faults and their parameters) comes from its own
// generator, so a seed replays the same sequence of operations and faults on every
// run. What a backfill has read between two barriers depends on goroutine timing, and
// so do the keys chosen near a backfill's position (from the data generator); the
// oracle holds whatever that timing is.
//
// The files: sim.go runs a seed (Options, Seed, the runner, the seed's configuration
// and the choice of each step); steps.go holds the workload steps (views, barriers and
// checkpoints, rescales, pause and resume, throttles) and the seed's finish; writes.go
// the writes and the keys they pick; faults.go the faults (crashes and the reopen after
// them, I/O errors, the commit hooks and the WAL fault injector); commitlog.go the
// commit-log seeds (a version log in PostgreSQL and a bucket, with their faults);
// model.go the tables, the reference model and the view shapes; check.go the oracle;
// report.go the figures.
package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/control"
	"github.com/seed04fbb902/weir/engine/cluster/exchange"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/internal/faultfs"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// Options configure a simulation run.
type Options struct {
	// Steps is the number of workload and fault steps per seed (default 60).
	Steps int
	// CallTimeout bounds every engine call; a call that does not return in time is a
	// liveness failure (default 60s).
	CallTimeout time.Duration
	// Logger receives the engine's logs (default: discarded).
	Logger *slog.Logger
	// Trace, when set, receives one line per step.
	Trace io.Writer
	// Postgres, when set, is the DSN of a PostgreSQL server's postgres database on
	// which commit-log seeds (a third of the seeds) each create a database for their
	// version log (commitlog.go).
	Postgres string
}

// errStop ends a seed early (after a failure was recorded).
var errStop = errors.New("sim: seed stopped")

// Seed runs one seed and adds its figures to rep. It returns an error only when the
// simulation itself could not run; mismatches are in rep.
func Seed(ctx context.Context, seed uint64, opts Options, rep *Report) error {
	if opts.Steps == 0 {
		opts.Steps = 60
	}
	if opts.CallTimeout == 0 {
		opts.CallTimeout = 60 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r := &runner{
		ctx: ctx, seed: seed, opts: opts, rep: rep,
		rng:  rand.New(rand.NewPCG(seed, seed^0x5eed5eed)),
		drng: rand.New(rand.NewPCG(seed, seed^0xda7a)),
		// The engine's default allocator is a pool: the sim's poisons what is freed, so
		// that a buffer read after its release reads garbage and fails the comparison.
		// It is given bare (its Allocated is the leak check), so that the engine's
		// decoders take its Uninit allocator, whose reused buffers are poisoned too (a
		// memory.CheckedAllocator around it would hide Uninit).
		mem:  &vec.PoolAllocator{Poison: true},
		fs:   vfs.NewCrashableMem(),
		refs: map[executors.Epoch]state{},
		cur:  newState(),
	}
	rep.Seeds++
	err := r.run()
	if r.e != nil {
		r.e.Crash()
	}
	if r.clog != nil {
		if cerr := r.clog.close(context.Background()); cerr != nil && err == nil {
			err = fmt.Errorf("sim: close the commit log: %w", cerr)
		}
	}
	if r.mesh != nil {
		if cerr := r.mesh.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("sim: close the exchange mesh: %w", cerr)
		}
	}
	if r.ctl != nil {
		rep.Sometimes["barrier_injected_over_control"] += r.ctl.Injected()
		rep.Sometimes["actors_built_over_control"] += r.ctl.Built()
		rep.Sometimes["backfill_finishing_over_control"] += r.ctl.Finishings()
		// A node's part of a checkpoint (export, apply, discard, recover) asked for
		// over its stream: the seeds with node stores over control streams.
		rep.Sometimes["node_calls_over_control"] += r.ctl.Calls()
		if cerr := r.ctl.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("sim: close the control streams: %w", cerr)
		}
	}
	rep.Sometimes["checkpoint_ingested"] += r.ingested.Load()
	rep.Sometimes["checkpoint_spaced_by_backfill"] += r.spaced.Load()
	for _, e := range r.engines {
		st := e.StateCacheStats()
		rep.Sometimes["state_cache_evicted"] += st.Evictions
		rep.Sometimes["state_cache_refilled"] += st.Loads
		rep.Sometimes["state_cache_hit"] += st.Hits
		rep.Sometimes["state_cache_known_absent"] += st.Absent
		rep.Sometimes["agg_group_evicted"] += st.GroupEvictions
		rep.Sometimes["agg_group_reloaded"] += st.GroupLoads
	}
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

type runner struct {
	ctx  context.Context
	seed uint64
	opts Options
	rep  *Report
	// ingested counts the checkpoints committed by ingesting sstables (the
	// coordinator's OnBarrier adds to it).
	ingested atomic.Int64
	// spaced counts the barriers that CheckpointEvery would have made checkpoints
	// and a running backfill did not (Options.BackfillCheckpointInterval), and
	// sinceCkpt the barriers since the last checkpoint (both from OnBarrier).
	spaced, sinceCkpt atomic.Int64
	// engines are the engines the seed opened, closed or not: their state cache
	// counters go into the report.
	engines []*engine.Engine
	// rng draws the schedule (configuration, steps, faults, their parameters) and
	// drng the data (keys and values), so that the schedule of a seed never depends
	// on timing, even where the data does (keys near a backfill's position).
	rng  *rand.Rand
	drng *rand.Rand
	mem  *vec.PoolAllocator

	fs  *vfs.MemFS
	inj injector
	e   *engine.Engine
	eo  engine.Options
	// mesh carries the cross-node edges of a cluster-shaped seed over Arrow Flight,
	// and ctl its barriers and actors' reports over control streams (nil: channels).
	mesh *exchange.Mesh
	ctl  *control.Local
	// clog is a commit-log seed's version log and bucket (nil: the engine commits
	// into its directory).
	clog *clusterLog

	ta, tb *schema.Table
	// byVnode lists the keys of a's domain by vnode; hot are the vnodes most writes go to.
	byVnode [][]int64
	hot     []int
	domain  int64
	groups  int64

	cur       state
	refs      map[executors.Epoch]state
	committed executors.Epoch
	pending   int // writes since the last barrier
	views     []*view
	paused    bool // the engine is paused (Pause or pause on bootstrap)
	step      int

	// crash: the point armed by a crash step and the file system image taken there.
	crashAt    string
	crashImg   *vfs.MemFS
	crashEpoch executors.Epoch
	// lostWrites is the engine's LostWrites when the model last followed it.
	lostWrites int64
}

func (r *runner) tracef(format string, args ...any) {
	if r.opts.Trace != nil {
		fmt.Fprintf(r.opts.Trace, "seed %d step %d: %s\n", r.seed, r.step, fmt.Sprintf(format, args...))
	}
}

// fail records a mismatch; fatal ones end the seed.
func (r *runner) fail(inv, format string, args ...any) {
	r.rep.Mismatches++
	if len(r.rep.Failures) < 100 {
		r.rep.Failures = append(r.rep.Failures, Failure{Seed: r.seed, Step: r.step, Invariant: inv, Message: fmt.Sprintf(format, args...)})
	}
}

// call runs one engine call under the call timeout; an error is a failure of the
// seed (the simulation injects no fault that should make a call fail, except the
// I/O error steps, which do not use call).
func (r *runner) call(what string, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.CallTimeout)
	defer cancel()
	if err := f(ctx); err != nil {
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		inv := "engine error"
		if errors.Is(err, context.DeadlineExceeded) {
			inv = "I5 liveness"
		}
		r.fail(inv, "%s: %v", what, err)
		return errStop
	}
	return nil
}

func (r *runner) open(pauseOnBootstrap bool) error {
	r.eo.FS = faultfs.Wrap(r.fs, &r.inj)
	r.eo.PauseOnBootstrap = pauseOnBootstrap
	e, err := engine.Open(r.ctx, "db", r.eo)
	if err != nil {
		r.fail("engine error", "open: %v", err)
		return errStop
	}
	r.e, r.lostWrites = e, 0
	r.engines = append(r.engines, e)
	if pauseOnBootstrap {
		r.paused = true
	}
	return nil
}

func (r *runner) run() error {
	rng := r.rng
	vnodeCounts := []int{8, 16, 32, 64, 128, 256, 8 + rng.IntN(249)}
	r.ta = tableA(vnodeCounts[rng.IntN(len(vnodeCounts))])
	r.tb = tableB(vnodeCounts[rng.IntN(len(vnodeCounts))])
	r.domain = int64(200 + rng.IntN(1800))
	r.groups = int64(3 + rng.IntN(28))
	r.eo = engine.Options{
		Nodes:           1 + rng.IntN(3),
		VnodeCount:      vnodeCounts[rng.IntN(len(vnodeCounts))],
		BarrierInterval: -1,
		CheckpointEvery: 1 + rng.IntN(5),
		ChunkSize:       []int{7, 64, 256, 1024}[rng.IntN(4)],
		BackfillWorkers: 1 + rng.IntN(3),
		ChannelCapacity: 4 + rng.IntN(16),
		MemTableSize:    64 << 20, // no flush, so no WAL rotation, while a fault is armed
		// A node over budget holds its backfills back (1 byte: every epoch once it
		// has written). Chosen by the seed, not drawn, so that the schedules of the
		// seeds stay what they were before the budget existed.
		BackfillMemoryBudget: []int64{0, 0, 1, 64 << 10}[r.seed%4],
		// Half the seeds commit every checkpoint they can by ingesting sstables (the
		// others' checkpoints stay below the default size), chosen by the seed too.
		IngestBytes: []int{0, 1}[r.seed/4%2],
		// The joins' cached state: the default budget, one byte (every entry evicted
		// as soon as it is made: every probe refills), 4 KiB (some keys stay), or no
		// cache. By the seed too.
		StateCacheBytes: []int64{0, 1, 4 << 10, -1}[r.seed/8%4],
		// Checkpoints spaced while a backfill runs (the default: a second between
		// them, far longer than a simulated round, unless a node's uncommitted bytes
		// pass the budget or a backfill becomes done), or at every barrier
		// CheckpointEvery names. By the seed too.
		BackfillCheckpointInterval: []time.Duration{0, -1}[r.seed/32%2],
		OnBarrier: func(bs engine.BarrierStats) {
			if bs.Ingested > 0 {
				r.ingested.Add(1)
			}
			if bs.Checkpoint {
				r.sinceCkpt.Store(0)
			} else if r.sinceCkpt.Add(1) >= int64(r.eo.CheckpointEvery) {
				r.spaced.Add(1)
			}
		},
		Mem:    r.mem,
		Logger: r.opts.Logger,
		Hooks:  engine.Hooks{BeforeCommit: r.beforeCommit, AfterCommit: r.afterCommit, Rebalance: r.rebalance},
	}
	// A quarter of the seeds have a dedicated backfill node (their last, of at
	// least two), where their views of odd parallelism backfill (by the seed).
	if r.seed/64%4 == 1 {
		r.eo.Nodes = max(r.eo.Nodes, 2)
		r.eo.NodeRoles = make([]string, r.eo.Nodes)
		r.eo.NodeRoles[r.eo.Nodes-1] = "backfill"
		r.tracef("config: node %d has role backfill", r.eo.Nodes-1)
	}
	// A third of the seeds are cluster-shaped: at least two nodes, every edge between
	// actors on different nodes an Arrow Flight stream in package wire's encoding,
	// and every barrier and actor's report a frame of a node's control stream (chosen by the
	// seed, so the other seeds' schedules stay as they were). So is half of the
	// commit-log seeds with node stores (below): the nearest to a cluster of
	// processes that runs in one.
	logSeed := r.opts.Postgres != "" && r.seed%3 == 1
	nodeStores := logSeed && r.seed/3%2 == 1
	if r.seed%3 == 0 || nodeStores && r.seed/6%2 == 1 {
		r.eo.Nodes = max(r.eo.Nodes, 2)
		mesh, err := exchange.NewMesh(r.eo.Nodes, 0, r.mem)
		if err != nil {
			return err
		}
		r.mesh, r.eo.Exchange = mesh, mesh
		ctl, err := control.NewLocal()
		if err != nil {
			return err
		}
		r.ctl, r.eo.Control = ctl, ctl
		r.tracef("config: cluster-shaped: cross-node edges over Arrow Flight, barriers and reports over control streams")
	}
	if logSeed {
		if err := r.setupLog(); err != nil {
			return err
		}
		r.rep.LogSeeds++
		r.tracef("config: commits through a version log in PostgreSQL and a file:// bucket")
		// Half of them give every node a store of its own, as a compute process
		// has: each checkpoint exports every node's store apart and commits them
		// together, and every store applies the commit (by the seed).
		if nodeStores {
			r.eo.NodeStores = true
			r.rep.Sometimes["seeds_with_node_stores"]++
			r.tracef("config: a store per node, committed together")
			if r.mesh != nil {
				r.rep.Sometimes["seeds_with_node_stores_over_flight"]++
			}
		}
	}
	r.tracef("config: a %d vnodes, b %d vnodes, %d keys, %d groups, %d nodes, %d vnodes for state, checkpoint every %d barriers, chunks of %d, %d backfill workers, channels of %d, backfill memory budget %d (0: the default), ingest from %d bytes (0: the default), backfill checkpoint interval %v (0: the default)",
		r.ta.VnodeCount, r.tb.VnodeCount, r.domain, r.groups, r.eo.Nodes, r.eo.VnodeCount, r.eo.CheckpointEvery, r.eo.ChunkSize, r.eo.BackfillWorkers, r.eo.ChannelCapacity, r.eo.BackfillMemoryBudget, r.eo.IngestBytes, r.eo.BackfillCheckpointInterval)
	r.keysByVnode()
	if err := r.open(false); err != nil {
		return err
	}
	r.refs[r.e.CommittedEpoch()] = newState()
	r.committed = r.e.CommittedEpoch()
	for _, t := range []*schema.Table{r.ta, r.tb} {
		if err := r.call("create table "+t.Name, func(ctx context.Context) error {
			return r.e.CreateTable(ctx, t, engine.TableOptions{Parallelism: 1 + rng.IntN(3)})
		}); err != nil {
			return err
		}
	}
	if err := r.afterCall(); err != nil {
		return err
	}
	// Initial data, so that backfills have a snapshot to read: none, a little, or
	// most of the key domain.
	switch rng.IntN(3) {
	case 0:
	case 1:
		for i, n := 0, 1+rng.IntN(5); i < n; i++ {
			if err := r.writeStep("insert"); err != nil {
				return err
			}
		}
	case 2:
		var rows []aRow
		for k := int64(0); k < r.domain; k++ {
			if r.drng.IntN(4) > 0 {
				rows = append(rows, r.randA(k))
			}
		}
		for len(rows) > 0 {
			n := min(len(rows), 500)
			if err := r.writeA("insert", r.e.Insert, rows[:n]); err != nil {
				return err
			}
			for _, x := range rows[:n] {
				r.cur.a[x.k] = x
			}
			r.rep.RowsByOp["insert"] += int64(n)
			rows = rows[n:]
		}
	}
	if err := r.afterCall(); err != nil {
		return err
	}
	for r.step = 1; r.step <= r.opts.Steps; r.step++ {
		r.rep.Steps++
		if err := r.ctx.Err(); err != nil {
			return err
		}
		if err := r.doStep(); err != nil {
			return err
		}
	}
	r.step++
	return r.finish()
}

// keysByVnode spreads a's key domain over its vnodes and picks the hot vnodes.
func (r *runner) keysByVnode() {
	r.byVnode = make([][]int64, r.ta.VnodeCount)
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	for k := int64(0); k < r.domain+400; k++ {
		b.Append(k)
	}
	arr := b.NewArray()
	defer arr.Release()
	var buf []byte
	for k := 0; k < arr.Len(); k++ {
		buf = vec.AppendKeyColumn(buf[:0], arr, k, r.ta.Columns[0].Type, false, true)
		v := vec.VnodeOf(buf, r.ta.VnodeCount)
		r.byVnode[v] = append(r.byVnode[v], int64(k))
	}
	for i, n := 0, 1+r.rng.IntN(4); i < n; i++ {
		r.hot = append(r.hot, r.rng.IntN(r.ta.VnodeCount))
	}
}

func (r *runner) doStep() error {
	x := r.rng.IntN(100)
	switch {
	case x < 38:
		ops := []string{"insert", "insert", "update", "pk_update", "delete", "range_delete", "b"}
		return r.writeStep(ops[r.rng.IntN(len(ops))])
	case x < 55:
		return r.barrierStep()
	case x < 63:
		return r.createStep()
	case x < 71:
		return r.rescaleStep()
	case x < 77:
		return r.pauseStep()
	case x < 83:
		return r.throttleStep()
	case x < 93:
		if r.mesh != nil && r.rng.IntN(2) == 0 {
			return r.breakStep()
		}
		return r.crashStep()
	default:
		if r.clog != nil && r.rng.IntN(2) == 0 {
			return r.logFaultStep()
		}
		return r.ioErrorStep()
	}
}

// afterCall records the reference state of a newly committed epoch and checks it.
// Every barrier the engine injects comes from a call of the simulation, after every
// write it made before the call, so the committed state is the current model.
func (r *runner) afterCall() error {
	e := r.e.CommittedEpoch()
	if e == r.committed {
		return nil
	}
	if e < r.committed {
		r.fail("I6 durability", "committed epoch went back from %d to %d", r.committed, e)
		return errStop
	}
	r.committed = e
	r.refs[e] = r.cur.clone()
	r.pending = 0
	r.rep.Checkpoints++
	return r.check("checkpoint")
}

// barrier injects one barrier, then records and checks what it committed.
func (r *runner) barrier() error {
	if err := r.call("barrier", func(ctx context.Context) error { _, _, err := r.e.Barrier(ctx); return err }); err != nil {
		return err
	}
	r.rep.Barriers++
	r.pending = 0
	return r.afterCall()
}

// checkpoint injects a checkpoint barrier, then records and checks what it committed.
func (r *runner) checkpoint() error {
	if err := r.call("checkpoint", func(ctx context.Context) error { _, err := r.e.WaitCheckpoint(ctx); return err }); err != nil {
		return err
	}
	r.rep.Barriers++
	r.pending = 0
	return r.afterCall()
}
