package exchange

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// BenchmarkEdge measures one edge on loopback: each iteration sends 1000 chunks of 1024
// rows (int64, varchar, float64) with a barrier every 100, and the receiver releases
// what it takes. The server's windows are the tests' fixed 64 KiB. It reports rows/s.
func BenchmarkEdge(b *testing.B) {
	const (
		rows          = 1024
		chunksPerIter = 1000
		barrierEvery  = 100
	)
	mem := memory.NewGoAllocator()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "price", Type: arrow.PrimitiveTypes.Float64},
	}, nil)
	rb := array.NewRecordBuilder(mem, sc)
	for i := range rows {
		rb.Field(0).(*array.Int64Builder).Append(int64(i))
		rb.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("item-%d", i))
		rb.Field(2).(*array.Float64Builder).Append(float64(i) * 1.5)
	}
	rec := rb.NewRecordBatch()
	rb.Release()
	ops := vec.NewOps(mem, rows, vec.Insert)
	c := vec.NewChunk(rec, ops, nil)
	rec.Release()
	ops.Release()
	defer c.Release()

	s, drained := benchEdge(b, mem, sc, 64)
	epoch := executors.Epoch(1)
	b.ResetTimer()
	for range b.N {
		for i := range chunksPerIter {
			if err := s.Send(b.Context(), executors.ChunkMessage(c)); err != nil {
				b.Fatal(err)
			}
			if (i+1)%barrierEvery == 0 {
				if err := s.Send(b.Context(), executors.BarrierMessage(&executors.Barrier{Prev: epoch, Curr: epoch + 1})); err != nil {
					b.Fatal(err)
				}
				epoch++
			}
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	if err := <-drained; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*chunksPerIter*rows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkEdgeVsChannel compares one edge on loopback with the engine's in-process
// edge, an engine.ChanOutput into a channel, in one run: each iteration sends 100
// chunks of 1024 Nexmark bid rows (random, 10% NULLs in nullable columns) and a
// barrier over the Flight edge, then the same over a channel of the same capacity,
// each to a receiver that releases what it takes. It reports both rows/s and the
// ratio flight/channel of their total times' rates.
func BenchmarkEdgeVsChannel(b *testing.B) {
	const (
		rows          = 1024
		chunksPerIter = 100
		capacity      = 16
	)
	mem := memory.NewGoAllocator()
	bid := tables.BidTable()
	c := vectest.RandomChunk(rand.New(rand.NewPCG(1, 2)), mem, bid, rows, 0.1)
	defer c.Release()
	sc := c.Record().Schema()

	s, flightDone := benchEdge(b, mem, sc, capacity)
	ch := make(chan executors.Message, capacity)
	out := engine.ChanOutput{ID: 2, C: ch}
	acks := make(chan struct{})
	go func() {
		for m := range ch {
			if m.Barrier != nil {
				acks <- struct{}{} // the channel edge's barrier is taken, as a Flight ack says
			}
			m.Release()
		}
		close(acks)
	}()
	var flightT, chanT time.Duration
	epoch := executors.Epoch(1)
	barrier := func() executors.Message {
		epoch++
		return executors.BarrierMessage(&executors.Barrier{Prev: epoch - 1, Curr: epoch})
	}
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		for range chunksPerIter {
			if err := s.Send(b.Context(), executors.ChunkMessage(c)); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Send(b.Context(), barrier()); err != nil { // returns once acknowledged
			b.Fatal(err)
		}
		t1 := time.Now()
		for range chunksPerIter {
			c.Retain() // the output takes a reference
			if err := out.Send(b.Context(), executors.ChunkMessage(c)); err != nil {
				b.Fatal(err)
			}
		}
		if err := out.Send(b.Context(), barrier()); err != nil {
			b.Fatal(err)
		}
		<-acks
		flightT += t1.Sub(t0)
		chanT += time.Since(t1)
	}
	b.StopTimer()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	if err := <-flightDone; err != nil {
		b.Fatal(err)
	}
	out.Close()
	<-acks
	total := float64(b.N * chunksPerIter * rows)
	b.ReportMetric(total/flightT.Seconds(), "flight_rows/s")
	b.ReportMetric(total/chanT.Seconds(), "channel_rows/s")
	b.ReportMetric(chanT.Seconds()/flightT.Seconds(), "flight/channel")
}

// benchEdge opens an edge on loopback whose inbox holds capacity messages and whose
// receiver releases what it takes; the channel gets the inbox's Err once it closes.
func benchEdge(b *testing.B, mem memory.Allocator, sc *arrow.Schema, capacity int) (*Sender, <-chan error) {
	b.Helper()
	srv := NewServer(mem)
	edge := Edge{Up: 1, Down: 2}
	in, err := srv.Expect(edge, sc, capacity)
	if err != nil {
		b.Fatal(err)
	}
	addr, _ := serve(b, srv)
	done := make(chan error, 1)
	go func() {
		for m := range in.Messages() {
			m.Release()
		}
		done <- in.Err()
	}()
	client, err := Dial(addr, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	s, err := NewSender(b.Context(), client, edge, sc, mem)
	if err != nil {
		b.Fatal(err)
	}
	return s, done
}
