package executors_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// TestHashAggRandom runs seeded random changelogs (inserts, deletes, update pairs
// inside and across groups, invisible rows, frequent deletes of a group's current
// max/min) through HashAgg, and after every barrier checks that the emitted changelog
// applied to a map equals GROUP BY computed from scratch over the model's live rows.
// Some rounds crash at a random point and restart a new HashAgg on a new node from the
// committed state.
func TestHashAggRandom(t *testing.T) {
	var cnt hgCounters
	for round := 0; round < 12; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			// No budget, one byte (every written group evicted at each checkpoint
			// barrier), or 2 KiB (some stay).
			budget := []int64{0, 1, 2 << 10}[round/2%3]
			cnt.add(runHashAggRandom(t, vectest.Seed(t), round%2 == 1, budget))
		})
	}
	if t.Failed() || vectest.SeedGiven() { // one seed replayed: no coverage to check
		return
	}
	t.Logf("emitted: %+v", cnt)
	if cnt.inserts == 0 || cnt.deletes == 0 || cnt.updates == 0 || cnt.crashes == 0 || cnt.evictions == 0 || cnt.loads == 0 || cnt.deferred == 0 {
		t.Errorf("a case never happened: %+v", cnt)
	}
}

// hgCounters count what the random runs exercised.
type hgCounters struct{ inserts, deletes, updates, crashes, evictions, loads, deferred int }

func (c *hgCounters) add(o hgCounters) {
	c.inserts += o.inserts
	c.deletes += o.deletes
	c.updates += o.updates
	c.crashes += o.crashes
	c.evictions += o.evictions
	c.loads += o.loads
	c.deferred += o.deferred
}

func runHashAggRandom(t *testing.T, seed uint64, crash bool, budget int64) (cnt hgCounters) {
	start := time.Now()
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(seed)
	store := mvOpenStore(t)
	cfg := executors.HashAggConfig{GroupBy: []int{hgK1, hgK2}, Aggs: hgAggs(), VnodeCount: 4}
	var cache *executors.StateCache
	if budget > 0 {
		cache = executors.NewStateCache(budget)
		cfg.Cache = cache
	}
	gen := &hgGen{rng: rng, rows: map[int]hgRow{}, maxLive: 5 + rng.IntN(60)}
	actor := newHGActor(t, store.AddNode(), mem, cfg)
	defer func() {
		actor.agg.Close()
		if cache != nil {
			if st := cache.Stats(); st.Used != 0 {
				t.Errorf("seed %d: %d bytes accounted to the budget after close", seed, st.Used)
			}
		}
	}()

	out := map[string]string{}
	committedRows, committedOut := map[int]hgRow{}, map[string]string{}
	epoch := 0
	actor.run(t, []executors.Message{mvBarrier(epoch, epoch+1, executors.Checkpoint)}, out)
	if _, err := store.Checkpoint(uint64(mvEpoch(epoch))); err != nil {
		t.Fatal(err)
	}
	epoch++
	const epochs = 30
	crashAt := -1
	if crash {
		crashAt = 5 + rng.IntN(epochs-10)
	}
	// A checkpoint's commit may wait until the next epoch's chunks are read, as the
	// engine's commit overlaps the actors' next epoch: the groups evicted at the
	// checkpoint barrier are then read back from its sealed, uncommitted runs.
	pending := -1
	var pendingRows map[int]hgRow
	var pendingOut map[string]string
	for ; epoch <= epochs; epoch++ {
		var msgs []executors.Message
		for range rng.IntN(4) {
			msgs = append(msgs, executors.ChunkMessage(gen.chunk(t, mem, 1+rng.IntN(40))))
		}
		kind := executors.Plain
		if rng.IntN(3) != 0 {
			kind = executors.Checkpoint
		}
		if pending >= 0 {
			p, rows, o := pending, pendingRows, pendingOut
			actor.src.beforeBarrier = func() {
				if _, err := store.Checkpoint(uint64(mvEpoch(p))); err != nil {
					t.Fatal(err)
				}
				committedRows, committedOut = rows, o
				actor.checkRowCounts(t, store)
			}
			pending = -1
		}
		msgs = append(msgs, mvBarrier(epoch, epoch+1, kind))
		actor.run(t, msgs, out)
		want := hgBatch(cfg.Aggs, gen.rows)
		if d := hgDiff(want, out); d != "" {
			t.Fatalf("seed %d: after epoch %d: the applied changelog differs from GROUP BY:%s", seed, epoch, d)
		}
		if kind == executors.Checkpoint {
			if rng.IntN(2) == 0 && epoch < epochs {
				pending, pendingRows, pendingOut = epoch, hgCloneRows(gen.rows), hgClone(out)
				cnt.deferred++
			} else {
				if _, err := store.Checkpoint(uint64(mvEpoch(epoch))); err != nil {
					t.Fatal(err)
				}
				committedRows, committedOut = hgCloneRows(gen.rows), hgClone(out)
				actor.checkRowCounts(t, store)
			}
		}
		if epoch == crashAt {
			pending = -1 // its commit never came
			// Crash: the actor and everything uncommitted are gone; a new actor on a
			// new node resumes from the committed state, and so does downstream.
			actor.agg.Close()
			store.DropUncommitted()
			gen.rows, out = hgCloneRows(committedRows), hgClone(committedOut)
			actor = newHGActor(t, store.AddNode(), mem, cfg)
			committed := store.CommittedEpoch()
			next := epoch + 1
			actor.run(t, []executors.Message{executors.BarrierMessage(&executors.Barrier{Prev: executors.Epoch(committed), Curr: mvEpoch(next), Kind: executors.Checkpoint})}, out)
			t.Logf("crashed after epoch %d, resumed from committed epoch %d", epoch, committed)
		}
	}
	t.Logf("seed %d: %d epochs, %d live rows, %d groups, %v", seed, epochs, len(gen.rows), len(out), time.Since(start))
	cnt.inserts, cnt.deletes, cnt.updates = actor.inserts, actor.deletes, actor.updates
	if cache != nil {
		st := cache.Stats()
		cnt.evictions, cnt.loads = int(st.GroupEvictions), int(st.GroupLoads)
	}
	if crashAt >= 0 {
		cnt.crashes++
	}
	return cnt
}

