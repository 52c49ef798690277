package exchange

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// script is a stream of messages over table-random chunks: chunks, barriers of every
// mutation, watermarks. The caller releases the messages.
func script(t *testing.T, mem memory.Allocator, nchunks int) (*arrow.Schema, []executors.Message) {
	rng, _ := vectest.Rand(t)
	tab := vectest.RandomTable(rng, "t")
	muts := []executors.Mutation{nil, executors.Pause{}, executors.Resume{Fragments: []executors.FragmentID{2}},
		executors.Throttle{Limits: map[executors.FragmentID]*int64{1: nil}},
		executors.Stop{Actors: []executors.ActorID{9}},
		executors.Update{Vnodes: map[executors.ActorID]*vnode.Bitmap{3: vnode.Full(vnode.MaxCount)}}}
	var msgs []executors.Message
	epoch := executors.Epoch(1 << 16)
	for i := range nchunks {
		msgs = append(msgs, executors.ChunkMessage(vectest.RandomChunk(rng, mem, tab, rng.IntN(300), 0.2)))
		if i%3 == 2 {
			msgs = append(msgs, executors.Message{Watermark: &executors.Watermark{Column: 0, Value: int64(i)}})
		}
		if i%4 == 3 {
			m := muts[(i/4)%len(muts)]
			b := &executors.Barrier{Prev: epoch, Curr: epoch + 1, Mutation: m}
			if executors.ForcesCheckpoint(m) {
				b.Kind = executors.Checkpoint
			}
			msgs = append(msgs, executors.BarrierMessage(b))
			epoch++
		}
	}
	return tab.ArrowSchema(), msgs
}

func TestRoundTrip(t *testing.T) {
	smem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	rmem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer smem.AssertSize(t, 0)
	defer rmem.AssertSize(t, 0)
	sc, msgs := script(t, smem, 40)
	defer func() {
		for _, m := range msgs {
			m.Release()
		}
	}()
	srv := NewServer(rmem)
	edge := Edge{Up: 3, Down: 7, Generation: 1 << 40}
	in, err := srv.Expect(edge, sc, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Expect(edge, sc, 4); err == nil || !strings.Contains(err.Error(), "edge 3 -> 7") {
		t.Fatalf("second Expect: %v", err)
	}
	addr, _ := serve(t, srv)
	done := make(chan error, 1)
	go func() { done <- recvAll(t, in, msgs) }()
	s := newSender(t, t.Context(), dial(t, addr), edge, sc, smem)
	for _, m := range msgs {
		if err := s.Send(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("inbox: %v", err)
	}
	if err := s.Send(t.Context(), msgs[0]); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Send after Close: %v", err)
	}
}

func TestUnexpectedEdge(t *testing.T) {
	srv := NewServer(memory.NewGoAllocator())
	addr, _ := serve(t, srv)
	sc := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}}, nil)
	_, err := NewSender(t.Context(), dial(t, addr), Edge{Up: 1, Down: 2}, sc, memory.NewGoAllocator())
	if err == nil || !strings.Contains(err.Error(), "edge 1 -> 2 (generation 0) is not expected") {
		t.Fatalf("got %v", err)
	}
}

// TestOneStreamPerEdge: a second stream for an edge that has one is refused.
func TestOneStreamPerEdge(t *testing.T) {
	srv := NewServer(memory.NewGoAllocator())
	edge := Edge{Up: 1, Down: 2, Generation: 9}
	sc := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}}, nil)
	in, err := srv.Expect(edge, sc, 1)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serve(t, srv)
	c := dial(t, addr)
	s := newSender(t, t.Context(), c, edge, sc, memory.NewGoAllocator())
	_, err = NewSender(t.Context(), c, edge, sc, memory.NewGoAllocator())
	if err == nil || !strings.Contains(err.Error(), "edge 1 -> 2 (generation 9) already has a stream") {
		t.Fatalf("second stream: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := recvAll(t, in, nil); err != nil {
		t.Fatal(err)
	}
}

