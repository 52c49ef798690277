package executors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
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
	Mem    memory.Allocator
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

// ArrangementBackfill is the arrangement backfill executor (DESIGN.md §6). Its input is
// the upstream's change stream (chunks of the upstream's full schema); it emits the
// upstream's rows projected to S2: first the snapshot of every owned vnode, read from
// the replicated table vnode by vnode in parallel and merged with the change stream,
// then (once every vnode is Completed) the change stream itself.
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

// openSnapshot starts this epoch's snapshot read, unless paused or done.
func (b *ArrangementBackfill) openSnapshot(ctx context.Context) error {
	b.snapDone = false
	if b.core.Phase() != backfilling || b.pausedNow() {
		return nil
	}
	starts := b.core.pending()
	if len(starts) == 0 {
		return nil
	}
	view, src, err := b.source()
	if err != nil {
		return fmt.Errorf("backfill of %s: %w", b.cfg.Upstream.Name, err)
	}
	req := storage.SnapshotRequest{Vnodes: starts, Projection: b.cfg.S2, BatchSize: b.cfg.BatchSize, Workers: b.cfg.Workers, Mem: b.mem}
	if b.cfg.NoShuffle {
		req.Workers = 1
	}
	// The limiter lives across epochs (a new one per epoch would grant a token at
	// every barrier); a Throttle replaces it.
	if b.limit != nil {
		if b.limiter == nil {
			b.limiter = newRateLimiter(*b.limit)
		}
		req.Limit, req.Unused = b.limiter.wait, b.limiter.giveBack
	}
	r, err := storage.OpenSnapshot(ctx, src, req)
	if err != nil {
		view.Release()
		return fmt.Errorf("backfill of %s: %w", b.cfg.Upstream.Name, err)
	}
	b.snap, b.snapView = r, view
	return nil
}

// source opens the snapshot source of the next read: the replicated table, or for a
// no-shuffle backfill the upstream through the node's view.
func (b *ArrangementBackfill) source() (*storage.View, storage.VnodeSource, error) {
	if b.cfg.readsNode() {
		view, err := b.cfg.Node.ViewAt(uint64(b.readAt))
		if err != nil {
			return nil, nil, err
		}
		return view, storage.ViewSource(view, b.cfg.UpstreamID, b.cfg.Upstream), nil
	}
	view, err := b.rep.View()
	if err != nil {
		return nil, nil, err
	}
	return view, storage.ReplicatedSource(b.rep, view), nil
}

// closeSnapshot stops the read; batches not received are dropped (positions stay those
// of the batches emitted).
func (b *ArrangementBackfill) closeSnapshot() error {
	var err error
	if b.snap != nil {
		err = b.snap.Close()
		b.snap = nil
	}
	if b.snapView != nil {
		b.snapView.Release()
		b.snapView = nil
	}
	return err
}

