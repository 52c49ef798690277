package executors

import (
	"context"
	"fmt"
	"slices"

	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
)

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

// onBarrier runs step 4 of docs/design.md §6.
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
