package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// VnodeProgress reports the committed per-vnode progress: midway some vnodes are not
// Completed and the rows add up to at most what the job read; at the end every vnode is
// Completed, owned by one of the view's actors, and the rows add up to the table's.
func TestVnodeProgress(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	e := openEngine(t, vfs.NewMem(), mem, 2*time.Millisecond, 1)
	defer e.Close()
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, vectest.NewRand(vectest.Seed(t)), 2000)
	limit := int64(300)
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2, RateLimit: &limit, Background: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	sum := func(ps []engine.VnodeProgress) (rows int64, done int) {
		for _, p := range ps {
			rows += p.Rows
			if p.State == vec.Completed {
				done++
			}
		}
		return rows, done
	}
	mid, err := e.VnodeProgress("mv1")
	if err != nil {
		t.Fatal(err)
	}
	rows, done := sum(mid)
	if len(mid) != kvT().VnodeCount || done == len(mid) || rows > progressOf(t, e, "mv1").RowsConsumed {
		t.Fatalf("midway: %d vnodes, %d completed, %d rows (job: %+v)", len(mid), done, rows, progressOf(t, e, "mv1"))
	}
	if err := e.SetRateLimit(ctx, "mv1", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitBackfill(ctx, "mv1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	end, err := e.VnodeProgress("mv1")
	if err != nil {
		t.Fatal(err)
	}
	rows, done = sum(end)
	if done != len(end) || rows != progressOf(t, e, "mv1").RowsConsumed {
		t.Fatalf("at the end: %d of %d completed, %d rows (job: %+v)", done, len(end), rows, progressOf(t, e, "mv1"))
	}
	for _, p := range end {
		if p.Actor == 0 || p.Upstream != "t" {
			t.Fatalf("vnode %d: %+v", p.Vnode, p)
		}
	}
	if _, err := e.VnodeProgress("t"); err == nil {
		t.Fatal("no error for a table")
	}
}
