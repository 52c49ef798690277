package engine

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
)

// BroadcastDispatcher sends every message to every output. A chunk is shared, never
// copied: it is retained once per output beyond the first. Barriers and watermarks go
// to every output. At a barrier with an Update for this dispatcher (actor and
// fragment), the new outputs are added before the barrier is sent and the removed
// ones dropped and closed after it (an update carries no mapping, and must leave at
// least one output). At a barrier with a Stop, the outputs to stopped actors are
// dropped and closed after it; a chunk sent when none is left is an error. Not safe
// for concurrent use.
type BroadcastDispatcher struct {
	outputSet
}

var _ Dispatcher = (*BroadcastDispatcher)(nil)

// NewBroadcastDispatcher returns the broadcast dispatcher of actor to fragment over
// outputs (at least one), which it owns.
func NewBroadcastDispatcher(actor executors.ActorID, fragment executors.FragmentID, outputs []Output) (*BroadcastDispatcher, error) {
	s, err := newOutputSet(actor, fragment, executors.Broadcast, outputs)
	if err != nil {
		return nil, err
	}
	if len(outputs) == 0 {
		return nil, fmt.Errorf("%s: no outputs", &s)
	}
	return &BroadcastDispatcher{s}, nil
}

// Dispatch implements Dispatcher.
func (d *BroadcastDispatcher) Dispatch(ctx context.Context, m executors.Message, newOutput func(executors.Output) (Output, error)) error {
	if err := d.broken(m); err != nil {
		return err
	}
	switch {
	case m.Chunk != nil:
		return d.fail(d.dispatchChunk(ctx, m.Chunk))
	case m.Barrier != nil:
		return d.fail(d.barrier(ctx, m.Barrier, newOutput, d.checkUpdate, nil))
	default:
		return d.fail(d.sendAll(ctx, m))
	}
}

func (d *BroadcastDispatcher) dispatchChunk(ctx context.Context, c *vec.Chunk) error {
	if len(d.outputs) == 0 {
		return d.noOutputs(c)
	}
	// We hold one reference throughout: every send but the last gets a new one, the
	// last gets ours.
	last := len(d.outputs) - 1
	for i, o := range d.outputs {
		if i < last {
			c.Retain()
		}
		if err := o.Send(ctx, executors.ChunkMessage(c)); err != nil {
			if i < last {
				c.Release()
			}
			return fmt.Errorf("%s: to actor %d: %w", d, o.Actor(), err)
		}
	}
	return nil
}

func (d *BroadcastDispatcher) checkUpdate(ch barrierChange) error {
	if ch.upd == nil {
		return nil
	}
	if ch.upd.Mapping != nil {
		return fmt.Errorf("%s: an update gives it a vnode mapping", d)
	}
	if ch.nextOutputs == 0 {
		return fmt.Errorf("%s: an update removes every output", d)
	}
	return nil
}

// SimpleDispatcher sends every message to its single output (Kind Simple), or, made by
// NewNoShuffleDispatcher, to its single co-located output actor that owns the same
// vnodes as the dispatcher's actor (Kind NoShuffle; routing is the same). Chunks,
// barriers and watermarks go through as they are. At a barrier with an Update for
// this dispatcher (actor and fragment), the output may be replaced: AddOutputs (the
// new one) is connected before the barrier, which both outputs then receive, and
// RemoveOutputs (the old one) is dropped and closed after it; there must be exactly
// one output after the barrier, or the update is an error naming the actor and epoch.
// At a barrier with a Stop naming the output's actor, the output is dropped and closed
// after the barrier, leaving none; a chunk sent then is an error. Not safe for
// concurrent use.
type SimpleDispatcher struct {
	outputSet
}

var _ Dispatcher = (*SimpleDispatcher)(nil)

// NewSimpleDispatcher returns the simple dispatcher of actor to fragment over output,
// which it owns.
func NewSimpleDispatcher(actor executors.ActorID, fragment executors.FragmentID, output Output) *SimpleDispatcher {
	return &SimpleDispatcher{outputSet{actor: actor, fragment: fragment, kind: executors.Simple, outputs: []Output{output}}}
}

// NewNoShuffleDispatcher returns the no-shuffle dispatcher of actor to fragment over
// output, which it owns: output's actor is co-located with actor and owns the same
// vnodes.
func NewNoShuffleDispatcher(actor executors.ActorID, fragment executors.FragmentID, output Output) *SimpleDispatcher {
	return &SimpleDispatcher{outputSet{actor: actor, fragment: fragment, kind: executors.NoShuffle, outputs: []Output{output}}}
}

