package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// specOutputs is the executors.Output of each actor.
func specOutputs(ids ...executors.ActorID) []executors.Output {
	out := make([]executors.Output, len(ids))
	for i, id := range ids {
		out[i] = executors.Output{Actor: id}
	}
	return out
}

// factory is a newOutput that makes a ChanOutput per actor and remembers them.
type factory struct {
	made map[executors.ActorID]engine.Output
	fail executors.ActorID // connecting this actor fails
}

func newFactory() *factory { return &factory{made: map[executors.ActorID]engine.Output{}} }

func (f *factory) newOutput(spec executors.Output) (engine.Output, error) {
	if spec.Actor == f.fail && f.fail != 0 {
		return nil, errors.New("refused")
	}
	o := engine.ChanOutput{ID: spec.Actor, C: make(chan executors.Message, 16)}
	f.made[spec.Actor] = o
	return o, nil
}

// newDispatcher builds a dispatcher of kind over outputs to actors ids (all with mapping
// EvenSplit for hash), from actor 1 to fragment 5.
func newDispatcher(t *testing.T, kind executors.DispatcherKind, mem memory.Allocator, ids ...executors.ActorID) (engine.Dispatcher, *factory) {
	t.Helper()
	k := tables.BidKernels()
	spec := executors.NewDispatcher{Actor: 1, Fragment: 5, Kind: kind, Outputs: specOutputs(ids...)}
	if kind == executors.Hash {
		m, err := vnode.EvenSplit(k.Table().VnodeCount, len(ids))
		if err != nil {
			t.Fatal(err)
		}
		spec.Mapping = m
	}
	f := newFactory()
	d, err := engine.NewDispatcher(1, spec, k, f.newOutput, mem)
	if err != nil {
		t.Fatal(err)
	}
	return d, f
}

func TestNewDispatcher(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	k := tables.BidKernels()
	n := k.Table().VnodeCount
	even := func(outs int) vnode.Mapping {
		m, err := vnode.EvenSplit(n, outs)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		spec  executors.NewDispatcher
		k     vec.Kernels
		fail  executors.ActorID // connecting it fails
		want  string            // error text; "" for success
		built int               // outputs built (and closed on failure)
	}{
		{"hash", executors.NewDispatcher{Kind: executors.Hash, Outputs: specOutputs(10, 11, 12), Mapping: even(3)}, k, 0, "", 3},
		{"broadcast", executors.NewDispatcher{Kind: executors.Broadcast, Outputs: specOutputs(10, 11)}, nil, 0, "", 2},
		{"simple", executors.NewDispatcher{Kind: executors.Simple, Outputs: specOutputs(10)}, nil, 0, "", 1},
		{"no-shuffle", executors.NewDispatcher{Kind: executors.NoShuffle, Outputs: specOutputs(10)}, nil, 0, "", 1},
		{"simple with two outputs", executors.NewDispatcher{Kind: executors.Simple, Outputs: specOutputs(10, 11)}, nil, 0, "2 outputs, want exactly 1", 0},
		{"no-shuffle with no output", executors.NewDispatcher{Kind: executors.NoShuffle}, nil, 0, "no outputs", 0},
		{"hash without mapping", executors.NewDispatcher{Kind: executors.Hash, Outputs: specOutputs(10, 11)}, k, 0, "no vnode mapping", 0},
		{"hash mapping for more outputs", executors.NewDispatcher{Kind: executors.Hash, Outputs: specOutputs(10, 11), Mapping: even(3)}, k, 0, "vnode mapping", 0},
		{"hash mapping of another table", executors.NewDispatcher{Kind: executors.Hash, Outputs: specOutputs(10, 11), Mapping: make(vnode.Mapping, n/2)}, k, 0, "maps 128 vnodes, want 256", 0},
		{"hash without kernels", executors.NewDispatcher{Kind: executors.Hash, Outputs: specOutputs(10), Mapping: even(1)}, nil, 0, "no kernels", 0},
		{"broadcast with mapping", executors.NewDispatcher{Kind: executors.Broadcast, Outputs: specOutputs(10), Mapping: even(1)}, nil, 0, "mapping", 0},
		{"duplicate output", executors.NewDispatcher{Kind: executors.Broadcast, Outputs: specOutputs(10, 11, 10)}, nil, 0, "actor 10 is an output twice", 0},
		{"another actor's spec", executors.NewDispatcher{Actor: 2, Kind: executors.Simple, Outputs: specOutputs(10)}, nil, 0, "spec is for actor 2", 0},
		{"unknown kind", executors.NewDispatcher{Kind: 9, Outputs: specOutputs(10)}, nil, 0, "unknown kind", 0},
		{"connect fails", executors.NewDispatcher{Kind: executors.Broadcast, Outputs: specOutputs(10, 11, 12)}, nil, 12, "connect actor 12: refused", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			if spec.Actor == 0 {
				spec.Actor = 1
			}
			spec.Fragment = 5
			f := newFactory()
			f.fail = tc.fail
			d, err := engine.NewDispatcher(1, spec, tc.k, f.newOutput, mem)
			if len(f.made) != tc.built {
				t.Fatalf("%d outputs connected, want %d", len(f.made), tc.built)
			}
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) ||
					!strings.Contains(err.Error(), "actor 1 ") || !strings.Contains(err.Error(), "fragment 5") {
					t.Fatalf("NewDispatcher = %v, want an error naming actor 1 and fragment 5 with %q", err, tc.want)
				}
				if d != nil {
					t.Fatalf("NewDispatcher returned %v with its error", d)
				}
				for _, o := range f.made {
					if !isClosed(o) {
						t.Fatalf("the output to actor %d connected before the failure was left open", o.Actor())
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Kind() != spec.Kind || d.Fragment() != 5 {
				t.Fatalf("kind %v fragment %d, want %v 5", d.Kind(), d.Fragment(), spec.Kind)
			}
			var ids []executors.ActorID
			for _, o := range spec.Outputs {
				ids = append(ids, o.Actor)
			}
			if got := d.Outputs(); !slices.Equal(got, ids) {
				t.Fatalf("outputs %v, want %v", got, ids)
			}
			d.Close()
			for _, o := range f.made {
				if !isClosed(o) {
					t.Fatalf("Close left the output to actor %d open", o.Actor())
				}
			}
		})
	}
}

