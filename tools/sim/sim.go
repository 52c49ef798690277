// Package sim is Weir's whole-engine simulation (TESTING.md layer 2): seeded random
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
package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/internal/faultfs"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
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
}

// Report holds the figures of a run (TESTING.md "Figures").
type Report struct {
	Seeds              int              `json:"seeds"`
	Steps              int64            `json:"steps"`
	Barriers           int64            `json:"barriers"`
	Checkpoints        int64            `json:"checkpoints"`
	CheckpointsChecked int64            `json:"checkpoints_checked"`
	RowsCompared       int64            `json:"rows_compared"`
	RowsByOp           map[string]int64 `json:"rows_by_op"`
	Views              map[string]int64 `json:"views"`
	Faults             map[string]int64 `json:"faults"`
	Sometimes          map[string]int64 `json:"sometimes"`
	Mismatches         int64            `json:"mismatches"`
	Failures           []Failure        `json:"failures,omitempty"`
	// ZeroCounters lists the "sometimes" counters and fault kinds that stayed 0: a
	// scenario the run never exercised. A run with any is a failed run.
	ZeroCounters []string `json:"zero_counters,omitempty"`
	Seconds      float64  `json:"seconds"`
}

// Failure is one mismatch (or an engine error the simulation did not expect), with
// the seed that replays it.
type Failure struct {
	Seed      uint64 `json:"seed"`
	Step      int    `json:"step"`
	Invariant string `json:"invariant"`
	Message   string `json:"message"`
}

func (f Failure) String() string {
	return fmt.Sprintf("seed %d step %d: %s: %s (replay: weir sim --seeds %d)", f.Seed, f.Step, f.Invariant, f.Message, f.Seed)
}

// FaultKinds and SometimesCounters are the counters a run must see above zero.
var (
	FaultKinds = []string{"crash_mid_epoch", "crash_before_commit", "crash_after_commit", "crash_during_rescale",
		"rescale", "pause", "resume", "throttle", "pause_on_bootstrap", "io_error_enospc", "io_error_eio"}
	SometimesCounters = []string{
		"update_straddling_position",        // a pk-changing update with one key backfilled and the other not
		"crash_mid_epoch_with_writes",       // a crash with uncommitted writes in flight
		"vnode_finishing_alone",             // a vnode Completed while others of its scan are not
		"inprogress_vnode_moved_by_rescale", // a rescale while a vnode is InProgress
		"actor_with_mixed_states",           // after a rescale, an actor owning vnodes in two or three states
		"pause_during_tombstone_run",        // a range delete of 20+ rows while a backfill is paused or throttled
		"view_over_backfilling_view",        // the view over a view created while its upstream view backfills
		"checkpoint_while_backfilling",      // a checkpoint checked with a backfill under way (I2 checked)
		"backfill_held_back_by_memory",      // an actor that stopped reading an epoch's snapshot over the memory budget
		"checkpoint_ingested",               // a checkpoint committed by ingesting sstables (half the seeds try every one)
	}
)

// NewReport returns an empty report with every counter present.
func NewReport() *Report {
	r := &Report{RowsByOp: map[string]int64{}, Views: map[string]int64{}, Faults: map[string]int64{}, Sometimes: map[string]int64{}}
	for _, k := range FaultKinds {
		r.Faults[k] = 0
	}
	for _, k := range SometimesCounters {
		r.Sometimes[k] = 0
	}
	return r
}

// Finish fills ZeroCounters.
func (r *Report) Finish() {
	r.ZeroCounters = nil
	for _, k := range FaultKinds {
		if r.Faults[k] == 0 {
			r.ZeroCounters = append(r.ZeroCounters, "faults."+k)
		}
	}
	for _, k := range SometimesCounters {
		if r.Sometimes[k] == 0 {
			r.ZeroCounters = append(r.ZeroCounters, "sometimes."+k)
		}
	}
}

// OK reports whether the run had no mismatch and no counter left at zero.
func (r *Report) OK() bool { return r.Mismatches == 0 && len(r.ZeroCounters) == 0 }

// errStop ends a seed early (after a failure was recorded).
var errStop = errors.New("sim: seed stopped")

