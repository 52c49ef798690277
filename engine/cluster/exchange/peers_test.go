package exchange

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
)

// registry is the tests' node registry: each node's exchange address, as the
// cluster's meta store holds them, and how often each node was looked up.
type registry struct {
	mu      sync.Mutex
	addrs   map[int]string
	lookups map[int]int
}

// errUnregistered is the registry's error for a node it does not know.
var errUnregistered = errors.New("not in the registry")

func newRegistry() *registry { return &registry{addrs: map[int]string{}, lookups: map[int]int{}} }

func (r *registry) set(node int, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addrs[node] = addr
}

// resolve is a PeerConfig.Resolve.
func (r *registry) resolve(_ context.Context, node int) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups[node]++
	addr, ok := r.addrs[node]
	if !ok {
		return "", fmt.Errorf("node %d: %w", node, errUnregistered)
	}
	return addr, nil
}

// looked is how often node was looked up.
func (r *registry) looked(node int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups[node]
}

// peerMesh starts node's PeerMesh over mem, registered in r; it is closed when the
// test ends.
func peerMesh(t *testing.T, r *registry, node int, mem memory.Allocator) *PeerMesh {
	t.Helper()
	m, err := NewPeerMesh(PeerConfig{Node: node, Window: testWindow, Mem: mem, Resolve: r.resolve})
	if err != nil {
		t.Fatal(err)
	}
	r.set(node, m.Addr())
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close the peer mesh of node %d: %v", node, err)
		}
	})
	return m
}

// checkedScript is a leak-checked allocator and a script of n chunks with barriers
// and watermarks among them; the script is released, then the allocator checked, when
// the test ends, after the meshes made after it are closed.
func checkedScript(t *testing.T, n int) (memory.Allocator, []executors.Message) {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	_, msgs := script(t, mem, n)
	t.Cleanup(func() {
		for _, m := range msgs {
			m.Release()
		}
	})
	return mem, msgs
}

// peerEdge is an edge of generation 1 and capacity 4.
func peerEdge(from, to executors.ActorID, fromNode, toNode int) engine.ExchangeEdge {
	return engine.ExchangeEdge{From: from, To: to, FromNode: fromNode, ToNode: toNode, Generation: 1, Capacity: 4}
}

// awaitPeerWatchers waits until no OpenRecv goroutine of ms is left, failing the test
// if live ends first.
func awaitPeerWatchers(t *testing.T, live context.Context, ms ...*PeerMesh) {
	t.Helper()
	for _, m := range ms {
		for m.watching.Load() != 0 && live.Err() == nil {
			blockBriefly()
		}
		if live.Err() != nil {
			t.Fatalf("node %d: OpenRecv goroutines were left after their inboxes ended (%d now)", m.Node(), m.watching.Load())
		}
	}
}

