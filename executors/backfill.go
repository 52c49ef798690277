package executors

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
)

// BackfillConfig describes an arrangement backfill actor.
type BackfillConfig struct {
	Actor    ActorID
	Fragment FragmentID
	// Upstream is S1, the upstream table's schema, and UpstreamID its table id.
	Upstream   *schema.Table
	UpstreamID uint32
	// S2 is the upstream columns the view needs plus every pk column, in upstream
	// order: the columns of the chunks the backfill emits.
	S2 []int
	// Vnodes is the upstream vnodes the actor owns.
	Vnodes *vnode.Bitmap
	// Node is the actor's node; Progress its progress table (over Upstream, Vnodes).
	Node     *storage.Node
	Progress *storage.ProgressTable
	// BatchSize is the most rows of a snapshot batch (0: storage's default); Workers
	// the snapshot read's goroutines (0: 1).
	BatchSize int
	Workers   int
	// RateLimit is the snapshot rows per second of this actor: nil unlimited, 0 paused.
	RateLimit *int64
	// BufferBudget is the memory the epoch's upstream buffer may hold before it
	// spills to a file in SpillDir (0: DefaultBufferBudget; "": the system's
	// temporary directory).
	BufferBudget int64
	SpillDir     string
	// Paused starts the backfill under its own pause (a view created or left paused
	// by itself), until a Resume naming its Fragment; EnginePaused under the
	// engine's, until a Resume without fragments (see Pause).
	Paused       bool
	EnginePaused bool
	// NoShuffle makes this the no-shuffle backfill, the baseline: the actor runs on
	// the node of the one upstream actor that owns the same vnodes, and reads the
	// upstream's state through the node's view (committed plus the node's sealed,
	// uncommitted epochs) instead of replicating the change stream; it reads its
	// vnodes one after the other with one worker, so one position orders them all.
	NoShuffle bool
	// LocalUpstream makes an arrangement backfill whose vnodes' upstream owners all
	// run on its own node read the upstream through the node's view (committed plus
	// the node's sealed epochs) and skip replication: the memory of the replicated
	// epochs is saved. The planner sets it only for upstream tables (which are never
	// rescheduled, so their actors never leave the node).
	LocalUpstream bool
	// Pressure, when set, reports that the node holds more uncommitted state than it
	// should (checkpoints falling behind what is written). While it does in an epoch
	// that has snapshot rows, the epoch takes no snapshot batch but those its barrier
	// takes ready (at most twice the read's channel, as at every barrier): more would
	// only grow the epoch that the next checkpoint must write, and the memory held
	// until then. It is asked again at each upstream message and whenever the channel
	// Relief gives is closed (nil Relief: at each upstream message only, which an idle
	// upstream sends at the barrier). Upstream chunks still flow, the read stays open
	// (its workers wait on their full channel), and the at-least-one-row rule is
	// untouched.
	Pressure func() bool
	// Relief returns a channel closed when the pressure may have eased (the next
	// checkpoint commit); it is asked before Pressure, so that an easing between the
	// two is not missed.
	Relief func() <-chan struct{}
	// OnFinishing, when set, is called once, from the actor's goroutine, when every
	// owned vnode's snapshot has ended: the backfill is done at the next barrier, so
	// the engine may inject one at once instead of at its next tick.
	OnFinishing func()
	Mem         memory.Allocator
}

// readsNode reports whether the backfill reads the upstream through its node's view
// rather than a replicated table.
func (c *BackfillConfig) readsNode() bool { return c.NoShuffle || c.LocalUpstream }

// BackfillStats is an arrangement backfill actor's progress.
type BackfillStats struct {
	Rows      int64 // snapshot rows consumed (restored from the progress table)
	Completed int   // owned vnodes Completed
	Owned     int   // owned vnodes
	Done      bool  // the backfill is over and its last progress persisted
	Started   bool  // progress has been loaded
	// ReplicatedBytes is the memory held by replicated epochs not yet committed (0
	// for backfills that read their node's view), and ReplicatedPeak its largest value
	// seen after a barrier.
	ReplicatedBytes, ReplicatedPeak int
	// SnapshotBatches and UpstreamMessages count what the executor took from each
	// source while backfilling (the fairness rule's measure).
	SnapshotBatches, UpstreamMessages int64
	// SpilledChunks counts upstream chunks the epoch buffer wrote to disk.
	SpilledChunks int64
	// UpstreamRowsForwarded counts the upstream rows the actor passed downstream:
	// at once (rows of Completed vnodes, and every row once the backfill is over) or
	// at a barrier (buffered rows at or below their vnode's position). It starts at 0
	// with the actor (after a recovery or a rescale).
	UpstreamRowsForwarded int64
	// ReadsKept counts the barriers the snapshot read went on across (an epoch with no
	// upstream change) instead of being stopped and reopened.
	ReadsKept int64
	// ReadyTaken counts the snapshot batches (with rows) the read had ready when a
	// barrier came, taken before the barrier (their rows belong to the epoch) rather
	// than dropped with the read and read again in the next epoch.
	ReadyTaken int64
	// StopFlushed counts the snapshot batches (with rows) a read stopped at a barrier
	// delivered after ReadyTaken's: mostly the partial batches its workers were
	// filling, whose rows would otherwise be read again in the next epoch.
	StopFlushed int64
	// HeldBack counts the epochs in which the read, with rows already taken, found
	// the node's uncommitted state over its budget (BackfillConfig.Pressure) and took
	// no more batches until the barrier but those ready then.
	HeldBack int64
	// Local: the actor reads its node's store (a no-shuffle backfill, or an
	// arrangement backfill whose upstream owners all run on its node) rather than
	// replicating the change stream.
	Local bool
}

