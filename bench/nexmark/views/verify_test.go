package views_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/bench/nexmark/gen"
	"github.com/seed04fbb902/weir/bench/nexmark/views"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/vec"
)

// Compare finds a view that differs from its oracle: q0 compared with rows read before
// more bids were written differs by those bids, and Verify, which reads the tables
// afresh, finds it equal. An unknown view is an error.
func TestCompareStaleRows(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	e, err := engine.Open(ctx, "db", engine.Options{FS: vfs.NewMem(), Mem: mem, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, tab := range views.Tables() {
		if err := e.CreateTable(ctx, tab, engine.TableOptions{Parallelism: 2}); err != nil {
			t.Fatal(err)
		}
	}
	g := gen.New(gen.Config{Seed: 1})
	if err := views.WriteEvents(ctx, e, g, mem, 0, 2000); err != nil {
		t.Fatal(err)
	}
	plan, err := views.Plan("q0")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "q0", plan, engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	stale, err := views.ReadRows(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Release()
	c, err := views.Compare(ctx, e, "q0", stale)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Verified || c.Rows == 0 {
		t.Fatalf("q0 against the rows of its epoch: %+v, want verified with rows", c)
	}
	before := c.Rows
	if err := views.WriteEvents(ctx, e, g, mem, 2000, 3000); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	c, err = views.Compare(ctx, e, "q0", stale)
	if err != nil {
		t.Fatal(err)
	}
	if c.Verified || c.Mismatches != c.Rows-before || c.Mismatches == 0 || c.Detail == "" {
		t.Fatalf("q0 against stale rows: %+v, want %d mismatches (the new bids) and a detail", c, c.Rows-before)
	}
	checks, err := views.Verify(ctx, e, []string{"q0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 1 || !checks[0].Verified || checks[0].Rows != c.Rows {
		t.Fatalf("Verify after the writes: %+v, want q0 verified with %d rows", checks, c.Rows)
	}
	if _, err := views.Verify(ctx, e, []string{"q99"}); err == nil || !strings.Contains(err.Error(), "q99") {
		t.Fatalf("Verify of q99: %v, want an error naming it", err)
	}
}