type view struct {
	sh    *shape
	cols  []string
	limit *int64
	last  []engine.VnodeProgress
	// frozen: the view's backfill is paused (engine paused or rate limit 0) and its
	// committed snapshot rows must stay frozenRows (I5).
	frozen     bool
	frozenRows int64
	rescaled   bool
	par        int
}

func (v *view) throttledToZero() bool { return v.limit != nil && *v.limit == 0 }

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
	rep.Sometimes["checkpoint_ingested"] += r.ingested.Load()
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
	r.e = e
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
		OnBarrier: func(bs engine.BarrierStats) {
			if bs.Ingested > 0 {
				r.ingested.Add(1)
			}
		},
		Mem:    r.mem,
		Logger: r.opts.Logger,
		Hooks:  engine.Hooks{BeforeCommit: r.beforeCommit, AfterCommit: r.afterCommit, Rebalance: r.rebalance},
	}
	r.tracef("config: a %d vnodes, b %d vnodes, %d keys, %d groups, %d nodes, %d vnodes for state, checkpoint every %d barriers, chunks of %d, %d backfill workers, channels of %d, backfill memory budget %d (0: the default), ingest from %d bytes (0: the default)",
		r.ta.VnodeCount, r.tb.VnodeCount, r.domain, r.groups, r.eo.Nodes, r.eo.VnodeCount, r.eo.CheckpointEvery, r.eo.ChunkSize, r.eo.BackfillWorkers, r.eo.ChannelCapacity, r.eo.BackfillMemoryBudget, r.eo.IngestBytes)
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
		return r.crashStep()
	default:
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

func (r *runner) barrierStep() error {
	n := 1 + r.rng.IntN(3)
	for i := 0; i < n; i++ {
		if err := r.barrier(); err != nil {
			return err
		}
	}
	r.tracef("%d barriers", n)
	return nil
}

func (r *runner) view(name string) *view {
	for _, v := range r.views {
		if v.sh.name == name {
			return v
		}
	}
	return nil
}

func (r *runner) createStep() error {
	var cands []*shape
	for i := range shapes {
		sh := &shapes[i]
		if r.view(sh.name) != nil {
			continue
		}
		if sh.name == "mvmv" && r.view("pass") == nil {
			continue
		}
		cands = append(cands, sh)
	}
	if len(cands) == 0 {
		return r.barrierStep()
	}
	sh := cands[r.rng.IntN(len(cands))]
	v := &view{sh: sh, par: 1 + r.rng.IntN(4)}
	mo := engine.MVOptions{Parallelism: v.par, Background: true}
	// Most backfills are rate limited, so that they span many barriers and the
	// checks see InProgress vnodes; some start paused (0), some are unlimited.
	switch x := r.rng.IntN(6); {
	case x == 0:
		l := int64(0)
		v.limit = &l
	case x < 4:
		l := int64(1 + r.rng.IntN(1000))
		v.limit = &l
	}
	mo.RateLimit = v.limit
	if sh.name == "mvmv" {
		if up := r.view("pass"); up != nil && !r.done(up) {
			r.rep.Sometimes["view_over_backfilling_view"]++
		}
	}
	if err := r.call("create view "+sh.name, func(ctx context.Context) error {
		return r.e.CreateMV(ctx, sh.name, sh.plan(), mo)
	}); err != nil {
		return err
	}
	t, err := r.e.Table(sh.name)
	if err != nil {
		r.fail("engine error", "table of view %s: %v", sh.name, err)
		return errStop
	}
	for _, c := range t.Columns {
		v.cols = append(v.cols, c.Name)
	}
	r.views = append(r.views, v)
	r.rep.Views[sh.name]++
	r.tracef("create view %s parallelism %d limit %v", sh.name, v.par, fmtLimit(v.limit))
	if err := r.afterCall(); err != nil {
		return err
	}
	return r.freezeIfPaused(v)
}

func fmtLimit(l *int64) string {
	if l == nil {
		return "none"
	}
	return fmt.Sprint(*l)
}