// TestBroadcastSharesChunks: every output gets the same chunk, retained, not copied.
func TestBroadcastSharesChunks(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(vectest.Seed(t))
	d, f := newDispatcher(t, executors.Broadcast, mem, 10, 11, 12)
	defer d.Close()
	c := vectest.RandomChunk(rng, mem, tables.BidTable(), 100, 0.1)
	before := mem.CurrentAlloc()
	if err := d.Dispatch(context.Background(), executors.ChunkMessage(c), nil); err != nil {
		t.Fatal(err)
	}
	if after := mem.CurrentAlloc(); after != before {
		t.Fatalf("broadcasting allocated %d bytes", after-before)
	}
	wm := executors.Message{Watermark: &executors.Watermark{Column: 5, Value: 7}}
	if err := d.Dispatch(context.Background(), wm, nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []executors.ActorID{10, 11, 12} {
		ms := drain(f.made[id])
		if len(ms) != 2 || ms[0].Chunk != c || ms[1].Watermark != wm.Watermark {
			t.Fatalf("actor %d got %v, want the chunk itself and the watermark", id, ms)
		}
		ms[0].Release() // three references in all: the last release frees it
	}
}

// TestDispatcherStop: at a Stop barrier the outputs to stopped actors still receive
// the barrier and are closed after it; the others stay.
func TestDispatcherStop(t *testing.T) {
	k := tables.BidKernels()
	for _, tc := range []struct {
		name    string
		kind    executors.DispatcherKind
		outs    []executors.ActorID
		mapping vnode.Mapping // hash: nil for EvenSplit
		stop    []executors.ActorID
		left    []executors.ActorID
		want    string // error
	}{
		{"hash, all outputs", executors.Hash, []executors.ActorID{10, 11, 12}, nil, []executors.ActorID{12, 3, 10, 11}, nil, ""},
		{"hash, an output without vnodes", executors.Hash, []executors.ActorID{10, 11, 12}, twoOfThree(k), []executors.ActorID{11}, []executors.ActorID{10, 12}, ""},
		{"hash, an output with vnodes", executors.Hash, []executors.ActorID{10, 11, 12}, nil, []executors.ActorID{11}, []executors.ActorID{10, 12}, "vnode 86 maps to actor 11"},
		{"broadcast, some outputs", executors.Broadcast, []executors.ActorID{10, 11, 12}, nil, []executors.ActorID{10, 12, 99}, []executors.ActorID{11}, ""},
		{"broadcast, all outputs", executors.Broadcast, []executors.ActorID{10, 11}, nil, []executors.ActorID{10, 11}, nil, ""},
		{"simple", executors.Simple, []executors.ActorID{10}, nil, []executors.ActorID{10}, nil, ""},
		{"no-shuffle", executors.NoShuffle, []executors.ActorID{10}, nil, []executors.ActorID{10}, nil, ""},
		{"simple, another actor", executors.Simple, []executors.ActorID{10}, nil, []executors.ActorID{1, 11}, []executors.ActorID{10}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
			defer mem.AssertSize(t, 0)
			rng := vectest.NewRand(vectest.Seed(t))
			ctx := context.Background()
			var d engine.Dispatcher
			var f *factory
			if tc.mapping != nil {
				f = newFactory()
				var outs []engine.Output
				for _, id := range tc.outs {
					o, _ := f.newOutput(executors.Output{Actor: id})
					outs = append(outs, o)
				}
				hd, err := engine.NewHashDispatcher(1, 5, k, tc.mapping, outs, mem)
				if err != nil {
					t.Fatal(err)
				}
				d = hd
			} else {
				d, f = newDispatcher(t, tc.kind, mem, tc.outs...)
			}
			defer d.Close()
			b := &executors.Barrier{Prev: 6, Curr: 7, Kind: executors.Checkpoint, Mutation: executors.Stop{Actors: tc.stop}}
			err := d.Dispatch(ctx, executors.BarrierMessage(b), nil)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Dispatch = %v, want an error with %q", err, tc.want)
				}
				// The dispatcher is broken now: it refuses (and releases) what follows.
				c := vectest.RandomChunk(rng, mem, k.Table(), 10, 0)
				if err2 := d.Dispatch(ctx, executors.ChunkMessage(c), nil); err2 == nil {
					t.Fatal("a broken dispatcher accepted a chunk")
				}
			} else if err != nil {
				t.Fatal(err)
			}
			for _, id := range tc.outs {
				o := f.made[id]
				ms := drain(o)
				if len(ms) != 1 || ms[0].Barrier != b {
					t.Fatalf("actor %d got %v, want the barrier", id, ms)
				}
				if stopped := slices.Contains(tc.stop, id); isClosed(o) != stopped {
					t.Fatalf("actor %d: stopped %v, closed %v", id, stopped, !stopped)
				}
			}
			if tc.want != "" {
				return
			}
			if got := d.Outputs(); !slices.Equal(got, tc.left) {
				t.Fatalf("outputs after the stop %v, want %v", got, tc.left)
			}
			// What follows reaches the outputs left, as routed before (for hash).
			for i := 0; i < 5; i++ {
				c := vectest.RandomChunk(rng, mem, k.Table(), 1+rng.IntN(100), 0)
				for c.CountVisible() == 0 {
					c.Release()
					c = vectest.RandomChunk(rng, mem, k.Table(), 1+rng.IntN(100), 0)
				}
				c.Retain()
				err := d.Dispatch(ctx, executors.ChunkMessage(c), nil)
				switch {
				case len(tc.left) == 0:
					if err == nil || !strings.Contains(err.Error(), "every output was removed") {
						t.Fatalf("Dispatch without outputs = %v", err)
					}
				case err != nil:
					t.Fatal(err)
				case tc.kind == executors.Hash:
					got := [][]executors.Message{drain(f.made[10]), nil, drain(f.made[12])}
					checkRouting(t, k, c, tc.mapping, nil, got)
				default:
					for _, id := range tc.left {
						ms := drain(f.made[id])
						if len(ms) != 1 || ms[0].Chunk != c {
							t.Fatalf("actor %d got %v, want the chunk", id, ms)
						}
						ms[0].Release()
					}
				}
				c.Release()
				if len(tc.left) == 0 {
					break
				}
			}
		})
	}
}

