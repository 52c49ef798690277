package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// bpChunk is a one-row bid chunk numbered seq (price), spread over vnodes (auction).
// All such chunks have the same size.
func bpChunk(mem memory.Allocator, seq int) *vec.Chunk {
	b := tables.NewBidBuilder(mem)
	defer b.Release()
	// Reserved for the one row: a chunk being built then holds what the chunk will,
	// which the memory bounds below count in chunks (an unreserved Append reserves 64
	// rows, and the fixed-width columns shrink to the row when built).
	b.Reserve(1)
	b.Append(vec.Insert, &tables.Bid{Auction: int64(seq), Bidder: int64(seq) * 7, Price: int64(seq)})
	return b.Build()
}

var backpressureCases = []struct {
	name string
	kind executors.DispatcherKind
	outs []executors.ActorID
}{
	{"simple", executors.Simple, []executors.ActorID{10}},
	{"no-shuffle", executors.NoShuffle, []executors.ActorID{10}},
	{"broadcast", executors.Broadcast, []executors.ActorID{10, 11, 12}},
	{"hash", executors.Hash, []executors.ActorID{10, 11, 12}},
}

// chanFactory makes ChanOutputs of capacity capacity.
func chanFactory(capacity int, made map[executors.ActorID]chan executors.Message) func(executors.Output) (engine.Output, error) {
	return func(spec executors.Output) (engine.Output, error) {
		c := make(chan executors.Message, capacity)
		made[spec.Actor] = c
		return engine.ChanOutput{ID: spec.Actor, C: c}, nil
	}
}

func bpDispatcher(t *testing.T, kind executors.DispatcherKind, outs []executors.ActorID, capacity int, mem memory.Allocator) (engine.Dispatcher, vnode.Mapping, map[executors.ActorID]chan executors.Message) {
	t.Helper()
	k := tables.BidKernels()
	spec := executors.NewDispatcher{Actor: 1, Fragment: 5, Kind: kind, Outputs: specOutputs(outs...)}
	var mapping vnode.Mapping
	if kind == executors.Hash {
		var err error
		if mapping, err = vnode.EvenSplit(k.Table().VnodeCount, len(outs)); err != nil {
			t.Fatal(err)
		}
		spec.Mapping = mapping
	}
	made := map[executors.ActorID]chan executors.Message{}
	d, err := engine.NewDispatcher(1, spec, k, chanFactory(capacity, made), mem)
	if err != nil {
		t.Fatal(err)
	}
	return d, mapping, made
}

