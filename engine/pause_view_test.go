package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// TestPauseMV: a view's own pause stops its backfill alone: no snapshot row of it is
// read across barriers while another view's backfill goes on and writes land; the
// engine's Pause and Resume do not lift it; it survives a crash and reopen, and a
// reschedule; its rate limit is kept; ResumeMV lifts it, but not the engine's pause,
// and the view ends right. A view created paused is resumed by ResumeMV, not by
// Resume.
func TestPauseMV(t *testing.T) {
	rng := vectest.NewRand(vectest.Seed(t))
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	fs := vfs.NewMem()
	e := openCtl(t, fs, mem, ctlOptions{interval: -1})
	defer func() { ctlClose(t, e) }()
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, rng, 1500)
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2, RateLimit: engine.RowsPerSecond(400), Background: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv3", mv3Plan(), engine.MVOptions{Parallelism: 2, RateLimit: engine.RowsPerSecond(400), Background: true}); err != nil {
		t.Fatal(err)
	}
	ctlAwaitMidway(t, e, "mv1", 100, true)
	if err := e.PauseMV(ctx, "mv1"); err != nil {
		t.Fatal(err)
	}
	held := progressOf(t, e, "mv1")
	if !held.Paused || held.Done {
		t.Fatalf("after PauseMV: %+v", held)
	}
	if p := progressOf(t, e, "mv3"); p.Paused {
		t.Fatalf("mv3 is paused with mv1: %+v", p)
	}
	still := func(when string) {
		t.Helper()
		p := progressOf(t, e, "mv1")
		if p.RowsConsumed != held.RowsConsumed || p.VnodesCompleted != held.VnodesCompleted || !p.Paused || p.Done {
			t.Fatalf("%s: mv1 %+v; at its pause: %+v", when, p, held)
		}
		if p.RateLimit == nil || *p.RateLimit != 400 {
			t.Fatalf("%s: mv1's rate limit %v, want 400 kept", when, p.RateLimit)
		}
	}
	mv3Before := progressOf(t, e, "mv3").RowsConsumed
	for i := range 10 {
		ctlUpsert(t, e, mem, rng, 0, 2000, 10)
		ctlCheckpoint(t, e)
		still(fmt.Sprintf("barrier %d", i))
	}
	if got := progressOf(t, e, "mv3"); got.RowsConsumed <= mv3Before && !got.Done {
		t.Fatalf("mv3 made no progress while mv1 was paused: %+v", got)
	}

	// The engine's pause and resume leave the view's own pause alone.
	if err := e.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		ctlCheckpoint(t, e)
		still(fmt.Sprintf("after the engine's resume, barrier %d", i))
	}

	// It is persisted: a crash and a reopen keep it.
	if err := e.Crash(); err != nil {
		t.Fatal(err)
	}
	e = openCtl(t, fs, mem, ctlOptions{interval: -1})
	for i := range 3 {
		ctlUpsert(t, e, mem, rng, 0, 2000, 10)
		ctlCheckpoint(t, e)
		still(fmt.Sprintf("after a reopen, barrier %d", i))
	}

	// A reschedule builds new actors from the catalog: they start under the pause.
	if err := e.RescheduleMV(ctx, "mv1", 3); err != nil {
		t.Fatal(err)
	}
	held = progressOf(t, e, "mv1")
	for i := range 3 {
		ctlUpsert(t, e, mem, rng, 0, 2000, 10)
		ctlCheckpoint(t, e)
		still(fmt.Sprintf("after a reschedule to 3 actors, barrier %d", i))
	}

	// ResumeMV under the engine's pause lifts the view's own pause only: nothing is
	// read until the engine's Resume.
	if err := e.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.ResumeMV(ctx, "mv1"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		ctlCheckpoint(t, e)
		still(fmt.Sprintf("after ResumeMV under the engine's pause, barrier %d", i))
	}
	if err := e.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.SetRateLimit(ctx, "mv1", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.SetRateLimit(ctx, "mv3", nil); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := ctlTimeout(30e9)
	defer cancel()
	for _, mv := range []string{"mv1", "mv3"} {
		if err := e.WaitBackfill(wctx, mv); err != nil {
			t.Fatal(err)
		}
	}
	if p := progressOf(t, e, "mv1"); p.Paused || !p.Done || p.RowsConsumed <= held.RowsConsumed {
		t.Fatalf("after ResumeMV: %+v (at the pause %+v)", p, held)
	}
	ctlCheckpoint(t, e)
	ctlCheckMV1(t, e, "after ResumeMV")

	// A view created paused: the engine's Resume leaves it paused, ResumeMV lifts it.
	if err := e.CreateMV(ctx, "mv2", mv2Plan(), engine.MVOptions{Paused: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	ctlCheckpoint(t, e)
	if p := progressOf(t, e, "mv2"); !p.Paused || p.RowsConsumed != 0 || p.Done {
		t.Fatalf("a view created paused, after the engine's Resume: %+v", p)
	}
	if err := e.ResumeMV(ctx, "mv2"); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitBackfill(wctx, "mv2"); err != nil {
		t.Fatal(err)
	}
	ctlCheckpoint(t, e)
	checkViews(t, e, "after mv2's ResumeMV")

	for _, c := range []struct{ name, want string }{{"nope", "pause nope: no such materialized view"}, {"t", "pause t: no such materialized view"}} {
		if err := e.PauseMV(ctx, c.name); err == nil || err.Error() != c.want {
			t.Errorf("PauseMV(%s): %v, want %q", c.name, err, c.want)
		}
	}
}