// Dispatch implements Dispatcher.
func (d *SimpleDispatcher) Dispatch(ctx context.Context, m executors.Message, newOutput func(executors.Output) (Output, error)) error {
	if err := d.broken(m); err != nil {
		return err
	}
	switch {
	case m.Chunk != nil:
		if len(d.outputs) == 0 {
			return d.fail(d.noOutputs(m.Chunk))
		}
		o := d.outputs[0]
		if err := o.Send(ctx, m); err != nil {
			return d.fail(fmt.Errorf("%s: to actor %d: %w", d, o.Actor(), err))
		}
		return nil
	case m.Barrier != nil:
		b := m.Barrier
		return d.fail(d.barrier(ctx, b, newOutput, func(ch barrierChange) error {
			if ch.upd == nil {
				return nil
			}
			if ch.upd.Mapping != nil {
				return fmt.Errorf("%s: barrier %d gives it a vnode mapping", d, b.Curr)
			}
			if ch.nextOutputs != 1 {
				return fmt.Errorf("%s: barrier %d would leave it %d outputs, want exactly 1", d, b.Curr, ch.nextOutputs)
			}
			return nil
		}, nil))
	default:
		return d.fail(d.sendAll(ctx, m))
	}
}

// NewDispatcher builds the dispatcher that spec (from an Add mutation) gives actor,
// connecting spec.Outputs through newOutput. k (the kernels of the dispatched table)
// is needed only for a Hash dispatcher and may be nil otherwise. A spec for another
// actor, without outputs, naming an output twice, with more than one output for
// Simple or NoShuffle, or with a missing, superfluous or invalid mapping is an error
// naming the actor and fragment; no output is connected then. When connecting an
// output fails, those already connected are closed.
func NewDispatcher(actor executors.ActorID, spec executors.NewDispatcher, k vec.Kernels, newOutput func(executors.Output) (Output, error), mem memory.Allocator) (Dispatcher, error) {
	name := fmt.Sprintf("%s dispatcher of actor %d to fragment %d", spec.Kind, actor, spec.Fragment)
	if spec.Actor != actor {
		return nil, fmt.Errorf("%s: the spec is for actor %d", name, spec.Actor)
	}
	if len(spec.Outputs) == 0 {
		return nil, fmt.Errorf("%s: no outputs", name)
	}
	for i, o := range spec.Outputs {
		for _, p := range spec.Outputs[:i] {
			if p.Actor == o.Actor {
				return nil, fmt.Errorf("%s: actor %d is an output twice", name, o.Actor)
			}
		}
	}
	switch spec.Kind {
	case executors.Hash:
		if k == nil {
			return nil, fmt.Errorf("%s: no kernels", name)
		}
		if spec.Mapping == nil {
			return nil, fmt.Errorf("%s: no vnode mapping", name)
		}
		if err := spec.Mapping.Validate(k.Table().VnodeCount, len(spec.Outputs)); err != nil {
			return nil, fmt.Errorf("%s: %d outputs: %w", name, len(spec.Outputs), err)
		}
	case executors.Broadcast:
		if spec.Mapping != nil {
			return nil, fmt.Errorf("%s: a vnode mapping is given", name)
		}
	case executors.Simple, executors.NoShuffle:
		if len(spec.Outputs) != 1 {
			return nil, fmt.Errorf("%s: %d outputs, want exactly 1", name, len(spec.Outputs))
		}
		if spec.Mapping != nil {
			return nil, fmt.Errorf("%s: a vnode mapping is given", name)
		}
	default:
		return nil, fmt.Errorf("%s: unknown kind", name)
	}
	if newOutput == nil {
		return nil, fmt.Errorf("%s: no output factory", name)
	}
	outs := make([]Output, 0, len(spec.Outputs))
	for _, o := range spec.Outputs {
		out, err := newOutput(o)
		if err == nil && out.Actor() != o.Actor {
			out.Close()
			err = fmt.Errorf("got an output to actor %d", out.Actor())
		}
		if err != nil {
			for _, c := range outs {
				c.Close()
			}
			return nil, fmt.Errorf("%s: connect actor %d: %w", name, o.Actor, err)
		}
		outs = append(outs, out)
	}
	var d Dispatcher
	var err error
	switch spec.Kind {
	case executors.Hash:
		d, err = NewHashDispatcher(actor, spec.Fragment, k, spec.Mapping, outs, mem)
	case executors.Broadcast:
		d, err = NewBroadcastDispatcher(actor, spec.Fragment, outs)
	case executors.Simple:
		d = NewSimpleDispatcher(actor, spec.Fragment, outs[0])
	default:
		d = NewNoShuffleDispatcher(actor, spec.Fragment, outs[0])
	}
	if err != nil { // checked above; kept so that outputs never leak
		for _, c := range outs {
			c.Close()
		}
		return nil, err
	}
	return d, nil
}
