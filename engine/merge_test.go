package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
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
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	seed := vectest.Seed(t)
	const inputs, epochs = 3, 40
	chans := make([]chan executors.Message, inputs)
	ins := make([]engine.MergeInput, inputs)
	for i := range chans {
		chans[i] = make(chan executors.Message, 4)
		ins[i] = engine.MergeInput{Actor: executors.ActorID(i + 1), C: chans[i]}
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
	m := engine.NewMerge(100, tables.BidTable().ArrowSchema(), ins, nil)
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
	m := engine.NewMerge(100, tables.BidTable().ArrowSchema(), []engine.MergeInput{{Actor: 1, C: a}, {Actor: 2, C: b}}, nil)
	_, err := m.Next(context.Background())
	if err == nil || !strings.Contains(err.Error(), "barrier") {
		t.Fatalf("Next = %v, want a barrier mismatch error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m2 := engine.NewMerge(100, tables.BidTable().ArrowSchema(), []engine.MergeInput{{Actor: 1, C: make(chan executors.Message)}}, nil)
	if _, err := m2.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next on a cancelled context = %v", err)
	}
}

// seqChunk is a one-row bid chunk tagged with its epoch (auction), producer (bidder)
// and a sequence number unique in the test (price).
func seqChunk(mem memory.Allocator, epoch int, producer executors.ActorID, seq int) *vec.Chunk {
	b := tables.NewBidBuilder(mem)
	defer b.Release()
	b.Append(vec.Insert, &tables.Bid{Auction: int64(epoch), Bidder: int64(producer), Price: int64(seq)})
	return b.Build()
}

// producerPlan is what one upstream actor of TestMergeUpdates sends: for epochs
// first..last, the data of the epoch (except before its first barrier when it joins
// at an update) and then the barrier closing it.
type producerPlan struct {
	actor       executors.ActorID
	first, last int  // barriers first..last
	joins       bool // added by the update of barrier first: starts with that barrier
	close       bool // closes its channel after its last barrier
	dropped     bool // removed by the mutation of barrier last (else it closes then)
}

// TestMergeUpdates runs producers through a merge whose inputs change at Update
// barriers (new producers start by sending the barrier, removed ones send it and then
// close, or not), at a Stop naming upstream actors, and when channels close; every
// chunk of epoch e must precede barrier e on the output, none may be lost or
// duplicated, and Inputs must follow the plan.
func TestMergeUpdates(t *testing.T) {
	const me = 100
	const epochs = 30
	seed := vectest.Seed(t)
	rng := vectest.NewRand(seed)
	barriers := make([]*executors.Barrier, epochs+1)
	for e := 1; e <= epochs; e++ {
		barriers[e] = &executors.Barrier{Prev: executors.Epoch(e), Curr: executors.Epoch(e + 1)}
	}
	// Barrier 8 adds 4 and 5 and removes 1; 12 is an update of another actor's merge
	// (adding an input there must not touch ours); 15 removes 4 and adds 6; 20 stops 2
	// (and actors that are not inputs); 25 removes 3 and 6 and adds nothing; producer 5
	// closes after barrier 27 without any mutation; 7 joins at 25.
	checkpoint := func(e int, mu executors.Mutation) {
		barriers[e].Kind = executors.Checkpoint
		barriers[e].Mutation = mu
	}
	checkpoint(8, executors.Update{Merges: []executors.MergeUpdate{{Actor: me, AddInputs: onNode0(4, 5), RemoveInputs: []executors.ActorID{1}}}})
	checkpoint(12, executors.Update{Merges: []executors.MergeUpdate{{Actor: me + 1, AddInputs: onNode0(9), RemoveInputs: []executors.ActorID{3}}}})
	checkpoint(15, executors.Update{Merges: []executors.MergeUpdate{{Actor: me, AddInputs: onNode0(6), RemoveInputs: []executors.ActorID{4}}}})
	checkpoint(20, executors.Stop{Actors: []executors.ActorID{2, 77, me + 1}})
	checkpoint(25, executors.Update{Merges: []executors.MergeUpdate{{Actor: me, AddInputs: onNode0(7), RemoveInputs: []executors.ActorID{3, 6}}}})
	plans := []producerPlan{
		{actor: 1, first: 1, last: 8, close: rng.IntN(2) == 0, dropped: true},
		{actor: 2, first: 1, last: 20, close: rng.IntN(2) == 0, dropped: true},
		{actor: 3, first: 1, last: 25, close: rng.IntN(2) == 0, dropped: true},
		{actor: 4, first: 8, last: 15, joins: true, close: true, dropped: true},
		{actor: 5, first: 8, last: 27, joins: true, close: true},
		{actor: 6, first: 15, last: 25, joins: true, close: rng.IntN(2) == 0, dropped: true},
		{actor: 7, first: 25, last: epochs, joins: true, close: true},
		{actor: 8, first: 1, last: epochs, close: true},
	}
	// alive[e]: the inputs right after barrier e is emitted (a producer that closes
	// without a mutation may or may not have been noticed yet: maybe[e]).
	inputsAfter := func(e int) (want, maybe []executors.ActorID) {
		for _, p := range plans {
			switch {
			case p.first <= e && e < p.last:
				want = append(want, p.actor)
			case e == p.last && !p.dropped:
				maybe = append(maybe, p.actor)
			}
		}
		return want, maybe
	}

	for round := 0; round < 10; round++ {
		mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		chans := map[executors.ActorID]chan executors.Message{}
		var initial []engine.MergeInput
		for _, p := range plans {
			chans[p.actor] = make(chan executors.Message, rng.IntN(4))
			if !p.joins {
				initial = append(initial, engine.MergeInput{Actor: p.actor, C: chans[p.actor]})
			}
		}
		var connected []executors.ActorID // only the merge's goroutine touches it
		connect := func(up executors.Output) (engine.MergeInput, error) {
			a := up.Actor
			connected = append(connected, a)
			c, ok := chans[a]
			if !ok {
				return engine.MergeInput{}, errors.New("no such producer")
			}
			return engine.MergeInput{Actor: a, C: c}, nil
		}
		// Sequence numbers: producer p's k-th chunk is p*1e6+k.
		sent := make([]int, len(plans))
		done := make(chan struct{})
		for i, p := range plans {
			prng := vectest.NewRand(seed + uint64(round)*100 + uint64(p.actor))
			go func() {
				defer func() { done <- struct{}{} }()
				c := chans[p.actor]
				send := func(m executors.Message) bool {
					select {
					case c <- m:
						return true
					case <-ctx.Done():
						m.Release()
						return false
					}
				}
				for e := p.first; e <= p.last; e++ {
					if !(p.joins && e == p.first) {
						for k := prng.IntN(4); k > 0; k-- {
							if !send(executors.ChunkMessage(seqChunk(mem, e, p.actor, int(p.actor)*1e6+sent[i]))) {
								return
							}
							sent[i]++
							if prng.IntN(3) == 0 {
								time.Sleep(time.Duration(prng.IntN(100)) * time.Microsecond)
							}
						}
					}
					if !send(executors.BarrierMessage(barriers[e])) {
						return
					}
				}
				if p.close {
					time.Sleep(time.Duration(prng.IntN(200)) * time.Microsecond)
					close(c)
				}
			}()
		}

		m := engine.NewMerge(me, tables.BidTable().ArrowSchema(), initial, connect)
		seen := map[int64]int{}
		epoch := 1
		var failed error
		for failed == nil {
			msg, err := m.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				failed = err
				break
			}
			if msg.Barrier != nil {
				if msg.Barrier != barriers[epoch] {
					failed = fmt.Errorf("barrier %v, want the one closing epoch %d", msg.Barrier, epoch)
					break
				}
				want, maybe := inputsAfter(epoch)
				got := m.Inputs()
				for _, a := range got {
					if !slices.Contains(want, a) && !slices.Contains(maybe, a) {
						failed = fmt.Errorf("after barrier %d the merge reads actor %d; want %v (and maybe %v)", epoch, a, want, maybe)
					}
				}
				for _, a := range want {
					if !slices.Contains(got, a) {
						failed = fmt.Errorf("after barrier %d the merge does not read actor %d; got %v", epoch, a, got)
					}
				}
				epoch++
				continue
			}
			v, err := tables.NewBidView(msg.Chunk)
			if err != nil {
				t.Fatal(err)
			}
			row := v.Row(0)
			if int(row.Auction) != epoch {
				failed = fmt.Errorf("a chunk of epoch %d from actor %d arrived during epoch %d", row.Auction, row.Bidder, epoch)
			}
			seen[row.Price]++
			msg.Release()
		}
		cancel()
		for range plans {
			<-done
		}
		m.Close()
		for _, c := range chans {
			drainChan(c)
		}
		if failed != nil {
			t.Fatalf("round %d: %v", round, failed)
		}
		if epoch != epochs+1 {
			t.Fatalf("round %d: %d barriers emitted, want %d", round, epoch-1, epochs)
		}
		if want := []executors.ActorID{4, 5, 6, 7}; !slices.Equal(connected, want) {
			t.Fatalf("round %d: connected %v, want %v", round, connected, want)
		}
		total := 0
		for i, p := range plans {
			for k := 0; k < sent[i]; k++ {
				if n := seen[int64(int(p.actor)*1e6+k)]; n != 1 {
					t.Fatalf("round %d: chunk %d of actor %d arrived %d times", round, k, p.actor, n)
				}
			}
			total += sent[i]
		}
		if len(seen) != total {
			t.Fatalf("round %d: %d distinct chunks arrived, %d were sent", round, len(seen), total)
		}
		mem.AssertSize(t, 0)
	}
}