// ArrangementBackfill is the arrangement backfill executor (docs/design.md §6). Its
// input is the upstream's change stream (chunks of the upstream's full schema); it
// emits the upstream's rows projected to S2: first the snapshot of every owned vnode,
// read from the replicated table vnode by vnode in parallel and merged with the change
// stream, then (once every vnode is Completed) the change stream itself.
//
// Messages:
//   - the first barrier is passed on at once; before anything else the executor waits
//     until the committed epoch reaches its Prev and loads the owned vnodes' progress;
//   - upstream chunks are buffered until the barrier while backfilling, forwarded
//     (projected) afterwards;
//   - a barrier takes the batches the read has ready and, unless the read goes on
//     into the next epoch, stops it and takes the batches its workers were filling
//     (storage.SnapshotReader.Stop); then it marks and forwards the buffer,
//     replicates it, seals, persists progress, applies Pause/Resume/Throttle (and
//     Add's pause on bootstrap), and is passed on; a new snapshot read starts for the
//     next epoch unless paused;
//   - watermarks pass through.
//
// Fairness: the upstream has priority, but the executor never takes two upstream
// messages in a row while an unthrottled snapshot read is open: after an upstream
// message it waits for the next snapshot batch, so a busy upstream leaves the snapshot
// at least every other message of an epoch (a rate-limited read takes a batch after
// an upstream message only when one is ready).
type ArrangementBackfill struct {
	cfg   BackfillConfig
	input Executor
	mem   memory.Allocator
	rep   *storage.ReplicatedTable
	core  *backfillCore
	s2    *arrow.Schema

	started  bool
	initFrom Epoch // Prev of the first barrier, until initialised
	// readAt is the epoch whose upstream state this epoch's snapshot reads: the Prev
	// of the last barrier handled. A backfill that reads its node's store reads it as
	// of readAt, not as the upstream actors have sealed it since (they run ahead: the
	// changes of the epoch ending at the next barrier are sealed before that barrier
	// reaches this actor, and must come through the change stream, not the snapshot).
	readAt Epoch
	inited bool
	out    []Message

	pump       chan pumped
	pumpCancel context.CancelFunc
	pumpDone   chan struct{}

	snap     *storage.SnapshotReader
	snapView *storage.View
	snapDone bool // the snapshot channel closed this epoch

	lastUpstream  bool
	paused        bool // the engine's Pause
	ownPaused     bool // a Pause naming the fragment, or Paused
	bootstrapWait bool // Add with PauseOnBootstrap, or EnginePaused
	limit         *int64
	limiter       *rateLimiter

	nBatches, nUpstream int64 // while backfilling
	forwarded           int64 // upstream rows emitted
	nKept               int64 // barriers the snapshot read went on across
	nReady              int64 // snapshot batches taken at barriers (takeReady)
	nFlushed            int64 // and delivered by a stopped read (flushRead)
	nHeld               int64 // epochs whose snapshot intake Pressure ended early
	held                bool  // this epoch's was

	mu    sync.Mutex
	stats BackfillStats
}

type pumped struct {
	m   Message
	err error
}

// NewArrangementBackfill returns the backfill of cfg over input.
func NewArrangementBackfill(input Executor, cfg BackfillConfig) (*ArrangementBackfill, error) {
	if cfg.Mem == nil {
		cfg.Mem = memory.DefaultAllocator
	}
	if err := checkInput(cfg.Upstream, input.Schema()); err != nil {
		return nil, fmt.Errorf("backfill: %w", err)
	}
	var rep *storage.ReplicatedTable
	if !cfg.readsNode() {
		var err error
		rep, err = storage.NewReplicatedTable(cfg.Node.Store(), cfg.UpstreamID, cfg.Upstream, cfg.S2, cfg.Vnodes, cfg.Mem)
		if err != nil {
			return nil, fmt.Errorf("backfill of %s: %w", cfg.Upstream.Name, err)
		}
	}
	b := &ArrangementBackfill{cfg: cfg, input: input, mem: cfg.Mem, rep: rep, s2: cfg.Upstream.ProjectedArrowSchema(cfg.S2), limit: cfg.RateLimit, ownPaused: cfg.Paused, bootstrapWait: cfg.EnginePaused}
	b.stats.Owned = cfg.Vnodes.Len()
	return b, nil
}