// done reports whether v's backfill was complete at the last check.
func (r *runner) done(v *view) bool {
	if len(v.last) == 0 {
		return false
	}
	for _, p := range v.last {
		if p.State != vec.Completed {
			return false
		}
	}
	return true
}

// freezeIfPaused commits what a view read before it was paused, then records the
// committed snapshot rows that must not change while it stays paused (I5).
func (r *runner) freezeIfPaused(v *view) error {
	if !(r.paused || v.throttledToZero()) {
		v.frozen = false
		return nil
	}
	if err := r.checkpoint(); err != nil {
		return err
	}
	prog, err := r.e.VnodeProgress(v.sh.name)
	if err != nil {
		r.fail("engine error", "progress of %s: %v", v.sh.name, err)
		return errStop
	}
	v.frozen, v.frozenRows = true, sumRows(prog)
	return nil
}

func sumRows(ps []engine.VnodeProgress) int64 {
	var n int64
	for _, p := range ps {
		n += p.Rows
	}
	return n
}

func (r *runner) rescaleStep() error {
	if len(r.views) == 0 {
		return r.barrierStep()
	}
	v := r.views[r.rng.IntN(len(r.views))]
	p := 1 + r.rng.IntN(4)
	prog, err := r.e.VnodeProgress(v.sh.name)
	if err != nil {
		r.fail("engine error", "progress of %s: %v", v.sh.name, err)
		return errStop
	}
	if err := r.call(fmt.Sprintf("rescale %s to %d", v.sh.name, p), func(ctx context.Context) error {
		return r.e.RescheduleMV(ctx, v.sh.name, p)
	}); err != nil {
		return err
	}
	r.rep.Faults["rescale"]++
	if p != v.par && slices.ContainsFunc(prog, func(x engine.VnodeProgress) bool { return x.State == vec.InProgress }) {
		r.rep.Sometimes["inprogress_vnode_moved_by_rescale"]++
	}
	v.par, v.rescaled = p, true
	r.tracef("rescale %s to %d", v.sh.name, p)
	return r.afterCall()
}

// rebalance chooses the vnode mapping of a rescale: half the time the engine's balanced
// minimal move, else a degenerate split: every vnode on one actor (the others own
// none), or each vnode on a random actor.
func (r *runner) rebalance(m vnode.Mapping, from, to int) vnode.Mapping {
	out, _, err := vnode.Rebalance(m, from, to)
	if err != nil {
		// The engine reports the same error before calling the hook.
		return m
	}
	switch r.rng.IntN(4) {
	case 0:
		a := uint16(r.rng.IntN(to))
		for i := range out {
			out[i] = a
		}
		r.rep.Sometimes["actor_with_all_vnodes"]++
	case 1:
		for i := range out {
			out[i] = uint16(r.rng.IntN(to))
		}
	}
	owned := make([]bool, to)
	for _, a := range out {
		owned[a] = true
	}
	if slices.Contains(owned, false) {
		r.rep.Sometimes["actor_without_vnodes"]++
	}
	return out
}

func (r *runner) pauseStep() error {
	if r.paused {
		r.rep.Faults["resume"]++
		r.tracef("resume")
		return r.resume()
	}
	r.rep.Faults["pause"]++
	r.tracef("pause")
	return r.pause()
}

func (r *runner) throttleStep() error {
	if len(r.views) == 0 {
		return r.barrierStep()
	}
	v := r.views[r.rng.IntN(len(r.views))]
	var l *int64
	switch r.rng.IntN(4) {
	case 0:
		x := int64(0)
		l = &x
	case 1:
		x := int64(1)
		l = &x
	case 2:
		x := int64(10 + r.rng.IntN(500))
		l = &x
	}
	if err := r.call("throttle "+v.sh.name, func(ctx context.Context) error { return r.e.SetRateLimit(ctx, v.sh.name, l) }); err != nil {
		return err
	}
	r.rep.Faults["throttle"]++
	v.limit = l
	v.frozen = false
	r.tracef("throttle %s to %s", v.sh.name, fmtLimit(l))
	if err := r.afterCall(); err != nil {
		return err
	}
	return r.freezeIfPaused(v)
}