// twoOfThree maps the vnodes of k's table to outputs 0 and 2 of three.
func twoOfThree(k vec.Kernels) vnode.Mapping {
	m := make(vnode.Mapping, k.Table().VnodeCount)
	for v := range m {
		m[v] = uint16(2 * (v % 2))
	}
	return m
}

// TestDispatcherUpdateErrors: an update that would leave a dispatcher in a bad state
// is refused before the barrier is sent, naming the actor and epoch.
func TestDispatcherUpdateErrors(t *testing.T) {
	k := tables.BidKernels()
	n := k.Table().VnodeCount
	even := func(outs int) vnode.Mapping {
		m, _ := vnode.EvenSplit(n, outs)
		return m
	}
	for _, tc := range []struct {
		name  string
		kind  executors.DispatcherKind
		outs  []executors.ActorID
		upd   executors.DispatcherUpdate
		nilNO bool // no newOutput
		want  string
		sent  bool // the barrier went out before the error
	}{
		{"simple adds without removing", executors.Simple, []executors.ActorID{10},
			executors.DispatcherUpdate{AddOutputs: specOutputs(11)}, false, "barrier 8 would leave it 2 outputs, want exactly 1", false},
		{"no-shuffle removes without adding", executors.NoShuffle, []executors.ActorID{10},
			executors.DispatcherUpdate{RemoveOutputs: []executors.ActorID{10}}, false, "barrier 8 would leave it 0 outputs, want exactly 1", false},
		{"simple with mapping", executors.Simple, []executors.ActorID{10},
			executors.DispatcherUpdate{AddOutputs: specOutputs(11), RemoveOutputs: []executors.ActorID{10}, Mapping: even(1)}, false, "mapping", false},
		{"broadcast removes all", executors.Broadcast, []executors.ActorID{10, 11},
			executors.DispatcherUpdate{RemoveOutputs: []executors.ActorID{10, 11}}, false, "removes every output", false},
		{"broadcast with mapping", executors.Broadcast, []executors.ActorID{10, 11},
			executors.DispatcherUpdate{AddOutputs: specOutputs(12), Mapping: even(3)}, false, "mapping", false},
		{"remove a stranger", executors.Broadcast, []executors.ActorID{10, 11},
			executors.DispatcherUpdate{RemoveOutputs: []executors.ActorID{12}}, false, "removes actor 12, which is not an output", false},
		{"add an output again", executors.Hash, []executors.ActorID{10, 11},
			executors.DispatcherUpdate{AddOutputs: specOutputs(11), Mapping: even(3)}, false, "adds actor 11, which already is an output", false},
		{"add twice", executors.Broadcast, []executors.ActorID{10},
			executors.DispatcherUpdate{AddOutputs: specOutputs(11, 11)}, false, "adds actor 11 twice", false},
		{"hash mapping for the old outputs", executors.Hash, []executors.ActorID{10, 11},
			executors.DispatcherUpdate{RemoveOutputs: []executors.ActorID{11}, Mapping: even(2)}, false, "update for 1 outputs: new mapping", false},
		{"hash removes a routed output without mapping", executors.Hash, []executors.ActorID{10, 11},
			executors.DispatcherUpdate{RemoveOutputs: []executors.ActorID{10}}, false, "vnode 0 maps to actor 10, which is dropped", true},
		{"no output factory", executors.Broadcast, []executors.ActorID{10},
			executors.DispatcherUpdate{AddOutputs: specOutputs(11)}, true, "no output factory", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
			defer mem.AssertSize(t, 0)
			d, f := newDispatcher(t, tc.kind, mem, tc.outs...)
			defer d.Close()
			upd := tc.upd
			upd.Actor, upd.Fragment = 1, 5
			b := &executors.Barrier{Prev: 7, Curr: 8, Kind: executors.Checkpoint, Mutation: executors.Update{Dispatchers: []executors.DispatcherUpdate{upd}}}
			newOutput := f.newOutput
			if tc.nilNO {
				newOutput = nil
			}
			err := d.Dispatch(context.Background(), executors.BarrierMessage(b), newOutput)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "actor 1 ") {
				t.Fatalf("Dispatch = %v, want an error naming actor 1 with %q", err, tc.want)
			}
			for _, id := range tc.outs {
				ms := drain(f.made[id])
				if got := len(ms) == 1 && ms[0].Barrier == b; got != tc.sent {
					t.Fatalf("actor %d got %v; barrier sent: %v, want %v", id, ms, got, tc.sent)
				}
			}
		})
	}

	// An update for the same actor's dispatcher to another fragment is not ours.
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	d, f := newDispatcher(t, executors.Simple, mem, 10)
	defer d.Close()
	b := &executors.Barrier{Prev: 7, Curr: 8, Kind: executors.Checkpoint, Mutation: executors.Update{Dispatchers: []executors.DispatcherUpdate{
		{Actor: 1, Fragment: 6, AddOutputs: specOutputs(11)}}}}
	if err := d.Dispatch(context.Background(), executors.BarrierMessage(b), f.newOutput); err != nil {
		t.Fatal(err)
	}
	if got := d.Outputs(); !slices.Equal(got, []executors.ActorID{10}) {
		t.Fatalf("outputs %v after another fragment's update", got)
	}
	drain(f.made[10])
}