// Schema implements Executor: S2.
func (b *ArrangementBackfill) Schema() *arrow.Schema { return b.s2 }

// Stats returns the actor's progress; safe to call from any goroutine.
func (b *ArrangementBackfill) Stats() BackfillStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

func (b *ArrangementBackfill) pausedNow() bool {
	return b.paused || b.ownPaused || b.bootstrapWait || (b.limit != nil && *b.limit == 0)
}

// Next implements Executor.
func (b *ArrangementBackfill) Next(ctx context.Context) (Message, error) {
	for {
		if len(b.out) > 0 {
			m := b.out[0]
			b.out = b.out[1:]
			return m, nil
		}
		if !b.started {
			m, err := b.input.Next(ctx)
			if err != nil {
				return Message{}, err
			}
			if m.Barrier == nil {
				m.Release()
				return Message{}, fmt.Errorf("backfill of %s: first message is %s, want a barrier", b.cfg.Upstream.Name, m)
			}
			b.started = true
			b.initFrom = m.Barrier.Prev
			b.applyMutation(m.Barrier)
			return m, nil // passed on before initialising
		}
		if !b.inited {
			if err := b.init(ctx); err != nil {
				return Message{}, err
			}
			continue
		}
		if err := b.step(ctx); err != nil {
			return Message{}, err
		}
	}
}

// init waits for the first barrier's epoch to commit, loads progress and starts
// reading.
func (b *ArrangementBackfill) init(ctx context.Context) error {
	name := b.cfg.Upstream.Name
	if err := b.cfg.Node.Store().WaitCommitted(ctx, uint64(b.initFrom)); err != nil {
		return fmt.Errorf("backfill of %s: first barrier: %w", name, err)
	}
	view, err := b.cfg.Node.View()
	if err != nil {
		return fmt.Errorf("backfill of %s: %w", name, err)
	}
	pos, rows, err := b.cfg.Progress.Load(view)
	view.Release()
	if err != nil {
		return fmt.Errorf("backfill of %s: %w", name, err)
	}
	core, err := newBackfillCore(b.cfg.Upstream, nil, b.cfg.S2, b.cfg.Vnodes, pos, rows, b.mem)
	if err != nil {
		return err
	}
	core.setBuffer(b.cfg.BufferBudget, b.cfg.SpillDir)
	b.core = core
	b.readAt = b.initFrom
	b.inited = true
	b.publish()
	var pctx context.Context
	pctx, b.pumpCancel = context.WithCancel(ctx)
	b.pump, b.pumpDone = make(chan pumped, 1), make(chan struct{})
	go b.runPump(pctx)
	return b.openSnapshot(ctx)
}

// runPump reads the input on its own goroutine, so that the executor can wait on the
// input and the snapshot at once.
func (b *ArrangementBackfill) runPump(ctx context.Context) {
	defer close(b.pumpDone)
	for {
		m, err := b.input.Next(ctx)
		select {
		case b.pump <- pumped{m, err}:
		case <-ctx.Done():
			m.Release()
			return
		}
		if err != nil {
			return
		}
	}
}

// publish copies the core's counters into the stats.
func (b *ArrangementBackfill) publish() {
	rows, completed, owned := b.core.stats()
	rb := 0
	if b.rep != nil {
		rb = b.rep.PrivateBytes()
	}
	b.mu.Lock()
	peak := max(b.stats.ReplicatedPeak, rb)
	b.stats = BackfillStats{Rows: rows, Completed: completed, Owned: owned, Done: b.core.Phase() == done, Started: true, ReplicatedBytes: rb, ReplicatedPeak: peak,
		SnapshotBatches: b.nBatches, UpstreamMessages: b.nUpstream, SpilledChunks: b.core.buf.spills, UpstreamRowsForwarded: b.forwarded, ReadsKept: b.nKept, ReadyTaken: b.nReady, StopFlushed: b.nFlushed, HeldBack: b.nHeld, Local: b.cfg.readsNode()}
	b.mu.Unlock()
}

// Close implements Executor.
func (b *ArrangementBackfill) Close() error {
	err := b.closeSnapshot()
	if b.pumpCancel != nil {
		// The pump may be blocked in input.Next: cancel it and wait, so that the input
		// is closed by this goroutine only.
		b.pumpCancel()
		<-b.pumpDone
		for {
			select {
			case p := <-b.pump:
				p.m.Release()
				continue
			default:
			}
			break
		}
	}
	if b.core != nil {
		b.core.release()
	}
	for _, m := range b.out {
		m.Release()
	}
	b.out = nil
	return errors.Join(err, b.input.Close())
}
