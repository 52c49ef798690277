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
// Each node opens its own side of an edge that crosses nodes: the sending node when
// it builds the upstream actor's dispatcher (or an Add or Update barrier gives it
// one), the receiving node when it builds the downstream actor's merge (or an Update
// barrier adds the input), in either order. Both may be called from any goroutine.
type Exchange interface {
	// OpenSend opens e's sending side on e.FromNode: what e.From's dispatcher sends
	// into (its Close ends the edge cleanly). It may return before the receiving
	// side is open; the edge's messages then wait for it. ctx bounds the side's
	// whole life: the engine cancels it when it tears the graph down or drops the
	// actor, and the edge must then end.
	OpenSend(ctx context.Context, e ExchangeEdge) (Output, error)
	// OpenRecv opens e's receiving side on e.ToNode: what e.To's merge reads. A
	// side whose ctx ends before a sender came ends, with an error.
	OpenRecv(ctx context.Context, e ExchangeEdge) (Inbound, error)
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

// link is a node's side of one edge: a channel when both actors are on the node, or
// the node's side of an exchange edge.
type link struct {
	c      chan executors.Message // a channel edge
	out    Output                 // the sending side of an exchange edge
	in     Inbound                // the receiving side of an exchange edge
	cancel context.CancelFunc     // ends the exchange side
}

// discard ends l and releases what it still buffers, once the actors that used it
// are gone.
func (l *link) discard() {
	if l.cancel != nil {
		l.cancel()
	}
	switch {
	case l.in != nil:
		l.in.Discard()
	case l.c != nil:
		drainNow(l.c)
	}
}

// edgeOf names the edge from -> to in n's graph.
func (n *nodeSide) edgeOf(from, to executors.Output) ExchangeEdge {
	return ExchangeEdge{From: from.Actor, To: to.Actor, FromNode: from.Node, ToNode: to.Node, Generation: n.env.generation, Capacity: n.env.opts.ChannelCapacity}
}

// channel returns the channel of edge k, held by the side of its receiving node,
// n, making it when neither side of the edge has been opened.
func (n *nodeSide) channel(k edge) *link {
	n.lmu.Lock()
	defer n.lmu.Unlock()
	l := n.links[k]
	if l == nil {
		l = &link{c: make(chan executors.Message, n.env.opts.ChannelCapacity)}
		n.links[k] = l
	}
	return l
}

// output opens the side of edge from -> to that actor from's dispatcher sends into.
func (n *nodeSide) output(from executors.ActorID, to executors.Output) (Output, error) {
	k := edge{from, to.Actor}
	ex := n.env.exchange
	if ex == nil || to.Node == n.node {
		// A channel, held by the receiving node's side: without an Exchange the
		// nodes share one process.
		recv := n
		if to.Node != n.node {
			if recv = n.peer(to.Node); recv == nil {
				return nil, fmt.Errorf("edge %d -> %d: node %d is not in this process", from, to.Actor, to.Node)
			}
		}
		l := recv.channel(k)
		return &ChanOutput{ID: to.Actor, C: l.c}, nil
	}
	n.lmu.Lock()
	defer n.lmu.Unlock()
	if _, ok := n.links[k]; ok {
		return nil, fmt.Errorf("edge %d -> %d: its sending side is open already", from, to.Actor)
	}
	e := n.edgeOf(executors.Output{Actor: from, Node: n.node}, to)
	ctx, cancel := context.WithCancel(n.env.ctx)
	out, err := ex.OpenSend(ctx, e)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("exchange: open the sending side of %s: %w", e, err)
	}
	n.links[k] = &link{out: out, cancel: cancel}
	return out, nil
}