// rescaleCase is a two-stage pipeline: upstream actors 1 and 2 dispatch (all of one
// kind) to downstream actors that change at update barriers. stages[s][u] lists the
// outputs of upstream actor u+1 in stage s, in output index order.
type rescaleCase struct {
	name   string
	kind   executors.DispatcherKind
	stages [][][]executors.ActorID
}

// TestDispatcherRescale runs random chunks through upstream dispatchers into the merges
// of downstream actors that are replaced or rescaled at Update barriers (2 -> 3 -> 1
// actors for hash and broadcast, with vnode.Rebalance mappings for hash; a replaced
// single output for simple and no-shuffle), then stopped. Each downstream actor must
// receive, in each epoch, exactly the rows it should (hash: of the vnodes it owns in
// that epoch; broadcast: all; simple, no-shuffle: all of its upstreams'), with valid
// update pairs, and see its barriers from its first to the one removing or stopping
// it, after which its inputs are closed.
func TestDispatcherRescale(t *testing.T) {
	a := func(ids ...executors.ActorID) []executors.ActorID { return ids }
	shared := func(ids ...executors.ActorID) [][]executors.ActorID { return [][]executors.ActorID{ids, ids} }
	for _, tc := range []rescaleCase{
		{"hash", executors.Hash, [][][]executors.ActorID{shared(10, 11), shared(10, 11, 12), shared(13)}},
		{"broadcast", executors.Broadcast, [][][]executors.ActorID{shared(10, 11), shared(10, 11, 12), shared(13)}},
		{"simple", executors.Simple, [][][]executors.ActorID{shared(10), shared(11), shared(12)}},
		{"no-shuffle", executors.NoShuffle, [][][]executors.ActorID{{a(10), a(20)}, {a(11), a(21)}, {a(12), a(22)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runRescale(t, tc)
		})
	}
}

// chunkInfo is what an upstream actor recorded about a chunk before dispatching it.
type chunkInfo struct {
	upstream int // index
	epoch    int
	ops      []vec.Op
	visible  []bool
	dests    [][]executors.ActorID // per row: the actors that must receive it
	seen     map[executors.ActorID][]int
}

func runRescale(t *testing.T, tc rescaleCase) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	seed := vectest.Seed(t)
	k := tables.BidKernels()
	const ups = 2
	// Epochs 1..12: barrier 4 moves to stage 1, barrier 8 to stage 2, barrier 12 stops
	// the last stage's actors.
	const epochs = 12
	changes := []int{4, 8} // barrier closing stage s-1
	stageOf := func(e int) int {
		s := 0
		for _, c := range changes {
			if e > c {
				s++
			}
		}
		return s
	}
	mappings := make([]vnode.Mapping, len(tc.stages))
	if tc.kind == executors.Hash {
		m, err := vnode.EvenSplit(k.Table().VnodeCount, len(tc.stages[0][0]))
		if err != nil {
			t.Fatal(err)
		}
		mappings[0] = m
		for s := 1; s < len(tc.stages); s++ {
			if mappings[s], _, err = vnode.Rebalance(mappings[s-1], len(tc.stages[s-1][0]), len(tc.stages[s][0])); err != nil {
				t.Fatal(err)
			}
		}
	}
	barriers := make([]*executors.Barrier, epochs+1)
	for e := 1; e <= epochs; e++ {
		barriers[e] = &executors.Barrier{Prev: executors.Epoch(e), Curr: executors.Epoch(e + 1)}
	}
	for s, e := range changes {
		var upd executors.Update
		prev, next := tc.stages[s], tc.stages[s+1]
		for u := 0; u < ups; u++ {
			du := executors.DispatcherUpdate{Actor: executors.ActorID(u + 1), Fragment: 5, Mapping: mappings[s+1]}
			for _, id := range next[u] {
				if !slices.Contains(prev[u], id) {
					du.AddOutputs = append(du.AddOutputs, executors.Output{Actor: id})
				}
			}
			for _, id := range prev[u] {
				if !slices.Contains(next[u], id) {
					du.RemoveOutputs = append(du.RemoveOutputs, id)
				}
			}
			upd.Dispatchers = append(upd.Dispatchers, du)
		}
		barriers[e].Kind, barriers[e].Mutation = executors.Checkpoint, upd
	}
	last := tc.stages[len(tc.stages)-1]
	var stop executors.Stop
	for _, ids := range last {
		for _, id := range ids {
			if !slices.Contains(stop.Actors, id) {
				stop.Actors = append(stop.Actors, id)
			}
		}
	}
	barriers[epochs].Kind, barriers[epochs].Mutation = executors.Checkpoint, stop

	// Every downstream actor: its upstreams, and the first and last barrier it must see.
	type downstream struct {
		id          executors.ActorID
		ups         []int
		first, last int
	}
	var downs []*downstream
	byID := map[executors.ActorID]*downstream{}
	for s, st := range tc.stages {
		for u, ids := range st {
			for _, id := range ids {
				d := byID[id]
				if d == nil {
					d = &downstream{id: id, first: 1}
					if s > 0 {
						d.first = changes[s-1]
					}
					byID[id] = d
					downs = append(downs, d)
				}
				if !slices.Contains(d.ups, u) {
					d.ups = append(d.ups, u)
				}
				d.last = epochs
				if s < len(changes) {
					d.last = changes[s]
				}
			}
		}
	}
	// The channels, made up front: chans[u][actor].
	chans := make([]map[executors.ActorID]chan executors.Message, ups)
	for u := range chans {
		chans[u] = map[executors.ActorID]chan executors.Message{}
	}
	for _, d := range downs {
		for _, u := range d.ups {
			chans[u][d.id] = make(chan executors.Message, 2)
		}
	}

	var mu sync.Mutex // guards infos and their seen maps
	infos := map[arrow.RecordBatch]*chunkInfo{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	report := func(err error) {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return // a consequence of an earlier report
		}
		select {
		case errs <- err:
		default:
		}
		cancel()
	}

	for u := 0; u < ups; u++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := vectest.NewRand(seed + uint64(u))
			newOutput := func(spec executors.Output) (engine.Output, error) {
				c, ok := chans[u][spec.Actor]
				if !ok {
					return nil, fmt.Errorf("no channel from upstream %d to actor %d", u+1, spec.Actor)
				}
				return engine.ChanOutput{ID: spec.Actor, C: c}, nil
			}
			spec := executors.NewDispatcher{Actor: executors.ActorID(u + 1), Fragment: 5, Kind: tc.kind, Outputs: specOutputs(tc.stages[0][u]...), Mapping: mappings[0]}
			d, err := engine.NewDispatcher(spec.Actor, spec, k, newOutput, mem)
			if err != nil {
				report(err)
				return
			}
			defer d.Close()
			vnodes := make([]uint16, 300)
			for e := 1; e <= epochs; e++ {
				s := stageOf(e)
				outs := tc.stages[s][u]
				if got := d.Outputs(); !slices.Equal(got, outs) {
					report(fmt.Errorf("upstream %d, epoch %d: outputs %v, want %v", u+1, e, got, outs))
					return
				}
				for n := rng.IntN(8); n > 0; n-- {
					c := vectest.RandomChunk(rng, mem, k.Table(), 1+rng.IntN(len(vnodes)), 0.1)
					info := &chunkInfo{upstream: u, epoch: e, ops: slices.Clone(c.Ops()), visible: make([]bool, c.NumRows()),
						dests: make([][]executors.ActorID, c.NumRows()), seen: map[executors.ActorID][]int{}}
					k.Vnodes(c, vnodes)
					for i := range info.visible {
						info.visible[i] = c.Visible(i)
						if !info.visible[i] {
							continue
						}
						if tc.kind == executors.Hash {
							info.dests[i] = outs[mappings[s][vnodes[i]] : mappings[s][vnodes[i]]+1]
						} else {
							info.dests[i] = outs
						}
					}
					mu.Lock()
					infos[c.Record()] = info
					mu.Unlock()
					if err := d.Dispatch(ctx, executors.ChunkMessage(c), newOutput); err != nil {
						report(fmt.Errorf("upstream %d, epoch %d: %w", u+1, e, err))
						return
					}
				}
				if err := d.Dispatch(ctx, executors.BarrierMessage(barriers[e]), newOutput); err != nil {
					report(fmt.Errorf("upstream %d, barrier %d: %w", u+1, e, err))
					return
				}
			}
			if got := d.Outputs(); len(got) != 0 {
				report(fmt.Errorf("upstream %d: outputs %v after the stop", u+1, got))
			}
		}()
	}

	for _, d := range downs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var inputs []engine.MergeInput
			for _, u := range d.ups {
				inputs = append(inputs, engine.MergeInput{Actor: executors.ActorID(u + 1), C: chans[u][d.id]})
			}
			m := engine.NewMerge(d.id, k.Table().ArrowSchema(), inputs, nil)
			defer m.Close()
			next := d.first // the next barrier to see
			for {
				msg, err := m.Next(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					report(fmt.Errorf("actor %d: %w", d.id, err))
					return
				}
				if msg.Barrier != nil {
					if next > d.last || msg.Barrier != barriers[next] {
						report(fmt.Errorf("actor %d: got %v, want barrier %d (first %d, last %d)", d.id, msg.Barrier, next, d.first, d.last))
						return
					}
					next++
					continue
				}
				if err := checkReceived(d.id, msg.Chunk, next, d.first, &mu, infos); err != nil {
					report(err)
					msg.Release()
					return
				}
				msg.Release()
			}
			if next != d.last+1 {
				report(fmt.Errorf("actor %d: its inputs ended after barrier %d, want %d", d.id, next-1, d.last))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		for _, m := range chans {
			for _, c := range m {
				drainChan(c)
			}
		}
		return
	}
	rows := 0
	for _, info := range infos {
		for i, dests := range info.dests {
			for _, id := range dests {
				if info.seen[id] == nil || info.seen[id][i] != 1 {
					t.Fatalf("upstream %d, epoch %d: row %d reached actor %d %d times, want once", info.upstream+1, info.epoch, i, id, count(info.seen[id], i))
				}
				rows++
			}
		}
	}
	t.Logf("%d chunks, %d rows delivered", len(infos), rows)
}

