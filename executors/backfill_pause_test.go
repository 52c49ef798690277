package executors_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
)

// TestBackfillOwnPause: the two pauses of a backfill are apart. A Pause naming the
// backfill's fragment holds it until a Resume naming it; a Pause or Resume naming
// another fragment does nothing to it; the engine's Resume does not lift its own
// pause, nor its own Resume the engine's. While either holds, no snapshot row is read
// across barriers (not even the one a barrier reads when the snapshot gave nothing);
// once neither does, it reads to the end and the view has every row once.
func TestBackfillOwnPause(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	tab := fairTable()
	const loaded, every = 2000, 10
	store, node := tombstoneUpstream(t, mem, tab, loaded, every, true)
	defer store.Close()
	in := &scripted{tab: tab, c: make(chan executors.Message, 4)}
	bf := localBackfill(t, in, tab, node, mem, nil) // fragment 1, unlimited
	defer bf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	rows := map[[2]int64]int{}
	epoch := executors.Epoch(2)
	barrier := func(m executors.Mutation) {
		t.Helper()
		passBarrier(t, ctx, bf, in, epoch, m, func(c *vec.Chunk) { applyKV(t, rows, c, nil) })
		epoch++
	}
	held := func(step string) {
		t.Helper()
		for i := range 3 {
			time.Sleep(10 * time.Millisecond) // time for a read that should not run
			barrier(nil)
			if s := bf.Stats(); s.Rows != 0 || s.Completed != 0 {
				t.Fatalf("%s, barrier %d: %d snapshot rows and %d vnodes Completed, want none", step, i, s.Rows, s.Completed)
			}
		}
	}
	for _, step := range []struct {
		name string
		m    executors.Mutation
	}{
		{"its own pause at the first barrier", executors.Pause{Fragments: []executors.FragmentID{1}}},
		{"another fragment's pause", executors.Pause{Fragments: []executors.FragmentID{2, 3}}},
		{"the engine's resume", executors.Resume{}},
		{"another fragment's resume", executors.Resume{Fragments: []executors.FragmentID{2}}},
		{"the engine's pause", executors.Pause{}},
		{"its own resume under the engine's pause", executors.Resume{Fragments: []executors.FragmentID{3, 1}}},
	} {
		barrier(step.m)
		held(step.name)
	}
	barrier(executors.Resume{})
	for n := 0; !bf.Stats().Done; n++ {
		if n == 50 {
			t.Fatalf("not done 50 barriers after both pauses were lifted: %+v", bf.Stats())
		}
		time.Sleep(10 * time.Millisecond)
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
		t.Fatalf("the view has %d distinct rows, want %d", len(rows), loaded/every)
	}
}
