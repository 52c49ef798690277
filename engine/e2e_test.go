package engine_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

var long = flag.Bool("engine.long", false, "run the long variants of the engine tests")

func scale(short, long_ int) int {
	if *long {
		return long_
	}
	return short
}

// kvT is the test table: k int64 pk, v int64, s varchar NULL, 16 vnodes.
func kvT() *schema.Table {
	return &schema.Table{
		Name: "t",
		Columns: []schema.Column{
			{Name: "k", Type: schema.Type{Kind: schema.Int64}},
			{Name: "v", Type: schema.Type{Kind: schema.Int64}},
			{Name: "s", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
		},
		PK:         []schema.KeyColumn{{Column: 0}},
		VnodeCount: 16,
	}
}

type kvRow struct {
	k, v int64
	s    *string
}

func kvRecord(mem memory.Allocator, rows []kvRow) arrow.RecordBatch {
	kb, vb, sb := array.NewInt64Builder(mem), array.NewInt64Builder(mem), array.NewStringBuilder(mem)
	defer kb.Release()
	defer vb.Release()
	defer sb.Release()
	for _, r := range rows {
		kb.Append(r.k)
		vb.Append(r.v)
		if r.s == nil {
			sb.AppendNull()
		} else {
			sb.Append(*r.s)
		}
	}
	cols := []arrow.Array{kb.NewArray(), vb.NewArray(), sb.NewArray()}
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	return array.NewRecordBatch(kvT().ArrowSchema(), cols, int64(len(rows)))
}

// mv1 is v2 = v * 2, s where v > 10 (k is added as the pk); mv2 reads mv1: v2 < 150.
func mv1Plan() engine.Plan {
	return engine.Project(engine.Filter(engine.Scan("t"), engine.Call("greater", engine.Column("v"), engine.Int(10))),
		engine.As(engine.Call("multiply", engine.Column("v"), engine.Int(2)), "v2"), engine.As(engine.Column("s"), "s"))
}

// mv3 reads t too (so t's actors feed two views): the rows with v < 30.
func mv3Plan() engine.Plan {
	return engine.Filter(engine.Scan("t"), engine.Call("less", engine.Column("v"), engine.Int(30)))
}

func expectMV3(table map[int64][]string) map[int64][]string {
	out := map[int64][]string{}
	for k, row := range table {
		var v int64
		fmt.Sscanf(strings.TrimPrefix(row[1], "v="), "%d", &v)
		if v < 30 {
			out[k] = row
		}
	}
	return out
}

func mv2Plan() engine.Plan {
	return engine.Filter(engine.Scan("mv1"), engine.Call("less", engine.Column("v2"), engine.Int(150)))
}

// readRows scans name in snap into a map from the k column to the row's formatted
// values.
func readRows(t *testing.T, snap *engine.Snapshot, name string) map[int64][]string {
	t.Helper()
	r, err := snap.Scan(context.Background(), name)
	if err != nil {
		t.Fatalf("scan %s: %v", name, err)
	}
	defer r.Release()
	out := map[int64][]string{}
	for r.Next() {
		rec := r.RecordBatch()
		ki := rec.Schema().FieldIndices("k")[0]
		ks := rec.Column(ki).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			k := ks.Value(i)
			if _, dup := out[k]; dup {
				t.Fatalf("%s: pk %d twice", name, k)
			}
			var vals []string
			for c := 0; c < int(rec.NumCols()); c++ {
				vals = append(vals, rec.Schema().Field(c).Name+"="+vectest.FormatValue(rec.Column(c), i))
			}
			out[k] = vals
		}
	}
	if err := r.Err(); err != nil {
		t.Fatalf("scan %s: %v", name, err)
	}
	return out
}

// expectMV1 evaluates mv1's query over the table's rows (v2, s, k).
func expectMV1(table map[int64][]string) map[int64][]string {
	out := map[int64][]string{}
	for k, row := range table {
		var v int64
		fmt.Sscanf(strings.TrimPrefix(row[1], "v="), "%d", &v)
		if v > 10 {
			out[k] = []string{fmt.Sprintf("v2=%d", v*2), strings.Replace(row[2], "s=", "s=", 1), fmt.Sprintf("k=%d", k)}
		}
	}
	return out
}