// input opens the side of edge from -> to that actor to's merge reads.
func (n *nodeSide) input(to executors.ActorID, from executors.Output) (MergeInput, error) {
	k := edge{from.Actor, to}
	ex := n.env.exchange
	if ex == nil || from.Node == n.node {
		return MergeInput{Actor: from.Actor, C: n.channel(k).c}, nil
	}
	n.lmu.Lock()
	defer n.lmu.Unlock()
	if _, ok := n.links[k]; ok {
		return MergeInput{}, fmt.Errorf("edge %d -> %d: its receiving side is open already", from.Actor, to)
	}
	e := n.edgeOf(from, executors.Output{Actor: to, Node: n.node})
	ctx, cancel := context.WithCancel(n.env.ctx)
	in, err := ex.OpenRecv(ctx, e)
	if err != nil {
		cancel()
		return MergeInput{}, fmt.Errorf("exchange: open the receiving side of %s: %w", e, err)
	}
	n.links[k] = &link{in: in, cancel: cancel}
	return MergeInput{Actor: from.Actor, C: in.C(), Err: in.Err}, nil
}

// peer is node's side in this process, or nil.
func (n *nodeSide) peer(node int) *nodeSide {
	if n.env.peers == nil {
		return nil
	}
	sides := n.env.peers()
	if node < 0 || node >= len(sides) {
		return nil
	}
	return sides[node]
}

// forgetLinks ends and forgets the node's sides of the edges of actor id, which is
// gone from the node (stopped, or dropped before it started): a channel into it, and
// an exchange edge's side it held. The messages an edge still buffers are released
// (for an exchange edge, once it has ended). A dropped actor sent nothing: the
// channels out of it go too, also those the receiving nodes of this process hold
// (a stopped actor's receivers may still be reading its last messages).
func (n *nodeSide) forgetLinks(id executors.ActorID, dropped bool) {
	var gone []*link
	sides := []*nodeSide{n}
	if dropped && n.env.peers != nil {
		sides = n.env.peers()
	}
	for _, side := range sides {
		if side == nil { // in another process: it holds no channel of this one
			continue
		}
		side.lmu.Lock()
		for k, l := range side.links {
			if side == n && (k.to == id || (l.out != nil && k.from == id)) || dropped && l.c != nil && k.from == id {
				gone = append(gone, l)
				delete(side.links, k)
			}
		}
		side.lmu.Unlock()
	}

	for _, l := range gone {
		if l.in == nil {
			l.discard()
			continue
		}
		l.cancel()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			l.in.Discard()
		}()
	}
}

// forgetLink ends and forgets the node's side of edge k, whose actor on this node
// dropped it before it started.
func (n *nodeSide) forgetLink(k edge) {
	n.lmu.Lock()
	l := n.links[k]
	delete(n.links, k)
	n.lmu.Unlock()
	if l != nil && l.in == nil {
		l.discard()
	}
}

// forgetRemovedOutputs ends and forgets the sending sides of a's exchange edges that
// none of its dispatchers sends into any more: an Update or a Stop removed the output,
// and the dispatcher closed it after the barrier. (The channels out of a are held by
// their receiving nodes' sides, which forget them with their actors.)
func (n *nodeSide) forgetRemovedOutputs(a *nodeActor) {
	live := map[executors.ActorID]bool{}
	for _, d := range a.disp {
		for _, o := range d.Outputs() {
			live[o] = true
		}
	}
	var gone []*link
	n.lmu.Lock()
	for k, l := range n.links {
		if k.from == a.id && l.out != nil && !live[k.to] {
			gone = append(gone, l)
			delete(n.links, k)
		}
	}
	n.lmu.Unlock()
	for _, l := range gone {
		l.cancel()
	}
}

// discardLinks releases what every edge of the node still buffers, once its actors
// are gone and the graph's context is cancelled.
func (n *nodeSide) discardLinks() {
	n.lmu.Lock()
	defer n.lmu.Unlock()
	for k, l := range n.links {
		l.discard()
		delete(n.links, k)
	}
}

// outputFrom connects the outputs of actor from.
func (n *nodeSide) outputFrom(from executors.ActorID) func(executors.Output) (Output, error) {
	return func(o executors.Output) (Output, error) { return n.output(from, o) }
}

// inputTo connects the merge inputs of actor to.
func (n *nodeSide) inputTo(to executors.ActorID) func(executors.Output) (MergeInput, error) {
	return func(from executors.Output) (MergeInput, error) { return n.input(to, from) }
}
