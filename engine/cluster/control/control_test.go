package control

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/executors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var testCfg = Config{Term: 5, Generation: 2, EventBuffer: 4}

func hello(node string, inc uint64) Hello {
	return Hello{Stamp: Stamp{Incarnation: inc}, Node: node, Role: "backfill", Addr: "127.0.0.1:1"}
}

// joined connects node at incarnation inc and takes its NodeJoined.
func joined(t *testing.T, c *Coordinator, addr, node string, inc uint64) *Node {
	t.Helper()
	n := connect(t, t.Context(), addr, hello(node, inc))
	ev := expect[NodeJoined](t, c)
	if want := (NodeJoined{Node: node, Role: "backfill", Addr: "127.0.0.1:1", Incarnation: inc}); ev != want {
		t.Fatalf("joined %+v, want %+v", ev, want)
	}
	return n
}

func recv(t *testing.T, n *Node) Message {
	t.Helper()
	m, err := n.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestExchange(t *testing.T) {
	c, addr := serveCoordinator(t, testCfg)
	n := joined(t, c, addr, "n1", 1)
	if got, want := n.Known(), (Stamp{Term: 5, Generation: 2, Incarnation: 1}); got != want {
		t.Fatalf("the node knows %s, want %s", got, want)
	}
	if got := c.Nodes(); len(got) != 1 || got[0].Node != "n1" || got[0].Incarnation != 1 {
		t.Fatalf("Nodes() = %+v", got)
	}
	ctx := t.Context()
	if err := c.Send(ctx, "n1", BuildActors{ID: 4, SpecVersion: 1, Spec: []byte("spec")}); err != nil {
		t.Fatal(err)
	}
	if b, ok := recv(t, n).(BuildActors); !ok || b.ID != 4 || string(b.Spec) != "spec" || b.Stamp != n.Known() {
		t.Fatalf("received %#v", b)
	}
	bar := &executors.Barrier{Prev: 1 << 16, Curr: 2 << 16, Kind: executors.Checkpoint}
	if err := c.Send(ctx, "n1", Inject{Barrier: bar}); err != nil {
		t.Fatal(err)
	}
	in, ok := recv(t, n).(Inject)
	if !ok || in.Barrier.Curr != bar.Curr || in.Barrier.Kind != executors.Checkpoint {
		t.Fatalf("received %#v", in)
	}
	reports := []Message{
		Collected{Epoch: bar.Curr, Actors: []executors.ActorID{1, 2}},
		Failed{Actor: 3, Err: "boom"},
		Sealed{Epoch: bar.Curr, Report: []byte("objects")},
	}
	for _, m := range reports {
		if err := n.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if m := fromNode[Collected](t, c, "n1"); m.Epoch != bar.Curr || len(m.Actors) != 2 || m.Stamp != (Stamp{5, 2, 1}) {
		t.Fatalf("collected %#v", m)
	}
	if m := fromNode[Failed](t, c, "n1"); m.Actor != 3 || m.Err != "boom" {
		t.Fatalf("failed %#v", m)
	}
	if m := fromNode[Sealed](t, c, "n1"); string(m.Report) != "objects" {
		t.Fatalf("sealed %#v", m)
	}

	// A new generation and term reach the node with the next message.
	if err := c.SetGeneration(3); err != nil {
		t.Fatal(err)
	}
	if err := c.SetTerm(6); err != nil {
		t.Fatal(err)
	}
	if err := c.SetGeneration(3); err == nil || !strings.Contains(err.Error(), "generation 3 is not above the current generation 3") {
		t.Fatalf("SetGeneration(3) again: %v", err)
	}
	if err := c.Send(ctx, "n1", Teardown{Generation: 2}); err != nil {
		t.Fatal(err)
	}
	if td, ok := recv(t, n).(Teardown); !ok || td.Generation != 2 || td.Stamp != (Stamp{6, 3, 1}) {
		t.Fatalf("received %#v", td)
	}
	if got := n.Known(); got != (Stamp{6, 3, 1}) {
		t.Fatalf("the node knows %s after the teardown", got)
	}
	if c.Refusals() != 0 || n.Refusals() != 0 {
		t.Fatalf("refusals: coordinator %d, node %d", c.Refusals(), n.Refusals())
	}
	if err := c.Send(ctx, "n1", Collected{}); err == nil {
		t.Fatal("the coordinator sent a collected")
	}
	if err := n.Send(ctx, Inject{Barrier: bar}); err == nil {
		t.Fatal("a node sent an inject")
	}
	if err := c.Send(ctx, "n9", Teardown{}); !errors.Is(err, ErrNoStream) || !strings.Contains(err.Error(), `"n9"`) {
		t.Fatalf("Send to an unknown node: %v", err)
	}
}

// refusedEvent takes the next event, a Refused of node, and checks its error's text.
func refusedEvent(t *testing.T, c *Coordinator, node string, want ...string) *RefusedError {
	t.Helper()
	ev := expect[Refused](t, c)
	if ev.Node != node || ev.Err == nil {
		t.Fatalf("refused %+v, want one of node %q", ev, node)
	}
	for _, w := range want {
		if !strings.Contains(ev.Err.Error(), w) {
			t.Fatalf("refusal %q does not name %q", ev.Err, w)
		}
	}
	return ev.Err
}

func TestStaleAtCoordinator(t *testing.T) {
	c, addr := serveCoordinator(t, testCfg)
	n := joined(t, c, addr, "n1", 1)
	ctx := t.Context()
	for i, tc := range []struct {
		s    Stamp
		want string
	}{
		{Stamp{4, 2, 1}, "stale term"},
		{Stamp{6, 2, 1}, "term above the leader's"},
		{Stamp{5, 1, 1}, "stale generation"},
		{Stamp{5, 3, 1}, "generation above the current one"},
		{Stamp{5, 2, 2}, "not the stream's incarnation"},
	} {
		if err := n.sendFrame(ctx, KindCollected, frame(t, Collected{Stamp: tc.s, Epoch: 9})); err != nil {
			t.Fatal(err)
		}
		e := refusedEvent(t, c, "n1", tc.want, tc.s.String(), "knows term 5, generation 2, incarnation 1")
		if e.Kind != KindCollected || e.Got != tc.s {
			t.Fatalf("refusal %+v", e)
		}
		if got := c.Refusals(); got != uint64(i+1) {
			t.Fatalf("%d refusals counted after %d", got, i+1)
		}
	}
	// The stream goes on.
	if err := n.Send(ctx, Collected{Epoch: 9}); err != nil {
		t.Fatal(err)
	}
	fromNode[Collected](t, c, "n1")

	// What the node sends before it learns of a new generation or term is stale.
	if err := c.SetGeneration(3); err != nil {
		t.Fatal(err)
	}
	if err := n.Send(ctx, Sealed{Epoch: 9}); err != nil {
		t.Fatal(err)
	}
	refusedEvent(t, c, "n1", "stale generation", "term 5, generation 2, incarnation 1")
	if err := c.SetTerm(7); err != nil {
		t.Fatal(err)
	}
	if err := n.Send(ctx, Sealed{Epoch: 9}); err != nil {
		t.Fatal(err)
	}
	refusedEvent(t, c, "n1", "stale term", "knows term 7, generation 3, incarnation 1")
	if got := c.Refusals(); got != 7 {
		t.Fatalf("%d refusals counted, want 7", got)
	}
}

func TestStaleAtNode(t *testing.T) {
	c, addr := serveCoordinator(t, testCfg)
	n := joined(t, c, addr, "n1", 1)
	for i, tc := range []struct {
		s    Stamp
		want string
	}{
		{Stamp{4, 2, 1}, "stale term"},
		{Stamp{5, 1, 1}, "stale generation"},
		{Stamp{5, 2, 2}, "not this node's incarnation"},
	} {
		sendRaw(t, c, "n1", frame(t, Teardown{Stamp: tc.s, Generation: 1}))
		_, err := n.Recv()
		var re *RefusedError
		if !errors.As(err, &re) || re.Got != tc.s || re.Kind != KindTeardown {
			t.Fatalf("Recv of %s: %v, want a refusal", tc.s, err)
		}
		for _, w := range []string{tc.want, tc.s.String(), "knows term 5, generation 2, incarnation 1"} {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("refusal %q does not name %q", err, w)
			}
		}
		if got := n.Refusals(); got != uint64(i+1) {
			t.Fatalf("%d refusals counted after %d", got, i+1)
		}
	}
	// The stream goes on, and a higher term and generation become the known ones.
	sendRaw(t, c, "n1", frame(t, Teardown{Stamp: Stamp{8, 4, 1}, Generation: 3}))
	if td, ok := recv(t, n).(Teardown); !ok || td.Generation != 3 {
		t.Fatalf("received %#v", td)
	}
	if got := n.Known(); got != (Stamp{8, 4, 1}) {
		t.Fatalf("the node knows %s", got)
	}
	sendRaw(t, c, "n1", frame(t, Teardown{Stamp: Stamp{7, 4, 1}}))
	if _, err := n.Recv(); err == nil || !strings.Contains(err.Error(), "stale term") {
		t.Fatalf("Recv of term 7 after term 8: %v", err)
	}
	// A newer leader's generations start anew: a lower generation of a higher
	// term is taken.
	sendRaw(t, c, "n1", frame(t, Teardown{Stamp: Stamp{9, 1, 1}, Generation: 1}))
	if td, ok := recv(t, n).(Teardown); !ok || td.Generation != 1 {
		t.Fatalf("received %#v", td)
	}
	if got := n.Known(); got != (Stamp{9, 1, 1}) {
		t.Fatalf("the node knows %s", got)
	}
}

// A node that saw a graph of an earlier leader connects to a new leader (a higher
// term) that has built no graph yet: generations are compared within a term.
func TestHelloOfAnEarlierTerm(t *testing.T) {
	_, addr := serveCoordinator(t, testCfg) // term 5, generation 2
	n := connect(t, t.Context(), addr, Hello{Stamp: Stamp{Term: 4, Generation: 9, Incarnation: 1}, Node: "n1"})
	if got := n.Known(); got != (Stamp{5, 2, 1}) {
		t.Fatalf("the node knows %s, want the new leader's term 5, generation 2", got)
	}
}

func TestHelloRefused(t *testing.T) {
	reg := &registry{cur: map[string]uint64{"n1": 2}}
	cfg := testCfg
	cfg.Registry = reg
	c, addr := serveCoordinator(t, cfg)
	ctx := t.Context()
	for _, tc := range []struct {
		h    Hello
		want string
	}{
		{Hello{Stamp: Stamp{Term: 9, Incarnation: 2}, Node: "n1"}, "the node has seen a term above the leader's"},
		{Hello{Stamp: Stamp{Term: 5, Generation: 3, Incarnation: 2}, Node: "n1"}, "the node has seen a generation above the current one"},
		{Hello{Stamp: Stamp{Incarnation: 1}, Node: "n1"}, "the registry refuses the incarnation"},
		{Hello{Stamp: Stamp{Incarnation: 1}, Node: "n2"}, "the registry refuses the incarnation"},
	} {
		n, err := Connect(ctx, addr, tc.h)
		if err == nil {
			n.Close()
			t.Fatalf("Connect with %+v succeeded", tc.h)
		}
		if status.Code(errors.Unwrap(err)) != codes.FailedPrecondition || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.h.Stamp.String()) {
			t.Fatalf("Connect with %+v: %v, want a refusal naming %q and %s", tc.h, err, tc.want, tc.h.Stamp)
		}
		refusedEvent(t, c, tc.h.Node, tc.want, "knows term 5, generation 2")
	}
	if got := c.Refusals(); got != 4 {
		t.Fatalf("%d refusals counted, want 4", got)
	}
	// A node that has seen the leader's own term and generation joins.
	n := connect(t, ctx, addr, Hello{Stamp: Stamp{Term: 5, Generation: 2, Incarnation: 2}, Node: "n1"})
	expect[NodeJoined](t, c)
	if n.Known() != (Stamp{5, 2, 2}) {
		t.Fatalf("the node knows %s", n.Known())
	}
}