// hgOpRow is an input row of the hash agg tests with its op.
type hgOpRow struct {
	op vec.Op
	r  hgRow
}

// hgEpoch is the input of one epoch: a chunk of rows (none when empty), then the
// checkpoint barrier that ends epoch.
func hgEpoch(t *testing.T, mem memory.Allocator, rows []hgOpRow, epoch int) []executors.Message {
	t.Helper()
	var msgs []executors.Message
	if len(rows) > 0 {
		b := vec.NewChunkBuilder(mem, hgInTable())
		for _, x := range rows {
			if err := b.AppendRow(x.op, x.r[:]...); err != nil {
				t.Fatal(err)
			}
		}
		c, err := b.Build()
		b.Release()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, executors.ChunkMessage(c))
	}
	return append(msgs, mvBarrier(epoch, epoch+1, executors.Checkpoint))
}

// TestHashAggRules checks hand-written cases, barrier by barrier: deleting the current
// max finds the next one, a change that leaves the output as it was emits nothing, a
// group whose last row goes is deleted, an update pair moving a row between groups
// updates both, NULL keys form a group, and FILTER ignores NULL and false.
func TestHashAggRules(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	store := mvOpenStore(t)
	cfg := executors.HashAggConfig{GroupBy: []int{hgK1, hgK2}, VnodeCount: 4, Aggs: []executors.AggCall{
		{Kind: executors.AggCountStar}, {Kind: executors.AggMax, Col: hgX}, {Kind: executors.AggCountDistinct, Col: hgX},
		{Kind: executors.AggSum, Col: hgX, HasFilter: true, Filter: hgFlag},
	}}
	a := newHGActor(t, store.AddNode(), mem, cfg)
	defer a.agg.Close()
	type row = hgOpRow
	r := func(k1 any, x any, flag any) hgRow { return hgRow{k1, "a", x, nil, nil, flag} }
	epoch := 0
	step := func(rows []row, want string) {
		t.Helper()
		// Every output column but the second group key (always "a").
		if s := hgEmitted(t, a, hgEpoch(t, mem, rows, epoch), 0, 2, 3, 4, 5); s != want {
			t.Fatalf("epoch %d: emitted %q, want %q", epoch, s, want)
		}
		if _, err := store.Checkpoint(uint64(mvEpoch(epoch))); err != nil {
			t.Fatal(err)
		}
		epoch++
	}
	I, D, UD, UI := vec.Insert, vec.Delete, vec.UpdateDelete, vec.UpdateInsert
	i32 := func(v int32) any { return v }
	i64 := func(v int64) any { return v }
	step(nil, "")
	step([]row{{I, r(i32(1), i64(5), true)}, {I, r(i32(1), i64(9), nil)}, {I, r(nil, i64(9), false)}},
		"+[1 2 9 2 5] +[<nil> 1 9 1 <nil>]")
	// Delete the max: the next one is found.
	step([]row{{D, r(i32(1), i64(9), nil)}}, "U-[1 2 9 2 5] U+[1 1 5 1 5]")
	// A second 5 without the flag changes only count(*).
	step([]row{{I, r(i32(1), i64(5), false)}}, "U-[1 1 5 1 5] U+[1 2 5 1 5]")
	// Insert and delete within one epoch: nothing.
	step([]row{{I, r(i32(1), i64(7), true)}, {D, r(i32(1), i64(7), true)}}, "")
	// An update pair moving a row from group 1 to group NULL updates both.
	step([]row{{UD, r(i32(1), i64(5), true)}, {UI, r(nil, i64(4), true)}},
		"U-[1 2 5 1 5] U+[1 1 5 1 <nil>] U-[<nil> 1 9 1 <nil>] U+[<nil> 2 9 2 4]")
	// The last value goes: max NULL, distinct 0.
	step([]row{{D, r(i32(1), i64(5), false)}, {I, r(i32(1), nil, nil)}}, "U-[1 1 5 1 <nil>] U+[1 1 <nil> 0 <nil>]")
	// The last row goes: Delete.
	step([]row{{D, r(i32(1), nil, nil)}}, "-[1 1 <nil> 0 <nil>]")
	// An update whose outputs stay the same (the flag of a row of 9 from false to NULL): nothing.
	step([]row{{UD, r(nil, i64(9), false)}, {UI, r(nil, i64(9), nil)}}, "")
}

