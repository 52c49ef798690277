package exchange

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"net"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine/cluster/wire"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// testWindow is the HTTP/2 window of the tests' servers: grpc's minimum, fixed.
const testWindow = 64 << 10

// serve starts a Flight server of s on 127.0.0.1 and returns its address; the server
// stops at the end of the test.
func serve(t testing.TB, s *Server) (addr string, fs flight.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs = NewFlightServer(s, testWindow)
	fs.InitListener(lis)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = fs.Serve()
	}()
	t.Cleanup(func() {
		fs.Shutdown()
		<-done
	})
	return lis.Addr().String(), fs
}

func dial(t testing.TB, addr string) flight.Client {
	t.Helper()
	c, err := Dial(addr, testWindow)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// digest hashes messages the same way on both sides of an edge: each message's wire
// metadata, then a chunk's rows as text.
type digest struct {
	h hash.Hash
	n int
}

func newDigest() *digest { return &digest{h: sha256.New()} }

func (d *digest) add(m executors.Message) error {
	md, err := wire.AppendMessage(nil, m)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.h, "%d:%x\n", len(md), md)
	if m.Chunk != nil {
		rec := m.Chunk.Record()
		for i := range int(rec.NumRows()) {
			fmt.Fprintln(d.h, vectest.FormatRow(rec, i))
		}
	}
	d.n++
	return nil
}

func (d *digest) sum() string { return hex.EncodeToString(d.h.Sum(nil)) }

// recvAll takes every message of in until its channel closes, checking each against
// want (in order) and releasing it; it returns the inbox's error.
func recvAll(t *testing.T, in *Inbox, want []executors.Message) error {
	t.Helper()
	i := 0
	for m := range in.Messages() {
		if i >= len(want) {
			t.Errorf("message %d (%v) past the %d sent", i, m, len(want))
		} else if err := messagesEqual(want[i], m); err != nil {
			t.Errorf("message %d: %v", i, err)
		}
		m.Release()
		i++
	}
	if in.Err() == nil && i != len(want) {
		t.Errorf("%d messages arrived, %d sent", i, len(want))
	}
	return in.Err()
}

func messagesEqual(a, b executors.Message) error {
	switch {
	case a.Chunk != nil:
		if b.Chunk == nil {
			return fmt.Errorf("%v arrived as %v", a, b)
		}
		return vectest.ChunksEqual(a.Chunk, b.Chunk)
	case a.Barrier != nil:
		if b.Barrier == nil {
			return fmt.Errorf("%v arrived as %v", a, b)
		}
		x, _ := wire.AppendBarrier(nil, a.Barrier)
		y, _ := wire.AppendBarrier(nil, b.Barrier)
		if string(x) != string(y) {
			return fmt.Errorf("%v arrived as %v", a, b)
		}
	case a.Watermark != nil:
		if b.Watermark == nil || *a.Watermark != *b.Watermark {
			return fmt.Errorf("%v arrived as %v", a, b)
		}
	}
	return nil
}

func newSender(t *testing.T, ctx context.Context, c flight.Client, e Edge, sc *arrow.Schema, mem memory.Allocator) *Sender {
	t.Helper()
	s, err := NewSender(ctx, c, e, sc, mem)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
