package executors_test

// Two faults of docs/testing.md and docs/design.md §6 that need the executor itself (its input,
// its snapshot workers and its rate limiter), not the state machine alone: an upstream
// error in the finishing phase, and long runs of deleted keys while throttled.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// fallible is an input that returns what is sent on c: a message, or an error. It is
// scripted with errors on the same channel, so that an error comes out after every
// message sent before it.
type fallible struct {
	tab *schema.Table
	c   chan nextResult
}

// nextResult is one return of an executor's Next.
type nextResult struct {
	m   executors.Message
	err error
}

func (f *fallible) Next(ctx context.Context) (executors.Message, error) {
	select {
	case n := <-f.c:
		return n.m, n.err
	case <-ctx.Done():
		return executors.Message{}, ctx.Err()
	}
}
func (f *fallible) Schema() *arrow.Schema { return f.tab.ArrowSchema() }
func (f *fallible) Close() error          { return nil }

// pullAll calls bf.Next on its own goroutine until it returns an error, sending each
// result on the returned channel (buffered, so the goroutine never waits for the test).
func pullAll(ctx context.Context, bf *executors.ArrangementBackfill) <-chan nextResult {
	out := make(chan nextResult, 1<<12)
	go func() {
		defer close(out)
		for {
			m, err := bf.Next(ctx)
			out <- nextResult{m, err}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// waitFor polls cond every millisecond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: still waiting for %s", what)
		}
	}
}

// docs/design.md §6, the third fault of the reference implementation: an upstream error in
// the finishing phase (every vnode Completed, the next barrier not yet come) is
// returned, not swallowed; and so is one after the backfill is done, when it passes
// everything through. Each case gets a fresh backfill over the same committed rows.
func TestBackfillFinishingReturnsUpstreamError(t *testing.T) {
	for _, phase := range []string{"finishing", "done"} {
		t.Run(phase, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
			defer mem.AssertSize(t, 0)
			tab := fairTable()
			const loaded = 300
			store, node, _ := committedUpstream(t, mem, tab, loaded)
			defer store.Close()
			in := &fallible{tab: tab, c: make(chan nextResult, 4)}
			bf := localBackfill(t, in, tab, node, mem, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			in.c <- nextResult{m: executors.BarrierMessage(&executors.Barrier{Prev: 1, Curr: 2, Kind: executors.Checkpoint})}
			results := pullAll(ctx, bf)
			defer func() { // on every path: stop the puller, release what it pulled, close
				cancel()
				for r := range results {
					r.m.Release()
				}
				if err := bf.Close(); err != nil {
					t.Error(err)
				}
			}()
			// The snapshot is read to its end with no second barrier: the backfill is
			// then finishing (every vnode Completed, not Done).
			waitFor(t, "every vnode Completed", func() bool { s := bf.Stats(); return s.Started && s.Completed == s.Owned })
			if s := bf.Stats(); s.Done || s.Rows != loaded {
				t.Fatalf("after the snapshot's end: %+v, want %d rows and not done", s, loaded)
			}
			if phase == "done" {
				in.c <- nextResult{m: executors.BarrierMessage(&executors.Barrier{Prev: 2, Curr: 3, Kind: executors.Checkpoint})}
				waitFor(t, "the backfill done", func() bool { return bf.Stats().Done })
				// Pass-through: an upstream chunk comes out as it is, projected.
				in.c <- nextResult{m: executors.ChunkMessage(fairChunk(t, mem, tab, loaded, 3))}
			}
			broke := errors.New("upstream actor failed")
			in.c <- nextResult{err: broke}
			rows, barriers, passed := 0, 0, 0
			var got error
			for r := range results {
				if r.err != nil {
					got = r.err
					continue
				}
				switch {
				case r.m.Barrier != nil:
					barriers++
				case r.m.Chunk != nil && barriers >= 2:
					passed += r.m.Chunk.NumRows()
				case r.m.Chunk != nil:
					rows += r.m.Chunk.NumRows()
				}
				r.m.Release()
			}
			if !errors.Is(got, broke) {
				t.Fatalf("Next returned %v, want the upstream's error", got)
			}
			if !strings.Contains(got.Error(), "backfill of "+tab.Name) {
				t.Errorf("error %q does not name the upstream table %s", got, tab.Name)
			}
			want := map[string][2]int{"finishing": {1, 0}, "done": {2, 3}}[phase]
			if rows != loaded || barriers != want[0] || passed != want[1] {
				t.Fatalf("before the error: %d snapshot rows, %d barriers, %d rows passed through; want %d, %d, %d",
					rows, barriers, passed, loaded, want[0], want[1])
			}
		})
	}
}

