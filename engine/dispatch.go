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
// done. Send takes ownership of m's chunk, also when it fails (it releases it then).
// Close signals the end of input to the downstream; a dispatcher calls it exactly once,
// when it drops the output, and sends nothing after it.
type Output interface {
	Actor() executors.ActorID
	Send(ctx context.Context, m executors.Message) error
	Close()
}

// ChanOutput is an Output over a channel. Close closes the channel: the downstream
// merge then drops this input.
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

// Close implements Output: it closes the channel.
func (o ChanOutput) Close() { close(o.C) }

// Dispatcher sends one actor's output messages to the actors of one downstream
// fragment. Every dispatcher sends barriers and watermarks to every output; how it
// routes chunks depends on its Kind. At a barrier:
//
//   - an executors.Update with a DispatcherUpdate for the dispatcher's actor and
//     fragment connects AddOutputs (through newOutput) before the barrier is sent, so
//     that the new outputs receive it, and drops and closes RemoveOutputs after it (a
//     hash dispatcher also installs the update's Mapping then);
//   - an executors.Stop drops and closes, after the barrier, the outputs to the actors
//     it names. A dispatcher may be left with no outputs that way: Outputs is then
//     empty and the actor should drop it.
//
// A dispatcher is not safe for concurrent use.
type Dispatcher interface {
	// Dispatch sends m downstream and takes ownership of m's chunk (also on error).
	// newOutput connects the outputs an Update mutation adds; it may be nil when no
	// barrier adds outputs.
	Dispatch(ctx context.Context, m executors.Message, newOutput func(executors.Output) (Output, error)) error
	// Outputs lists the current outputs' actors (for a hash dispatcher, in mapping
	// index order).
	Outputs() []executors.ActorID
	// Fragment is the downstream fragment the dispatcher feeds.
	Fragment() executors.FragmentID
	// Kind is how the dispatcher routes chunks.
	Kind() executors.DispatcherKind
	// Close closes every output; the dispatcher has no outputs afterwards.
	Close()
}

// outputSet is what every dispatcher shares: its identity, its outputs and the
// barrier-time changes to them. Not safe for concurrent use.
type outputSet struct {
	actor    executors.ActorID
	fragment executors.FragmentID
	kind     executors.DispatcherKind
	outputs  []Output

	gone []bool // scratch: gone[i] = outputs[i] is dropped after the barrier
	err  error  // the first Dispatch error: the dispatcher is broken after it
}

func newOutputSet(actor executors.ActorID, fragment executors.FragmentID, kind executors.DispatcherKind, outputs []Output) (outputSet, error) {
	s := outputSet{actor: actor, fragment: fragment, kind: kind}
	for _, o := range outputs {
		if s.index(o.Actor()) >= 0 {
			return s, fmt.Errorf("%s: actor %d is an output twice", &s, o.Actor())
		}
		s.outputs = append(s.outputs, o)
	}
	return s, nil
}

// String names the dispatcher in errors.
func (s *outputSet) String() string {
	return fmt.Sprintf("%s dispatcher of actor %d to fragment %d", s.kind, s.actor, s.fragment)
}

// Outputs implements Dispatcher.
func (s *outputSet) Outputs() []executors.ActorID {
	ids := make([]executors.ActorID, len(s.outputs))
	for i, o := range s.outputs {
		ids[i] = o.Actor()
	}
	return ids
}

// Fragment implements Dispatcher.
func (s *outputSet) Fragment() executors.FragmentID { return s.fragment }

// Kind implements Dispatcher.
func (s *outputSet) Kind() executors.DispatcherKind { return s.kind }

// Close implements Dispatcher.
func (s *outputSet) Close() {
	for _, o := range s.outputs {
		o.Close()
	}
	s.outputs = nil
}

func (s *outputSet) index(actor executors.ActorID) int {
	for i, o := range s.outputs {
		if o.Actor() == actor {
			return i
		}
	}
	return -1
}

// sendAll sends a barrier or a watermark to every output.
func (s *outputSet) sendAll(ctx context.Context, m executors.Message) error {
	for _, o := range s.outputs {
		if err := o.Send(ctx, m); err != nil {
			return fmt.Errorf("%s: %v to actor %d: %w", s, m, o.Actor(), err)
		}
	}
	return nil
}

