package executors

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
)

// Executor is one stage of an actor's chain. The actor calls Next on the last
// executor of its chain in a loop; each executor pulls from its input the same way.
//
// The contract:
//   - Next returns the next message, blocking until one is ready or ctx is done. It
//     never returns an empty message with a nil error.
//   - A returned chunk belongs to the caller, which must Release it. Its record has the
//     executor's Schema; invisible rows do not exist logically.
//   - Barriers are returned in epoch order, each exactly once, and every chunk between
//     two barriers belongs to the first barrier's Curr epoch. An executor that buffers
//     rows emits what belongs to an epoch before that epoch's closing barrier.
//   - A barrier's mutation is applied by every executor it concerns before the barrier
//     is passed on (unless the executor documents otherwise).
//   - An error is final: the actor stops and the engine recovers from the last
//     checkpoint. Errors name the table, vnode or epoch they concern.
//   - Close releases what the executor holds (buffered chunks, iterators, goroutines)
//     and closes its inputs; it may be called at any time, once.
//
// Executors are not safe for concurrent use: one actor goroutine drives a chain.
type Executor interface {
	Next(ctx context.Context) (Message, error)
	Schema() *arrow.Schema
	Close() error
}
