package executors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
)

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
	before := b.core.Phase()
	out, err := b.core.snapshot(sb)
	if err != nil {
		return err
	}
	if before == backfilling && b.core.Phase() == finishing && b.cfg.OnFinishing != nil {
		b.cfg.OnFinishing()
	}
	b.emit(out)
	b.publish()
	return nil
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
