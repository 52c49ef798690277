package engine

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/executors"
)

// MergeInput is one input of a merge: the channel from an upstream actor.
type MergeInput struct {
	Actor executors.ActorID
	C     <-chan executors.Message
	// Err, when set, says once C is closed whether the input ended or broke (an
	// exchange edge: Inbound.Err); an error fails the merge instead of dropping the
	// input.
	Err func() error
}

// Merge is the executor that receives an actor's upstream channels and aligns their
// barriers. What it does with each message:
//
//   - a chunk or a watermark from any input is passed on as it arrives;
//   - a barrier blocks its input (it is not read again until the barrier is emitted);
//     the barrier is emitted once, after every input has delivered it. So every chunk
//     of epoch e from every input precedes barrier e, and none of a later epoch does.
//     Inputs delivering different barriers at the same point is an error naming both
//     epochs.
//   - when a barrier is first seen and carries an executors.Update with a MergeUpdate
//     for the merge's actor, the inputs from AddInputs are connected right away
//     (through connect); their first message must be that barrier, and alignment
//     waits for it from them too. After the barrier is emitted, the inputs from
//     RemoveInputs are dropped, releasing what they still buffer.
//   - after emitting a barrier that carries an executors.Stop, the inputs from the
//     actors it names are dropped the same way.
//   - an input whose channel closes is dropped (unless its Err reports an error,
//     which Next returns); Next returns io.EOF once no input is left (and no
//     barrier is pending).
//
// Merge selects over the unblocked inputs once per message (not per row); with a
// single unblocked input it reads it directly. Not safe for concurrent use.
type Merge struct {
	actor   executors.ActorID
	schema  *arrow.Schema
	connect func(upstream executors.Output) (MergeInput, error)
	inputs  []mergeInput
	pending *executors.Barrier
	nblock  int

	cases []reflect.SelectCase // cached: rebuilt when stale
	index []int                // cases[i] reads inputs[index[i]]; the last case is ctx.Done
	stale bool
}

type mergeInput struct {
	MergeInput
	blocked bool // delivered the pending barrier
	fresh   bool // added at the pending barrier, which it has not delivered yet
}

// NewMerge returns the merge of actor over inputs (one per upstream actor: their
// actors must differ), whose chunks have schema. connect opens the edge from an
// upstream actor (on its node) that an Update adds; it may be nil when no update adds
// inputs.
func NewMerge(actor executors.ActorID, schema *arrow.Schema, inputs []MergeInput, connect func(upstream executors.Output) (MergeInput, error)) *Merge {
	m := &Merge{actor: actor, schema: schema, connect: connect, stale: true}
	for _, in := range inputs {
		m.inputs = append(m.inputs, mergeInput{MergeInput: in})
	}
	return m
}

// Inputs lists the upstream actors of the current inputs, in order.
func (m *Merge) Inputs() []executors.ActorID {
	ids := make([]executors.ActorID, len(m.inputs))
	for i, in := range m.inputs {
		ids[i] = in.Actor
	}
	return ids
}

// Next implements executors.Executor.
func (m *Merge) Next(ctx context.Context) (executors.Message, error) {
	for {
		if m.pending != nil && m.nblock == len(m.inputs) {
			return m.emit(), nil
		}
		if len(m.inputs) == 0 {
			return executors.Message{}, io.EOF
		}
		i, msg, ok, err := m.recv(ctx)
		if err != nil {
			return executors.Message{}, err
		}
		in := &m.inputs[i]
		if !ok {
			if in.Err != nil {
				if err := in.Err(); err != nil {
					return executors.Message{}, fmt.Errorf("merge of actor %d: input from actor %d: %w", m.actor, in.Actor, err)
				}
			}
			m.inputs = slices.Delete(m.inputs, i, i+1)
			m.stale = true
			continue
		}
		if msg.Barrier == nil {
			if in.fresh {
				err := fmt.Errorf("merge of actor %d: new input from actor %d delivered %v before barrier %d -> %d",
					m.actor, in.Actor, msg, m.pending.Prev, m.pending.Curr)
				msg.Release()
				return executors.Message{}, err
			}
			return msg, nil
		}
		b := msg.Barrier
		if m.pending == nil {
			m.pending = b
			if err := m.addInputs(b); err != nil {
				return executors.Message{}, err
			}
			in = &m.inputs[i] // addInputs may have moved the inputs
		} else if b.Curr != m.pending.Curr || b.Prev != m.pending.Prev {
			return executors.Message{}, fmt.Errorf("merge of actor %d: input from actor %d delivered barrier %d -> %d while aligning barrier %d -> %d",
				m.actor, in.Actor, b.Prev, b.Curr, m.pending.Prev, m.pending.Curr)
		}
		in.blocked = true
		in.fresh = false
		m.nblock++
		m.stale = true
	}
}