func count(seen []int, i int) int {
	if seen == nil {
		return 0
	}
	return seen[i]
}

// checkReceived checks a chunk that downstream actor id received in epoch (the
// barrier it waits for next; first is the first it must see): every visible row must
// be one of the input's visible rows of that epoch destined to id, with its op (an
// update pair split between actors as Delete/Insert), and the chunk a valid changelog.
func checkReceived(id executors.ActorID, c *vec.Chunk, epoch, first int, mu *sync.Mutex, infos map[arrow.RecordBatch]*chunkInfo) error {
	mu.Lock()
	defer mu.Unlock()
	info := infos[c.Record()]
	if info == nil {
		return fmt.Errorf("actor %d: a chunk no upstream sent", id)
	}
	if epoch == first && first > 1 {
		return fmt.Errorf("actor %d: a chunk before its first barrier %d", id, first)
	}
	if info.epoch != epoch {
		return fmt.Errorf("actor %d: a chunk of epoch %d from upstream %d during epoch %d", id, info.epoch, info.upstream+1, epoch)
	}
	if err := vectest.ChangelogError(c); err != nil {
		return fmt.Errorf("actor %d: %w", id, err)
	}
	seen := info.seen[id]
	if seen == nil {
		seen = make([]int, len(info.visible))
		info.seen[id] = seen
	}
	for i := 0; i < c.NumRows(); i++ {
		if !c.Visible(i) {
			continue
		}
		if !slices.Contains(info.dests[i], id) {
			return fmt.Errorf("actor %d: row %d of an epoch %d chunk from upstream %d is for %v", id, i, epoch, info.upstream+1, info.dests[i])
		}
		op, want := c.Ops()[i], info.ops[i]
		if op != want && !(want == vec.UpdateDelete && op == vec.Delete) && !(want == vec.UpdateInsert && op == vec.Insert) {
			return fmt.Errorf("actor %d: row %d: op %v became %v", id, i, want, op)
		}
		seen[i]++
	}
	return nil
}
