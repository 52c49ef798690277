package exchange

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
)

// halfEdge is the edge the half-edge tests open: actor 4 on node 0 to actor 9 on
// node 1 of a 3-node mesh.
func halfEdge(generation uint64) engine.ExchangeEdge {
	return engine.ExchangeEdge{From: 4, To: 9, FromNode: 0, ToNode: 1, Generation: generation, Capacity: 4}
}

// inboxOf is the Inbox under a mesh's Inbound.
func inboxOf(t *testing.T, recv engine.Inbound) *Inbox {
	t.Helper()
	mi, ok := recv.(*meshInbound)
	if !ok {
		t.Fatalf("OpenRecv returned a %T", recv)
	}
	return mi.in
}

// sendAll sends msgs on out, counting the Sends that returned in sent, then closes
// out. Send releases what it sends, so each chunk is retained first: msgs stay the
// caller's.
func sendAll(ctx context.Context, out engine.Output, msgs []executors.Message, sent *atomic.Int64) error {
	for _, m := range msgs {
		if m.Chunk != nil {
			m.Chunk.Retain()
		}
		if err := out.Send(ctx, m); err != nil {
			return err
		}
		sent.Add(1)
	}
	out.Close()
	return nil
}

// await returns what c delivers, failing the test when nothing comes within a bound
// far above what any step here takes: an operation that should end but hangs fails.
func await[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("%s hangs", what)
		panic("unreachable")
	}
}

// boundedCtx is a context for a subtest's edge that ends well before the test's own
// timeout, so that an inbox that never ends otherwise ends with it and fails the
// test instead of hanging it.
func boundedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// awaitWatchers waits until no OpenRecv goroutine of m is left, failing the test if
// live, a context that bounds those goroutines too, ends first: they must exit when
// their inboxes end, not only with their context.
func awaitWatchers(t *testing.T, m *Mesh, live context.Context) {
	t.Helper()
	for m.watching.Load() != 0 && live.Err() == nil {
		blockBriefly()
	}
	if live.Err() != nil {
		t.Fatalf("OpenRecv goroutines were left after their inboxes ended, until their context ended (%d now)", m.watching.Load())
	}
}

// waitAWhile lets a sender retry a few times (its backoff reaches its 50ms ceiling).
func waitAWhile() {
	for range 50 {
		blockBriefly()
	}
}