// TestBackpressure: with output channels of capacity C and consumers that do not
// read, the producer blocks with at most C chunks queued per output plus the one it is
// sending, and memory stays at that; once the consumers read (slowly), every chunk
// arrives exactly once where it should, and no output ever has more than C+1 chunks
// outstanding.
func TestBackpressure(t *testing.T) {
	for _, tc := range backpressureCases {
		t.Run(tc.name, func(t *testing.T) {
			const capacity, total = 3, 400
			mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
			defer mem.AssertSize(t, 0)
			rng := vectest.NewRand(vectest.Seed(t))
			k := tables.BidKernels()
			before := mem.CurrentAlloc()
			c := bpChunk(mem, 0)
			size := mem.CurrentAlloc() - before // every chunk's bytes
			c.Release()

			d, mapping, chans := bpDispatcher(t, tc.kind, tc.outs, capacity, mem)
			nout := len(tc.outs)
			expected := make([]atomic.Int64, nout) // chunks the producer meant for output o so far
			got := make([]atomic.Int64, nout)      // chunks output o's consumer received
			dests := make([][]int, total)          // per chunk, the outputs it goes to
			var produced atomic.Int64              // Dispatch calls returned
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs := make(chan error, 2*nout+2)
			fail := func(err error) {
				select {
				case errs <- err:
				default:
				}
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer d.Close() // ends the consumers
				vn := make([]uint16, 1)
				for seq := 0; seq < total; seq++ {
					c := bpChunk(mem, seq)
					switch tc.kind {
					case executors.Hash:
						k.Vnodes(c, vn)
						dests[seq] = []int{int(mapping[vn[0]])}
					default:
						for o := range nout {
							dests[seq] = append(dests[seq], o)
						}
					}
					for _, o := range dests[seq] {
						expected[o].Add(1)
					}
					if err := d.Dispatch(ctx, executors.ChunkMessage(c), nil); err != nil {
						fail(fmt.Errorf("chunk %d: %w", seq, err))
						return
					}
					produced.Add(1)
				}
			}()

			// The consumers do not read yet: the producer must block, not drop or queue.
			last, stable := int64(-1), 0
			for stable < 10 {
				time.Sleep(5 * time.Millisecond)
				if p := produced.Load(); p != last {
					last, stable = p, 0
				} else {
					stable++
				}
			}
			if last >= total {
				t.Fatalf("the producer sent all %d chunks to consumers that read none", total)
			}
			blocked := false
			for o := range nout {
				e := expected[o].Load()
				if e > capacity+1 {
					t.Fatalf("output %d: %d chunks outstanding, capacity %d", o, e, capacity)
				}
				blocked = blocked || e == capacity+1
			}
			if !blocked {
				t.Fatalf("the producer stopped after %d chunks without a full output", last)
			}
			if held, bound := mem.CurrentAlloc(), nout*(capacity+1)*size; held > bound {
				t.Fatalf("%d bytes held while blocked, want at most %d (%d-byte chunks)", held, bound, size)
			}
			t.Logf("the producer blocked after %d chunks", last)

			// Now read, slowly.
			bound := (nout*(capacity+2) + 2) * size
			var peak atomic.Int64
			seen := make([][]int, nout)
			for o, id := range tc.outs {
				seen[o] = make([]int, total)
				crng := vectest.NewRand(rng.Uint64())
				wg.Add(1)
				go func() {
					defer wg.Done()
					for msg := range chans[id] {
						g := got[o].Add(1)
						if e := expected[o].Load(); e > g+capacity+1 {
							fail(fmt.Errorf("output %d: %d chunks outstanding, capacity %d", o, e-g, capacity))
						}
						held := mem.CurrentAlloc()
						for p := peak.Load(); int64(held) > p && !peak.CompareAndSwap(p, int64(held)); p = peak.Load() {
						}
						if held > bound {
							fail(fmt.Errorf("%d bytes held, want at most %d", held, bound))
						}
						v, err := tables.NewBidView(msg.Chunk)
						if err != nil {
							fail(err)
						} else {
							seen[o][v.Row(0).Price]++
						}
						msg.Release()
						if crng.IntN(4) == 0 {
							time.Sleep(time.Duration(crng.IntN(100)) * time.Microsecond)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for seq := 0; seq < total; seq++ {
				for o := range nout {
					want := 0
					for _, d := range dests[seq] {
						if d == o {
							want = 1
						}
					}
					if seen[o][seq] != want {
						t.Fatalf("chunk %d reached output %d %d times, want %d", seq, o, seen[o][seq], want)
					}
				}
			}
			t.Logf("peak %d bytes of %d-byte chunks (bound %d)", peak.Load(), size, bound)
		})
	}
}

// TestBackpressureCancel: cancelling ctx unblocks a Dispatch blocked on a full output;
// the chunk is released (also the references of outputs it never reached), and the
// dispatcher refuses what follows.
func TestBackpressureCancel(t *testing.T) {
	for _, tc := range backpressureCases {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
			defer mem.AssertSize(t, 0)
			d, _, chans := bpDispatcher(t, tc.kind, tc.outs, 0, mem)
			defer d.Close()
			// The first output of a broadcast has a reader: the dispatcher then blocks
			// on the second, with the chunk shared between them.
			var readers sync.WaitGroup
			if tc.kind == executors.Broadcast {
				readers.Add(1)
				go func() {
					defer readers.Done()
					(<-chans[tc.outs[0]]).Release()
				}()
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Dispatch(ctx, executors.ChunkMessage(bpChunk(mem, 1)), nil) }()
			select {
			case err := <-done:
				t.Fatalf("Dispatch to full outputs returned %v", err)
			case <-time.After(30 * time.Millisecond):
			}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Dispatch = %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("cancelling did not unblock Dispatch")
			}
			readers.Wait()
			if n := mem.CurrentAlloc(); n != 0 {
				t.Fatalf("%d bytes still held after the cancelled Dispatch", n)
			}
			if err := d.Dispatch(context.Background(), executors.ChunkMessage(bpChunk(mem, 2)), nil); !errors.Is(err, context.Canceled) {
				t.Fatalf("Dispatch after a failed one = %v, want the first error", err)
			}
		})
	}
}
