package engine_test

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/vec"
)

func str(s string) *string { return &s }

// catalogState is what the engine shows of its catalog: every object's schema and
// every job.
func catalogState(t *testing.T, e *engine.Engine) string {
	t.Helper()
	var b strings.Builder
	for _, name := range []string{"t", "mv1", "mv2", "u", "bad"} {
		if tab, err := e.Table(name); err == nil {
			b.WriteString(tab.Canonical())
		}
	}
	for _, p := range e.Progress() {
		b.WriteString(p.Name + " " + p.Upstream + " " + string(p.Backfill) + " ")
		b.WriteString(strings.Repeat("|", p.Parallelism) + "\n")
	}
	return b.String()
}

// Bad input gets a clear error naming what is wrong, and changes nothing.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	e, mem := kvEngine(t)
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	rec := kvRecord(mem, []kvRow{{k: 1, v: 20, s: str("a")}})
	defer rec.Release()
	if err := e.Insert(ctx, "t", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	before := catalogState(t, e)
	epoch := e.CommittedEpoch()

	wrong := func() arrow.RecordBatch {
		b := array.NewInt64Builder(mem)
		defer b.Release()
		b.Append(1)
		a := b.NewArray()
		defer a.Release()
		return array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64}}, nil), []arrow.Array{a}, 1)
	}()
	defer wrong.Release()

	cases := []struct {
		name string
		do   func() error
		want string
	}{
		{"insert a wrong-shaped record", func() error { return e.Insert(ctx, "t", wrong) }, "table t"},
		{"insert into a missing table", func() error { return e.Insert(ctx, "nope", rec) }, "nope: no such table"},
		{"insert into a view", func() error { return e.Insert(ctx, "mv1", rec) }, "insert mv1: mv1 is a materialized view, which is read-only; write into its upstream tables (t)"},
		{"view over a missing table", func() error {
			return e.CreateMV(ctx, "bad", engine.Scan("nope"), engine.MVOptions{})
		}, `no table or materialized view "nope"`},
		{"view over a missing column", func() error {
			return e.CreateMV(ctx, "bad", engine.Filter(engine.Scan("t"), engine.Call("greater", engine.Column("w"), engine.Int(1))), engine.MVOptions{})
		}, `over t: no column "w"`},
		{"view with a bad function", func() error {
			return e.CreateMV(ctx, "bad", engine.Filter(engine.Scan("t"), engine.Call("no_such_fn", engine.Column("v"))), engine.MVOptions{})
		}, "no_such_fn"},
		{"view that renames a pk column", func() error {
			return e.CreateMV(ctx, "bad", engine.Project(engine.Scan("t"), engine.As(engine.Column("v"), "k")), engine.MVOptions{})
		}, `column "k" is a pk column of t`},
		{"view with a filter that is not boolean", func() error {
			return e.CreateMV(ctx, "bad", engine.Filter(engine.Scan("t"), engine.Column("v")), engine.MVOptions{})
		}, "want boolean"},
		{"view with an existing name", func() error {
			return e.CreateMV(ctx, "mv1", engine.Scan("t"), engine.MVOptions{})
		}, "mv1: a table or materialized view of that name exists"},
		{"impossible no-shuffle placement", func() error {
			return e.CreateMV(ctx, "bad", engine.Scan("mv1"), engine.MVOptions{Backfill: engine.NoShuffleBackfill, Parallelism: 2})
		}, "co-locates one view actor with each of the 3 actors of mv1; parallelism 2 cannot be placed"},
		{"unknown backfill kind", func() error {
			return e.CreateMV(ctx, "bad", engine.Scan("mv1"), engine.MVOptions{Backfill: "magic"})
		}, `unknown backfill kind "magic"`},
		{"reschedule a missing view", func() error { return e.RescheduleMV(ctx, "nope", 2) }, "nope: no such materialized view"},
		{"reschedule a table", func() error { return e.RescheduleMV(ctx, "t", 2) }, "t: no such materialized view"},
		{"reschedule to zero", func() error { return e.RescheduleMV(ctx, "mv1", 0) }, "parallelism 0: want 1..16 (the vnode count of its scan node)"},
		{"drop a missing view", func() error { return e.DropMV(ctx, "nope") }, "nope: no such materialized view"},
		{"create a table twice", func() error { return e.CreateTable(ctx, kvT(), engine.TableOptions{}) }, "create table t: a table or materialized view of that name exists"},
		{"rate limit below zero", func() error { v := int64(-1); return e.SetRateLimit(ctx, "mv1", &v) }, "want >= 0"},
		{"scan a missing table", func() error { _, err := e.Scan(ctx, "nope"); return err }, "scan nope: no table"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.do()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if got := catalogState(t, e); got != before {
				t.Fatalf("the catalog changed:\n%s\nwas:\n%s", got, before)
			}
		})
	}
	if got := e.CommittedEpoch(); got != epoch {
		t.Fatalf("bad input committed a checkpoint: epoch %d, was %d", got, epoch)
	}
}