// TestMeshHalfEdges opens the two sides of an edge separately, as the nodes of a
// cluster do, in either order.
func TestMeshHalfEdges(t *testing.T) {
	// The sender sends before the receiver opens its side: its first Send waits,
	// retrying, and once the receiver opens, every message, barriers and watermarks
	// among the chunks, arrives in order, and the edge ends cleanly.
	t.Run("SenderFirst", func(t *testing.T) {
		m, msgs := scriptedMesh(t, 12)
		ctx := boundedCtx(t)
		e := halfEdge(1)
		out, err := m.OpenSend(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if out.Actor() != e.To {
			t.Fatalf("the output's actor is %d, want %d", out.Actor(), e.To)
		}
		var sent atomic.Int64
		done := make(chan error, 1)
		go func() { done <- sendAll(ctx, out, msgs, &sent) }()
		waitAWhile()
		select {
		case err := <-done:
			t.Fatalf("the sender returned (%v) before the receiver opened its side", err)
		default:
		}
		if n := sent.Load(); n != 0 {
			t.Fatalf("%d Sends returned before the receiver opened its side", n)
		}
		if n := m.Opened(); n != 0 {
			t.Fatalf("%d edges opened before the receiver opened its side", n)
		}
		recv, err := m.OpenRecv(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := recvAll(t, inboxOf(t, recv), msgs); err != nil {
			t.Fatalf("inbox: %v", err)
		}
		if err := await(t, "the sender", done); err != nil {
			t.Fatalf("sender: %v", err)
		}
		if n := m.Opened(); n != 1 {
			t.Fatalf("Opened() = %d, want 1", n)
		}
		awaitWatchers(t, m, ctx)
	})

	// The receiver opens first; the sender then opens its stream at the first Send.
	// OpenRecv's goroutine exits when the inbox ends, its context still live.
	t.Run("ReceiverFirst", func(t *testing.T) {
		m, msgs := scriptedMesh(t, 12)
		ctx := boundedCtx(t)
		e := halfEdge(2)
		recv, err := m.OpenRecv(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- recvAll(t, inboxOf(t, recv), msgs) }()
		out, err := m.OpenSend(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		var sent atomic.Int64
		if err := sendAll(ctx, out, msgs, &sent); err != nil {
			t.Fatalf("sender: %v", err)
		}
		if err := await(t, "the receiver", got); err != nil {
			t.Fatalf("inbox: %v", err)
		}
		if n := m.Opened(); n != 1 {
			t.Fatalf("Opened() = %d, want 1", n)
		}
		awaitWatchers(t, m, ctx)
	})

	// An edge closed with nothing sent, before its receiver opened, ends cleanly: Close
	// opens the stream to send the end.
	t.Run("NothingSent", func(t *testing.T) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		m := newMesh(t, mem)
		ctx := boundedCtx(t)
		e := halfEdge(3)
		out, err := m.OpenSend(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan struct{})
		go func() {
			out.Close()
			close(closed)
		}()
		waitAWhile()
		recv, err := m.OpenRecv(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := recvAll(t, inboxOf(t, recv), nil); err != nil {
			t.Fatalf("inbox of an edge that carried nothing: %v, want nil", err)
		}
		await(t, "Close", closed)
		if n := m.Opened(); n != 1 {
			t.Fatalf("Opened() = %d, want 1", n)
		}
		awaitWatchers(t, m, ctx)
	})

	// A receiver whose context ends before any sender came ends, with an error
	// naming the edge, and OpenRecv's goroutine with it.
	t.Run("ReceiverContextEnds", func(t *testing.T) {
		m := newMesh(t, memory.NewGoAllocator())
		e := halfEdge(4)
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		recv, err := m.OpenRecv(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		waitAWhile()
		select {
		case msg, ok := <-recv.C():
			t.Fatalf("the inbox delivered %v (open %v) with no sender", msg, ok)
		default:
		}
		cancel()
		ended := make(chan struct{})
		go func() {
			recv.Discard()
			close(ended)
		}()
		await(t, "the inbox of an edge no sender came to", ended)
		err = recv.Err()
		if err == nil || !strings.Contains(err.Error(), e.String()) || !strings.Contains(err.Error(), "no sender came") {
			t.Fatalf("inbox error %v, want one naming %s and saying no sender came", err, e)
		}
		awaitWatchers(t, m, boundedCtx(t))
		// The edge is no longer expected: a late sender fails.
		out, err := m.OpenSend(testCtx(t), e)
		if err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
		defer scancel()
		if err := out.Send(sctx, executors.Message{Watermark: &executors.Watermark{}}); err == nil {
			t.Fatal("a sender to a receiver that gave up succeeded")
		}
	})

	// A sender whose context ends while its receiver never came fails its Send (it
	// does not hang), naming the edge and the receiving node, and releases the
	// message. Its Close then does not end the edge cleanly (a message was lost): a
	// receiver that opens later sees no clean end.
	for _, which := range []string{"SendContext", "EdgeContext"} {
		t.Run("SenderContextEnds/"+which, func(t *testing.T) {
			m, msgs := scriptedMesh(t, 1)
			e := halfEdge(5)
			edgeCtx, edgeCancel := context.WithCancel(testCtx(t))
			defer edgeCancel()
			sendCtx, sendCancel := context.WithCancel(testCtx(t))
			defer sendCancel()
			out, err := m.OpenSend(edgeCtx, e)
			if err != nil {
				t.Fatal(err)
			}
			msgs[0].Chunk.Retain()
			failed := make(chan error, 1)
			go func() { failed <- out.Send(sendCtx, msgs[0]) }()
			waitAWhile()
			if which == "SendContext" {
				sendCancel()
			} else {
				edgeCancel()
			}
			err = await(t, "Send to a receiver that never came", failed)
			if err == nil || !strings.Contains(err.Error(), e.String()) || !strings.Contains(err.Error(), m.Addr(e.ToNode)) ||
				!errors.Is(err, context.Canceled) {
				t.Fatalf("Send: %v, want an error naming %s and node %d at %s, for the context's end", err, e, e.ToNode, m.Addr(e.ToNode))
			}
			t.Logf("Send: %v", err)
			if n := m.Opened(); n != 0 {
				t.Fatalf("Opened() = %d, want 0", n)
			}
			if which == "EdgeContext" {
				await(t, "Close", goClose(out))
				return
			}
			closed := goClose(out)
			rctx, rcancel := context.WithTimeout(testCtx(t), 500*time.Millisecond)
			defer rcancel()
			recv, err := m.OpenRecv(rctx, e)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() { got <- recvAll(t, inboxOf(t, recv), nil) }()
			if err := await(t, "the inbox", got); err == nil {
				t.Fatal("the edge whose Send failed ended cleanly")
			}
			await(t, "Close", closed)
		})
	}

	// A failure other than "not expected yet" fails the Send at once: here a second
	// sender of an edge that has one.
	t.Run("OtherErrorFailsAtOnce", func(t *testing.T) {
		m := newMesh(t, memory.NewGoAllocator())
		ctx := boundedCtx(t)
		e := halfEdge(6)
		recv, err := m.OpenRecv(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.OpenSend(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		wm := executors.Message{Watermark: &executors.Watermark{Column: 0, Value: int64(1)}}
		if err := out.Send(ctx, wm); err != nil {
			t.Fatal(err)
		}
		second, err := m.OpenSend(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		failed := make(chan error, 1)
		go func() { failed <- second.Send(ctx, wm) }()
		err = await(t, "a second sender's Send", failed)
		if err == nil || !strings.Contains(err.Error(), "already has a stream") || !strings.Contains(err.Error(), m.Addr(e.ToNode)) {
			t.Fatalf("second sender: %v, want it refused naming node %d at %s", err, e.ToNode, m.Addr(e.ToNode))
		}
		out.Close()
		if err := recvAll(t, inboxOf(t, recv), []executors.Message{wm}); err != nil {
			t.Fatalf("inbox: %v", err)
		}
	})

	// Both sides validate the edge's nodes.
	t.Run("OutOfRange", func(t *testing.T) {
		m := newMesh(t, memory.NewGoAllocator())
		ctx := boundedCtx(t)
		for _, e := range []engine.ExchangeEdge{
			{From: 1, To: 2, FromNode: 0, ToNode: 3},
			{From: 1, To: 2, FromNode: -1, ToNode: 1},
			{From: 1, To: 2, FromNode: 0, ToNode: -1},
			{From: 1, To: 2, FromNode: 3, ToNode: 0},
		} {
			if out, err := m.OpenSend(ctx, e); err == nil || !strings.Contains(err.Error(), "the mesh has nodes 0 to 2") {
				t.Errorf("OpenSend %s: %v, %v; want it refused", e, out, err)
			}
			if in, err := m.OpenRecv(ctx, e); err == nil || !strings.Contains(err.Error(), "the mesh has nodes 0 to 2") {
				t.Errorf("OpenRecv %s: %v, %v; want it refused", e, in, err)
			}
		}
		if n := m.Opened(); n != 0 {
			t.Fatalf("Opened() = %d, want 0", n)
		}
	})
}

// goClose closes out in a goroutine; the channel closes when Close returns.
func goClose(out engine.Output) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		out.Close()
		close(c)
	}()
	return c
}

// scriptedMesh is a mesh over a leak-checked allocator and a script of n chunks with
// barriers and watermarks among them, made from it; the script is released, and the
// allocator checked, when the test ends.
func scriptedMesh(t *testing.T, n int) (*Mesh, []executors.Message) {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	_, msgs := script(t, mem, n)
	t.Cleanup(func() {
		for _, m := range msgs {
			m.Release()
		}
	})
	return newMesh(t, mem), msgs
}
