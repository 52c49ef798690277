package exchange

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
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

	srv := NewServer(mem)
	edge := Edge{Up: 1, Down: 2}
	in, err := srv.Expect(edge, sc, 64)
	if err != nil {
		b.Fatal(err)
	}
	addr, _ := serve(b, srv)
	drained := make(chan error, 1)
	go func() {
		for m := range in.Messages() {
			m.Release()
		}
		drained <- in.Err()
	}()
	client, err := Dial(addr, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	s, err := NewSender(b.Context(), client, edge, sc, mem)
	if err != nil {
		b.Fatal(err)
	}
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