// drainChan releases what c buffers, without waiting (c may be closed or not).
func drainChan(c chan executors.Message) {
	for {
		select {
		case m, ok := <-c:
			if !ok {
				return
			}
			m.Release()
		default:
			return
		}
	}
}

// TestMergeUpdateErrors: a new input must start with the barrier that adds it, an
// added input must be new, and adding one needs a connect function.
func TestMergeUpdateErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	upd := func(add ...executors.ActorID) *executors.Barrier {
		var outs []executors.Output
		for _, a := range add {
			outs = append(outs, executors.Output{Actor: a})
		}
		return &executors.Barrier{Prev: 3, Curr: 4, Kind: executors.Checkpoint, Mutation: executors.Update{
			Merges: []executors.MergeUpdate{{Actor: 100, AddInputs: outs}}}}
	}
	for _, tc := range []struct {
		name    string
		b       *executors.Barrier
		connect bool
		fresh   []executors.Message // what the new input (actor 2) delivers
		want    string
	}{
		{"chunk before the barrier", upd(2), true, []executors.Message{executors.ChunkMessage(tagged(mem, 4, 2))}, "actor 2 delivered chunk"},
		{"another barrier", upd(2), true, []executors.Message{executors.BarrierMessage(&executors.Barrier{Prev: 4, Curr: 5})}, "barrier 4 -> 5 while aligning barrier 3 -> 4"},
		{"duplicate input", upd(1), true, nil, "already has"},
		{"no connect", upd(2), false, nil, "no connect function"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, fresh := make(chan executors.Message, 1), make(chan executors.Message, len(tc.fresh))
			old <- executors.BarrierMessage(tc.b)
			for _, m := range tc.fresh {
				fresh <- m
			}
			var connect func(executors.Output) (engine.MergeInput, error)
			if tc.connect {
				connect = func(up executors.Output) (engine.MergeInput, error) {
					return engine.MergeInput{Actor: up.Actor, C: fresh}, nil
				}
			}
			m := engine.NewMerge(100, tables.BidTable().ArrowSchema(), []engine.MergeInput{{Actor: 1, C: old}}, connect)
			defer m.Close()
			_, err := m.Next(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "actor 100") {
				t.Fatalf("Next = %v, want an error naming actor 100 with %q", err, tc.want)
			}
			drainChan(fresh)
		})
	}
}

// onNode0 names actors ids, each on node 0.
func onNode0(ids ...executors.ActorID) []executors.Output {
	var outs []executors.Output
	for _, a := range ids {
		outs = append(outs, executors.Output{Actor: a})
	}
	return outs
}