// TestBadDescriptor: a stream whose first message does not name an edge is refused.
func TestBadDescriptor(t *testing.T) {
	for _, d := range []*flight.FlightDescriptor{
		nil,
		{Type: flight.DescriptorCMD, Cmd: []byte("x")},
		{Type: flight.DescriptorPATH, Path: []string{descriptorTag, "1", "2"}},
		{Type: flight.DescriptorPATH, Path: []string{descriptorTag, "1", "4294967296", "0"}},
		{Type: flight.DescriptorPATH, Path: []string{"other", "1", "2", "0"}},
	} {
		if e, err := parseDescriptor(d); err == nil {
			t.Errorf("descriptor %v parsed as %s", d, e)
		}
	}
	e := Edge{Up: 4294967295, Down: 0, Generation: 1<<64 - 1}
	if got, err := parseDescriptor(e.descriptor()); err != nil || got != e {
		t.Fatalf("%s parsed as %s, %v", e, got, err)
	}
}

// TestStreamEndsWithoutClose: a sender that goes away without Close leaves its inbox
// an error naming the edge, not io.EOF.
func TestStreamEndsWithoutClose(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	sc, msgs := script(t, mem, 4)
	defer func() {
		for _, m := range msgs {
			m.Release()
		}
	}()
	srv := NewServer(mem)
	edge := Edge{Up: 5, Down: 6}
	in, err := srv.Expect(edge, sc, 100)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serve(t, srv)
	ctx, cancel := context.WithCancel(t.Context())
	s := newSender(t, ctx, dial(t, addr), edge, sc, mem)
	for _, m := range msgs {
		if err := s.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	err = recvAll(t, in, msgs)
	if err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "edge 5 -> 6") {
		t.Fatalf("inbox error %v, want one naming the edge", err)
	}
	if err := s.Send(t.Context(), msgs[len(msgs)-1]); err == nil || !strings.Contains(err.Error(), "edge 5 -> 6") {
		t.Fatalf("Send on a cancelled edge: %v", err)
	}
	if err := s.Close(); err == nil {
		t.Fatal("Close of a broken edge returned nil")
	}
}

