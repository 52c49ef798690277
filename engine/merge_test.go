package engine_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// tagged is a one-row bid chunk whose auction is the epoch and bidder the input.
func tagged(mem memory.Allocator, epoch, input int) *vec.Chunk {
	b := tables.NewBidBuilder(mem)
	defer b.Release()
	b.Append(vec.Insert, &tables.Bid{Auction: int64(epoch), Bidder: int64(input)})
	return b.Build()
}

func TestMergeAlignsBarriers(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	seed := vectest.Seed(t)
	const inputs, epochs = 3, 40
	chans := make([]chan executors.Message, inputs)
	ins := make([]<-chan executors.Message, inputs)
	for i := range chans {
		chans[i] = make(chan executors.Message, 4)
		ins[i] = chans[i]
	}
	barriers := make([]*executors.Barrier, epochs+1)
	for e := 1; e <= epochs; e++ {
		barriers[e] = &executors.Barrier{Prev: executors.Epoch(e), Curr: executors.Epoch(e + 1)}
	}
	for i := 0; i < inputs; i++ {
		go func(i int) {
			rng := vectest.NewRand(seed + uint64(i))
			defer close(chans[i])
			for e := 1; e <= epochs; e++ {
				for k := rng.IntN(4); k > 0; k-- {
					chans[i] <- executors.ChunkMessage(tagged(mem, e, i))
					if rng.IntN(3) == 0 {
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
					}
				}
				chans[i] <- executors.BarrierMessage(barriers[e])
			}
		}(i)
	}
	m := engine.NewMerge(tables.BidTable().ArrowSchema(), ins)
	defer m.Close()
	epoch := 1 // chunks now must belong to this epoch
	for {
		msg, err := m.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if msg.Barrier != nil {
			if msg.Barrier != barriers[epoch] {
				t.Fatalf("barrier %v, want the one closing epoch %d", msg.Barrier, epoch)
			}
			epoch++
			continue
		}
		got := int(msg.Chunk.Record().Column(tables.BidColAuction).(*array.Int64).Value(0))
		if got != epoch {
			t.Fatalf("a chunk of epoch %d arrived during epoch %d", got, epoch)
		}
		msg.Release()
	}
	if epoch != epochs+1 {
		t.Fatalf("%d barriers emitted, want %d", epoch-1, epochs)
	}
}

func TestMergeMismatchedBarriers(t *testing.T) {
	a, b := make(chan executors.Message, 1), make(chan executors.Message, 1)
	a <- executors.BarrierMessage(&executors.Barrier{Prev: 1, Curr: 2})
	b <- executors.BarrierMessage(&executors.Barrier{Prev: 2, Curr: 3})
	m := engine.NewMerge(tables.BidTable().ArrowSchema(), []<-chan executors.Message{a, b})
	_, err := m.Next(context.Background())
	if err == nil || !strings.Contains(err.Error(), "barrier") {
		t.Fatalf("Next = %v, want a barrier mismatch error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m2 := engine.NewMerge(tables.BidTable().ArrowSchema(), []<-chan executors.Message{make(chan executors.Message)})
	if _, err := m2.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next on a cancelled context = %v", err)
	}
}