// tombstoneUpstream commits loaded rows of fairTable (k = v = 0..loaded-1) at epoch 1,
// then deletes every key that is not a multiple of every and seals the deletes at
// epoch 2, committing them too with commit (else they stay on the node, sealed). It
// checks that every vnode keeps a live key, so that a token always buys a row. The
// caller closes the store.
func tombstoneUpstream(t testing.TB, mem memory.Allocator, tab *schema.Table, loaded, every int, commit bool) (*storage.Store, *storage.Node) {
	t.Helper()
	live := make([]int, tab.VnodeCount)
	for k, vn := range fairVnodes(t, mem, tab, loaded) {
		if k%every == 0 {
			live[vn]++
		}
	}
	if slices.Contains(live, 0) {
		t.Fatalf("live keys per vnode %v: a vnode has none", live)
	}
	store, node, st := committedUpstream(t, mem, tab, loaded)
	for from := 0; from < loaded; from += 100_000 {
		b := vec.NewChunkBuilder(mem, tab)
		for k := from; k < min(from+100_000, loaded); k++ {
			if k%every != 0 {
				if err := b.AppendRow(vec.Delete, int64(k), int64(k)); err != nil {
					t.Fatal(err)
				}
			}
		}
		dels, err := b.Build()
		b.Release()
		if err == nil {
			err = st.Write(dels)
			dels.Release()
		}
		if err != nil {
			store.Close()
			t.Fatal(err)
		}
	}
	err := st.Seal(2)
	if err == nil && commit {
		_, err = store.Checkpoint(2)
	}
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	return store, node
}

// localBackfill is a backfill of every vnode of tab on node (table id 1, reading the
// node's store), fed by in, with its progress in table 2 and the rate limit given.
func localBackfill(t testing.TB, in executors.Executor, tab *schema.Table, node *storage.Node, mem memory.Allocator, limit *int64) *executors.ArrangementBackfill {
	t.Helper()
	full := vnode.Full(tab.VnodeCount)
	prog, err := storage.NewProgressTable(node, 2, "local_progress", tab, full)
	if err != nil {
		t.Fatal(err)
	}
	bf, err := executors.NewArrangementBackfill(in, executors.BackfillConfig{
		Actor: 1, Fragment: 1, Upstream: tab, UpstreamID: 1, S2: []int{0, 1}, Vnodes: full,
		Node: node, Progress: prog, Workers: 2, Mem: mem, LocalUpstream: true, RateLimit: limit,
	})
	if err != nil {
		t.Fatal(err)
	}
	return bf
}

// passBarrier sends the barrier {prev, prev+1} (a checkpoint, with m) on in and pulls bf
// until the barrier comes out, handing each chunk before it to each (which must not
// keep it) and releasing it; it returns how long that took.
func passBarrier(t testing.TB, ctx context.Context, bf *executors.ArrangementBackfill, in *scripted, prev executors.Epoch, m executors.Mutation, each func(*vec.Chunk)) time.Duration {
	t.Helper()
	in.c <- executors.BarrierMessage(&executors.Barrier{Prev: prev, Curr: prev + 1, Kind: executors.Checkpoint, Mutation: m})
	t0 := time.Now()
	for {
		msg, err := bf.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if msg.Chunk != nil && each != nil {
			each(msg.Chunk)
		}
		isBarrier := msg.Barrier != nil
		msg.Release()
		if isBarrier {
			return time.Since(t0)
		}
	}
}