// TestBackpressure: with an inbox that nobody reads, the sender blocks after a bounded
// number of messages; once the inbox is read, everything arrives in order.
func TestBackpressure(t *testing.T) {
	const (
		rows     = 1024
		capacity = 4
		total    = 400
	)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	sc := arrow.NewSchema([]arrow.Field{{Name: "v", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewInt64Builder(mem)
	for i := range rows {
		b.Append(int64(i))
	}
	col := b.NewArray()
	b.Release()
	rec := array.NewRecordBatch(sc, []arrow.Array{col}, rows)
	col.Release()
	ops := vec.NewOps(mem, rows, vec.Insert)
	c := vec.NewChunk(rec, ops, nil)
	rec.Release()
	ops.Release()
	defer c.Release()

	srv := NewServer(mem)
	edge := Edge{Up: 1, Down: 2}
	in, err := srv.Expect(edge, sc, capacity)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serve(t, srv)
	s := newSender(t, t.Context(), dial(t, addr), edge, sc, mem)
	var sent atomic.Int64
	sendErr := make(chan error, 1)
	go func() {
		for range total {
			if err := s.Send(t.Context(), executors.ChunkMessage(c)); err != nil {
				sendErr <- err
				return
			}
			sent.Add(1)
		}
		sendErr <- s.Close()
	}()
	// Each message carries at least rows*8 bytes of column data against the window;
	// besides the inbox and the one message the server holds, the stream's window and
	// grpc's 64 KiB write quota hold the rest (one message more each, partly sent).
	bound := int64(capacity + 1 + 2*testWindow/(rows*8) + 2)
	// Wait until the sender stops making progress: the count is checked, never a time.
	var last int64 = -1
	for stable := 0; stable < 50; {
		n := sent.Load()
		if n > bound {
			t.Fatalf("the sender got %d messages ahead of an unread inbox, bound %d", n, bound)
		}
		if n == last {
			stable++
		} else {
			stable, last = 0, n
		}
		runtime.Gosched()
		select {
		case err := <-sendErr:
			t.Fatalf("the sender finished (%v) with nobody reading", err)
		case <-t.Context().Done():
		default:
		}
		blockBriefly()
	}
	t.Logf("chunks of %d int64 rows, window %d, inbox %d: the sender blocked after %d messages (bound %d)", rows, testWindow, capacity, last, bound)
	want := make([]executors.Message, total)
	for i := range want {
		want[i] = executors.ChunkMessage(c)
	}
	if err := recvAll(t, in, want); err != nil {
		t.Fatal(err)
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
}

// A chunk far above grpc's default message limit (4 MiB) crosses the edge whole: the
// tests' server is NewFlightServer's, whose limit is MaxMessageBytes.
func TestWideChunk(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	sc := arrow.NewSchema([]arrow.Field{{Name: "blob", Type: arrow.BinaryTypes.String}}, nil)
	b := array.NewRecordBuilder(mem, sc)
	wide := strings.Repeat("x", 12<<10)
	for range 1024 { // 12 MiB
		b.Field(0).(*array.StringBuilder).Append(wide)
	}
	rec := b.NewRecordBatch()
	b.Release()
	ops := vec.NewOps(mem, 1024, vec.Insert)
	c := vec.NewChunk(rec, ops, nil)
	rec.Release()
	ops.Release()
	defer c.Release()

	srv := NewServer(mem)
	edge := Edge{Up: 1, Down: 2}
	in, err := srv.Expect(edge, sc, 4)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serve(t, srv)
	s := newSender(t, t.Context(), dial(t, addr), edge, sc, mem)
	if err := s.Send(t.Context(), executors.ChunkMessage(c)); err != nil {
		t.Fatal(err)
	}
	m := <-in.Messages()
	if m.Chunk == nil || m.Chunk.Record().NumRows() != 1024 || m.Chunk.Record().Column(0).(*array.String).Value(1023) != wide {
		t.Fatalf("received %v", m)
	}
	m.Release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range in.Messages() {
	}
	if err := in.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestBarrierAckedAfterReceiverGoes: a receiver that goes right after it took a
// barrier (an Update that stops it) still has the barrier acknowledged, so the
// sender's Send of it succeeds; before, the ack raced the receiver's end, and a sender
// that lost the race failed the round (seen in weir sim under load).
func TestBarrierAckedAfterReceiverGoes(t *testing.T) {
	mem := memory.NewGoAllocator()
	srv := NewServer(mem)
	edge := Edge{Up: 2, Down: 10, Generation: 7}
	sc := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}}, nil)
	in, err := srv.Expect(edge, sc, 4)
	if err != nil {
		t.Fatal(err)
	}
	gone := make(chan struct{})
	testingBeforeAck = func(e Edge) {
		if e == edge {
			<-gone // the receiver took the barrier and went before the ack
		}
	}
	defer func() { testingBeforeAck = nil }()
	addr, _ := serve(t, srv)
	s := newSender(t, t.Context(), dial(t, addr), edge, sc, mem)
	go func() {
		m := <-in.Messages()
		m.Release()
		srv.Abort(edge, errors.New("the receiver stopped"))
		close(gone)
	}()
	b := &executors.Barrier{Prev: 1 << 16, Curr: 2 << 16, Kind: executors.Checkpoint, Mutation: executors.Stop{Actors: []executors.ActorID{10}}}
	if err := s.Send(t.Context(), executors.BarrierMessage(b)); err != nil {
		t.Fatalf("the barrier the receiver took was not acknowledged: %v", err)
	}
	// The stream is over: the next message fails, naming why.
	if err := s.Send(t.Context(), executors.BarrierMessage(&executors.Barrier{Prev: 2 << 16, Curr: 3 << 16})); err == nil || !strings.Contains(err.Error(), "the receiver stopped") {
		t.Fatalf("a send after the receiver went: %v", err)
	}
}
