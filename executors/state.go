package executors

import (
	"context"
	"fmt"

	"github.com/seed04fbb902/weir/storage"
)

// sealer is a state table (or progress table) sealed at every barrier.
type sealer interface {
	Seal(epoch uint64) error
}

// stateEpochs is what every stateful executor does with its state across barriers:
// seal its tables at each barrier's Prev; read them through a node view renewed every
// epoch (taken lazily); and after the very first barrier, wait until that barrier's
// Prev is committed before reading (a new or rescheduled actor must read fully
// persisted state; the coordinator commits that checkpoint only after collecting the
// barrier, so the wait happens at the start of the following Next).
type stateEpochs struct {
	node    *storage.Node
	view    *storage.View // nil: take one before the next read
	epoch   Epoch         // the epoch of the data being read (Curr of the last barrier)
	started bool          // the first barrier was seen
	waiting bool          // waitFor must be committed before the next read
	waitFor uint64
}

// endEpoch seals tables at b.Prev and drops the view; at the first barrier it arranges
// the commit wait. Nil entries of tables are skipped by the callers.
func (s *stateEpochs) endEpoch(b *Barrier, tables ...sealer) error {
	for _, t := range tables {
		if err := t.Seal(uint64(b.Prev)); err != nil {
			return fmt.Errorf("seal epoch %d: %w", b.Prev, err)
		}
	}
	s.releaseView()
	s.epoch = b.Curr
	if !s.started {
		s.started = true
		s.waiting, s.waitFor = true, uint64(b.Prev)
	}
	return nil
}

// awaitCommit blocks, after the first barrier, until its Prev is committed.
func (s *stateEpochs) awaitCommit(ctx context.Context) error {
	if !s.waiting {
		return nil
	}
	if err := s.node.Store().WaitCommitted(ctx, s.waitFor); err != nil {
		return fmt.Errorf("first barrier: %w", err)
	}
	s.waiting = false
	return nil
}

// readView returns the epoch's view, taking it when needed.
func (s *stateEpochs) readView() (*storage.View, error) {
	if s.view == nil {
		v, err := s.node.View()
		if err != nil {
			return nil, fmt.Errorf("epoch %d: %w", s.epoch, err)
		}
		s.view = v
	}
	return s.view, nil
}

func (s *stateEpochs) releaseView() {
	if s.view != nil {
		s.view.Release()
		s.view = nil
	}
}