// runEdge opens e's receiving side on recv and its sending side on send, sends msgs
// and checks that they all arrive, in order, and that the edge ends cleanly.
func runEdge(t *testing.T, ctx context.Context, send, recv *PeerMesh, e engine.ExchangeEdge, msgs []executors.Message) {
	t.Helper()
	in, err := recv.OpenRecv(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- recvAll(t, inboxOf(t, in), msgs) }()
	out, err := send.OpenSend(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	if err := sendAll(ctx, out, msgs, &sent); err != nil {
		t.Fatalf("%s: sender: %v", e, err)
	}
	if err := await(t, "the receiver of "+e.String(), got); err != nil {
		t.Fatalf("%s: inbox: %v", e, err)
	}
}

// Three nodes, each with its own PeerMesh and server, resolving each other through
// the registry: every edge carries its chunks, barriers and watermarks in order and
// ends cleanly, whichever side opens first. The streams into a node share one
// connection, so each node is looked up once by each node that sends to it, and a
// node's edges to itself go through its own server without a lookup.
func TestPeerMeshEdges(t *testing.T) {
	for _, order := range []string{"SenderFirst", "ReceiverFirst"} {
		t.Run(order, func(t *testing.T) {
			mem, msgs := checkedScript(t, 12)
			reg := newRegistry()
			ms := []*PeerMesh{peerMesh(t, reg, 0, mem), peerMesh(t, reg, 1, mem), peerMesh(t, reg, 2, mem)}
			ctx := boundedCtx(t)
			edges := []engine.ExchangeEdge{
				peerEdge(1, 11, 0, 1), peerEdge(2, 12, 0, 1), peerEdge(1, 21, 0, 2),
				peerEdge(3, 13, 2, 1), peerEdge(1, 5, 0, 0),
			}
			var sent atomic.Int64
			sendErrs, recvErrs := make([]chan error, len(edges)), make([]chan error, len(edges))
			openSends := func() {
				for i, e := range edges {
					out, err := ms[e.FromNode].OpenSend(ctx, e)
					if err != nil {
						t.Fatal(err)
					}
					sendErrs[i] = make(chan error, 1)
					go func() { sendErrs[i] <- sendAll(ctx, out, msgs, &sent) }()
				}
			}
			openRecvs := func() {
				for i, e := range edges {
					in, err := ms[e.ToNode].OpenRecv(ctx, e)
					if err != nil {
						t.Fatal(err)
					}
					recvErrs[i] = make(chan error, 1)
					go func() { recvErrs[i] <- recvAll(t, inboxOf(t, in), msgs) }()
				}
			}
			if order == "SenderFirst" {
				openSends()
				waitAWhile()
				if n := sent.Load(); n != 0 {
					t.Fatalf("%d Sends returned before the receivers opened their sides", n)
				}
				for _, m := range ms {
					if n := m.Opened(); n != 0 {
						t.Fatalf("node %d opened %d edges before the receivers opened their sides", m.Node(), n)
					}
				}
				openRecvs()
			} else {
				openRecvs()
				openSends()
			}
			for i, e := range edges {
				if err := await(t, "the sender of "+e.String(), sendErrs[i]); err != nil {
					t.Errorf("%s: sender: %v", e, err)
				}
				if err := await(t, "the receiver of "+e.String(), recvErrs[i]); err != nil {
					t.Errorf("%s: inbox: %v", e, err)
				}
			}
			for node, want := range []int64{4, 0, 1} {
				if n := ms[node].Opened(); n != want {
					t.Errorf("node %d opened %d edges, want %d", node, n, want)
				}
			}
			for node, want := range []int{0, 2, 1} {
				if n := reg.looked(node); n != want {
					t.Errorf("node %d was looked up %d times, want %d (once by each node sending to it)", node, n, want)
				}
			}
			awaitPeerWatchers(t, ctx, ms...)
		})
	}
}

// A receiving node whose process restarts at another address is found there: the
// sender's first edge into it after the restart (a new graph, a new generation) finds
// the connection it cached dead, resolves the node again, and opens there.
func TestPeerMeshRestartedReceiver(t *testing.T) {
	mem, msgs := checkedScript(t, 6)
	reg := newRegistry()
	send, recv := peerMesh(t, reg, 0, mem), peerMesh(t, reg, 1, mem)
	ctx := boundedCtx(t)
	e := peerEdge(4, 9, 0, 1)
	runEdge(t, ctx, send, recv, e, msgs)
	old := recv.Addr()
	if err := recv.Close(); err != nil {
		t.Fatal(err)
	}
	// The restarted process listens elsewhere: a port of its own, not the old one.
	recv = peerMesh(t, reg, 1, mem)
	for recv.Addr() == old {
		recv = peerMesh(t, reg, 1, mem)
	}
	t.Logf("node 1 moved from %s to %s", old, recv.Addr())
	e.Generation = 2
	runEdge(t, ctx, send, recv, e, msgs)
	if n := reg.looked(1); n != 2 {
		t.Fatalf("node 1 was looked up %d times, want 2: at the first edge and after its restart", n)
	}
	if n := send.Opened(); n != 2 {
		t.Fatalf("Opened() = %d, want 2", n)
	}
	awaitPeerWatchers(t, ctx, recv)
}

// A node registered at an address where nothing listens fails the Send that opens
// the stream, naming the edge, the node and the address, after one more lookup (which
// gives the same address). Once the registry has the node's real address, the next
// edge's opening resolves it again and opens.
func TestPeerMeshDeadAddress(t *testing.T) {
	mem, msgs := checkedScript(t, 3)
	reg := newRegistry()
	send := peerMesh(t, reg, 0, mem)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	reg.set(1, dead)
	ctx := boundedCtx(t)
	e := peerEdge(4, 9, 0, 1)
	out, err := send.OpenSend(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	msgs[0].Chunk.Retain()
	err = out.Send(ctx, msgs[0])
	if err == nil || !strings.Contains(err.Error(), e.String()) || !strings.Contains(err.Error(), "node 1 at "+dead) {
		t.Fatalf("Send to a dead address: %v, want an error naming %s and node 1 at %s", err, e, dead)
	}
	t.Logf("Send: %v", err)
	out.Close()
	if n := reg.looked(1); n != 2 {
		t.Fatalf("node 1 was looked up %d times, want 2: at the opening and once again after it failed", n)
	}
	recv := peerMesh(t, reg, 1, mem)
	e.Generation = 2
	runEdge(t, ctx, send, recv, e, msgs)
	if n := reg.looked(1); n != 3 {
		t.Fatalf("node 1 was looked up %d times, want 3", n)
	}
}

// A PeerMesh opens only its own node's sides of edges, and refuses the others naming
// the nodes.
func TestPeerMeshWrongNode(t *testing.T) {
	reg := newRegistry()
	m := peerMesh(t, reg, 1, memory.NewGoAllocator())
	ctx := boundedCtx(t)
	for _, c := range []struct {
		recv bool // OpenRecv, else OpenSend
		e    engine.ExchangeEdge
		want string
	}{
		{recv: true, e: peerEdge(1, 2, 1, 2), want: "its receiving side is on node 2, and this process serves node 1"},
		{recv: false, e: peerEdge(1, 2, 2, 1), want: "its sending side is on node 2, and this process serves node 1"},
		{recv: false, e: peerEdge(1, 2, 1, -1), want: "there is no node -1"},
	} {
		var err error
		if c.recv {
			_, err = m.OpenRecv(ctx, c.e)
		} else {
			_, err = m.OpenSend(ctx, c.e)
		}
		if err == nil || !strings.Contains(err.Error(), c.e.String()) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it refused with %q", c.e, err, c.want)
		}
	}
	if n := m.Opened(); n != 0 {
		t.Fatalf("Opened() = %d, want 0", n)
	}
	if n := reg.looked(2); n != 0 {
		t.Fatalf("node 2 was looked up %d times, want 0", n)
	}
}

// OpenSend resolves nothing; the first Send does, and a lookup that fails fails it,
// naming the edge and the node, and releases the message. The failure is the
// output's: its next Send fails alike, without another lookup.
func TestPeerMeshResolveError(t *testing.T) {
	mem, msgs := checkedScript(t, 1)
	reg := newRegistry()
	m := peerMesh(t, reg, 0, mem)
	ctx := boundedCtx(t)
	e := peerEdge(4, 9, 0, 2)
	out, err := m.OpenSend(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if n := reg.looked(2); n != 0 {
		t.Fatalf("OpenSend looked node 2 up %d times, want 0", n)
	}
	for range 2 {
		msgs[0].Chunk.Retain()
		err = out.Send(ctx, msgs[0])
		if err == nil || !strings.Contains(err.Error(), e.String()) || !strings.Contains(err.Error(), "node 2: resolving its address") ||
			!errors.Is(err, errUnregistered) {
			t.Fatalf("Send to an unregistered node: %v, want an error naming %s and node 2, wrapping the registry's", err, e)
		}
		if n := reg.looked(2); n != 1 {
			t.Fatalf("node 2 was looked up %d times, want 1", n)
		}
	}
	t.Logf("Send: %v", err)
	out.Close()
	// The lookup that failed is not cached: an edge opened once the node registered
	// looks it up again, and opens.
	recv := peerMesh(t, reg, 2, mem)
	e.Generation = 2
	runEdge(t, ctx, m, recv, e, msgs)
	if n := reg.looked(2); n != 2 {
		t.Fatalf("node 2 was looked up %d times, want 2", n)
	}
}

// A failure other than "not expected yet" retires the connection it happened on, but
// the streams still on it go on, and it closes with the last of them: here a second
// sender of an edge that has one is refused (twice: on the cached connection and on a
// new one), while the first sender's stream carries on and ends cleanly.
func TestPeerMeshRetiredConnection(t *testing.T) {
	mem, msgs := checkedScript(t, 6)
	reg := newRegistry()
	send, recv := peerMesh(t, reg, 0, mem), peerMesh(t, reg, 1, mem)
	ctx := boundedCtx(t)
	e := peerEdge(4, 9, 0, 1)
	in, err := recv.OpenRecv(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- recvAll(t, inboxOf(t, in), msgs) }()
	first, err := send.OpenSend(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	half := len(msgs) / 2
	var sent atomic.Int64
	if err := sendAll(ctx, unclosed{first}, msgs[:half], &sent); err != nil {
		t.Fatal(err)
	}
	p, err := send.peerOf(1)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	old := p.conn
	p.mu.Unlock()

	second, err := send.OpenSend(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	wm := executors.Message{Watermark: &executors.Watermark{Column: 0, Value: int64(1)}}
	if err := second.Send(ctx, wm); err == nil || !strings.Contains(err.Error(), "already has a stream") || !strings.Contains(err.Error(), recv.Addr()) {
		t.Fatalf("second sender: %v, want it refused naming node 1 at %s", err, recv.Addr())
	}
	second.Close()
	if n := reg.looked(1); n != 2 {
		t.Fatalf("node 1 was looked up %d times, want 2", n)
	}
	// A retired connection is closed when it leaves p.retired.
	retired := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		_, ok := p.retired[old]
		return ok
	}
	p.mu.Lock()
	current := p.conn
	p.mu.Unlock()
	if !retired() || current == old {
		t.Fatal("the first connection is not retired and open for its stream")
	}
	if err := sendAll(ctx, first, msgs[half:], &sent); err != nil {
		t.Fatalf("the first sender, after its connection was retired: %v", err)
	}
	if err := await(t, "the receiver", got); err != nil {
		t.Fatalf("inbox: %v", err)
	}
	for retired() && ctx.Err() == nil {
		blockBriefly()
	}
	if retired() {
		t.Fatal("the retired connection was not closed after its last stream ended")
	}
}

// unclosed is an output whose Close does nothing: sendAll into it leaves the edge
// open.
type unclosed struct{ engine.Output }

func (unclosed) Close() {}
