package control

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"google.golang.org/grpc"
)

// The meta store is the registry the coordinator is meant to use.
var _ Registry = (*meta.Store)(nil)

// serveCoordinator serves a coordinator of cfg on 127.0.0.1 and returns it with its
// address; the server stops and the coordinator closes at the end of the test.
func serveCoordinator(t testing.TB, cfg Config) (*Coordinator, string) {
	t.Helper()
	c := NewCoordinator(cfg)
	srv := grpc.NewServer(ServerOptions()...)
	c.Register(srv)
	addr := serveOn(t, srv)
	t.Cleanup(c.Close)
	return c, addr
}

// serveOn serves srv on 127.0.0.1 until the end of the test (its cleanup runs before
// those registered earlier, such as the coordinator's Close).
func serveOn(t testing.TB, srv *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

// connect connects a node, closed at the end of the test.
func connect(t testing.TB, ctx context.Context, addr string, h Hello) *Node {
	t.Helper()
	n, err := Connect(ctx, addr, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// next takes the coordinator's next event; it fails the test when Events is closed.
func next(t testing.TB, c *Coordinator) Event {
	t.Helper()
	ev, ok := <-c.Events()
	if !ok {
		t.Fatal("the coordinator's events closed")
	}
	return ev
}

// expect takes the next event and checks that it is a T.
func expect[T Event](t testing.TB, c *Coordinator) T {
	t.Helper()
	ev := next(t, c)
	v, ok := ev.(T)
	if !ok {
		var want T
		t.Fatalf("event %#v, want a %T", ev, want)
	}
	return v
}

// fromNode takes the next event, checks that it is a FromNode of node holding an M,
// and returns the message.
func fromNode[M Message](t testing.TB, c *Coordinator, node string) M {
	t.Helper()
	ev := expect[FromNode](t, c)
	m, ok := ev.Msg.(M)
	if ev.Node != node || !ok {
		var want M
		t.Fatalf("event %#v, want a %T from node %q", ev, want, node)
	}
	return m
}

// sendRaw hands frame, as it is, to node's stream, bypassing Send's stamping.
func sendRaw(t testing.TB, c *Coordinator, node string, frame []byte) {
	t.Helper()
	c.mu.Lock()
	st := c.nodes[node]
	c.mu.Unlock()
	if st == nil {
		t.Fatalf("node %q has no stream", node)
	}
	req := sendReq{frame: frame, done: make(chan error, 1)}
	st.out <- req
	if err := <-req.done; err != nil {
		t.Fatal(err)
	}
}

// frame encodes m, failing the test on an error.
func frame(t testing.TB, m Message) []byte {
	t.Helper()
	f, err := AppendFrame(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// registry is a Registry of fixed current incarnations.
type registry struct {
	mu  sync.Mutex
	cur map[string]uint64
}

func (r *registry) CheckIncarnation(_ context.Context, node string, inc uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.cur[node]; !ok || cur != inc {
		return fmt.Errorf("node %q incarnation %d: stale incarnation (current %d)", node, inc, cur)
	}
	return nil
}
