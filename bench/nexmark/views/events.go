package views

import (
	"context"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/gen"
	"github.com/seed04fbb902/weir/engine"
)

// WriteEvents inserts the generated events [from, to) into the tables person, auction
// and bid, in chunks of up to 4096 rows, and returns the first insert error.
func WriteEvents(ctx context.Context, e engine.DB, g *gen.Generator, mem memory.Allocator, from, to uint64) error {
	for kind, c := range g.Chunks(from, to, 4096, mem) {
		err := e.Insert(ctx, kind.String(), c.Record())
		c.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// PaceEvents paces a generator's events by the wall clock: every step it calls
// write(lo, hi) with the events [lo, hi) due by then at rate events/s from event
// from, until stop is closed (it returns nil) or write fails (it returns the error).
func PaceEvents(stop <-chan struct{}, from uint64, rate float64, step time.Duration, write func(lo, hi uint64) error) error {
	start, next := time.Now(), from
	tick := time.NewTicker(step)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
		due := from + uint64(time.Since(start).Seconds()*rate)
		if due <= next {
			continue
		}
		if err := write(next, due); err != nil {
			return err
		}
		next = due
	}
}
