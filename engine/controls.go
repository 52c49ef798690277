package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/seed04fbb902/weir/executors"
)

// Pause pauses every job's snapshot reads (and sources) at the next barrier; writes
// and the change stream keep flowing. It is the engine's pause, which Resume undoes;
// a view's own pause (PauseMV) is apart from it.
func (e *Engine) Pause(ctx context.Context) error { return e.setEnginePaused(ctx, true) }

// Resume undoes Pause and Options.PauseOnBootstrap. Views under their own pause
// (MVOptions.Paused, PauseMV) stay paused until ResumeMV.
func (e *Engine) Resume(ctx context.Context) error { return e.setEnginePaused(ctx, false) }

func (e *Engine) setEnginePaused(ctx context.Context, paused bool) error {
	what, m := "resume", executors.Mutation(executors.Resume{})
	if paused {
		what, m = "pause", executors.Pause{}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.retryLost(ctx, func() error {
		if err := e.usable(); err != nil {
			return err
		}
		if _, err := e.round(ctx, roundSpec{mutation: m}); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		e.paused = paused
		return nil
	})
}

// maxControlAttempts bounds the attempts at a control, the first included, when the
// nodes it reached were lost (retryLost): it is applied again at most twice.
const maxControlAttempts = 3

// retryLost runs op, a control that leaves the same state however often it is
// applied (a pause, a resume, a rate limit), and runs it again when it failed because
// a node was lost and the engine recovered from that: the caller asked for a state,
// not for a round, and a compute process's crash is the engine's to absorb. op looks
// up what it changes each time, since the recovery reloaded the catalog. Any other
// failure, a failed recovery or a closing engine is returned as it is.
func (e *Engine) retryLost(ctx context.Context, op func() error) error {
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || attempt == maxControlAttempts || !errors.Is(err, ErrNodeLost) || ctx.Err() != nil || e.usable() != nil {
			return err
		}
		e.controlRetries++
		e.log.Warn("a control met a lost node; applying it again after the recovery", "attempt", attempt, "error", err)
	}
}

// PauseMV pauses the backfill of view name at the next barrier (a checkpoint, which
// persists it: the view stays paused across recoveries and reopens) until ResumeMV:
// no snapshot row is read, while barriers and the upstream's changes keep flowing, as
// a rate limit of 0 does, but the view's rate limit is kept for the resume. Pausing a
// paused view, or one whose backfill is done, changes nothing that shows.
func (e *Engine) PauseMV(ctx context.Context, name string) error {
	return e.setPaused(ctx, name, true)
}

// ResumeMV undoes PauseMV and MVOptions.Paused for view name. The engine's own pause
// (Pause), if any, still holds.
func (e *Engine) ResumeMV(ctx context.Context, name string) error {
	return e.setPaused(ctx, name, false)
}

func (e *Engine) setPaused(ctx context.Context, name string, paused bool) error {
	what := "resume"
	if paused {
		what = "pause"
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.retryLost(ctx, func() error { return e.setPausedOnce(ctx, name, what, paused) })
}

func (e *Engine) setPausedOnce(ctx context.Context, name, what string, paused bool) error {
	if err := e.usable(); err != nil {
		return err
	}
	o, ok := e.cat.objects[name]
	if !ok || o.Kind != kindMV {
		return fmt.Errorf("%s %s: no such materialized view", what, name)
	}
	j, ok := e.g.jobs[name]
	if !ok {
		return fmt.Errorf("%s %s: the view has no running job", what, name)
	}
	var frags []executors.FragmentID
	for _, f := range j.scans() {
		frags = append(frags, f.id)
	}
	// A Pause or Resume without fragments is the engine's: a view with no backfill
	// fragment has nothing to pause, and only its flag is persisted.
	var m executors.Mutation
	switch {
	case len(frags) == 0:
	case paused:
		m = executors.Pause{Fragments: frags}
	default:
		m = executors.Resume{Fragments: frags}
	}
	_, err := e.round(ctx, roundSpec{mutation: m, checkpoint: true, stage: func() error {
		o.Paused = paused
		return e.cat.stage(e.store, o, false)
	}})
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, name, err)
	}
	return nil
}

// SetRateLimit sets a materialized view's backfill rate limit (rows per second per
// actor; nil: unlimited, 0: paused), persisted with the view.
func (e *Engine) SetRateLimit(ctx context.Context, name string, limit *int64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.retryLost(ctx, func() error { return e.setRateLimitOnce(ctx, name, limit) })
}

func (e *Engine) setRateLimitOnce(ctx context.Context, name string, limit *int64) error {
	if err := e.usable(); err != nil {
		return err
	}
	o, ok := e.cat.objects[name]
	if !ok || o.Kind != kindMV {
		return fmt.Errorf("set rate limit of %s: no such materialized view", name)
	}
	if err := checkRateLimit(limit); err != nil {
		return fmt.Errorf("set rate limit of %s: %w", name, err)
	}
	j := e.g.jobs[name]
	l := copyLimit(limit)
	limits := map[executors.FragmentID]*int64{}
	for _, f := range j.scans() {
		limits[f.id] = l
	}
	_, err := e.round(ctx, roundSpec{mutation: executors.Throttle{Limits: limits}, checkpoint: true, stage: func() error {
		o.RateLimit = l
		return e.cat.stage(e.store, o, false)
	}})
	if err != nil {
		return fmt.Errorf("set rate limit of %s: %w", name, err)
	}
	return nil
}

// copyLimit is a copy of a rate limit, so that the caller's and the catalog's never
// alias.
func copyLimit(l *int64) *int64 {
	if l == nil {
		return nil
	}
	v := *l
	return &v
}