// docs/testing.md layer 3, "long tombstone runs while throttled to 1 row/s": one key in 250
// is live, so every vnode is long runs of deleted keys between a few live ones.
// Throttled to 1 row/s the backfill consumes no more rows than its tokens allow and
// never stalls a barrier while it skips the deleted keys; paused it consumes none,
// even once the limit is lifted; resumed, every barrier makes progress even when
// barriers come back to back, and it finishes within a few barriers (I5); and the
// view ends with exactly the live rows, each once. (What the skips cost the read
// while it waits for tokens: BenchmarkBackfillThrottledTombstoneRuns.)
func TestBackfillTombstoneRunsThrottled(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	tab := fairTable()
	const loaded, every = 8000, 250 // 32 live keys: 0, 250, 500, ...
	store, node := tombstoneUpstream(t, mem, tab, loaded, every, true)
	defer store.Close()
	in := &scripted{tab: tab, c: make(chan executors.Message, 4)}
	one := int64(1)
	bf := localBackfill(t, in, tab, node, mem, &one)
	defer bf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	rows := map[[2]int64]int{}
	epoch := executors.Epoch(2)
	// barrier passes the next barrier (with m), applying the rows before it; it fails
	// when that takes a second or more.
	barrier := func(m executors.Mutation) {
		t.Helper()
		d := passBarrier(t, ctx, bf, in, epoch, m, func(c *vec.Chunk) { applyKV(t, rows, c, nil) })
		if epoch++; d >= time.Second {
			t.Fatalf("barrier %d took %v to pass through the backfill", epoch, d)
		}
	}
	start := time.Now()
	barrier(nil) // the first barrier: passed on, then progress is loaded
	epochs := func(n int, m executors.Mutation) {
		for i := range n {
			time.Sleep(40 * time.Millisecond)
			if i == n-1 {
				barrier(m)
			} else {
				barrier(nil)
			}
		}
	}
	// Throttled: at most the first token's row plus one a second (a row takes a token
	// whether the read or a barrier's "at least one row" read takes it; a vnode's end
	// takes none), and at least that first row: the token is free from the start, and
	// the read or the first barrier spends it on a live key past deleted ones.
	epochs(15, executors.Pause{})
	s := bf.Stats()
	if limit := 1 + int64(time.Since(start).Seconds()); s.Rows < 1 || s.Rows > limit {
		t.Fatalf("throttled to 1 row/s for %v: %d snapshot rows, want 1 to %d", time.Since(start), s.Rows, limit)
	}
	// Paused, and the limit lifted while paused: no snapshot row at all, barriers
	// still flowing.
	epochs(1, executors.Throttle{Limits: map[executors.FragmentID]*int64{1: nil}})
	epochs(8, executors.Resume{})
	if p := bf.Stats(); p.Rows != s.Rows || p.Completed != s.Completed {
		t.Fatalf("paused: snapshot rows went from %d to %d, vnodes Completed from %d to %d", s.Rows, p.Rows, s.Completed, p.Completed)
	}
	// Resumed, unthrottled. Barriers back to back, so that each read is stopped
	// before its workers get far: each barrier still makes progress (the "at least
	// one row" read skips a whole run of deleted keys to the next live key or the
	// vnode's end).
	for range 2 {
		before := bf.Stats()
		barrier(nil)
		if after := bf.Stats(); !after.Done && after.Rows == before.Rows && after.Completed == before.Completed {
			t.Fatalf("a barrier with no progress: %+v, then %+v", before, after)
		}
	}
	// Then at the pace of the barriers above: done within a few of them.
	for n := 0; !bf.Stats().Done; n++ {
		if n == 5 {
			t.Fatalf("not done 5 paced barriers after the limit was lifted: %+v", bf.Stats())
		}
		time.Sleep(40 * time.Millisecond)
		barrier(nil)
	}
	if got := bf.Stats().Rows; got != loaded/every {
		t.Fatalf("%d snapshot rows, want the %d live keys", got, loaded/every)
	}
	for k := 0; k < loaded; k += every {
		if n := rows[[2]int64{int64(k), int64(k)}]; n != 1 {
			t.Fatalf("live key %d emitted %d times net, want once", k, n)
		}
	}
	if len(rows) != loaded/every {
		t.Fatalf("the view has %d distinct rows, want %d: %v", len(rows), loaded/every, rows)
	}
}