// staleLeader answers every hello with an Accept of term 3 and generation 1.
type staleLeader struct{}

func (staleLeader) serve(stream grpc.ServerStream) error {
	var f rawFrame
	if err := stream.RecvMsg(&f); err != nil {
		return err
	}
	m, err := DecodeFrame(f)
	if err != nil {
		return err
	}
	a, err := AppendFrame(nil, Accept{Stamp: Stamp{Term: 3, Generation: 1, Incarnation: StampOf(m).Incarnation}})
	if err != nil {
		return err
	}
	f = a
	if err := stream.SendMsg(&f); err != nil {
		return err
	}
	return stream.RecvMsg(&f)
}

func TestAcceptRefused(t *testing.T) {
	srv := grpc.NewServer()
	srv.RegisterService(&serviceDesc, staleLeader{})
	addr := serveOn(t, srv)
	for _, tc := range []struct {
		seen Stamp
		want string
	}{
		{Stamp{Term: 4, Generation: 1, Incarnation: 1}, "stale term"},
		{Stamp{Term: 3, Generation: 2, Incarnation: 1}, "stale generation"},
	} {
		n, err := Connect(t.Context(), addr, Hello{Stamp: tc.seen, Node: "n1"})
		if err == nil {
			n.Close()
			t.Fatalf("Connect having seen %s accepted a leader at term 3, generation 1", tc.seen)
		}
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "stamped term 3, generation 1, incarnation 1") {
			t.Fatalf("Connect having seen %s: %v, want a refusal of the accept", tc.seen, err)
		}
	}
	n := connect(t, t.Context(), addr, Hello{Stamp: Stamp{Term: 3, Generation: 1, Incarnation: 1}, Node: "n1"})
	if n.Known() != (Stamp{3, 1, 1}) {
		t.Fatalf("the node knows %s", n.Known())
	}
}