// broken returns the first error of an earlier Dispatch (releasing m): a message may
// then have reached some outputs only, or a barrier changed the outputs halfway, so
// the dispatcher refuses to go on.
func (s *outputSet) broken(m executors.Message) error {
	if s.err != nil {
		m.Release()
	}
	return s.err
}

// fail records err (if not nil) as the dispatcher's first error and returns it.
func (s *outputSet) fail(err error) error {
	if err != nil && s.err == nil {
		s.err = err
	}
	return err
}

// noOutputs is the error of a chunk sent to a dispatcher without outputs; it releases
// the chunk.
func (s *outputSet) noOutputs(c *vec.Chunk) error {
	c.Release()
	return fmt.Errorf("%s: a chunk after every output was removed", s)
}

// barrierChange is what a barrier does to a dispatcher's outputs.
type barrierChange struct {
	upd  *executors.DispatcherUpdate // the Update for this dispatcher's actor, if any
	stop bool                        // the barrier carries a Stop
	// nextOutputs is the number of outputs after the barrier. gone (in the outputSet)
	// marks the outputs dropped after it.
	nextOutputs int
	removes     bool // some output is dropped
}

// plan works out, before anything is sent, what barrier b does to the outputs: it
// checks the Update for this actor (removed outputs exist, added ones do not) and
// marks in s.gone the outputs to drop after the barrier (removed or stopped).
func (s *outputSet) plan(b *executors.Barrier) (barrierChange, error) {
	var ch barrierChange
	var stop []executors.ActorID
	switch mu := b.Mutation.(type) {
	case executors.Update:
		for i := range mu.Dispatchers {
			if mu.Dispatchers[i].Actor == s.actor && mu.Dispatchers[i].Fragment == s.fragment {
				if ch.upd != nil {
					return ch, fmt.Errorf("%s: barrier %d updates it twice", s, b.Curr)
				}
				ch.upd = &mu.Dispatchers[i]
			}
		}
	case executors.Stop:
		ch.stop = true
		stop = mu.Actors
	}
	ch.nextOutputs = len(s.outputs)
	if ch.upd == nil && !ch.stop {
		return ch, nil
	}
	if cap(s.gone) < len(s.outputs) {
		s.gone = make([]bool, len(s.outputs))
	}
	s.gone = s.gone[:len(s.outputs)]
	clear(s.gone)
	mark := func(i int) {
		if !s.gone[i] {
			s.gone[i] = true
			ch.removes = true
			ch.nextOutputs--
		}
	}
	for _, a := range stop {
		if i := s.index(a); i >= 0 {
			mark(i)
		}
	}
	if ch.upd != nil {
		for _, a := range ch.upd.RemoveOutputs {
			i := s.index(a)
			if i < 0 {
				return ch, fmt.Errorf("%s: barrier %d removes actor %d, which is not an output", s, b.Curr, a)
			}
			mark(i)
		}
		for j, spec := range ch.upd.AddOutputs {
			if s.index(spec.Actor) >= 0 {
				return ch, fmt.Errorf("%s: barrier %d adds actor %d, which already is an output", s, b.Curr, spec.Actor)
			}
			for _, prev := range ch.upd.AddOutputs[:j] {
				if prev.Actor == spec.Actor {
					return ch, fmt.Errorf("%s: barrier %d adds actor %d twice", s, b.Curr, spec.Actor)
				}
			}
		}
		ch.nextOutputs += len(ch.upd.AddOutputs)
	}
	return ch, nil
}

// connect adds the outputs of the update (before the barrier is sent). The new
// outputs are not marked gone.
func (s *outputSet) connect(b *executors.Barrier, ch barrierChange, newOutput func(executors.Output) (Output, error)) error {
	if ch.upd == nil {
		return nil
	}
	for _, spec := range ch.upd.AddOutputs {
		if newOutput == nil {
			return fmt.Errorf("%s: barrier %d adds actor %d, and no output factory was given", s, b.Curr, spec.Actor)
		}
		o, err := newOutput(spec)
		if err != nil {
			return fmt.Errorf("%s: barrier %d: connect actor %d: %w", s, b.Curr, spec.Actor, err)
		}
		if o.Actor() != spec.Actor {
			o.Close()
			return fmt.Errorf("%s: barrier %d: connecting actor %d gave an output to actor %d", s, b.Curr, spec.Actor, o.Actor())
		}
		s.outputs = append(s.outputs, o)
		s.gone = append(s.gone, false)
	}
	return nil
}

