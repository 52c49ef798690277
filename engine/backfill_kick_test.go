package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// A backfill that finishes its snapshot asks for a barrier at once: with an hour
// between ticks, a foreground CreateMV over an empty table and over one with rows
// (arrangement and no-shuffle, two actors each) returns as soon as each actor's
// snapshot has ended and one barrier has passed, and the views are right.
func TestBackfillFinishInjectsBarrier(t *testing.T) {
	seed := vectest.Seed(t)
	rng := vectest.NewRand(seed)
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	var barriers atomic.Int64
	e, err := engine.Open(ctx, "db", engine.Options{
		FS: vfs.NewMem(), Mem: mem, BarrierInterval: time.Hour, ChunkSize: 64, Logger: quietLogger(),
		OnBarrier: func(engine.BarrierStats) { barriers.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	create := func(name string, plan engine.Plan, kind engine.BackfillKind) {
		t.Helper()
		before := barriers.Load()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := e.CreateMV(cctx, name, plan, engine.MVOptions{Backfill: kind, Parallelism: 2}); err != nil {
			t.Fatalf("create %s by %s backfill with no tick to come: %v", name, kind, err)
		}
		// The Add barrier, then one per actor at most (two actors may finish before
		// one barrier).
		if n := barriers.Load() - before; n < 2 || n > 3 {
			t.Fatalf("create %s: %d barriers, want the Add barrier and one or two for the actors that finished", name, n)
		}
		if p := progressOf(t, e, name); !p.Done {
			t.Fatalf("create %s returned with progress %+v", name, p)
		}
	}
	create("mv1", mv1Plan(), engine.ArrangementBackfill)
	preload(t, e, mem, rng, 3000)
	create("mv3", mv3Plan(), engine.NoShuffleBackfill)
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if n := checkViews(t, e, "after the builds"); n != 3000 {
		t.Fatalf("t has %d rows, want 3000", n)
	}
}
