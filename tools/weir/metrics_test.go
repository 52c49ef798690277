package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/gen"
	"github.com/seed04fbb902/weir/bench/nexmark/views"
	"github.com/seed04fbb902/weir/engine"
)

// The metrics endpoint serves the jobs' and actors' backfill figures, barrier latency
// and checkpoint duration, and pprof.
func TestMetrics(t *testing.T) {
	m, err := serveMetrics("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	ctx := context.Background()
	e, err := engine.Open(ctx, t.TempDir(), engine.Options{OnBarrier: m.onBarrier, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, tab := range views.Tables() {
		if err := e.CreateTable(ctx, tab, engine.TableOptions{Parallelism: 2}); err != nil {
			t.Fatal(err)
		}
	}
	mem := memory.NewGoAllocator()
	for kind, c := range gen.New(gen.Config{Seed: 1}).Chunks(0, 5000, 1024, mem) {
		if err := e.Insert(ctx, kind.String(), c.Record()); err != nil {
			t.Fatal(err)
		}
		c.Release()
	}
	plan, _ := views.Plan("q16")
	if err := e.CreateMV(ctx, "q16", plan, engine.MVOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	// Rows written after the backfill are forwarded by its actors, one by one.
	bids := 0
	for kind, c := range gen.New(gen.Config{Seed: 1}).Chunks(5000, 6000, 1024, mem) {
		if kind.String() == "bid" {
			bids += c.NumRows()
		}
		if err := e.Insert(ctx, kind.String(), c.Record()); err != nil {
			t.Fatal(err)
		}
		c.Release()
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if bids == 0 {
		t.Fatal("no bid among the events written after the backfill")
	}
	m.observe(e, e.Progress())
	get := func(path string) string {
		resp, err := http.Get("http://" + m.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
		return string(b)
	}
	body := get("/metrics")
	for _, want := range []string{
		`weir_backfill_snapshot_rows{job="q16"} 4600`,
		`weir_backfill_vnodes{job="q16",state="completed"} 256`,
		`weir_backfill_done{job="q16"} 1`,
		`weir_backfill_actor_snapshot_rows{actor=`,
		`weir_backfill_actor_vnodes{actor=`,
		`weir_barrier_latency_seconds_count`,
		`weir_checkpoint_duration_seconds_count`,
		fmt.Sprintf(`weir_backfill_upstream_rows_forwarded{job="q16"} %d`, bids),
		`weir_backfill_actor_upstream_rows_forwarded{actor=`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	if !strings.Contains(get("/debug/pprof/"), "goroutine") {
		t.Error("no pprof index")
	}
}
