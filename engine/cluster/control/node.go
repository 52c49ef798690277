package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// Node is a compute node's side of its control stream. Recv may be called from one
// goroutine at a time; Send, Known, Refusals and Close from any.
type Node struct {
	hello   Hello
	conn    *grpc.ClientConn
	stream  grpc.ClientStream
	cancel  context.CancelFunc
	refused atomic.Uint64
	once    sync.Once

	sendMu sync.Mutex // one SendMsg at a time

	mu    sync.Mutex
	known Stamp // the highest term and generation seen, and the node's incarnation
}

// Connect opens node hello.Node's control stream to the coordinator at addr: it sends
// hello (whose stamp holds the node's incarnation and the highest term and generation
// it has seen) and waits for the coordinator's Accept. It fails when the coordinator
// refuses the hello, and refuses an Accept whose term or generation is below what
// hello says the node has seen (a deposed leader) or whose incarnation is not
// hello's, naming the three numbers. The stream lasts until ctx ends or Close.
//
// The connection has no transport security and pings a silent coordinator every
// 10 s; opts come after these defaults and override them (grpc.WithTransportCredentials
// for TLS).
func Connect(ctx context.Context, addr string, hello Hello, opts ...grpc.DialOption) (*Node, error) {
	first, err := AppendFrame(nil, hello)
	if err != nil {
		return nil, fmt.Errorf("control: connect to %s: %w", addr, err)
	}
	dopts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
	}, opts...)
	conn, err := grpc.NewClient(addr, dopts...)
	if err != nil {
		return nil, fmt.Errorf("control: node %q incarnation %d: connect to %s: %w", hello.Node, hello.Incarnation, addr, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	n := &Node{hello: hello, conn: conn, cancel: cancel, known: hello.Stamp}
	fail := func(err error) (*Node, error) {
		n.Close()
		return nil, fmt.Errorf("control: node %q incarnation %d: connect to %s: %w", hello.Node, hello.Incarnation, addr, err)
	}
	n.stream, err = conn.NewStream(sctx, &serviceDesc.Streams[0], streamMethod, grpc.CallContentSubtype(codecName))
	if err != nil {
		return fail(err)
	}
	f := rawFrame(first)
	if err := n.stream.SendMsg(&f); err != nil && !errors.Is(err, io.EOF) {
		return fail(err)
	}
	// On io.EOF the coordinator has ended the stream already: RecvMsg returns its
	// status.
	if err := n.stream.RecvMsg(&f); err != nil {
		return fail(err)
	}
	m, err := DecodeFrame(f)
	if err != nil {
		return fail(err)
	}
	a, ok := m.(Accept)
	if !ok {
		return fail(fmt.Errorf("the coordinator answered the hello with a %s (%s), not an accept", m.Kind(), StampOf(m)))
	}
	if rerr := checkAtNode(hello.Node, KindAccept, a.Stamp, hello.Stamp); rerr != nil {
		n.refused.Add(1)
		return fail(rerr)
	}
	n.known = a.Stamp
	return n, nil
}

// Known returns the highest term and generation the node has accepted, and its
// incarnation: what Send stamps a message with.
func (n *Node) Known() Stamp {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.known
}

// Refusals counts the messages refused for their stamps.
func (n *Node) Refusals() uint64 { return n.refused.Load() }

// Recv returns the coordinator's next message: a BuildActors, Inject, Teardown or
// Call.
// A message with a stale stamp (a term or generation below the known ones, an
// incarnation not the node's) is refused with a *RefusedError, and the stream goes
// on; a newer term or generation becomes the known one. Any other error means the
// stream has ended (the coordinator went away or replaced the stream, ctx ended, a
// frame did not decode); it names the node and its incarnation.
func (n *Node) Recv() (Message, error) {
	var f rawFrame
	err := n.stream.RecvMsg(&f)
	if errors.Is(err, io.EOF) {
		return nil, n.fail(errors.New("the coordinator ended the stream"))
	}
	if err != nil {
		return nil, n.fail(fmt.Errorf("stream lost: %w", err))
	}
	m, err := DecodeFrame(f)
	if err != nil {
		return nil, n.fail(err)
	}
	switch m.Kind() {
	case KindBuildActors, KindInject, KindTeardown, KindCall:
	default:
		return nil, n.fail(fmt.Errorf("the coordinator sent a %s (%s), which only a node sends or only answers a hello", m.Kind(), StampOf(m)))
	}
	s := StampOf(m)
	n.mu.Lock()
	defer n.mu.Unlock()
	if rerr := checkAtNode(n.hello.Node, m.Kind(), s, n.known); rerr != nil {
		n.refused.Add(1)
		return nil, rerr
	}
	n.known.Term, n.known.Generation = s.Term, s.Generation
	return m, nil
}

// fail ends the stream, so that the coordinator sees it lost, and wraps err.
func (n *Node) fail(err error) error {
	n.cancel()
	return fmt.Errorf("control: node %q incarnation %d: %w", n.hello.Node, n.hello.Incarnation, err)
}

// Send sends m (a Collected, Failed, Sealed, Built, Finishing or Answer) stamped with
// Known (m's own stamp is ignored). It returns once the stream's transport took the frame; ctx is checked
// before, and a Send blocked by flow control ends when the stream does.
func (n *Node) Send(ctx context.Context, m Message) error {
	if m == nil || !m.Kind().FromNode() || m.Kind() == KindHello {
		return fmt.Errorf("control: node %q: %T is not a message to the coordinator", n.hello.Node, m)
	}
	return n.sendStamped(ctx, m, n.Known())
}

// SendAt is Send with generation gen in m's stamp, not the known one: the generation
// of the graph m belongs to. A process that keeps one stream across graphs stamps its
// actors' reports so, and a late report of a graph torn down is then refused, not
// taken for the next graph's.
func (n *Node) SendAt(ctx context.Context, gen uint64, m Message) error {
	if m == nil || !m.Kind().FromNode() || m.Kind() == KindHello {
		return fmt.Errorf("control: node %q: %T is not a message to the coordinator", n.hello.Node, m)
	}
	s := n.Known()
	s.Generation = gen
	return n.sendStamped(ctx, m, s)
}

// Report sends r, an actor's report of the graph of generation gen, as the frame
// that carries it: a Finishing, a Failed or a Collected.
func (n *Node) Report(ctx context.Context, gen uint64, r engine.ControlReport) error {
	switch {
	case r.Finishing:
		return n.SendAt(ctx, gen, Finishing{Actor: r.Actor})
	case r.Err != nil:
		return n.SendAt(ctx, gen, Failed{Actor: r.Actor, Err: errText(r.Err)})
	}
	return n.SendAt(ctx, gen, Collected{Epoch: r.Epoch, Actors: []executors.ActorID{r.Actor}, Progress: r.Backfill, Pending: uint64(max(r.Pending, 0))})
}

func (n *Node) sendStamped(ctx context.Context, m Message, s Stamp) error {
	m, err := withStamp(m, s)
	if err != nil {
		return err
	}
	frame, err := AppendFrame(nil, m)
	if err != nil {
		return fmt.Errorf("control: node %q: %w", n.hello.Node, err)
	}
	return n.sendFrame(ctx, m.Kind(), frame)
}

func (n *Node) sendFrame(ctx context.Context, k Kind, frame []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("control: node %q incarnation %d: send %s: %w", n.hello.Node, n.hello.Incarnation, k, err)
	}
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	f := rawFrame(frame)
	err := n.stream.SendMsg(&f)
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("control: node %q incarnation %d: send %s: the stream has ended (Recv returns why)", n.hello.Node, n.hello.Incarnation, k)
	}
	if err != nil {
		return fmt.Errorf("control: node %q incarnation %d: send %s: %w", n.hello.Node, n.hello.Incarnation, k, err)
	}
	return nil
}

// Close ends the stream and its connection; the coordinator sees the stream lost.
func (n *Node) Close() {
	n.once.Do(func() {
		n.cancel()
		_ = n.conn.Close()
	})
}
