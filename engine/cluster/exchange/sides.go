package exchange

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sides is what Mesh and PeerMesh share: how they open the two sides of an edge. The
// receiving side is an inbox of a server this process serves (a local); the sending
// side is a stream into the receiving node's server, reached through a peer.
type sides struct {
	mem    memory.Allocator
	window int32
	opened atomic.Int64

	watching atomic.Int64 // openRecv's goroutines that wait for an inbox's context
}

// openRecv registers e with srv, the server of e.ToNode, and returns its inbox (see
// Mesh.OpenRecv): when ctx ends, the inbox ends, with an error naming the edge (an
// attached stream is cut).
func (x *sides) openRecv(ctx context.Context, e engine.ExchangeEdge, srv *Server) (*meshInbound, error) {
	in, err := srv.Expect(meshEdge(e), nil, e.Capacity)
	if err != nil {
		return nil, err
	}
	x.watching.Add(1)
	go func() {
		defer x.watching.Add(-1)
		select {
		case <-ctx.Done():
			// The receiver is gone: an inbox no sender came to ends now, an
			// attached one's stream is cut.
			srv.Abort(in.edge, fmt.Errorf("exchange: %s: the receiving side ended (no sender came, or it is cut): %w", e, context.Cause(ctx)))
		case <-in.done:
		}
	}()
	return &meshInbound{in: in}, nil
}

// output is the sending side of e into node e.ToNode, reached through p, whose stream
// opens at its first Send or Close (see Mesh.OpenSend).
func (x *sides) output(ctx context.Context, e engine.ExchangeEdge, p *peer) *meshOutput {
	return &meshOutput{x: x, p: p, e: e, ctx: ctx}
}

func meshEdge(e engine.ExchangeEdge) Edge {
	return Edge{Up: e.From, Down: e.To, Generation: e.Generation}
}

// Backoff of openSender while the receiver does not expect the edge yet.
const (
	minOpenBackoff = time.Millisecond
	maxOpenBackoff = 50 * time.Millisecond
)

// openSender opens e's stream into node e.ToNode through p, within edgeCtx (the edge's
// life) and ctx (this attempt's): the stream lives until edgeCtx ends; the end of ctx
// while opening fails the opening. While the server refuses the edge as not expected,
// it retries. Any other failure fails the opening, except that a peer which resolves
// its node's address forgets the connection that failed, and tries once more on a
// newly resolved one: the node's process may have restarted elsewhere. Its errors name
// the node and its address, and wrap the Sender's, which name the edge.
func (x *sides) openSender(edgeCtx, ctx context.Context, e engine.ExchangeEdge, p *peer) (*Sender, error) {
	edge := meshEdge(e)
	addr := p.known()
	if c := ended(edgeCtx, ctx); c != nil {
		return nil, fmt.Errorf("%s: the context ended before the stream opened: %w", p.at(addr), context.Cause(c))
	}
	backoff := minOpenBackoff
	reresolved := false
	for {
		cn, err := p.get(edgeCtx, ctx, x.window)
		if err != nil {
			return nil, err
		}
		addr = cn.addr
		s, err := handshake(edgeCtx, ctx, cn.client, edge, x.mem, func() { p.release(cn) })
		if err == nil {
			x.opened.Add(1)
			return s, nil
		}
		notExpected := status.Code(err) == codes.NotFound
		if !notExpected {
			if c := ended(edgeCtx, ctx); c != nil {
				// What failed is most likely the stream the context's end cancelled.
				return nil, fmt.Errorf("%s: the context ended while opening the stream: %w (%v)", p.at(addr), context.Cause(c), err)
			}
			if p.resolve == nil {
				return nil, fmt.Errorf("%s: %w", p.at(addr), err)
			}
			p.forget(cn)
			if reresolved {
				return nil, fmt.Errorf("%s: %w", p.at(addr), err)
			}
			reresolved = true
			continue
		}
		if ended(edgeCtx, ctx) == nil {
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-edgeCtx.Done():
			case <-ctx.Done():
			}
			t.Stop()
		}
		if c := ended(edgeCtx, ctx); c != nil {
			return nil, fmt.Errorf("%s: %s is not expected there (its receiver did not open its side) and the context ended: %w",
				p.at(addr), edge, context.Cause(c))
		}
		backoff = min(2*backoff, maxOpenBackoff)
	}
}

// ended returns the first of cs that has ended, or nil.
func ended(cs ...context.Context) context.Context {
	for _, c := range cs {
		if c.Err() != nil {
			return c
		}
	}
	return nil
}