func expectMV2(mv1 map[int64][]string) map[int64][]string {
	out := map[int64][]string{}
	for k, row := range mv1 {
		var v2 int64
		fmt.Sscanf(strings.TrimPrefix(row[0], "v2="), "%d", &v2)
		if v2 < 150 {
			out[k] = row
		}
	}
	return out
}

func diffRows(want, got map[int64][]string) string {
	var b strings.Builder
	keys := map[int64]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	var ks []int64
	for k := range keys {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	n := 0
	for _, k := range ks {
		w, g := strings.Join(want[k], " "), strings.Join(got[k], " ")
		if w != g && n < 10 {
			fmt.Fprintf(&b, "  k=%d: want [%s], got [%s]\n", k, w, g)
			n++
		}
		if w != g {
			n++
		}
	}
	if n > 0 {
		return fmt.Sprintf("%d rows differ:\n%s", n, b.String())
	}
	return ""
}

// checkViews compares every view with its query over the scanned upstream, all read
// at one committed epoch.
// It returns the table's row count.
func checkViews(t *testing.T, e *engine.Engine, when string) int {
	t.Helper()
	snap, err := e.Snapshot()
	if err != nil {
		t.Fatalf("%s: snapshot: %v", when, err)
	}
	defer snap.Release()
	table := readRows(t, snap, "t")
	mv1 := readRows(t, snap, "mv1")
	if d := diffRows(expectMV1(table), mv1); d != "" {
		t.Fatalf("%s (epoch %d): mv1 vs its query over t (%d rows): %s", when, snap.Epoch(), len(table), d)
	}
	if _, err := e.Table("mv2"); err == nil {
		if d := diffRows(expectMV2(mv1), readRows(t, snap, "mv2")); d != "" {
			t.Fatalf("%s (epoch %d): mv2 vs its query over mv1: %s", when, snap.Epoch(), d)
		}
	}
	if _, err := e.Table("mv3"); err == nil {
		if d := diffRows(expectMV3(table), readRows(t, snap, "mv3")); d != "" {
			t.Fatalf("%s (epoch %d): mv3 vs its query over t: %s", when, snap.Epoch(), d)
		}
	}
	return len(table)
}

// writer writes random batches until stopped: inserts, upserts, updates and deletes
// over a small key domain, so that pks collide.
type writer struct {
	e    *engine.Engine
	mem  memory.Allocator
	rng  *rand.Rand
	stop chan struct{}
	done chan struct{}
	n    int
}

func startWriter(e *engine.Engine, mem memory.Allocator, seed uint64) *writer {
	w := &writer{e: e, mem: mem, rng: vectest.NewRand(seed), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *writer) run() {
	defer close(w.done)
	ctx := context.Background()
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		rows := make([]kvRow, 1+w.rng.IntN(20))
		for i := range rows {
			rows[i] = kvRow{k: w.rng.Int64N(300), v: w.rng.Int64N(120)}
			if w.rng.IntN(4) > 0 {
				s := fmt.Sprintf("s%d", w.rng.IntN(50))
				rows[i].s = &s
			}
		}
		rec := kvRecord(w.mem, rows)
		var err error
		switch w.rng.IntN(6) {
		case 0, 1:
			err = w.e.Insert(ctx, "t", rec)
		case 2:
			err = w.e.Upsert(ctx, "t", rec)
		case 3:
			err = w.e.Update(ctx, "t", rec)
		default:
			err = w.e.Delete(ctx, "t", rec)
		}
		rec.Release()
		if err != nil {
			// Recovery or close cut the write short; it was not applied.
			time.Sleep(time.Millisecond)
			continue
		}
		w.n++
		if w.n%8 == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

func (w *writer) halt() {
	close(w.stop)
	<-w.done
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// kvEngine is openEngine on a memory file system, with barriers on demand and a
// checkpoint at each, over a poisoning pool, with table t (kvT) created with 2 actors.
// The test's cleanup closes the engine, then checks that no Arrow memory is left.
func kvEngine(t *testing.T) (*engine.Engine, *memory.CheckedAllocator) {
	t.Helper()
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	e := openEngine(t, vfs.NewMem(), mem, -1, 1)
	t.Cleanup(func() {
		e.Close()
		mem.AssertSize(t, 0)
	})
	if err := e.CreateTable(context.Background(), kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	return e, mem
}

func openEngine(t *testing.T, fs vfs.FS, mem memory.Allocator, interval time.Duration, every int) *engine.Engine {
	t.Helper()
	e, err := engine.Open(context.Background(), "db", engine.Options{
		FS: fs, Mem: mem, BarrierInterval: interval, CheckpointEvery: every, ChannelCapacity: 4,
		CacheSize: 4 << 20, MemTableSize: 1 << 20, Logger: quietLogger(),
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return e
}

// The end-to-end test of issue 4: a table, a filter/project view over it and a view
// over that view; writes run continuously while each view is rescaled up and down and
// the engine crashes (crashable file system) and reopens; at every checkpoint each view
// equals its query over its scanned upstream.
func TestEndToEnd(t *testing.T) {
	base := vectest.Seed(t)
	for i := 0; i < scale(3, 20); i++ {
		seed := base + uint64(i)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
			runEndToEnd(t, seed)
		})
	}
}

func runEndToEnd(t *testing.T, seed uint64) {
	rng := vectest.NewRand(seed)
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	interval := time.Duration(1+rng.IntN(5)) * time.Millisecond
	every := 1 + rng.IntN(3)
	e := openEngine(t, fs, mem, interval, every)
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 1 + rng.IntN(3)}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 1 + rng.IntN(3)}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv2", mv2Plan(), engine.MVOptions{Parallelism: 1 + rng.IntN(3)}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv3", mv3Plan(), engine.MVOptions{Parallelism: 1 + rng.IntN(3)}); err != nil {
		t.Fatal(err)
	}
	w := startWriter(e, mem, rng.Uint64())
	steps := scale(14, 60)
	checks, crashes, rescales, writes, maxRows := 0, 0, 0, 0, 0
	for step := 0; step < steps; step++ {
		time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
		switch x := rng.IntN(10); {
		case x < 4:
			if _, err := e.WaitCheckpoint(ctx); err != nil {
				t.Fatalf("step %d: wait checkpoint: %v", step, err)
			}
			maxRows = max(maxRows, checkViews(t, e, fmt.Sprintf("step %d", step)))
			checks++
		case x < 7:
			mv := []string{"mv1", "mv2", "mv3"}[rng.IntN(3)]
			p := 1 + rng.IntN(4)
			if err := e.RescheduleMV(ctx, mv, p); err != nil {
				t.Fatalf("step %d: reschedule %s to %d: %v", step, mv, p, err)
			}
			rescales++
		default:
			// Crash: keep what a crash now would leave on disk, then reopen it.
			pct := []int{0, 50, 100}[rng.IntN(3)]
			cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: pct}
			if pct > 0 {
				cfg.RNG = rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
			}
			crashed := fs.CrashClone(cfg)
			w.halt()
			writes += w.n
			if err := e.Close(); err != nil {
				t.Fatalf("step %d: close: %v", step, err)
			}
			fs = crashed
			e = openEngine(t, fs, mem, interval, every)
			checkViews(t, e, fmt.Sprintf("step %d, after a crash", step))
			w = startWriter(e, mem, rng.Uint64())
			crashes++
		}
	}
	w.halt()
	writes += w.n
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	maxRows = max(maxRows, checkViews(t, e, "the end"))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d steps: %d checks, %d rescales, %d crashes; %d write batches; up to %d rows in t", steps, checks, rescales, crashes, writes, maxRows)
	if writes == 0 || maxRows == 0 {
		t.Fatalf("the test wrote nothing: it checked nothing")
	}
}
