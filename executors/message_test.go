package executors_test

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

func TestEpochs(t *testing.T) {
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := executors.EpochAt(base)
	if got := e.Time(); !got.Equal(base) || e.Seq() != 0 {
		t.Fatalf("EpochAt(%v) = %v (time %v seq %d)", base, e, got, e.Seq())
	}
	// Same millisecond, a clock going back, and time moving on: always increasing;
	// a new millisecond restarts the sequence.
	rng := vectest.NewRand(vectest.Seed(t))
	prev := e
	now := base
	for i := 0; i < 10000; i++ {
		now = now.Add(time.Duration(rng.IntN(3)-1) * time.Millisecond / time.Duration(1+rng.IntN(4)))
		next := executors.NextEpoch(prev, now)
		if next <= prev {
			t.Fatalf("step %d: NextEpoch(%v, %v) = %v, not above", i, prev, now, next)
		}
		if executors.EpochAt(now) > prev && next != executors.EpochAt(now) {
			t.Fatalf("step %d: a new millisecond gave %v, want %v", i, next, executors.EpochAt(now))
		}
		prev = next
	}
	if s := executors.NextEpoch(e, base).String(); !strings.Contains(s, "2026-11-29T12:00:00.000Z+1") {
		t.Fatalf("String() = %q", s)
	}
}

func TestBarrierValidate(t *testing.T) {
	cases := []struct {
		name string
		b    executors.Barrier
		want string // "" = valid
	}{
		{"plain", executors.Barrier{Prev: 1, Curr: 2}, ""},
		{"checkpoint", executors.Barrier{Prev: 1, Curr: 2, Kind: executors.Checkpoint}, ""},
		{"epochs equal", executors.Barrier{Prev: 2, Curr: 2}, "epochs must increase"},
		{"epochs backwards", executors.Barrier{Prev: 3, Curr: 2}, "epochs must increase"},
		{"add needs checkpoint", executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Add{PauseOnBootstrap: true}}, "mutation (add) that needs a checkpoint barrier"},
		{"update needs checkpoint", executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Update{}}, "mutation (update) that needs a checkpoint"},
		{"stop needs checkpoint", executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Stop{}}, "mutation (stop) that needs a checkpoint"},
		{"add on checkpoint", executors.Barrier{Prev: 1, Curr: 2, Kind: executors.Checkpoint, Mutation: executors.Add{}}, ""},
		{"pause on plain", executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Pause{}}, ""},
		{"throttle on plain", executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Throttle{}}, ""},
		{"resume on plain", executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Resume{}}, ""},
	}
	for _, c := range cases {
		err := c.b.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if executors.ForcesCheckpoint(nil) || executors.ForcesCheckpoint(executors.Pause{}) || !executors.ForcesCheckpoint(executors.Stop{}) {
		t.Error("ForcesCheckpoint")
	}
	zero, ten := int64(0), int64(10)
	th := executors.Throttle{Limits: map[executors.FragmentID]*int64{1: &zero, 2: &ten, 3: nil}}
	if l, ok := th.Limit(1); !ok || *l != 0 {
		t.Error("fragment 1 should be paused")
	}
	if l, ok := th.Limit(3); !ok || l != nil {
		t.Error("fragment 3 should be unlimited")
	}
	if _, ok := th.Limit(4); ok {
		t.Error("fragment 4 is not named")
	}
}

func TestMessageOwnership(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	b := tables.NewBidBuilder(mem)
	defer b.Release()
	b.Append(vec.Insert, &tables.Bid{Auction: 1})
	m := executors.ChunkMessage(b.Build())
	if !strings.Contains(m.String(), "1 rows") {
		t.Errorf("String() = %q", m.String())
	}
	m.Release() // the receiver releases: nothing may leak
	bm := executors.BarrierMessage(&executors.Barrier{Prev: 1, Curr: 2, Kind: executors.Checkpoint, Mutation: executors.Pause{}})
	if s := bm.String(); s != "barrier(1 -> 2, checkpoint, pause)" {
		t.Errorf("String() = %q", s)
	}
	bm.Release() // no chunk: a no-op
}
