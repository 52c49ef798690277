package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// metaKeyOf is the store key of a metadata entry (table 0, vnode 0, kind, rest).
func metaKeyOf(kind byte, rest string) string {
	return string([]byte{0, 0, 0, 0, 0, 0, kind}) + rest
}

// TestOptionsRefused: every option of CreateMV, CreateTable, RescheduleMV and
// SetRateLimit is checked before anything is written, with one set of rules, and a
// CreateMV that fails, a foreground one whose context ends while it waits for the
// backfill among them, leaves no view, actor, state row or progress row behind.
func TestOptionsRefused(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	fs := vfs.NewMem()
	e, err := biOpen(fs, mem)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	writeT(t, e, mem, e.Insert, biKVRows(0, 200)...)
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Crash(); err != nil {
		t.Fatal(err)
	}
	stored := biDump(t, fs)
	if e, err = biOpen(fs, mem); err != nil {
		t.Fatal(err)
	}
	defer func() { e.Crash() }()
	before := catalogState(t, e)
	jobs := len(e.Progress())

	other := func(name string) *schema.Table {
		tab := kvT()
		tab.Name = name
		return tab
	}
	timeout := func(d time.Duration) context.Context {
		c, cancel := context.WithTimeout(ctx, d)
		t.Cleanup(cancel)
		return c
	}
	for _, c := range []struct {
		name string
		do   func() error
		want []string
		is   error // the error must be this one too (errors.Is), when set
	}{
		{"a negative rate limit", func() error {
			return e.CreateMV(ctx, "bad", engine.Scan("t"), engine.MVOptions{RateLimit: engine.RowsPerSecond(-1)})
		}, []string{"create materialized view bad", "rate limit -1 rows/s: want >= 0"}, nil},
		{"a negative rate limit in the background", func() error {
			return e.CreateMV(ctx, "bad", engine.Scan("t"), engine.MVOptions{RateLimit: engine.RowsPerSecond(-5), Background: true})
		}, []string{"rate limit -5 rows/s"}, nil},
		{"a negative parallelism", func() error {
			return e.CreateMV(ctx, "bad", engine.Scan("t"), engine.MVOptions{Parallelism: -1})
		}, []string{"create materialized view bad", "parallelism -1"}, nil},
		{"more actors than vnodes", func() error {
			return e.CreateMV(ctx, "bad", engine.Scan("t"), engine.MVOptions{Parallelism: 17})
		}, []string{"create materialized view bad", "parallelism 17: want 1..16"}, nil},
		{"an unknown backfill kind", func() error {
			return e.CreateMV(ctx, "bad", engine.Scan("t"), engine.MVOptions{Backfill: "magic"})
		}, []string{"create materialized view bad", `unknown backfill kind "magic"`}, nil},
		{"a foreground create whose context ends", func() error {
			return e.CreateMV(timeout(300*time.Millisecond), "bad", engine.Scan("t"), engine.MVOptions{RateLimit: engine.RowsPerSecond(1)})
		}, []string{"create materialized view bad", "the view was dropped again"}, context.DeadlineExceeded},
		{"a nil plan", func() error {
			return e.CreateMV(ctx, "bad", nil, engine.MVOptions{})
		}, []string{"create materialized view bad", "the plan's root: nil plan node"}, nil},
		{"a nil input", func() error {
			return e.CreateMV(ctx, "bad", engine.Filter((*engine.FilterPlan)(nil), engine.Column("v")), engine.MVOptions{})
		}, []string{"filter.input: nil plan node"}, nil},
		{"a plan that is its own input", func() error {
			f := engine.Filter(nil, engine.Call("greater", engine.Column("v"), engine.Int(1)))
			f.Input = engine.Project(f, engine.As(engine.Column("v"), "v"))
			return e.CreateMV(ctx, "bad", f, engine.MVOptions{})
		}, []string{"filter.input.project.input: the filter node is its own input"}, nil},
		{"a plan deeper than the planner walks", func() error {
			var p engine.Plan = engine.Scan("t")
			for range 100 {
				p = engine.Filter(p, engine.Call("greater", engine.Column("v"), engine.Int(1)))
			}
			return e.CreateMV(ctx, "bad", p, engine.MVOptions{})
		}, []string{"the plan is deeper than 64 nodes"}, nil},
		{"a table with a negative parallelism", func() error {
			return e.CreateTable(ctx, other("bad"), engine.TableOptions{Parallelism: -2})
		}, []string{"create table bad", "parallelism -2: want 1..16"}, nil},
		{"a table with more actors than vnodes", func() error {
			return e.CreateTable(ctx, other("bad"), engine.TableOptions{Parallelism: 17})
		}, []string{"create table bad", "parallelism 17: want 1..16"}, nil},
		{"a reschedule to a negative parallelism", func() error {
			return e.RescheduleMV(ctx, "mv1", -3)
		}, []string{"reschedule materialized view mv1", "parallelism -3: want 1..16"}, nil},
		{"a reschedule to more actors than vnodes", func() error {
			return e.RescheduleMV(ctx, "mv1", 17)
		}, []string{"parallelism 17: want 1..16"}, nil},
		{"a negative rate limit set", func() error {
			return e.SetRateLimit(ctx, "mv1", engine.RowsPerSecond(-1))
		}, []string{"set rate limit of mv1", "rate limit -1 rows/s: want >= 0"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.do()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q, want one containing %q", err, w)
				}
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("error %q is not %v", err, c.is)
			}
			if got := catalogState(t, e); got != before {
				t.Fatalf("the catalog changed:\n%s\nwas:\n%s", got, before)
			}
			if got := len(e.Progress()); got != jobs {
				t.Fatalf("%d jobs, was %d", got, jobs)
			}
			if _, err := e.Table("bad"); err == nil {
				t.Fatal("bad exists")
			}
		})
	}
	if err := e.Crash(); err != nil {
		t.Fatal(err)
	}
	// The dropped view's checkpoints moved the committed epoch and the catalog's next
	// id; nothing else may differ.
	skip := func(k string) bool {
		return k == metaKeyOf('e', "") || k == metaKeyOf('c', "next_id")
	}
	if d := biDiff(stored, biDump(t, fs), skip); d != "" {
		t.Fatalf("the refused calls left data in the store:\n%s", d)
	}
	// The limits that are allowed are taken, and the name is free.
	if e, err = biOpen(fs, mem); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "bad", engine.Scan("t"), engine.MVOptions{RateLimit: engine.RowsPerSecond(0)}); err != nil {
		t.Fatal(err)
	}
	if err := e.SetRateLimit(ctx, "bad", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitBackfill(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	if got, want := len(readRowsNow(t, e, "bad")), len(readRowsNow(t, e, "t")); got != want {
		t.Fatalf("view bad has %d rows, t %d", got, want)
	}
}

// TestAccessorsReturnCopies: what the engine hands out of its catalog (a table's
// schema, a job's rate limit) is the caller's to change, and what a caller passes in
// (a rate limit) is copied: changing either changes nothing in the engine.
func TestAccessorsReturnCopies(t *testing.T) {
	ctx := context.Background()
	e, mem := kvEngine(t)
	limit := engine.RowsPerSecond(0)
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{RateLimit: limit, Background: true}); err != nil {
		t.Fatal(err)
	}
	*limit = -7 // the caller's pointer, changed after the call

	for _, name := range []string{"t", "mv1"} {
		tab, err := e.Table(name)
		if err != nil {
			t.Fatal(err)
		}
		want := tab.Canonical()
		tab.Name = "MUTATED"
		tab.Columns[0].Name = "MUTATED"
		tab.Columns[0].Type = schema.Type{Kind: schema.Boolean}
		tab.PK[0].Desc = !tab.PK[0].Desc
		tab.VnodeCount = 3
		again, err := e.Table(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := again.Canonical(); got != want {
			t.Fatalf("%s changed with the returned schema:\n%s\nwas:\n%s", name, got, want)
		}
	}
	p := e.Progress()
	if len(p) != 1 || p[0].RateLimit == nil || *p[0].RateLimit != 0 {
		t.Fatalf("progress %+v, want mv1 limited to 0 rows/s", p)
	}
	*p[0].RateLimit = 99
	if got := e.Progress()[0].RateLimit; got == nil || *got != 0 {
		t.Fatalf("the job's rate limit changed with the returned progress: %v", got)
	}
	// A valid write still goes in, and the view still follows the table.
	writeT(t, e, mem, e.Insert, kvRow{k: 1, v: 20})
	if err := e.SetRateLimit(ctx, "mv1", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitBackfill(ctx, "mv1"); err != nil {
		t.Fatal(err)
	}
	if got := readRowsNow(t, e, "mv1"); len(got) != 1 {
		t.Fatalf("mv1 has %v", got)
	}
}