// drop closes and removes the outputs marked gone (after the barrier), keeping the
// others in order.
func (s *outputSet) drop() {
	kept := s.outputs[:0]
	for i, o := range s.outputs {
		if i < len(s.gone) && s.gone[i] {
			o.Close()
			continue
		}
		kept = append(kept, o)
	}
	clear(s.outputs[len(kept):])
	s.outputs = kept
}

// barrier runs the common barrier protocol: plan, connect the added outputs, send
// the barrier to every output, then call after (if not nil) while s.gone still
// marks the outputs to drop, and drop them.
func (s *outputSet) barrier(ctx context.Context, b *executors.Barrier, newOutput func(executors.Output) (Output, error),
	check func(barrierChange) error, after func(barrierChange) error) error {
	ch, err := s.plan(b)
	if err != nil {
		return err
	}
	if check != nil {
		if err := check(ch); err != nil {
			return err
		}
	}
	if err := s.connect(b, ch, newOutput); err != nil {
		return err
	}
	if err := s.sendAll(ctx, executors.BarrierMessage(b)); err != nil {
		return err
	}
	if !ch.removes && ch.upd == nil {
		return nil
	}
	var aerr error
	if after != nil {
		aerr = after(ch)
	}
	if ch.removes {
		s.drop()
	}
	return aerr
}

// HashDispatcher sends each visible row of a chunk to the output that owns its vnode
// (mapping[vnode] indexes outputs), sharing the chunk's record: each output gets the
// same columns with its own visibility (an output that gets every visible row gets the
// chunk itself). An update pair whose halves land on different outputs becomes a
// Delete on one and an Insert on the other. Barriers and watermarks go to every
// output. At a barrier with an Update for this dispatcher (actor and fragment), the
// new outputs are added (at the end of the index order) before the barrier is sent,
// and the removed outputs are dropped and closed and the new mapping installed after
// it; without a new mapping, the old one keeps routing to the same actors, and must
// not route to a removed one. At a barrier with a Stop, the outputs to stopped actors
// are dropped and closed after it: either all of them (the dispatcher then has no
// outputs, and a chunk sent to it is an error) or only ones the mapping does not
// route to. Not safe for concurrent use.
type HashDispatcher struct {
	outputSet
	k       vec.Kernels
	mem     memory.Allocator
	mapping vnode.Mapping // vnode -> index into outputs

	vnodes []uint16
	split  []vec.SplitOutput
	remap  []int // scratch: old output index -> new, -1 when dropped
}

var _ Dispatcher = (*HashDispatcher)(nil)

// NewHashDispatcher returns the dispatcher of actor to fragment, for chunks of the
// table whose kernels are k, over outputs with mapping (len = the table's vnode count,
// values < len(outputs)). The dispatcher owns the outputs; the mapping is copied.
func NewHashDispatcher(actor executors.ActorID, fragment executors.FragmentID, k vec.Kernels, mapping vnode.Mapping, outputs []Output, mem memory.Allocator) (*HashDispatcher, error) {
	s, err := newOutputSet(actor, fragment, executors.Hash, outputs)
	if err != nil {
		return nil, err
	}
	if k == nil {
		return nil, fmt.Errorf("%s: no kernels", &s)
	}
	if err := mapping.Validate(k.Table().VnodeCount, len(outputs)); err != nil {
		return nil, fmt.Errorf("%s: %w", &s, err)
	}
	return &HashDispatcher{outputSet: s, k: k, mem: mem, mapping: slices.Clone(mapping)}, nil
}