// TestHashAggConfigErrors checks that bad configurations are refused with a message.
func TestHashAggConfigErrors(t *testing.T) {
	good := executors.HashAggConfig{GroupBy: []int{hgK1}, Aggs: []executors.AggCall{{Kind: executors.AggSum, Col: hgX}}}
	for name, c := range map[string]struct {
		cfg  executors.HashAggConfig
		want string
	}{
		"no group by":    {executors.HashAggConfig{Aggs: good.Aggs}, "no group-by column"},
		"group by range": {executors.HashAggConfig{GroupBy: []int{9}}, "out of range"},
		"sum of string":  {executors.HashAggConfig{GroupBy: []int{hgK1}, Aggs: []executors.AggCall{{Kind: executors.AggSum, Col: hgS}}}, "not an integer or float"},
		"filter type":    {executors.HashAggConfig{GroupBy: []int{hgK1}, Aggs: []executors.AggCall{{Kind: executors.AggCountStar, HasFilter: true, Filter: hgX}}}, "not boolean"},
		"unknown kind":   {executors.HashAggConfig{GroupBy: []int{hgK1}, Aggs: []executors.AggCall{{Kind: 99}}}, "unknown kind"},
	} {
		_, err := executors.HashAggStateTable("s", hgInSchema, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", name, err, c.want)
		}
	}
	if _, err := executors.HashAggMultisetTable("m", hgInSchema, good, 0); err == nil || !strings.Contains(err.Error(), "multiset 0 of 0") {
		t.Errorf("multiset table of an aggregation without one: error %v", err)
	}
	store := mvOpenStore(t)
	node := store.AddNode()
	st, err := executors.HashAggStateTable("s", hgInSchema, good)
	if err != nil {
		t.Fatal(err)
	}
	other, err := executors.HashAggStateTable("s", hgInSchema, executors.HashAggConfig{GroupBy: []int{hgK2}, Aggs: good.Aggs})
	if err != nil {
		t.Fatal(err)
	}
	for name, tab := range map[string]*schema.Table{"right": st, "wrong": other} {
		cfg := good
		cfg.Node, cfg.Mem = node, memory.NewGoAllocator()
		cfg.State, err = storage.NewStateTable(node, 5, tab, vnode.Full(tab.VnodeCount))
		if err != nil {
			t.Fatal(err)
		}
		_, err = executors.NewHashAgg(&hgSource{}, cfg)
		if (err == nil) != (name == "right") {
			t.Errorf("%s state table: error %v", name, err)
		}
	}
}

