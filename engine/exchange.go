package engine

import (
	"context"
	"fmt"

	"github.com/seed04fbb902/weir/executors"
)

// Exchange carries the edges between actors placed on different nodes: in cluster
// mode a stream between processes (engine/cluster/exchange implements it over Arrow
// Flight; the engine never imports that). With Options.Exchange nil every edge is a
// Go channel; with one set, an edge whose two actors are on the same node still is.
//
// The engine opens an edge once, when the first of its two sides is built, and calls
// Open from its barrier rounds and recovery, one goroutine at a time.
type Exchange interface {
	// Open opens edge e. send is what e.From's dispatcher sends into (its Close ends
	// the edge); recv is what e.To's merge reads. ctx bounds the edge's whole life:
	// the engine cancels it when it tears the graph down (a recovery, Close), and
	// the edge must then end on both sides.
	Open(ctx context.Context, e ExchangeEdge) (send Output, recv Inbound, err error)
}

// ExchangeEdge names an edge for Exchange.Open.
type ExchangeEdge struct {
	From, To         executors.ActorID
	FromNode, ToNode int
	// Generation is the graph's: the engine builds a new graph, with a new
	// generation, at every recovery, and its actor ids start over, so an edge is
	// named by its actors and generation. Generations grow, and start from the
	// wall clock's nanoseconds, so an engine reopened on the directory (in this
	// process or another) does not reuse an earlier one's unless the clock was set
	// back.
	Generation uint64
	// Capacity is how many messages the receiving side may buffer
	// (Options.ChannelCapacity).
	Capacity int
}

func (e ExchangeEdge) String() string {
	return fmt.Sprintf("edge %d (node %d) -> %d (node %d), generation %d", e.From, e.FromNode, e.To, e.ToNode, e.Generation)
}

// Inbound is the receiving side of an exchange edge.
type Inbound interface {
	// C delivers the edge's messages in order; it is closed when the edge ends.
	C() <-chan executors.Message
	// Err reports, once C is closed, how the edge ended: nil after the sender's
	// Close; otherwise the error that broke it, which fails the receiving actor
	// (a broken edge fails the round; it never drops a message silently).
	Err() error
	// Discard waits until the edge has ended (the engine has cancelled Open's
	// context first) and releases every message still buffered.
	Discard()
}

// link is one edge of the graph: a channel, or an exchange edge.
type link struct {
	c   chan executors.Message // a channel edge
	out Output                 // an exchange edge: its two sides
	in  Inbound
}

// output is the dispatcher's side of l.
func (l *link) output(to executors.ActorID) Output {
	if l.out != nil {
		return l.out
	}
	return &ChanOutput{ID: to, C: l.c}
}

// input is the merge's side of l.
func (l *link) input(from executors.ActorID) MergeInput {
	if l.in != nil {
		return MergeInput{Actor: from, C: l.in.C(), Err: l.in.Err}
	}
	return MergeInput{Actor: from, C: l.c}
}

// discard releases what l still buffers, once the graph's actors are gone.
func (l *link) discard() {
	if l.in != nil {
		l.in.Discard()
		return
	}
	drainNow(l.c)
}

// link returns the edge from -> to, opening it: through the engine's Exchange when the
// two actors are on different nodes, a channel otherwise.
func (g *graph) link(from, to executors.ActorID) (*link, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := edge{from, to}
	if l, ok := g.edges[k]; ok {
		return l, nil
	}
	l := &link{}
	ex := g.e.opts.Exchange
	up, okUp := g.actors[from]
	down, okDown := g.actors[to]
	if ex != nil && okUp && okDown && up.node != down.node {
		e := ExchangeEdge{From: from, To: to, FromNode: up.node, ToNode: down.node, Generation: g.generation, Capacity: g.e.opts.ChannelCapacity}
		out, in, err := ex.Open(g.ctx, e)
		if err != nil {
			return nil, fmt.Errorf("exchange: open %s: %w", e, err)
		}
		l.out, l.in = out, in
	} else {
		l.c = make(chan executors.Message, g.e.opts.ChannelCapacity)
	}
	g.edges[k] = l
	return l, nil
}

// outputFrom connects the outputs of actor from.
func (g *graph) outputFrom(from executors.ActorID) func(executors.Output) (Output, error) {
	return func(o executors.Output) (Output, error) {
		if _, ok := g.actors[o.Actor]; !ok {
			return nil, fmt.Errorf("actor %d does not exist", o.Actor)
		}
		l, err := g.link(from, o.Actor)
		if err != nil {
			return nil, err
		}
		return l.output(o.Actor), nil
	}
}

// inputTo connects the merge inputs of actor to.
func (g *graph) inputTo(to executors.ActorID) func(executors.ActorID) (MergeInput, error) {
	return func(from executors.ActorID) (MergeInput, error) {
		l, err := g.link(from, to)
		if err != nil {
			return MergeInput{}, err
		}
		return l.input(from), nil
	}
}