// recv receives one message from an unblocked input: its index, the message, and
// ok=false when the channel is closed.
func (m *Merge) recv(ctx context.Context) (int, executors.Message, bool, error) {
	if m.stale {
		m.cases, m.index = m.cases[:0], m.index[:0]
		for i, in := range m.inputs {
			if !in.blocked {
				m.cases = append(m.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(in.C)})
				m.index = append(m.index, i)
			}
		}
		m.cases = append(m.cases, reflect.SelectCase{Dir: reflect.SelectRecv})
		m.stale = false
	}
	if len(m.index) == 1 {
		i := m.index[0]
		select {
		case msg, ok := <-m.inputs[i].C:
			return i, msg, ok, nil
		case <-ctx.Done():
			return 0, executors.Message{}, false, ctx.Err()
		}
	}
	done := len(m.cases) - 1
	m.cases[done].Chan = reflect.ValueOf(ctx.Done())
	chosen, v, ok := reflect.Select(m.cases)
	m.cases[done].Chan = reflect.Value{}
	if chosen == done {
		return 0, executors.Message{}, false, ctx.Err()
	}
	var msg executors.Message
	if ok {
		msg = v.Interface().(executors.Message)
	}
	return m.index[chosen], msg, ok, nil
}

// addInputs connects the inputs that barrier b adds to this merge's actor.
func (m *Merge) addInputs(b *executors.Barrier) error {
	u := m.update(b)
	if u == nil {
		return nil
	}
	for _, up := range u.AddInputs {
		a := up.Actor
		if slices.ContainsFunc(m.inputs, func(in mergeInput) bool { return in.Actor == a }) {
			return fmt.Errorf("merge of actor %d: barrier %d adds an input from actor %d, which it already has", m.actor, b.Curr, a)
		}
		if m.connect == nil {
			return fmt.Errorf("merge of actor %d: barrier %d adds an input from actor %d, and no connect function was given", m.actor, b.Curr, a)
		}
		in, err := m.connect(up)
		if err != nil {
			return fmt.Errorf("merge of actor %d: barrier %d: connect actor %d: %w", m.actor, b.Curr, a, err)
		}
		m.inputs = append(m.inputs, mergeInput{MergeInput: in, fresh: true})
		m.stale = true
	}
	return nil
}

// update returns the MergeUpdate of b for this merge's actor, if any.
func (m *Merge) update(b *executors.Barrier) *executors.MergeUpdate {
	u, ok := b.Mutation.(executors.Update)
	if !ok {
		return nil
	}
	for i := range u.Merges {
		if u.Merges[i].Actor == m.actor {
			return &u.Merges[i]
		}
	}
	return nil
}

// emit returns the aligned pending barrier, unblocks the inputs and drops the inputs
// the barrier removes or stops.
func (m *Merge) emit() executors.Message {
	b := m.pending
	m.pending = nil
	m.nblock = 0
	for i := range m.inputs {
		m.inputs[i].blocked = false
	}
	m.stale = true
	var gone []executors.ActorID
	switch mu := b.Mutation.(type) {
	case executors.Update:
		if u := m.update(b); u != nil {
			gone = u.RemoveInputs
		}
	case executors.Stop:
		gone = mu.Actors
	}
	if len(gone) > 0 {
		m.inputs = slices.DeleteFunc(m.inputs, func(in mergeInput) bool {
			if !slices.Contains(gone, in.Actor) {
				return false
			}
			drainNow(in.C)
			return true
		})
	}
	return executors.BarrierMessage(b)
}

// drainNow releases the messages buffered in c, without waiting for more.
func drainNow(c <-chan executors.Message) {
	for {
		select {
		case msg, ok := <-c:
			if !ok {
				return
			}
			msg.Release()
		default:
			return
		}
	}
}

// Schema implements executors.Executor.
func (m *Merge) Schema() *arrow.Schema { return m.schema }

// Close implements executors.Executor: it releases the chunks still buffered in the
// inputs' channels without waiting for more.
func (m *Merge) Close() error {
	for _, in := range m.inputs {
		drainNow(in.C)
	}
	return nil
}