func TestSecondStreamOfIncarnation(t *testing.T) {
	c, addr := serveCoordinator(t, testCfg)
	n := joined(t, c, addr, "n1", 1)
	n2, err := Connect(t.Context(), addr, hello("n1", 1))
	if err == nil {
		n2.Close()
		t.Fatal("a second stream of node n1 incarnation 1 was accepted")
	}
	if status.Code(errors.Unwrap(err)) != codes.AlreadyExists || !strings.Contains(err.Error(), `node "n1" incarnation 1 already has a stream`) {
		t.Fatalf("second stream: %v", err)
	}
	// The first stream goes on.
	if err := c.Send(t.Context(), "n1", Teardown{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if _, ok := recv(t, n).(Teardown); !ok {
		t.Fatal("the first stream did not get the teardown")
	}
}

func TestNewerIncarnationReplaces(t *testing.T) {
	c, addr := serveCoordinator(t, testCfg)
	old := joined(t, c, addr, "n1", 1)
	fresh := connect(t, t.Context(), addr, hello("n1", 2))
	lost := expect[NodeLost](t, c)
	if lost.Node != "n1" || lost.Incarnation != 1 || !strings.Contains(lost.Err.Error(), "replaced by incarnation 2") {
		t.Fatalf("lost %+v, want incarnation 1 replaced by incarnation 2", lost)
	}
	if ev := expect[NodeJoined](t, c); ev.Incarnation != 2 {
		t.Fatalf("joined %+v", ev)
	}
	if _, err := old.Recv(); err == nil || !strings.Contains(err.Error(), "replaced by incarnation 2") {
		t.Fatalf("the old stream's Recv: %v, want an error naming incarnation 2", err)
	}
	if err := c.Send(t.Context(), "n1", Teardown{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if td, ok := recv(t, fresh).(Teardown); !ok || td.Incarnation != 2 {
		t.Fatalf("the new stream received %#v", td)
	}
	// The old incarnation cannot come back.
	back, err := Connect(t.Context(), addr, hello("n1", 1))
	if err == nil {
		back.Close()
		t.Fatal("incarnation 1 came back after incarnation 2")
	}
	refusedEvent(t, c, "n1", "an incarnation below the node's current stream's", "incarnation 1", "incarnation 2")
}

func TestLostStreams(t *testing.T) {
	c, addr := serveCoordinator(t, testCfg)
	ctx, cancel := context.WithCancel(t.Context())
	connect(t, ctx, addr, hello("ctx", 1))
	expect[NodeJoined](t, c)
	closed := joined(t, c, addr, "closed", 4)
	bad := joined(t, c, addr, "bad", 2)

	cancel()
	if ev := expect[NodeLost](t, c); ev.Node != "ctx" || ev.Incarnation != 1 || !strings.Contains(ev.Err.Error(), `node "ctx" incarnation 1`) {
		t.Fatalf("lost %+v", ev)
	}
	closed.Close()
	if ev := expect[NodeLost](t, c); ev.Node != "closed" || ev.Incarnation != 4 {
		t.Fatalf("lost %+v", ev)
	}
	// A message only a coordinator sends ends the stream.
	if err := bad.sendFrame(t.Context(), KindTeardown, frame(t, Teardown{Stamp: Stamp{5, 2, 2}})); err != nil {
		t.Fatal(err)
	}
	if ev := expect[NodeLost](t, c); ev.Node != "bad" || !strings.Contains(ev.Err.Error(), "sent a teardown") {
		t.Fatalf("lost %+v", ev)
	}
	if err := c.Send(t.Context(), "closed", Teardown{}); !errors.Is(err, ErrNoStream) {
		t.Fatalf("Send to a lost node: %v", err)
	}
	if len(c.Nodes()) != 0 {
		t.Fatalf("nodes after every stream was lost: %+v", c.Nodes())
	}
}

func TestCoordinatorClose(t *testing.T) {
	c, addr := serveCoordinator(t, testCfg)
	n := joined(t, c, addr, "n1", 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range c.Events() {
		}
	}()
	c.Close()
	<-done
	if _, err := n.Recv(); err == nil || !strings.Contains(err.Error(), "coordinator closed") {
		t.Fatalf("Recv after the coordinator closed: %v", err)
	}
	if _, err := Connect(t.Context(), addr, hello("n2", 1)); err == nil || !strings.Contains(err.Error(), "coordinator closed") {
		t.Fatalf("Connect after the coordinator closed: %v", err)
	}
}