// handshake is NewSender(edgeCtx, ...) whose opening also fails when ctx ends. done is
// called once the stream's context has ended: the Sender closed or broke, or edgeCtx
// ended, or the opening failed.
func handshake(edgeCtx, ctx context.Context, client flight.Client, edge Edge, mem memory.Allocator, done func()) (*Sender, error) {
	// The stream's context is edgeCtx's child, which the Sender's Close or failure
	// cancels (after its own), so that it does not outlive the stream.
	sctx, cancel := context.WithCancel(edgeCtx)
	context.AfterFunc(sctx, done)
	stop := context.AfterFunc(ctx, cancel)
	s, err := NewSender(sctx, client, edge, nil, mem)
	if !stop() && err == nil {
		// ctx ended while opening: the stream is cancelled.
		err = s.abort(fmt.Errorf("exchange: %s: opening the stream: %w", edge, context.Cause(ctx)))
	}
	if err != nil {
		cancel()
		return nil, err
	}
	s.release = cancel
	return s, nil
}

// peer is the way into one node's exchange server, shared by the edges into it: the
// server's address, and a connection (a Flight client) that their streams share.
type peer struct {
	node int
	// resolve, when not nil, looks up the server's address at the first opening, and
	// again after a connection failed; when nil, addr is fixed.
	resolve func(context.Context, int) (string, error)

	mu        sync.Mutex
	addr      string             // the address last resolved (or the fixed one): for errors
	conn      *conn              // nil: resolve and dial at the next opening
	resolving chan struct{}      // not nil while an opening resolves; closed when it is done
	retired   map[*conn]struct{} // no longer p's connection, still open for its streams
	closed    bool               // the mesh is closed: no more openings
}

// conn is a peer's connection: a client dialled to one address of its node.
type conn struct {
	addr   string
	client flight.Client

	// The openings and streams on client whose stream context has not ended; guarded
	// by the peer's mu.
	streams int
}

// at names p's node, at addr if known.
func (p *peer) at(addr string) string {
	if addr == "" {
		return fmt.Sprintf("node %d", p.node)
	}
	return fmt.Sprintf("node %d at %s", p.node, addr)
}

// known is the address p last resolved, or "".
func (p *peer) known() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// get returns p's connection, resolving the node's address (within edgeCtx and ctx)
// and dialling it when there is none, and counts an opening on it: the caller calls
// release when the stream opened on it ends. One opening resolves at a time; the
// others wait for its connection. Its errors name the node.
func (p *peer) get(edgeCtx, ctx context.Context, window int32) (*conn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("%s: the mesh is closed", p.at(p.addr))
		}
		if p.conn != nil || p.resolve == nil {
			c, err := p.dial(p.addr, window)
			p.mu.Unlock()
			return c, err
		}
		if wait := p.resolving; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-edgeCtx.Done():
			case <-ctx.Done():
			}
			c := ended(edgeCtx, ctx)
			return nil, fmt.Errorf("%s: the context ended while its address was being resolved: %w", p.at(""), context.Cause(c))
		}
		done := make(chan struct{})
		p.resolving = done
		p.mu.Unlock()

		addr, err := p.lookup(edgeCtx, ctx)
		p.mu.Lock()
		p.resolving = nil
		close(done)
		var c *conn
		switch {
		case err != nil:
		case p.closed:
			err = fmt.Errorf("%s: the mesh is closed", p.at(addr))
		default:
			c, err = p.dial(addr, window)
		}
		p.mu.Unlock()
		return c, err
	}
}

// dial returns p's connection, dialling addr when there is none, and counts an
// opening on it. p.mu is held.
func (p *peer) dial(addr string, window int32) (*conn, error) {
	if p.conn == nil {
		client, err := Dial(addr, window)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.at(addr), err)
		}
		p.addr, p.conn = addr, &conn{addr: addr, client: client}
	}
	p.conn.streams++
	return p.conn, nil
}

// lookup resolves p's node's address, within edgeCtx and ctx.
func (p *peer) lookup(edgeCtx, ctx context.Context) (string, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(edgeCtx, cancel)()
	addr, err := p.resolve(rctx, p.node)
	switch {
	case err != nil:
		return "", fmt.Errorf("%s: resolving its address: %w", p.at(""), err)
	case addr == "":
		return "", fmt.Errorf("%s: resolving its address: the address is empty", p.at(""))
	}
	return addr, nil
}

// release ends an opening or stream on c that get counted; a retired connection is
// closed with its last stream.
func (p *peer) release(c *conn) {
	p.mu.Lock()
	c.streams--
	last := p.unused(c)
	p.mu.Unlock()
	if last {
		_ = c.client.Close()
	}
}