// TestHashAggFirstBarrierWaits checks that after the first barrier nothing is read
// until the store's committed epoch reaches its Prev.
func TestHashAggFirstBarrierWaits(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	store := mvOpenStore(t)
	cfg := executors.HashAggConfig{GroupBy: []int{hgK1}, Aggs: []executors.AggCall{{Kind: executors.AggCountStar}}}
	a := newHGActor(t, store.AddNode(), mem, cfg)
	defer a.agg.Close()
	a.src.q = append(a.src.q, mvBarrier(3, 4, executors.Checkpoint), mvBarrier(4, 5, executors.Checkpoint))
	m, err := a.agg.Next(context.Background())
	if err != nil || m.Barrier == nil {
		t.Fatalf("first Next: %v %v", m, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := a.agg.Next(ctx); err == nil {
		t.Fatal("read on before the committed epoch reached the first barrier's Prev")
	}
	if len(a.src.q) != 1 {
		t.Fatalf("the input was read while waiting (%d messages left)", len(a.src.q))
	}
	if _, err := store.Checkpoint(uint64(mvEpoch(3))); err != nil {
		t.Fatal(err)
	}
	if m, err := a.agg.Next(context.Background()); err != nil || m.Barrier == nil {
		t.Fatalf("after the commit: %v %v", m, err)
	}
}

// BenchmarkHashAgg measures inserts of 1024-row chunks into 1000 groups with count(*),
// sum, max and count(DISTINCT), a checkpoint barrier every 8 chunks (state written, sealed and committed).
func BenchmarkHashAgg(b *testing.B) {
	mem := memory.NewGoAllocator()
	store := mvOpenStore(b)
	cfg := executors.HashAggConfig{GroupBy: []int{hgK1}, VnodeCount: 16, Aggs: []executors.AggCall{
		{Kind: executors.AggCountStar}, {Kind: executors.AggSum, Col: hgX},
		{Kind: executors.AggMax, Col: hgX}, {Kind: executors.AggCountDistinct, Col: hgX},
	}}
	a := newHGActor(b, store.AddNode(), mem, cfg)
	defer a.agg.Close()
	rng := vectest.NewRand(1)
	tab := hgInTable()
	var chunks []*vec.Chunk
	for range 16 {
		cb := vec.NewChunkBuilder(mem, tab)
		for range 1024 {
			if err := cb.AppendRow(vec.Insert, int32(rng.IntN(1000)), "a", int64(rng.IntN(100)), nil, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
		c, err := cb.Build()
		if err != nil {
			b.Fatal(err)
		}
		cb.Release()
		chunks = append(chunks, c)
	}
	defer func() {
		for _, c := range chunks {
			c.Release()
		}
	}()
	out := map[string]string{}
	epoch := 0
	a.run(b, []executors.Message{mvBarrier(epoch, epoch+1, executors.Checkpoint)}, out)
	if _, err := store.Checkpoint(uint64(mvEpoch(epoch))); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := chunks[i%len(chunks)]
		c.Retain()
		msgs := []executors.Message{executors.ChunkMessage(c)}
		if i%8 == 7 || i == b.N-1 {
			epoch++
			msgs = append(msgs, mvBarrier(epoch, epoch+1, executors.Checkpoint))
			a.src.q = append(a.src.q, msgs...)
			for {
				m, err := a.agg.Next(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				m.Release()
				if m.Barrier != nil {
					break
				}
			}
			if _, err := store.Checkpoint(uint64(mvEpoch(epoch))); err != nil {
				b.Fatal(err)
			}
			continue
		}
		a.src.q = append(a.src.q, msgs...)
	}
	b.SetBytes(1024)
}

// TestHashAggGroupEmptiedWithValues: a delete of a value never inserted can empty a
// group (count(*) back to 0) while its multiset still counts another value, whose row
// would outlive the group and later be written again as new. The barrier refuses it,
// as it refuses a negative count; until then the row counts stay exact.
func TestHashAggGroupEmptiedWithValues(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	store := mvOpenStore(t)
	cfg := executors.HashAggConfig{GroupBy: []int{hgK1, hgK2}, VnodeCount: 4, Aggs: []executors.AggCall{
		{Kind: executors.AggCountStar}, {Kind: executors.AggCountDistinct, Col: hgX}}}
	a := newHGActor(t, store.AddNode(), mem, cfg)
	defer a.agg.Close()
	epoch := 0
	step := func(op vec.Op, rows ...hgRow) error {
		t.Helper()
		var in []hgOpRow
		for _, r := range rows {
			in = append(in, hgOpRow{op, r})
		}
		a.src.q = append(a.src.q, hgEpoch(t, mem, in, epoch)...)
		for {
			m, err := a.agg.Next(context.Background())
			if err != nil {
				return err
			}
			isBarrier := m.Barrier != nil
			m.Release()
			if isBarrier {
				break
			}
		}
		if _, err := store.Checkpoint(uint64(mvEpoch(epoch))); err != nil {
			t.Fatal(err)
		}
		a.checkRowCounts(t, store)
		epoch++
		return nil
	}
	r := func(x int64) hgRow { return hgRow{int32(1), "a", x, nil, nil, nil} }
	for _, err := range []error{step(vec.Insert), step(vec.Insert, r(1))} {
		if err != nil {
			t.Fatal(err)
		}
	}
	err := step(vec.Delete, r(2)) // never inserted: count(*) back to 0, x = 1 still counted
	if err == nil || !strings.Contains(err.Error(), "never inserted") || !strings.Contains(err.Error(), "aggregate 1") {
		t.Fatalf("a group emptied while its multiset counts a value: %v", err)
	}
}

// The multiset aggregates share a multiset (and its table) per input column, in order
// of first appearance; the table holds the group keys, the value and a count per
// aggregate of the slot.
func TestHashAggMultisetSlots(t *testing.T) {
	cfg := executors.HashAggConfig{GroupBy: []int{hgK1, hgK2}, Aggs: hgAggs()}
	slots, err := executors.HashAggMultisetSlots(hgInSchema, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int{{4, 5, 10, 12}, {8, 13, 15}, {9}} // x, s, f
	if fmt.Sprint(slots) != fmt.Sprint(want) {
		t.Fatalf("slots %v, want %v", slots, want)
	}
	for sl, aggs := range want {
		tab, err := executors.HashAggMultisetTable("m", hgInSchema, cfg, sl)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range tab.Columns {
			names = append(names, c.Name)
		}
		wantNames := []string{"g0", "g1", "v"} // the group keys, then the value
		for _, a := range aggs {
			wantNames = append(wantNames, fmt.Sprintf("c%d", a))
		}
		if fmt.Sprint(names) != fmt.Sprint(wantNames) || len(tab.PK) != 3 || tab.PK[2].Column != 2 {
			t.Errorf("slot %d: columns %v pk %v, want %v and pk (keys, v)", sl, names, tab.PK, wantNames)
		}
	}
	if _, err := executors.HashAggMultisetTable("m", hgInSchema, cfg, 3); err == nil || !strings.Contains(err.Error(), "multiset 3 of 3") {
		t.Errorf("slot 3 of 3: error %v", err)
	}
	// A table per slot: one table short is refused, and so is a table of another
	// slot's shape, naming the slot's column.
	store := mvOpenStore(t)
	node := store.AddNode()
	cfg.Node, cfg.Mem = node, memory.NewGoAllocator()
	st, err := executors.HashAggStateTable("s", hgInSchema, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.State, err = storage.NewStateTable(node, 5, st, vnode.Full(st.VnodeCount)); err != nil {
		t.Fatal(err)
	}
	for sl := range 2 {
		mt, err := executors.HashAggMultisetTable(fmt.Sprintf("m%d", sl), hgInSchema, cfg, sl)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := storage.NewStateTable(node, uint32(6+sl), mt, vnode.Full(mt.VnodeCount))
		if err != nil {
			t.Fatal(err)
		}
		cfg.MultiSets = append(cfg.MultiSets, ms)
	}
	if _, err := executors.NewHashAgg(&hgSource{}, cfg); err == nil || !strings.Contains(err.Error(), "2 multiset tables, want 3") {
		t.Errorf("two tables for three slots: error %v", err)
	}
	cfg.MultiSets = append(cfg.MultiSets, cfg.MultiSets[0]) // slot 2's table with slot 0's shape
	if _, err := executors.NewHashAgg(&hgSource{}, cfg); err == nil || !strings.Contains(err.Error(), "multiset 2, of column "+hgInSchema.Field(hgF).Name) {
		t.Errorf("a table of another slot's shape: error %v", err)
	}
}

// TestHashAggNegativeCountZeroed: a value deleted more often than inserted (input
// that is not a changelog) has its multiset count set to 0 at the barrier, whether
// the barrier is a checkpoint (which writes the state) or not, so a later insert of
// the value counts it again.
func TestHashAggNegativeCountZeroed(t *testing.T) {
	for _, kind := range []executors.BarrierKind{executors.Plain, executors.Checkpoint} {
		mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
		store := mvOpenStore(t)
		cfg := executors.HashAggConfig{GroupBy: []int{hgK1, hgK2}, VnodeCount: 4, Aggs: []executors.AggCall{
			{Kind: executors.AggCountStar}, {Kind: executors.AggCountDistinct, Col: hgX}}}
		a := newHGActor(t, store.AddNode(), mem, cfg)
		epoch := 0
		step := func(kind executors.BarrierKind, rows ...hgOpRow) string {
			t.Helper()
			msgs := hgEpoch(t, mem, rows, epoch)
			msgs[len(msgs)-1] = mvBarrier(epoch, epoch+1, kind)
			got := hgEmitted(t, a, msgs, 2, 3)
			if kind == executors.Checkpoint {
				if _, err := store.Checkpoint(uint64(mvEpoch(epoch))); err != nil {
					t.Fatal(err)
				}
			}
			epoch++
			return got
		}
		r := func(x int64) hgRow { return hgRow{int32(1), "a", x, nil, nil, nil} }
		step(executors.Checkpoint)
		if got, want := step(executors.Checkpoint, hgOpRow{vec.Insert, r(1)}, hgOpRow{vec.Insert, r(1)}), "+[2 1]"; got != want {
			t.Fatalf("%v: first epoch emitted %q, want %q", kind, got, want)
		}
		// x = 2 was never inserted: its count goes to -1, count(*) to 1.
		if got, want := step(kind, hgOpRow{vec.Delete, r(2)}), "U-[2 1] U+[1 1]"; got != want {
			t.Fatalf("%v: the delete emitted %q, want %q", kind, got, want)
		}
		if got, want := step(executors.Checkpoint, hgOpRow{vec.Insert, r(2)}), "U-[1 1] U+[2 2]"; got != want {
			t.Fatalf("%v barrier: the insert after the delete emitted %q, want %q (the count was not set to 0)", kind, got, want)
		}
		a.checkRowCounts(t, store)
		a.agg.Close()
		mem.AssertSize(t, 0)
	}
}

// TestHashAggMaxIgnoresUncountedValue: an insert that only brings a value's count back
// to 0 (after a delete of it that had no insert: input that is not a changelog) does
// not make the value the max.
func TestHashAggMaxIgnoresUncountedValue(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	store := mvOpenStore(t)
	cfg := executors.HashAggConfig{GroupBy: []int{hgK1, hgK2}, VnodeCount: 4, Aggs: []executors.AggCall{
		{Kind: executors.AggCountStar}, {Kind: executors.AggMax, Col: hgX}}}
	a := newHGActor(t, store.AddNode(), mem, cfg)
	defer a.agg.Close()
	r := func(x int64) hgRow { return hgRow{int32(1), "a", x, nil, nil, nil} }
	var got []string
	for epoch, rows := range [][]hgOpRow{nil, {{vec.Insert, r(5)}, {vec.Insert, r(5)}}, {{vec.Delete, r(9)}, {vec.Insert, r(9)}}} {
		if s := hgEmitted(t, a, hgEpoch(t, mem, rows, epoch), 2, 3); s != "" {
			got = append(got, s)
		}
		if _, err := store.Checkpoint(uint64(mvEpoch(epoch))); err != nil {
			t.Fatal(err)
		}
	}
	// The last epoch leaves count(*) at 2 and 9 uncounted: no change.
	if s, want := strings.Join(got, " "), "+[2 5]"; s != want {
		t.Fatalf("emitted %q, want %q", s, want)
	}
}

// hgEmitted feeds msgs to a's aggregate and returns what it emitted up to the barrier,
// one "op[values of cols]" per row, space-separated.
func hgEmitted(t *testing.T, a *hgActor, msgs []executors.Message, cols ...int) string {
	t.Helper()
	a.src.q = append(a.src.q, msgs...)
	var got []string
	for {
		m, err := a.agg.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if m.Barrier != nil {
			return strings.Join(got, " ")
		}
		rec := m.Chunk.Record()
		for i, op := range m.Chunk.Ops() {
			vals := make([]any, len(cols))
			for k, c := range cols {
				vals[k] = hgCell(rec.Column(c), i)
			}
			got = append(got, fmt.Sprintf("%v%v", op, vals))
		}
		m.Release()
	}
}