// Dispatch implements Dispatcher.
func (d *HashDispatcher) Dispatch(ctx context.Context, m executors.Message, newOutput func(executors.Output) (Output, error)) error {
	if err := d.broken(m); err != nil {
		return err
	}
	switch {
	case m.Chunk != nil:
		return d.fail(d.dispatchChunk(ctx, m.Chunk))
	case m.Barrier != nil:
		return d.fail(d.barrier(ctx, m.Barrier, newOutput, d.checkUpdate, d.afterBarrier))
	default:
		return d.fail(d.sendAll(ctx, m))
	}
}

func (d *HashDispatcher) dispatchChunk(ctx context.Context, c *vec.Chunk) error {
	if len(d.outputs) == 0 {
		return d.noOutputs(c)
	}
	defer c.Release()
	n := c.NumRows()
	if cap(d.vnodes) < n {
		d.vnodes = make([]uint16, n)
	}
	if cap(d.split) < len(d.outputs) {
		d.split = append(d.split[:cap(d.split)], make([]vec.SplitOutput, len(d.outputs)-cap(d.split))...)
	}
	d.split = d.split[:len(d.outputs)]
	d.k.Split(c, d.mapping, d.vnodes[:n], d.split)
	total := 0
	for i := range d.split {
		total += d.split[i].Rows
	}
	for i := range d.split {
		so := &d.split[i]
		if so.Rows == 0 {
			continue
		}
		var out *vec.Chunk
		switch {
		case so.Rows == total && !so.OwnOps:
			// Every visible row goes here: send the chunk itself.
			c.Retain()
			out = c
		case so.OwnOps:
			vis := d.visibility(so.Vis)
			ops := vec.NewOps(d.mem, n, vec.Insert)
			copy(vec.OpsOf(ops.Bytes()), so.Ops)
			out = c.WithOpsAndVisibility(ops, vis)
			ops.Release()
			vis.Release()
		default:
			vis := d.visibility(so.Vis)
			out = c.WithVisibility(vis)
			vis.Release()
		}
		if err := d.outputs[i].Send(ctx, executors.ChunkMessage(out)); err != nil {
			return fmt.Errorf("%s: to actor %d: %w", d, d.outputs[i].Actor(), err)
		}
	}
	return nil
}

func (d *HashDispatcher) visibility(bits []byte) *memory.Buffer {
	vis := memory.NewResizableBuffer(d.mem)
	vis.Resize(len(bits))
	copy(vis.Bytes(), bits)
	return vis
}

// checkUpdate validates an Update's new mapping against the output count after the
// barrier, before anything is sent.
func (d *HashDispatcher) checkUpdate(ch barrierChange) error {
	if ch.upd == nil || ch.upd.Mapping == nil {
		return nil
	}
	if err := ch.upd.Mapping.Validate(d.k.Table().VnodeCount, ch.nextOutputs); err != nil {
		return fmt.Errorf("%s: update for %d outputs: new mapping: %w", d, ch.nextOutputs, err)
	}
	return nil
}

// afterBarrier installs the mapping over the outputs that remain: the update's, or the
// old one re-indexed past the dropped outputs.
func (d *HashDispatcher) afterBarrier(ch barrierChange) error {
	if ch.upd != nil && ch.upd.Mapping != nil {
		d.mapping = slices.Clone(ch.upd.Mapping)
		return nil
	}
	if !ch.removes {
		return nil // outputs were only added: the old mapping still holds
	}
	if ch.nextOutputs == 0 {
		if ch.upd != nil {
			return fmt.Errorf("%s: an update removes every output", d)
		}
		return nil // stopped: the actor drops this dispatcher
	}
	if cap(d.remap) < len(d.outputs) {
		d.remap = make([]int, len(d.outputs))
	}
	d.remap = d.remap[:len(d.outputs)]
	next := 0
	for i := range d.outputs {
		if d.gone[i] {
			d.remap[i] = -1
		} else {
			d.remap[i] = next
			next++
		}
	}
	for v, a := range d.mapping {
		if d.remap[a] < 0 {
			return fmt.Errorf("%s: vnode %d maps to actor %d, which is dropped, and no new mapping was given", d, v, d.outputs[a].Actor())
		}
	}
	for v, a := range d.mapping {
		d.mapping[v] = uint16(d.remap[a])
	}
	return nil
}