// step waits for one upstream message or snapshot batch and handles it.
func (b *ArrangementBackfill) step(ctx context.Context) error {
	var batches <-chan storage.SnapshotBatch
	if b.snap != nil && !b.snapDone {
		batches = b.snap.Batches()
	}
	var relief <-chan struct{}
	if batches != nil && b.core.epochRows > 0 && b.cfg.Pressure != nil && b.cfg.Pressure() {
		if b.cfg.Relief != nil {
			relief = b.cfg.Relief()
		}
		if relief == nil || b.cfg.Pressure() { // asked again: it may have eased meanwhile
			batches = nil // held back (see BackfillConfig.Pressure)
			if !b.held {
				b.held = true
				b.nHeld++
			}
		} else {
			relief = nil
		}
	}
	// Upstream priority, with a share for the snapshot: right after an upstream
	// message, the next message is a snapshot batch when one is ready, and when the
	// read is not rate limited, the executor waits for it (a busy upstream would
	// otherwise starve the snapshot to one row per barrier; its chunks only wait in
	// the buffer until the barrier anyway). A rate-limited read is never waited for,
	// so that barriers keep flowing.
	if batches != nil && b.lastUpstream {
		if b.limiter == nil {
			select {
			case sb, ok := <-batches:
				return b.onBatch(sb, ok)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case sb, ok := <-batches:
			return b.onBatch(sb, ok)
		default:
		}
	}
	select {
	case p := <-b.pump:
		return b.onUpstream(ctx, p)
	default:
	}
	select {
	case p := <-b.pump:
		return b.onUpstream(ctx, p)
	case sb, ok := <-batches:
		return b.onBatch(sb, ok)
	case <-relief: // ask Pressure again
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *ArrangementBackfill) onBatch(sb storage.SnapshotBatch, ok bool) error {
	b.lastUpstream = false
	if !ok {
		b.snapDone = true
		if err := b.snap.Err(); err != nil {
			return fmt.Errorf("backfill of %s: %w", b.cfg.Upstream.Name, err)
		}
		return nil
	}
	b.nBatches++
	out, err := b.core.snapshot(sb)
	if err != nil {
		return err
	}
	b.emit(out)
	b.publish()
	return nil
}

// takeReady takes the snapshot batches the open read has ready now: those in its
// channel and those its workers wait to send (a receive from a full channel takes in
// a waiting sender's batch), at most twice the channel's capacity (which is the
// read's worker count), so that workers filling new batches meanwhile cannot hold
// the barrier up.
func (b *ArrangementBackfill) takeReady() error {
	if b.snap == nil || b.snapDone {
		return nil
	}
	batches := b.snap.Batches()
	for range 2 * cap(batches) {
		select {
		case sb, ok := <-batches:
			if done, err := b.takeAtBarrier(sb, ok, &b.nReady); done {
				return err
			}
		default:
			return nil
		}
	}
	return nil
}

// flushRead stops the open read (storage.SnapshotReader.Stop) and takes every batch
// it delivers until its channel closes: the partial batches its workers were filling
// included, so that no row read this epoch is dropped and read again by the next
// epoch's read. A worker ends its batch within a few dozen rows, so the barrier waits
// for no more than the decode of one batch per worker.
func (b *ArrangementBackfill) flushRead() error {
	if b.snap == nil || b.snapDone {
		return nil
	}
	b.snap.Stop()
	for {
		sb, ok := <-b.snap.Batches()
		if done, err := b.takeAtBarrier(sb, ok, &b.nFlushed); done {
			return err
		}
	}
}

// takeAtBarrier handles a batch received at a barrier (ok false: the channel closed),
// counting it in *n when it has rows; done reports that taking should stop (the read
// ended, or an error).
func (b *ArrangementBackfill) takeAtBarrier(sb storage.SnapshotBatch, ok bool, n *int64) (done bool, err error) {
	if ok && sb.Rows > 0 {
		*n++
	}
	err = b.onBatch(sb, ok)
	return err != nil || !ok, err
}

func (b *ArrangementBackfill) onUpstream(ctx context.Context, p pumped) error {
	b.lastUpstream = true
	if b.core.Phase() == backfilling {
		b.nUpstream++
	}
	if p.err != nil {
		if errors.Is(p.err, io.EOF) {
			return p.err
		}
		// Returned in every phase, the finishing one included.
		return fmt.Errorf("backfill of %s: upstream: %w", b.cfg.Upstream.Name, p.err)
	}
	m := p.m
	switch {
	case m.Chunk != nil:
		out := b.core.upstream(m.Chunk)
		b.countForwarded(out)
		b.emit(out)
		return nil
	case m.Barrier != nil:
		return b.onBarrier(ctx, m.Barrier)
	default:
		b.out = append(b.out, m)
		return nil
	}
}

func (b *ArrangementBackfill) countForwarded(chunks []*vec.Chunk) {
	for _, c := range chunks {
		b.forwarded += int64(c.CountVisible())
	}
}

func (b *ArrangementBackfill) emit(chunks []*vec.Chunk) {
	for _, c := range chunks {
		b.out = append(b.out, ChunkMessage(c))
	}
}

// onBarrier runs step 4 of DESIGN.md §6.
func (b *ArrangementBackfill) onBarrier(ctx context.Context, br *Barrier) error {
	name := b.cfg.Upstream.Name
	// Flush: the batches the read has ready are this epoch's rows (read from its
	// snapshot): they are taken before the barrier, advancing their vnodes' positions
	// before the buffer is marked, instead of being dropped and read again by the next
	// epoch's read.
	if err := b.takeReady(); err != nil {
		return err
	}
	// The read goes on into the next epoch when this epoch brought no upstream
	// change (so the read's view still holds every row of the owned vnodes above
	// their positions, as a new read would), it gave rows (so no "at least one row"
	// read moves a position behind its back), and the barrier carries no mutation (a
	// pause, throttle or rescale changes what to read). Otherwise it is stopped, and
	// the batches its workers were filling are taken too, then it is closed.
	keep := b.snap != nil && !b.snapDone && b.core.buf.len() == 0 && b.core.epochRows > 0 && br.Mutation == nil
	if !keep {
		if err := b.flushRead(); err != nil {
			return err
		}
		if err := b.closeSnapshot(); err != nil {
			return fmt.Errorf("backfill of %s: barrier %d: %w", name, br.Curr, err)
		}
	}
	// At least one row per barrier when the snapshot gave nothing, never while paused.
	if b.core.Phase() == backfilling && b.core.epochRows == 0 && !b.pausedNow() && (b.limiter == nil || b.limiter.tryTake()) {
		if vs, ok := b.core.firstPending(); ok {
			view, src, err := b.source()
			if err != nil {
				return fmt.Errorf("backfill of %s: barrier %d: %w", name, br.Curr, err)
			}
			sb, err := storage.ReadOne(src, vs.Vnode, vs.After, b.cfg.S2, b.mem)
			if err == nil {
				var out []*vec.Chunk
				out, err = b.core.snapshot(sb)
				b.emit(out)
			}
			view.Release()
			if err != nil {
				return fmt.Errorf("backfill of %s: barrier %d: at least one row: %w", name, br.Curr, err)
			}
		}
	}
	emit, replicate, progress, err := b.core.barrier()
	if err != nil {
		return err
	}
	b.readAt = br.Prev // the epoch's changes are marked: the next read sees them
	b.countForwarded(emit)
	b.emit(emit)
	for i, c := range replicate {
		if err == nil && b.rep != nil {
			err = b.rep.WriteChunk(c)
		}
		c.Release()
		replicate[i] = nil
	}
	if err != nil {
		return fmt.Errorf("backfill of %s: barrier %d: replicate: %w", name, br.Curr, err)
	}
	if b.rep != nil {
		b.rep.Seal(uint64(br.Prev))
	}
	for _, p := range progress {
		if err := b.cfg.Progress.Set(p.Vnode, p.Progress); err != nil {
			return fmt.Errorf("backfill of %s: barrier %d: %w", name, br.Curr, err)
		}
	}
	if err := b.cfg.Progress.Seal(uint64(br.Prev)); err != nil {
		return fmt.Errorf("backfill of %s: barrier %d: %w", name, br.Curr, err)
	}
	b.held = false
	b.publish()
	b.applyMutation(br)
	b.out = append(b.out, BarrierMessage(br))
	if Stops(br.Mutation, b.cfg.Actor) {
		return nil
	}
	if keep {
		b.nKept++
		return nil
	}
	return b.openSnapshot(ctx)
}

// applyMutation records pause, resume and throttle.
func (b *ArrangementBackfill) applyMutation(br *Barrier) {
	switch m := br.Mutation.(type) {
	case Add:
		if m.PauseOnBootstrap && slices.Contains(m.Actors, b.cfg.Actor) {
			b.bootstrapWait = true
		}
	case Pause:
		if m.Engine() {
			b.paused = true
		} else if m.Names(b.cfg.Fragment) {
			b.ownPaused = true
		}
	case Resume:
		if m.Engine() {
			b.paused = false
			b.bootstrapWait = false
		} else if m.Names(b.cfg.Fragment) {
			b.ownPaused = false
		}
	case Throttle:
		if l, ok := m.Limit(b.cfg.Fragment); ok {
			b.limiter = nil
			if l == nil {
				b.limit = nil
			} else {
				v := *l
				b.limit = &v
			}
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

// rateLimiter is a token bucket of rows per second with a burst of one second.
type rateLimiter struct {
	mu     sync.Mutex
	rate   float64
	tokens float64
	last   time.Time
}

func newRateLimiter(rate int64) *rateLimiter {
	return &rateLimiter{rate: float64(rate), tokens: math.Min(float64(rate), 1), last: time.Now()}
}

func (l *rateLimiter) refill(now time.Time) {
	l.tokens = math.Min(l.rate, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
}

// giveBack returns n tokens granted for rows that were not read (up to the burst).
func (l *rateLimiter) giveBack(n int) {
	l.mu.Lock()
	l.tokens = math.Min(l.rate, l.tokens+float64(n))
	l.mu.Unlock()
}

// tryTake takes one token if one is free now.
func (l *rateLimiter) tryTake() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill(time.Now())
	if l.tokens >= 1 {
		l.tokens--
		return true
	}
	return false
}

// wait is the storage.SnapshotLimiter: it grants up to want rows, at least one,
// blocking until one token is free.
func (l *rateLimiter) wait(ctx context.Context, _ uint16, want int) (int, error) {
	for {
		l.mu.Lock()
		l.refill(time.Now())
		if l.tokens >= 1 {
			n := min(want, int(l.tokens))
			l.tokens -= float64(n)
			l.mu.Unlock()
			return n, nil
		}
		need := time.Duration((1 - l.tokens) / l.rate * float64(time.Second))
		l.mu.Unlock()
		select {
		case <-time.After(need):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