// finish ends a seed: every pause and limit lifted, barriers until every backfill is
// done (I5: within a bound), the final check (I1), then a clean close and reopen that
// must show the same state, and no Arrow memory left allocated.
func (r *runner) finish() error {
	if r.paused {
		if err := r.call("resume", r.e.Resume); err != nil {
			return err
		}
		r.paused = false
	}
	for _, v := range r.views {
		if v.limit != nil {
			if err := r.call("lift limit", func(ctx context.Context) error { return r.e.SetRateLimit(ctx, v.sh.name, nil) }); err != nil {
				return err
			}
			v.limit = nil
		}
		v.frozen = false
	}
	if err := r.afterCall(); err != nil {
		return err
	}
	const bound = 3000
	for i := 0; ; i++ {
		all := true
		for _, p := range r.e.Progress() {
			all = all && p.Done
		}
		if all {
			break
		}
		if i == bound {
			r.fail("I5 liveness", "backfills not done %d barriers after the last fault", bound)
			return errStop
		}
		time.Sleep(time.Millisecond)
		if err := r.barrier(); err != nil {
			return err
		}
	}
	if err := r.checkpoint(); err != nil {
		return err
	}
	for _, v := range r.views {
		if !r.done(v) {
			r.fail("I1 result", "view %s: Progress says done but not every vnode is Completed", v.sh.name)
		}
	}
	if err := r.e.Close(); err != nil {
		r.fail("engine error", "close: %v", err)
		r.e = nil
		return errStop
	}
	r.e = nil
	// The close's own checkpoint committed the same state under a newer epoch.
	if err := r.open(false); err != nil {
		return err
	}
	r.committed = r.e.CommittedEpoch()
	r.refs[r.committed] = r.cur.clone()
	if err := r.check("reopened after close"); err != nil {
		return err
	}
	err := r.e.Close()
	r.e = nil
	if err != nil {
		r.fail("engine error", "close: %v", err)
		return errStop
	}
	if n := r.mem.Allocated(); n != 0 {
		r.fail("memory", "%d bytes of Arrow memory left allocated after close", n)
	}
	return nil
}

// ---- Writes ----

func (r *runner) randKey() int64 {
	switch x := r.drng.IntN(10); {
	case x < 4:
		// A hot vnode.
		ks := r.byVnode[r.hot[r.drng.IntN(len(r.hot))]]
		if len(ks) > 0 {
			return ks[r.drng.IntN(len(ks))]
		}
	case x < 6:
		// Near a backfill's position.
		if k, ok := r.nearPosition(); ok {
			return k
		}
	}
	return r.drng.Int64N(r.domain)
}

// nearPosition returns a key a few steps from the committed position of an InProgress
// vnode of a backfill over a.
func (r *runner) nearPosition() (int64, bool) {
	delta := int64(r.drng.IntN(7)) - 3
	pick := r.drng.IntN(1 << 20)
	var cands [][]byte
	for _, v := range r.views {
		for _, p := range v.last {
			if p.Upstream == "a" && p.State == vec.InProgress && len(p.Position) > 0 {
				cands = append(cands, p.Position)
			}
		}
	}
	if len(cands) == 0 {
		return 0, false
	}
	k, err := decodeK(cands[pick%len(cands)])
	if err != nil {
		return 0, false
	}
	return max(0, k+delta), true
}

func decodeK(key []byte) (int64, error) {
	null, rest, err := vec.DecodeKeyMarker(key, false)
	if err != nil || null {
		return 0, fmt.Errorf("bad key %x", key)
	}
	k, _, err := vec.DecodeKeyInt64(rest, false)
	return k, err
}

func (r *runner) randA(k int64) aRow {
	row := aRow{k: k, g: r.drng.Int64N(r.groups), v: r.drng.Int64N(1000)}
	if r.drng.IntN(5) > 0 {
		s := fmt.Sprintf("s%d", r.drng.IntN(100))
		row.s = &s
	}
	return row
}

