package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// Output is one downstream of a dispatcher: typically a bounded channel into another
// actor. Send blocks while the downstream is full (backpressure) and fails when ctx is
// done. A chunk sent is owned by the receiver.
type Output interface {
	Actor() executors.ActorID
	Send(ctx context.Context, m executors.Message) error
}

// ChanOutput is an Output over a channel.
type ChanOutput struct {
	ID executors.ActorID
	C  chan executors.Message
}

// Actor implements Output.
func (o ChanOutput) Actor() executors.ActorID { return o.ID }

// Send implements Output.
func (o ChanOutput) Send(ctx context.Context, m executors.Message) error {
	select {
	case o.C <- m:
		return nil
	case <-ctx.Done():
		m.Release()
		return ctx.Err()
	}
}

// HashDispatcher sends each visible row of a chunk to the output that owns its vnode
// (mapping[vnode] indexes outputs), sharing the chunk's record: each output gets the
// same columns with its own visibility. An update pair whose halves land on different
// outputs becomes a Delete on one and an Insert on the other. Barriers and watermarks
// go to every output. At a barrier with an Update mutation naming this dispatcher's
// actor, the new outputs are added before the barrier is sent, and the removed outputs
// are dropped and the new mapping installed after it. Not safe for concurrent use.
type HashDispatcher struct {
	actor   executors.ActorID
	k       vec.Kernels
	mem     memory.Allocator
	outputs []Output
	mapping vnode.Mapping // vnode -> index into outputs

	vnodes []uint16
	split  []vec.SplitOutput
}

// NewHashDispatcher returns the dispatcher of actor, for chunks of the table whose
// kernels are k, over outputs with mapping (len = the table's vnode count, values
// < len(outputs)).
func NewHashDispatcher(actor executors.ActorID, k vec.Kernels, mapping vnode.Mapping, outputs []Output, mem memory.Allocator) (*HashDispatcher, error) {
	if err := mapping.Validate(k.Table().VnodeCount, len(outputs)); err != nil {
		return nil, fmt.Errorf("dispatcher of actor %d: %w", actor, err)
	}
	return &HashDispatcher{actor: actor, k: k, mem: mem, outputs: slices.Clone(outputs), mapping: slices.Clone(mapping)}, nil
}

// Outputs lists the current outputs' actors, in mapping index order.
func (d *HashDispatcher) Outputs() []executors.ActorID {
	ids := make([]executors.ActorID, len(d.outputs))
	for i, o := range d.outputs {
		ids[i] = o.Actor()
	}
	return ids
}

// Dispatch sends m downstream; it takes ownership of m's chunk. newOutputs supplies the
// Output of every actor an Update mutation adds (it is called only for those).
func (d *HashDispatcher) Dispatch(ctx context.Context, m executors.Message, newOutput func(executors.Output) (Output, error)) error {
	switch {
	case m.Chunk != nil:
		return d.dispatchChunk(ctx, m.Chunk)
	case m.Barrier != nil:
		return d.dispatchBarrier(ctx, m.Barrier, newOutput)
	default:
		for _, o := range d.outputs {
			if err := o.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	}
}

func (d *HashDispatcher) dispatchChunk(ctx context.Context, c *vec.Chunk) error {
	defer c.Release()
	n := c.NumRows()
	if cap(d.vnodes) < n {
		d.vnodes = make([]uint16, n)
	}
	if len(d.split) != len(d.outputs) {
		d.split = make([]vec.SplitOutput, len(d.outputs))
	}
	d.k.Split(c, d.mapping, d.vnodes[:n], d.split)
	for i, so := range d.split {
		if so.Rows == 0 {
			continue
		}
		vis := memory.NewResizableBuffer(d.mem)
		vis.Resize(len(so.Vis))
		copy(vis.Bytes(), so.Vis)
		var out *vec.Chunk
		if so.OwnOps {
			ops := vec.NewOps(d.mem, n, vec.Insert)
			copy(vec.OpsOf(ops.Bytes()), so.Ops)
			out = c.WithOpsAndVisibility(ops, vis)
			ops.Release()
		} else {
			out = c.WithVisibility(vis)
		}
		vis.Release()
		if err := d.outputs[i].Send(ctx, executors.ChunkMessage(out)); err != nil {
			return fmt.Errorf("dispatcher of actor %d: to actor %d: %w", d.actor, d.outputs[i].Actor(), err)
		}
	}
	return nil
}

func (d *HashDispatcher) dispatchBarrier(ctx context.Context, b *executors.Barrier, newOutput func(executors.Output) (Output, error)) error {
	var upd *executors.DispatcherUpdate
	if u, ok := b.Mutation.(executors.Update); ok {
		for i := range u.Dispatchers {
			if u.Dispatchers[i].Actor == d.actor {
				upd = &u.Dispatchers[i]
			}
		}
	}
	// Before the barrier: connect the new outputs, so they receive it.
	if upd != nil {
		for _, spec := range upd.AddOutputs {
			if newOutput == nil {
				return fmt.Errorf("dispatcher of actor %d: barrier %d adds actor %d, and no output factory was given", d.actor, b.Curr, spec.Actor)
			}
			o, err := newOutput(spec)
			if err != nil {
				return fmt.Errorf("dispatcher of actor %d: barrier %d: connect actor %d: %w", d.actor, b.Curr, spec.Actor, err)
			}
			d.outputs = append(d.outputs, o)
		}
	}
	for _, o := range d.outputs {
		if err := o.Send(ctx, executors.BarrierMessage(b)); err != nil {
			return fmt.Errorf("dispatcher of actor %d: barrier %d to actor %d: %w", d.actor, b.Curr, o.Actor(), err)
		}
	}
	if upd == nil {
		return nil
	}
	// After it: drop the removed outputs, install the new mapping over what remains.
	kept := d.outputs[:0]
	for _, o := range d.outputs {
		if !slices.Contains(upd.RemoveOutputs, o.Actor()) {
			kept = append(kept, o)
		}
	}
	d.outputs = kept
	if upd.Mapping != nil {
		if err := upd.Mapping.Validate(d.k.Table().VnodeCount, len(d.outputs)); err != nil {
			return fmt.Errorf("dispatcher of actor %d: barrier %d: new mapping: %w", d.actor, b.Curr, err)
		}
		d.mapping = slices.Clone(upd.Mapping)
	} else if err := d.mapping.Validate(d.k.Table().VnodeCount, len(d.outputs)); err != nil {
		return fmt.Errorf("dispatcher of actor %d: barrier %d removed outputs without a new mapping: %w", d.actor, b.Curr, err)
	}
	return nil
}
