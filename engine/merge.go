package engine

import (
	"context"
	"fmt"
	"io"
	"reflect"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/executors"
)

// Merge is the executor that receives an actor's upstream channels and aligns their
// barriers: it passes chunks and watermarks from any input as they arrive, stops
// reading an input once that input has delivered the next barrier, and emits that
// barrier once, after every input has delivered it. So every chunk of epoch e from every
// input precedes barrier e, and none of a later epoch does. Inputs delivering different
// barriers at the same point is an error naming both epochs. Next returns io.EOF once
// every input channel is closed (and no barrier is pending).
//
// Merge selects over the unblocked inputs once per message (not per row).
type Merge struct {
	schema  *arrow.Schema
	inputs  []<-chan executors.Message
	closed  []bool
	blocked []bool // delivered the pending barrier
	pending *executors.Barrier
	nblock  int
	nopen   int
	cases   []reflect.SelectCase
	index   []int // cases[i] reads inputs[index[i]]; the last case is ctx.Done
}

// NewMerge returns a merge of inputs, whose chunks have schema.
func NewMerge(schema *arrow.Schema, inputs []<-chan executors.Message) *Merge {
	return &Merge{schema: schema, inputs: inputs, closed: make([]bool, len(inputs)), blocked: make([]bool, len(inputs)), nopen: len(inputs)}
}

// Next implements executors.Executor.
func (m *Merge) Next(ctx context.Context) (executors.Message, error) {
	for {
		if m.pending != nil && m.nblock == m.nopen {
			b := m.pending
			m.pending = nil
			m.nblock = 0
			clear(m.blocked)
			return executors.BarrierMessage(b), nil
		}
		if m.nopen == 0 {
			return executors.Message{}, io.EOF
		}
		m.cases, m.index = m.cases[:0], m.index[:0]
		for i, in := range m.inputs {
			if !m.closed[i] && !m.blocked[i] {
				m.cases = append(m.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(in)})
				m.index = append(m.index, i)
			}
		}
		m.cases = append(m.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
		chosen, v, ok := reflect.Select(m.cases)
		if chosen == len(m.cases)-1 {
			return executors.Message{}, ctx.Err()
		}
		i := m.index[chosen]
		if !ok {
			m.closed[i] = true
			m.nopen--
			continue
		}
		msg := v.Interface().(executors.Message)
		if msg.Barrier == nil {
			return msg, nil
		}
		if m.pending == nil {
			m.pending = msg.Barrier
		} else if msg.Barrier.Curr != m.pending.Curr || msg.Barrier.Prev != m.pending.Prev {
			return executors.Message{}, fmt.Errorf("merge: input %d delivered barrier %d -> %d while aligning barrier %d -> %d",
				i, msg.Barrier.Prev, msg.Barrier.Curr, m.pending.Prev, m.pending.Curr)
		}
		m.blocked[i] = true
		m.nblock++
	}
}

// Schema implements executors.Executor.
func (m *Merge) Schema() *arrow.Schema { return m.schema }

// Close implements executors.Executor: it releases the chunks still buffered in the
// inputs' channels without waiting for more.
func (m *Merge) Close() error {
	for _, in := range m.inputs {
	drain:
		for {
			select {
			case msg, ok := <-in:
				if !ok {
					break drain
				}
				msg.Release()
			default:
				break drain
			}
		}
	}
	return nil
}
