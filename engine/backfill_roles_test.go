package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// Dedicated backfill nodes (docs/design.md §8).

func openRoles(t *testing.T, fs vfs.FS, mem memory.Allocator) *engine.Engine {
	t.Helper()
	e, err := engine.Open(context.Background(), "db", engine.Options{
		FS: fs, Mem: mem, BarrierInterval: -1, ChannelCapacity: 4, ChunkSize: 32,
		CacheSize: 4 << 20, MemTableSize: 1 << 20, Logger: quietLogger(),
		Nodes: 3, NodeRoles: []string{"", "", "backfill"},
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return e
}

// A view created to backfill on the "backfill" role runs every actor on that role's
// node while it backfills, its scans replicating the upstream's changes, and keeps
// there across a crash; once done it moves onto the regular nodes in one Update
// barrier, to hold what its query gives, and stays there when reopened. The views and
// tables without the option never run on the role's node.
func TestBackfillOnRole(t *testing.T) {
	rng := vectest.NewRand(vectest.Seed(t))
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	fs := vfs.NewMem()
	e := openRoles(t, fs, mem)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv3", mv3Plan(), engine.MVOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	regular := func(when, name string) {
		t.Helper()
		p := progressOf(t, e, name)
		if p.BackfillOn != "" || len(p.Nodes) == 0 || slices.Contains(p.Nodes, 2) {
			t.Fatalf("%s: %s runs on nodes %v (backfill on %q), want only the regular nodes 0 and 1", when, name, p.Nodes, p.BackfillOn)
		}
	}
	onRole := func(when string) engine.JobProgress {
		t.Helper()
		p := progressOf(t, e, "mv1")
		if p.Done || p.BackfillOn != "backfill" || !slices.Equal(p.Nodes, []int{2}) {
			t.Fatalf("%s: mv1 runs on nodes %v (backfill on %q, done %v), want node 2 alone while it backfills", when, p.Nodes, p.BackfillOn, p.Done)
		}
		for _, a := range p.Actors {
			if a.LocalReads || a.Node != 2 {
				t.Fatalf("%s: mv1's backfill actor %d on node %d reads locally %v, want node 2 replicating", when, a.Actor, a.Node, a.LocalReads)
			}
		}
		return p
	}
	regular("created", "mv3")
	preload(t, e, mem, rng, 1500)
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2, RateLimit: ctlLimit(300), Background: true, BackfillOn: "backfill"}); err != nil {
		t.Fatal(err)
	}
	onRole("created")
	ctlAwaitMidway(t, e, "mv1", 100, true)
	for range 3 {
		ctlUpsert(t, e, mem, rng, 0, 2000, 20)
		ctlCheckpoint(t, e)
	}
	before := onRole("midway")
	if err := e.Crash(); err != nil {
		t.Fatal(err)
	}
	e = openRoles(t, fs, mem)
	defer ctlClose(t, e)
	onRole("reopened")
	regular("reopened", "mv3")
	if err := e.SetRateLimit(ctx, "mv1", nil); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := ctlTimeout(30 * time.Second)
	defer cancel()
	if err := e.WaitBackfill(wctx, "mv1"); err != nil {
		t.Fatal(err)
	}
	p := progressOf(t, e, "mv1")
	if !p.Done || p.RowsConsumed < before.RowsConsumed {
		t.Fatalf("after the backfill: %+v (midway %d rows)", p, before.RowsConsumed)
	}
	regular("done", "mv1")
	ctlCheckMV1(t, e, "moved")
	for range 3 {
		ctlUpsert(t, e, mem, rng, 0, 2000, 20)
		ctlCheckpoint(t, e)
	}
	ctlCheckMV1(t, e, "after writes on the regular nodes")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openRoles(t, fs, mem)
	regular("reopened after the move", "mv1")
	ctlCheckMV1(t, e, "reopened after the move")
}

// Roles that cannot be placed are refused, naming what is wrong.
func TestBackfillOnRoleRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		nodes int
		roles []string
		want  string
	}{
		{"every node", 2, []string{"backfill", "gpu"}, "every node has a role (backfill, gpu)"},
		{"too many", 2, []string{"", "", "x"}, "3 node roles for 2 nodes"},
		{"bad name", 2, []string{"", "back fill"}, `role of node 1: role "back fill": ' ' is not`},
	} {
		_, err := engine.Open(ctx, "db", engine.Options{FS: vfs.NewMem(), Nodes: tc.nodes, NodeRoles: tc.roles, Logger: quietLogger()})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: open: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	e := openRoles(t, vfs.NewMem(), mem)
	defer ctlClose(t, e)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts engine.MVOptions
		want string
	}{
		{"no such role", engine.MVOptions{BackfillOn: "gpu"}, `create materialized view v: backfill on role "gpu": no node has it (the nodes' roles are backfill`},
		{"no-shuffle", engine.MVOptions{BackfillOn: "backfill", Backfill: engine.NoShuffleBackfill}, "a no-shuffle backfill runs beside its upstream's actors"},
	} {
		if err := e.CreateMV(ctx, "v", mv1Plan(), tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := e.Table("v"); err == nil {
		t.Fatal("a refused view exists")
	}
	// A view that backfills on the role's nodes (paused, so it stays there) cannot
	// be read by a no-shuffle view, which would have to run beside it.
	if err := e.CreateMV(ctx, "onrole", mv1Plan(), engine.MVOptions{BackfillOn: "backfill", Paused: true}); err != nil {
		t.Fatal(err)
	}
	err := e.CreateMV(ctx, "beside", engine.Scan("onrole"), engine.MVOptions{Backfill: engine.NoShuffleBackfill})
	if err == nil || !strings.Contains(err.Error(), `runs beside the actors of onrole, which run on the nodes of role "backfill"`) {
		t.Fatalf("a no-shuffle view over a view on a role's nodes: %v", err)
	}
}