// existing returns up to n distinct existing keys of a, chosen around random keys.
func (r *runner) existing(n int) []int64 {
	keys := map[int64]bool{}
	for i := 0; i < 4*n && len(keys) < n; i++ {
		k := r.randKey()
		for d := int64(0); d < 8; d++ {
			if _, ok := r.cur.a[k+d]; ok {
				keys[k+d] = true
				break
			}
		}
	}
	out := make([]int64, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (r *runner) writeA(what string, op func(context.Context, string, arrow.RecordBatch) error, rows []aRow) error {
	if len(rows) == 0 {
		return nil
	}
	rec := recordA(r.mem, r.ta, rows)
	defer rec.Release()
	if err := r.call(what+" into a", func(ctx context.Context) error { return op(ctx, "a", rec) }); err != nil {
		return err
	}
	r.pending++
	return nil
}

func (r *runner) writeStep(op string) error {
	n := 1 + r.rng.IntN(40)
	var rows []aRow
	switch op {
	case "insert":
		seen := map[int64]bool{}
		for i := 0; i < n; i++ {
			k := r.randKey()
			if seen[k] {
				continue
			}
			seen[k] = true
			rows = append(rows, r.randA(k))
		}
		if err := r.writeA("insert", r.e.Insert, rows); err != nil {
			return err
		}
		for _, x := range rows {
			r.cur.a[x.k] = x
		}
	case "update":
		for _, k := range r.existing(n) {
			rows = append(rows, r.randA(k))
		}
		if err := r.writeA("update", r.e.Update, rows); err != nil {
			return err
		}
		for _, x := range rows {
			r.cur.a[x.k] = x
		}
	case "pk_update":
		// Delete rows and insert them under new keys in the same epoch.
		var dels, ins []aRow
		taken := map[int64]bool{}
		for _, k := range r.existing(1 + r.rng.IntN(5)) {
			nk := r.randKey()
			if _, ok := r.cur.a[nk]; ok || taken[nk] {
				continue
			}
			taken[nk] = true
			old := r.cur.a[k]
			dels = append(dels, old)
			nr := old
			nr.k, nr.v = nk, (old.v+1)%1000
			ins = append(ins, nr)
			if r.straddles(k, nk) {
				r.rep.Sometimes["update_straddling_position"]++
			}
		}
		if err := r.writeA("pk-changing update (delete)", r.e.Delete, dels); err != nil {
			return err
		}
		for _, x := range dels {
			delete(r.cur.a, x.k)
		}
		if err := r.writeA("pk-changing update (insert)", r.e.Insert, ins); err != nil {
			return err
		}
		for _, x := range ins {
			r.cur.a[x.k] = x
		}
		rows = ins
	case "delete":
		for _, k := range r.existing(n) {
			rows = append(rows, r.cur.a[k])
		}
		if err := r.writeA("delete", r.e.Delete, rows); err != nil {
			return err
		}
		for _, x := range rows {
			delete(r.cur.a, x.k)
		}
	case "range_delete":
		lo := r.randKey()
		hi := lo + int64(20+r.rng.IntN(300))
		for k := lo; k < hi; k++ {
			if x, ok := r.cur.a[k]; ok {
				rows = append(rows, x)
			}
		}
		if err := r.writeA("range delete", r.e.Delete, rows); err != nil {
			return err
		}
		for _, x := range rows {
			delete(r.cur.a, x.k)
		}
		if len(rows) >= 20 {
			for _, v := range r.views {
				if (r.paused || (v.limit != nil && *v.limit <= 1)) && !r.done(v) {
					r.rep.Sometimes["pause_during_tombstone_run"]++
					break
				}
			}
		}
	case "b":
		var bs []bRow
		seen := map[int64]bool{}
		for i := 0; i < 1+r.drng.IntN(8); i++ {
			id := r.drng.Int64N(r.groups + 3)
			if !seen[id] {
				seen[id] = true
				bs = append(bs, bRow{id: id, w: r.drng.Int64N(100)})
			}
		}
		del := r.rng.IntN(3) == 0
		rec := recordB(r.mem, r.tb, bs)
		defer rec.Release()
		fn, what := r.e.Insert, "insert into b"
		if del {
			fn, what = r.e.Delete, "delete from b"
		}
		if err := r.call(what, func(ctx context.Context) error { return fn(ctx, "b", rec) }); err != nil {
			return err
		}
		r.pending++
		for _, x := range bs {
			if del {
				delete(r.cur.b, x.id)
			} else {
				r.cur.b[x.id] = x
			}
		}
		r.rep.RowsByOp["b_"+what[:6]] += int64(len(bs))
		r.tracef("%s: %d rows", what, len(bs))
		return nil
	}
	r.rep.RowsByOp[op] += int64(len(rows))
	r.tracef("%s: %d rows", op, len(rows))
	return nil
}

// straddles reports whether, for some unfinished backfill over a, one of the keys is
// already backfilled (at or below its vnode's committed position, or in a Completed
// vnode) and the other is not.
func (r *runner) straddles(k1, k2 int64) bool {
	for _, v := range r.views {
		if r.done(v) {
			continue
		}
		in := func(k int64) (bool, bool) {
			var buf []byte
			buf = vec.AppendKeyInt64(append(buf, vec.KeyNullMarker(false)), k, false)
			vn := r.vnodeOfK(k)
			for _, p := range v.last {
				if p.Upstream == "a" && p.Scan == 0 && int(p.Vnode) == vn {
					return backfilled(p, buf), true
				}
			}
			return false, false
		}
		b1, ok1 := in(k1)
		b2, ok2 := in(k2)
		if ok1 && ok2 && b1 != b2 {
			return true
		}
	}
	return false
}

func (r *runner) vnodeOfK(k int64) int {
	for v, ks := range r.byVnode {
		if i := sort.Search(len(ks), func(i int) bool { return ks[i] >= k }); i < len(ks) && ks[i] == k {
			return v
		}
	}
	return -1
}

// backfilled reports whether an upstream row with pk key is in a backfill's committed
// prefix: its vnode is Completed, or InProgress with the position at or after key.
func backfilled(p engine.VnodeProgress, key []byte) bool {
	switch p.State {
	case vec.Completed:
		return true
	case vec.InProgress:
		return p.Position != nil && string(key) <= string(p.Position)
	}
	return false
}

// ---- Faults ----

func (r *runner) cloneFS() *vfs.MemFS {
	pct := []int{0, 0, 50, 100}[r.rng.IntN(4)]
	cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: pct}
	if pct > 0 {
		cfg.RNG = rand.New(rand.NewPCG(r.rng.Uint64(), r.rng.Uint64()))
	}
	return r.fs.CrashClone(cfg)
}

func (r *runner) beforeCommit(epoch executors.Epoch) {
	r.inj.activate()
	if r.crashAt == "before_commit" && r.crashImg == nil {
		r.crashImg, r.crashEpoch = r.cloneFS(), epoch
	}
}

func (r *runner) afterCommit(epoch executors.Epoch) {
	r.inj.deactivate()
	if r.crashAt == "after_commit" && r.crashImg == nil {
		r.crashImg, r.crashEpoch = r.cloneFS(), epoch
	}
}

func (r *runner) crashStep() error {
	kinds := []string{"mid_epoch", "before_commit", "after_commit", "during_rescale"}
	kind := kinds[r.rng.IntN(len(kinds))]
	want := r.committed // the epoch the reopened engine must hold
	var land *state     // the model at the epoch that lands, when it is a new one
	switch kind {
	case "mid_epoch":
		if r.pending > 0 {
			r.rep.Sometimes["crash_mid_epoch_with_writes"]++
		}
		r.crashImg = r.cloneFS()
	case "before_commit", "after_commit":
		r.crashAt = kind
		for i := 0; i < 8 && r.crashImg == nil; i++ {
			if err := r.call("barrier", func(ctx context.Context) error { _, _, err := r.e.Barrier(ctx); return err }); err != nil {
				return err
			}
			r.rep.Barriers++
		}
	case "during_rescale":
		if len(r.views) == 0 {
			return r.barrierStep()
		}
		v := r.views[r.rng.IntN(len(r.views))]
		p := 1 + r.rng.IntN(4)
		r.crashAt = []string{"before_commit", "after_commit"}[r.rng.IntN(2)]
		if err := r.call("rescale", func(ctx context.Context) error { return r.e.RescheduleMV(ctx, v.sh.name, p) }); err != nil {
			return err
		}
		r.rep.Faults["rescale"]++
		if r.crashAt == "after_commit" {
			v.par, v.rescaled = p, true
		}
	}
	if r.crashImg == nil {
		r.fail("sim", "crash %s: no crash image was taken", kind)
		return errStop
	}
	if r.crashAt == "after_commit" {
		want = r.crashEpoch
		s := r.cur.clone()
		land = &s
	}
	img := r.crashImg
	r.crashAt, r.crashImg = "", nil
	r.rep.Faults["crash_"+kind]++
	r.tracef("crash %s (epoch %d must survive)", kind, want)
	if err := r.e.Crash(); err != nil {
		r.fail("engine error", "crash: %v", err)
		return errStop
	}
	r.e, r.fs = nil, img
	return r.reopen(want, land, nil)
}

// reopen opens the engine on r.fs after a crash or a fault. The committed epoch must
// be want, whose model is land when it is a new epoch; or, when newer is set (after a
// failed WAL sync), any epoch after want, whose model is newer. The model goes back
// to the committed state.
func (r *runner) reopen(want executors.Epoch, land, newer *state) error {
	bootPaused := r.rng.IntN(4) == 0
	if bootPaused && !r.paused {
		r.rep.Faults["pause_on_bootstrap"]++
	}
	if err := r.open(bootPaused || r.paused); err != nil {
		return err
	}
	got := r.e.CommittedEpoch()
	switch {
	case got == want && land != nil:
		r.refs[got] = *land
	case got > want && newer != nil:
		r.refs[got] = *newer
		r.rep.Sometimes["failed_sync_epoch_landed"]++
	case got != want:
		r.fail("I6 durability", "reopened at epoch %d, want %d", got, want)
		return errStop
	}
	if _, ok := r.refs[got]; !ok {
		r.fail("I6 durability", "reopened at epoch %d, which the simulation never committed", got)
		return errStop
	}
	for ep := range r.refs {
		if ep > got {
			delete(r.refs, ep)
		}
	}
	r.committed = got
	r.cur = r.refs[got].clone()
	r.pending = 0
	if err := r.check("after reopening"); err != nil {
		return err
	}
	return r.refreeze()
}

// ioErrorStep injects disk full into the WAL write, or EIO into the WAL sync, of a
// checkpoint's commit. The checkpoint must fail and not be committed; the engine then
// refuses work; after the fault clears, a reopen holds the last committed epoch (or,
// after a failed sync, possibly the failed one, never a mix).
//
// Pebble ends the process when a commit that switches WAL files fails (storage's
// TestFatalFaultsEndProcess), and it switches files when the commit does not fit the
// memtable. So the faulted commit must be small: the step pauses the backfills (unless
// they are), commits what they read, flushes (a fresh memtable), writes a few rows and
// faults that checkpoint; after the reopen it resumes them again.
func (r *runner) ioErrorStep() error {
	kind := []string{"enospc", "eio"}[r.rng.IntN(2)]
	wasPaused := r.paused
	if !wasPaused {
		if err := r.pause(); err != nil {
			return err
		}
	}
	if err := r.checkpoint(); err != nil {
		return err
	}
	if err := r.e.Flush(); err != nil {
		r.fail("engine error", "flush: %v", err)
		return errStop
	}
	if err := r.writeStep("insert"); err != nil {
		return err
	}
	r.inj.arm(kind)
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.CallTimeout)
	_, err := r.e.WaitCheckpoint(ctx)
	cancel()
	hit := r.inj.disarm()
	r.rep.Barriers++
	switch {
	case err == nil && hit:
		r.fail("I6 durability", "checkpoint succeeded although its WAL %s failed", kind)
		return errStop
	case err == nil:
		r.fail("sim", "checkpoint wrote no WAL record to fault")
		return errStop
	case !hit:
		r.fail("engine error", "checkpoint failed without an injected fault: %v", err)
		return errStop
	}
	r.rep.Faults["io_error_"+kind]++
	r.tracef("checkpoint failed with injected %s: %v", kind, err)
	if got := r.e.CommittedEpoch(); got != r.committed {
		r.fail("I6 durability", "checkpoint failed (%v) but the committed epoch moved from %d to %d", err, r.committed, got)
	}
	if _, _, err := r.e.Barrier(r.ctx); err == nil {
		r.fail("I6 durability", "the engine accepted a barrier after a failed checkpoint")
	}
	// Closing a store whose WAL failed reports that failure again; that is expected.
	_ = r.e.Crash()
	r.e = nil
	// The failed epoch's number is not returned; after a failed sync any newer epoch
	// that lands must be it, holding the current model.
	var newer *state
	if kind == "eio" {
		s := r.cur.clone()
		newer = &s
	}
	if err := r.reopen(r.committed, nil, newer); err != nil {
		return err
	}
	if wasPaused {
		return nil
	}
	return r.resume()
}