// forget retires c, which failed for some other reason than an edge not expected, if
// it is still p's connection, so that the next opening resolves the node's address
// again and dials it anew. The streams still on c go on: c is closed with its last.
func (p *peer) forget(c *conn) {
	p.mu.Lock()
	if p.conn == c {
		p.conn = nil
		if p.retired == nil {
			p.retired = map[*conn]struct{}{}
		}
		p.retired[c] = struct{}{}
	}
	last := p.unused(c)
	p.mu.Unlock()
	if last {
		_ = c.client.Close()
	}
}

// unused reports whether c is retired and no stream is left on it; it then forgets
// c, for the caller to close. p.mu is held.
func (p *peer) unused(c *conn) bool {
	if _, retired := p.retired[c]; !retired || c.streams > 0 {
		return false
	}
	delete(p.retired, c)
	return true
}

// drop closes p's connection now, breaking every stream on it, so that the next
// opening dials anew; closing, the mesh is closed: it closes the retired connections
// too, and the openings after it fail.
func (p *peer) drop(closing bool) error {
	p.mu.Lock()
	var cs []*conn
	if p.conn != nil {
		cs = append(cs, p.conn)
		p.conn = nil
	}
	if closing {
		p.closed = true
		for c := range p.retired {
			cs = append(cs, c)
		}
		clear(p.retired)
	}
	p.mu.Unlock()
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.client.Close())
	}
	return errors.Join(errs...)
}

// local is an exchange server this process serves for one node.
type local struct {
	srv  *Server
	fs   flight.Server
	addr string
	done chan struct{} // closed when fs.Serve returns
}

// serveLocal starts node's exchange server on listen (a host:port).
func serveLocal(node int, listen string, window int32, mem memory.Allocator) (*local, error) {
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("exchange: node %d: listen: %w", node, err)
	}
	l := &local{srv: NewServer(mem), addr: lis.Addr().String(), done: make(chan struct{})}
	l.fs = NewFlightServer(l.srv, window)
	l.fs.InitListener(lis)
	go func() {
		defer close(l.done)
		_ = l.fs.Serve()
	}()
	return l, nil
}

// stop stops the server: it ends the inboxes no sender came to (and openRecv's
// goroutines with them), saying why, then waits for the streams it serves to end.
func (l *local) stop(why string) {
	l.srv.forgetUnattached(why)
	l.fs.Shutdown()
	<-l.done
}

// meshOutput is the dispatcher's side of a mesh edge. Its stream is opened by the
// first Send or by Close (OpenSend), or by Open.
type meshOutput struct {
	x   *sides
	p   *peer
	e   engine.ExchangeEdge
	ctx context.Context // the edge's life

	s      *Sender // nil until the stream is open
	err    error   // sticky: the stream could not be opened
	closed bool
}

func (o *meshOutput) Actor() executors.ActorID { return o.e.To }

// open opens the stream if it is not, within ctx.
func (o *meshOutput) open(ctx context.Context) error {
	if o.s != nil {
		return nil
	}
	if o.err != nil {
		return o.err
	}
	s, err := o.x.openSender(o.ctx, ctx, o.e, o.p)
	if err != nil {
		// Sticky: an output whose stream never opened sends nothing, not even the end
		// (a Close after a failed Send must not end the edge cleanly).
		o.err = fmt.Errorf("exchange: %s: %w", o.e, err)
		return o.err
	}
	o.s = s
	return nil
}

// Send implements engine.Output: the Sender encodes m, and m is released after.
func (o *meshOutput) Send(ctx context.Context, m executors.Message) error {
	if o.closed {
		m.Release()
		return fmt.Errorf("exchange: %s: the sender is closed", o.e)
	}
	if err := o.open(ctx); err != nil {
		m.Release()
		return err
	}
	err := o.s.Send(ctx, m)
	m.Release()
	return err
}

// Close implements engine.Output. A Close that fails leaves the receiving side's
// inbox closed with the error, which fails the receiving actor. An output that sent
// nothing opens its stream, within the edge's context, to send the end; one whose
// stream could not be opened sends nothing, and its receiver's inbox ends with the
// receiver's context.
func (o *meshOutput) Close() {
	if o.closed {
		return
	}
	o.closed = true
	if o.open(o.ctx) != nil {
		return
	}
	_ = o.s.Close()
}

// meshInbound is the merge's side of a mesh edge.
type meshInbound struct{ in *Inbox }

func (i *meshInbound) C() <-chan executors.Message { return i.in.Messages() }
func (i *meshInbound) Err() error                  { return i.in.Err() }

// Discard implements engine.Inbound: it releases messages until the stream ends.
func (i *meshInbound) Discard() {
	for msg := range i.in.Messages() {
		msg.Release()
	}
}