// Drop, a view over a view that blocks the drop, a no-shuffle view, rate limits and
// pause state survive a reopen; the catalog is rebuilt from the store.
func TestCatalogAcrossReopen(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	fs := vfs.NewMem()
	e := openEngine(t, fs, mem, -1, 1)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv2", mv2Plan(), engine.MVOptions{Backfill: engine.NoShuffleBackfill}); err != nil {
		t.Fatal(err)
	}
	if err := e.DropMV(ctx, "mv1"); err == nil || !strings.Contains(err.Error(), "read by [mv2]") {
		t.Fatalf("drop of a view that another reads: %v", err)
	}
	if err := e.RescheduleMV(ctx, "mv2", 2); err == nil || !strings.Contains(err.Error(), "no-shuffle") {
		t.Fatalf("reschedule of a no-shuffle view: %v", err)
	}
	if err := e.RescheduleMV(ctx, "mv1", 2); err == nil || !strings.Contains(err.Error(), "mv2 is co-located") {
		t.Fatalf("reschedule of the upstream of a no-shuffle view: %v", err)
	}
	limit := int64(500)
	if err := e.SetRateLimit(ctx, "mv2", &limit); err != nil {
		t.Fatal(err)
	}
	rows := []kvRow{{k: 1, v: 20, s: str("a")}, {k: 2, v: 5}, {k: 3, v: 100, s: str("c")}}
	rec := kvRecord(mem, rows)
	if err := e.Insert(ctx, "t", rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	checkViews(t, e, "before reopen")
	before := catalogState(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e = openEngine(t, fs, mem, -1, 1)
	if got := catalogState(t, e); got != before {
		t.Fatalf("catalog after reopen:\n%s\nbefore:\n%s", got, before)
	}
	jobs := e.Progress()
	if len(jobs) != 2 || jobs[1].Name != "mv2" || jobs[1].RateLimit == nil || *jobs[1].RateLimit != 500 || jobs[1].Backfill != engine.NoShuffleBackfill {
		t.Fatalf("jobs after reopen: %+v", jobs)
	}
	n := checkViews(t, e, "after reopen")
	if n != 3 {
		t.Fatalf("t has %d rows after reopen, want 3", n)
	}
	if err := e.DropMV(ctx, "mv2"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Scan(ctx, "mv2"); err == nil {
		t.Fatal("scan of a dropped view succeeded")
	}
	// Writes still flow into mv1 after its downstream is gone.
	rec = kvRecord(mem, []kvRow{{k: 4, v: 50}})
	if err := e.Insert(ctx, "t", rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got := len(readRows(t, snap, "mv1")); got != 3 {
		t.Fatalf("mv1 has %d rows, want 3 (k = 1, 3, 4)", got)
	}
	snap.Release()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// The dropped view stays dropped, and its name is free again.
	e = openEngine(t, fs, mem, -1, 1)
	defer e.Close()
	if _, err := e.Table("mv2"); err == nil {
		t.Fatal("mv2 is back after a reopen")
	}
}

// PauseOnBootstrap starts everything paused; views created paused are reported so
// until ResumeMV.
func TestPauseOnBootstrap(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	mem := memory.NewGoAllocator()
	e := openEngine(t, fs, mem, -1, 1)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Paused: true}); err != nil {
		t.Fatal(err)
	}
	if p := e.Progress(); len(p) != 1 || !p[0].Paused {
		t.Fatalf("a view created paused: %+v", p)
	}
	if err := e.ResumeMV(ctx, "mv1"); err != nil {
		t.Fatal(err)
	}
	if p := e.Progress(); p[0].Paused {
		t.Fatalf("after resume: %+v", p)
	}
	if err := e.WaitBackfill(ctx, "mv1"); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(ctx, "db", engine.Options{FS: fs, BarrierInterval: -1, PauseOnBootstrap: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if p := e.Progress(); !p[0].Paused {
		t.Fatalf("after a paused bootstrap: %+v", p)
	}
	// Writes and the change stream flow while paused (the backfill is done: the view
	// follows its upstream).
	rec := kvRecord(mem, []kvRow{{k: 1, v: 20}})
	if err := e.Insert(ctx, "t", rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	snap, _ := e.Snapshot()
	defer snap.Release()
	if got := len(readRows(t, snap, "mv1")); got != 1 {
		t.Fatalf("mv1 has %d rows while paused, want 1", got)
	}
	if err := e.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if p := e.Progress(); p[0].Paused {
		t.Fatalf("after resume: %+v", p)
	}
}

// An actor that fails (here: an overflow in a view's expression) makes the engine
// recover from the last checkpoint: the round reports the error, the recovery sends
// the failing epoch's writes again, which fail the view again, until the fourth
// recovery in a row drops them (LostWrites), and the engine goes on.
func TestActorFailureRecovers(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	e := openEngine(t, vfs.NewMem(), mem, -1, 1)
	defer e.Close()
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv2", mv2Plan(), engine.MVOptions{}); err != nil {
		t.Fatal(err)
	}
	write := func(rows ...kvRow) {
		rec := kvRecord(mem, rows)
		defer rec.Release()
		if err := e.Insert(ctx, "t", rec); err != nil {
			t.Fatal(err)
		}
	}
	write(kvRow{k: 1, v: 20}, kvRow{k: 2, v: 30})
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	committed := e.CommittedEpoch()
	write(kvRow{k: 3, v: 40}, kvRow{k: 4, v: 1 << 62}) // v * 2 overflows in mv1
	_, err := e.WaitCheckpoint(ctx)
	if err == nil || !strings.Contains(err.Error(), "overflow") || !strings.Contains(err.Error(), "recovered to committed epoch") {
		t.Fatalf("checkpoint over a failing actor: %v", err)
	}
	if e.CommittedEpoch() != committed {
		t.Fatalf("the failed epoch was committed")
	}
	if got := e.Recoveries(); got != 2 {
		t.Fatalf("%d graph builds, want 2 (open and one recovery)", got)
	}
	// The recovery sent the failed epoch's writes again, and they fail the view
	// again: three recoveries in a row send them, the fourth drops them.
	for i := range 3 {
		if _, err := e.WaitCheckpoint(ctx); err == nil || !strings.Contains(err.Error(), "overflow") {
			t.Fatalf("checkpoint %d after the failure, over the writes sent again: %v", i+1, err)
		}
	}
	if got := e.LostWrites(); got != 2 {
		t.Fatalf("%d rows of writes lost, want the failed epoch's 2", got)
	}
	if got := e.ResentWrites(); got != 3*2 {
		t.Fatalf("%d rows of writes sent again, want 2 by each of 3 recoveries", got)
	}
	write(kvRow{k: 5, v: 50})
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if n := checkViews(t, e, "after recovery"); n != 3 {
		t.Fatalf("t has %d rows, want 3 (k = 1, 2, 5; the failed epoch's rows are gone)", n)
	}
}

// StorageMetrics reports pebble's metrics of the engine's store while it is open (a
// committed insert is in the WAL; a Flush shows as a flush), and nil once closed.
func TestStorageMetrics(t *testing.T) {
	ctx := context.Background()
	e, mem := kvEngine(t)
	rec := kvRecord(mem, []kvRow{{k: 1, v: 20, s: str("a")}, {k: 2, v: 30}})
	defer rec.Release()
	if err := e.Insert(ctx, "t", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	m := e.StorageMetrics()
	if m == nil || m.WAL.BytesWritten == 0 {
		t.Fatalf("after a committed insert: metrics %v", m)
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if m2 := e.StorageMetrics(); m2.Flush.Count <= m.Flush.Count || m2.Levels[0].TablesFlushed == 0 {
		t.Fatalf("after Flush: %d flushes (%d before), %d tables flushed", m2.Flush.Count, m.Flush.Count, m2.Levels[0].TablesFlushed)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if m := e.StorageMetrics(); m != nil {
		t.Fatal("metrics of a closed engine")
	}
}

// An engine opened under profiler labels keeps them on its actors' goroutines, under
// the actors' own (a CPU profile of a process with several engines tells them apart).
func TestOpenLabels(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	var e *engine.Engine
	var err error
	pprof.Do(context.Background(), pprof.Labels("weir_test_engine", "e42"), func(ctx context.Context) {
		e, err = engine.Open(ctx, "db", engine.Options{FS: vfs.NewMem(), Mem: mem, BarrierInterval: -1, Logger: quietLogger()})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.CreateTable(context.Background(), kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	var dump bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&dump, 1); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(dump.String(), "\n") {
		if strings.HasPrefix(l, "# labels:") && strings.Contains(l, `"weir_actor"`) && strings.Contains(l, `"weir_test_engine":"e42"`) {
			return
		}
	}
	t.Fatalf("no actor goroutine has the labels of Open's context:\n%s", dump.String())
}

// With the default allocator (a pool for the engine's own batches), the records Scan
// hands out come from Arrow's Go allocator: a value kept from one (an
// array.String's Value aliases its buffer) stays as it was after the reader's
// Release, even once later scans have read other values of the same size. With the
// engine's pool behind Scan, the second scan reuses the first's buffers.
func TestScanValuesOutliveRelease(t *testing.T) {
	ctx := context.Background()
	e, err := engine.Open(ctx, "db", engine.Options{FS: vfs.NewMem(), BarrierInterval: -1, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 1}); err != nil {
		t.Fatal(err)
	}
	write := func(s string) {
		var rows []kvRow
		for k := int64(0); k < 64; k++ {
			rows = append(rows, kvRow{k: k, v: k, s: str(s)})
		}
		rec := kvRecord(memory.DefaultAllocator, rows)
		defer rec.Release()
		if err := e.Upsert(ctx, "t", rec); err != nil {
			t.Fatal(err)
		}
		if _, err := e.WaitCheckpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	scan := func() []string {
		rr, err := e.Scan(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		defer rr.Release()
		var kept []string
		for rr.Next() {
			s := rr.RecordBatch().Column(2).(*array.String)
			for i := 0; i < s.Len(); i++ {
				kept = append(kept, s.Value(i)) // no copy
			}
		}
		if err := rr.Err(); err != nil {
			t.Fatal(err)
		}
		return kept
	}
	write("alpha")
	first := scan()
	for round, s := range []string{"omega", "sigma", "gamma"} {
		write(s)
		if got := scan(); len(got) != 64 || got[0] != s {
			t.Fatalf("round %d: scan read %d values, first %q", round, len(got), got[0])
		}
	}
	for i, s := range first {
		if s != "alpha" {
			t.Fatalf("value %d of the first scan is %q after its Release, want alpha", i, s)
		}
	}
}

// A failing write ahead of many others: each recovery sends them again, and the view
// fails at the first one while the input's channel (4 messages) fills behind it. The
// recovery takes the failure while it sends (it does not hang), and the next one
// sends them again; once the failing write was sent four times it is dropped, with
// the writes sent as often (its epoch's), and every later write that returned nil is
// committed. (The writes that a recovery interrupted returned its error.)
func TestResendOverAFailingWrite(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	e, err := biOpen(vfs.NewMem(), mem)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{}); err != nil {
		t.Fatal(err)
	}
	write := func(rows ...kvRow) error {
		rec := kvRecord(mem, rows)
		defer rec.Release()
		return e.Insert(ctx, "t", rec)
	}
	if err := write(kvRow{k: 0, v: 1 << 62}); err != nil { // v * 2 overflows in mv1
		t.Fatal(err)
	}
	// The writes after it block once the view stopped reading, until a round's
	// recovery interrupts them.
	acked := make(chan int64, 60)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := range int64(60) {
			if write(kvRow{k: 1 + k, v: k}) == nil {
				acked <- 1 + k
			}
		}
	}()
	for writing := true; writing; {
		_, _ = e.WaitCheckpoint(ctx) // its rounds interrupt the blocked writer
		select {
		case <-done:
			writing = false
		default:
		}
	}
	for i := 0; ; i++ {
		_, err := e.WaitCheckpoint(ctx)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "overflow") || i == 10 {
			t.Fatalf("checkpoint %d over the failing write: %v", i+1, err)
		}
	}
	close(acked)
	n := 0
	for range acked {
		n++
	}

	// The writes sent as often as the failing one (its epoch's, sent again with it
	// each time) are dropped with it; every other one that returned nil is in t.
	lost := int(e.LostWrites())
	if lost < 1 {
		t.Fatal("the failing write was not dropped")
	}
	if rows := checkViews(t, e, "after the failing write was dropped"); rows != n-(lost-1) {
		t.Fatalf("t has %d rows, want the %d written after the failing one that returned nil, less the %d dropped with it", rows, n, lost-1)
	}
	t.Logf("%d of 60 writes returned nil; %d rows sent again, %d dropped with the failing one", n, e.ResentWrites(), lost-1)
}