// pause pauses the engine and freezes every view (I5).
func (r *runner) pause() error {
	if err := r.call("pause", r.e.Pause); err != nil {
		return err
	}
	r.paused = true
	if err := r.afterCall(); err != nil {
		return err
	}
	return r.refreeze()
}

// resume resumes the engine; the views throttled to 0 stay frozen (I5).
func (r *runner) resume() error {
	if err := r.call("resume", r.e.Resume); err != nil {
		return err
	}
	r.paused = false
	r.unfreeze()
	if err := r.afterCall(); err != nil {
		return err
	}
	return r.refreeze()
}

func (r *runner) unfreeze() {
	for _, v := range r.views {
		v.frozen = false
	}
}

// refreeze records anew which views are paused, and their committed rows (I5).
func (r *runner) refreeze() error {
	r.unfreeze()
	for _, v := range r.views {
		if err := r.freezeIfPaused(v); err != nil {
			return err
		}
	}
	return nil
}

// injector fails WAL operations of one checkpoint's commit: armed by a step, active
// from the BeforeCommit hook to the AfterCommit hook. Pebble calls it from its own
// goroutines.
type injector struct {
	mu     sync.Mutex
	kind   string
	armed  bool
	active bool
	hit    bool
}

func (j *injector) arm(kind string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.kind, j.armed, j.hit = kind, true, false
}

