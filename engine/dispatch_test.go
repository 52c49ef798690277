package engine_test

import (
	"context"
	"errors"
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

func outputs(ids ...executors.ActorID) []engine.Output {
	var out []engine.Output
	for _, id := range ids {
		out = append(out, engine.ChanOutput{ID: id, C: make(chan executors.Message, 1024)})
	}
	return out
}

// drain returns the messages buffered in o's channel (without waiting for more, and
// stopping at its end).
func drain(o engine.Output) []executors.Message {
	c := o.(engine.ChanOutput).C
	var ms []executors.Message
	for {
		select {
		case m, ok := <-c:
			if !ok {
				return ms
			}
			ms = append(ms, m)
		default:
			return ms
		}
	}
}

// isClosed reports whether o's channel, which must be empty, is closed.
func isClosed(o engine.Output) bool {
	select {
	case m, ok := <-o.(engine.ChanOutput).C:
		if ok {
			panic("isClosed: the channel holds " + m.String())
		}
		return true
	default:
		return false
	}
}

// checkRouting verifies that every visible row of in reached exactly the output its
// vnode maps to, with its op (an update pair split between outputs as Delete/Insert),
// and that every output's chunk is a valid changelog.
func checkRouting(t *testing.T, k vec.Kernels, in *vec.Chunk, mapping vnode.Mapping, outs []engine.Output, got [][]executors.Message) {
	t.Helper()
	n := in.NumRows()
	vn := make([]uint16, n)
	k.Vnodes(in, vn)
	seen := make([]int, n)
	for o, ms := range got {
		for _, m := range ms {
			if m.Chunk == nil {
				continue
			}
			c := m.Chunk
			if c.NumRows() != n {
				t.Fatalf("output %d: chunk of %d rows, input %d", o, c.NumRows(), n)
			}
			for i := 0; i < n; i++ {
				if !c.Visible(i) {
					continue
				}
				seen[i]++
				if int(mapping[vn[i]]) != o {
					t.Fatalf("row %d (vnode %d) went to output %d, mapping says %d", i, vn[i], o, mapping[vn[i]])
				}
				if !in.Visible(i) {
					t.Fatalf("output %d: row %d was invisible in the input", o, i)
				}
				op, want := c.Ops()[i], in.Ops()[i]
				if op != want && !(want == vec.UpdateDelete && op == vec.Delete) && !(want == vec.UpdateInsert && op == vec.Insert) {
					t.Fatalf("row %d: op %v became %v", i, want, op)
				}
			}
			if err := vectest.ChangelogError(c); err != nil {
				t.Fatalf("output %d: %v", o, err)
			}
			c.Release()
		}
	}
	for i := 0; i < n; i++ {
		want := 0
		if in.Visible(i) {
			want = 1
		}
		if seen[i] != want {
			t.Fatalf("row %d reached %d outputs, want %d", i, seen[i], want)
		}
	}
}

func TestHashDispatcher(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	rng := vectest.NewRand(vectest.Seed(t))
	k := tables.BidKernels()
	mapping, err := vnode.EvenSplit(k.Table().VnodeCount, 3)
	if err != nil {
		t.Fatal(err)
	}
	outs := outputs(10, 11, 12)
	d, err := engine.NewHashDispatcher(1, 5, k, mapping, outs, mem)
	if err != nil {
		t.Fatal(err)
	}
	send := func(c *vec.Chunk, mapping vnode.Mapping, outs []engine.Output) {
		c.Retain()
		if err := d.Dispatch(ctx, executors.ChunkMessage(c), nil); err != nil {
			t.Fatal(err)
		}
		got := make([][]executors.Message, len(outs))
		for i, o := range outs {
			got[i] = drain(o)
		}
		checkRouting(t, k, c, mapping, outs, got)
		c.Release()
	}
	for i := 0; i < 20; i++ {
		send(vectest.RandomChunk(rng, mem, k.Table(), 1+rng.IntN(300), 0), mapping, outs)
	}

	// Rescale 3 -> 3 outputs, replacing actor 10 by 13: 13 is connected before the
	// barrier, 10 still receives the barrier and is dropped after it.
	newMapping, _, err := vnode.Rebalance(mapping, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	b := &executors.Barrier{Prev: 1, Curr: 2, Kind: executors.Checkpoint, Mutation: executors.Update{
		Dispatchers: []executors.DispatcherUpdate{{Actor: 1, Fragment: 5, AddOutputs: []executors.Output{{Actor: 13}}, RemoveOutputs: []executors.ActorID{10}, Mapping: newMapping}},
	}}
	added := outputs(13)[0]
	if err := d.Dispatch(ctx, executors.BarrierMessage(b), func(spec executors.Output) (engine.Output, error) {
		if spec.Actor != 13 {
			t.Fatalf("asked to connect actor %d", spec.Actor)
		}
		return added, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, o := range append(outs, added) {
		ms := drain(o)
		if len(ms) != 1 || ms[0].Barrier != b {
			t.Fatalf("actor %d got %v, want the barrier once", o.Actor(), ms)
		}
	}
	if got := d.Outputs(); len(got) != 3 || got[0] != 11 || got[1] != 12 || got[2] != 13 {
		t.Fatalf("outputs after the update %v, want [11 12 13]", got)
	}
	after := []engine.Output{outs[1], outs[2], added}
	for i := 0; i < 10; i++ {
		send(vectest.RandomChunk(rng, mem, k.Table(), 1+rng.IntN(300), 0), newMapping, after)
	}
	if ms := drain(outs[0]); len(ms) != 0 {
		t.Fatalf("a removed output still received %d messages", len(ms))
	}
	if !isClosed(outs[0]) {
		t.Fatal("the removed output was not closed")
	}
	for _, o := range after {
		if isClosed(o) {
			t.Fatalf("output to actor %d was closed", o.Actor())
		}
	}
	if d.Fragment() != 5 || d.Kind() != executors.Hash {
		t.Fatalf("fragment %d kind %v, want 5 hash", d.Fragment(), d.Kind())
	}
	d.Close()
	for _, o := range after {
		if !isClosed(o) {
			t.Fatalf("Close left the output to actor %d open", o.Actor())
		}
	}
	if got := d.Outputs(); len(got) != 0 {
		t.Fatalf("outputs after Close: %v", got)
	}

	// Backpressure: a full output blocks the dispatcher until ctx ends; the chunk is
	// released, not leaked.
	full := engine.ChanOutput{ID: 20, C: make(chan executors.Message)}
	one, _ := vnode.EvenSplit(k.Table().VnodeCount, 1)
	d2, err := engine.NewHashDispatcher(2, 5, k, one, []engine.Output{full}, mem)
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	c := vectest.RandomChunk(rng, mem, k.Table(), 10, 0)
	for c.CountVisible() == 0 {
		c.Release()
		c = vectest.RandomChunk(rng, mem, k.Table(), 10, 0)
	}
	if err := d2.Dispatch(tctx, executors.ChunkMessage(c), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dispatch to a full output = %v, want the deadline", err)
	}

	// A mapping naming an output that does not exist is refused.
	bad := make(vnode.Mapping, k.Table().VnodeCount)
	bad[5] = 7
	if _, err := engine.NewHashDispatcher(3, 5, k, bad, outputs(1, 2), mem); err == nil {
		t.Fatal("a mapping to output 7 of 2 was accepted")
	}
}