func (j *injector) activate() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.active = j.armed
}

func (j *injector) deactivate() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.active = false
}

// disarm ends the fault and reports whether it was injected.
func (j *injector) disarm() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	hit := j.hit
	j.armed, j.active, j.hit = false, false, false
	return hit
}

// MaybeError implements errorfs.Injector: it fails the WAL's writes or syncs, and
// those of the sstables a checkpoint writes to ingest (a seed that ingests commits its
// faulted checkpoint either way; a failed sstable is an ordinary error, which fails
// the engine as a failed WAL write does).
func (j *injector) MaybeError(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, ".log") && !strings.Contains(op.Path, storage.IngestDirName) {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.active {
		return nil
	}
	switch {
	case j.kind == "enospc" && op.Kind == errorfs.OpFileWrite:
		j.hit = true
		return syscall.ENOSPC
	case j.kind == "eio" && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData):
		j.hit = true
		return syscall.EIO
	}
	return nil
}

// String implements errorfs.Injector.
func (j *injector) String() string { return "sim WAL fault injector" }

// Merge adds the figures of o to r.
func (r *Report) Merge(o *Report) {
	r.Seeds += o.Seeds
	r.Steps += o.Steps
	r.Barriers += o.Barriers
	r.Checkpoints += o.Checkpoints
	r.CheckpointsChecked += o.CheckpointsChecked
	r.RowsCompared += o.RowsCompared
	r.Mismatches += o.Mismatches
	for _, m := range []struct{ dst, src map[string]int64 }{
		{r.RowsByOp, o.RowsByOp}, {r.Views, o.Views}, {r.Faults, o.Faults}, {r.Sometimes, o.Sometimes},
	} {
		for k, v := range m.src {
			m.dst[k] += v
		}
	}
	r.Failures = append(r.Failures, o.Failures...)
	sort.SliceStable(r.Failures, func(i, j int) bool { return r.Failures[i].Seed < r.Failures[j].Seed })
}
