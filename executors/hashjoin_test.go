package executors_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// The join tests' inputs: left (lid int64 pk, k int64 key, t int64), right (rid int64
// pk, k int64 key, lo int64, s varchar). k, t, lo may be NULL. The residual keeps the
// pairs with lo <= t <= lo + 3.
var (
	hjLeftSchema = arrow.NewSchema([]arrow.Field{
		{Name: "lid", Type: arrow.PrimitiveTypes.Int64},
		{Name: "k", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "t", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, nil)
	hjRightSchema = arrow.NewSchema([]arrow.Field{
		{Name: "rid", Type: arrow.PrimitiveTypes.Int64},
		{Name: "k", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "lo", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	hjResidual = executors.Call("and_kleene",
		executors.Call("greater_equal", executors.Col(2), executors.Col(5)),
		executors.Call("less_equal", executors.Col(2), executors.Call("add", executors.Col(5), executors.Lit(int64(3)))))
)

// hjSource is an input fed through a channel by the test, read by the join's goroutine.
type hjSource struct {
	schema *arrow.Schema
	ch     chan executors.Message
}

func newHJSource(s *arrow.Schema) *hjSource {
	return &hjSource{schema: s, ch: make(chan executors.Message, 4096)}
}

func (s *hjSource) Next(ctx context.Context) (executors.Message, error) {
	select {
	case m, ok := <-s.ch:
		if !ok {
			return executors.Message{}, io.EOF
		}
		return m, nil
	case <-ctx.Done():
		return executors.Message{}, ctx.Err()
	}
}
func (s *hjSource) Schema() *arrow.Schema { return s.schema }
func (s *hjSource) Close() error {
	for {
		select {
		case m, ok := <-s.ch:
			if !ok {
				return nil
			}
			m.Release()
		default:
			return nil
		}
	}
}

// hjRow is a model row: vals[0] is the pk; nil is NULL. Column 3 of the right side
// (s) is a string stored as its int64 suffix.
type hjRow []*int64

func hjCfg() executors.HashJoinConfig {
	return executors.HashJoinConfig{LeftKeys: []int{1}, RightKeys: []int{1}, LeftPK: []int{0}, RightPK: []int{0}, Residual: hjResidual, VnodeCount: 4}
}

type hjActor struct {
	l, r *hjSource
	j    *executors.HashJoin
	cnt  [3]int // inserts, deletes, chunks
}

func newHJActor(t testing.TB, node *storage.Node, mem memory.Allocator, cfg executors.HashJoinConfig) *hjActor {
	t.Helper()
	lt, err := executors.HashJoinLeftTable("hj_left", hjLeftSchema, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := executors.HashJoinRightTable("hj_right", hjRightSchema, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LeftState, err = storage.NewStateTable(node, 41, lt, vnode.Full(lt.VnodeCount)); err != nil {
		t.Fatal(err)
	}
	if cfg.RightState, err = storage.NewStateTable(node, 42, rt, vnode.Full(rt.VnodeCount)); err != nil {
		t.Fatal(err)
	}
	cfg.Node, cfg.Mem = node, mem
	a := &hjActor{l: newHJSource(hjLeftSchema), r: newHJSource(hjRightSchema)}
	if a.j, err = executors.NewHashJoin(a.l, a.r, cfg); err != nil {
		t.Fatal(err)
	}
	return a
}

// run reads up to the next barrier, applying the output to out (output pk -> row).
func (a *hjActor) run(t testing.TB, out map[string]string, bug bool) *executors.Barrier {
	t.Helper()
	for {
		m, err := a.j.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if m.Barrier != nil {
			return m.Barrier
		}
		if m.Chunk == nil {
			t.Fatalf("unexpected message %v", m)
		}
		if m.Chunk.CountVisible() == 0 {
			t.Fatal("chunk with no visible row emitted")
		}
		if err := vectest.ChangelogError(m.Chunk); err != nil {
			t.Fatal(err)
		}
		a.cnt[2]++
		err = hjApply(out, m.Chunk, &a.cnt)
		m.Chunk.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func hjCell(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return "N"
	}
	switch a := a.(type) {
	case *array.Int64:
		return strconv.FormatInt(a.Value(i), 10)
	case *array.String:
		return a.Value(i)
	}
	return "?"
}

func hjApply(out map[string]string, c *vec.Chunk, cnt *[3]int) error {
	rec := c.Record()
	ops := c.Ops()
	for i := 0; i < c.NumRows(); i++ {
		if !c.Visible(i) {
			continue
		}
		cells := make([]string, rec.NumCols())
		for j := range cells {
			cells[j] = hjCell(rec.Column(j), i)
		}
		pk := cells[0] + "/" + cells[3]
		row := strings.Join(cells, ",")
		if ops[i].IsInsert() {
			cnt[0]++
			if old, ok := out[pk]; ok {
				return fmt.Errorf("insert of %s over existing %s", row, old)
			}
			out[pk] = row
		} else {
			cnt[1]++
			if old, ok := out[pk]; !ok || old != row {
				return fmt.Errorf("delete of %s: the output holds %q (present %v)", row, old, ok)
			}
			delete(out, pk)
		}
	}
	return nil
}

func hjStr(v *int64) string {
	if v == nil {
		return "N"
	}
	return strconv.FormatInt(*v, 10)
}

// hjNested is the join computed from scratch over the model by nested loops.
func hjNested(left, right map[int64]hjRow) map[string]string {
	out := map[string]string{}
	for _, l := range left {
		for _, r := range right {
			if l[1] == nil || r[1] == nil || *l[1] != *r[1] {
				continue
			}
			if l[2] == nil || r[2] == nil || *l[2] < *r[2] || *l[2] > *r[2]+3 {
				continue
			}
			s := "N"
			if r[3] != nil {
				s = "s" + hjStr(r[3])
			}
			out[hjStr(l[0])+"/"+hjStr(r[0])] = strings.Join([]string{hjStr(l[0]), hjStr(l[1]), hjStr(l[2]), hjStr(r[0]), hjStr(r[1]), hjStr(r[2]), s}, ",")
		}
	}
	return out
}

// hjGen generates valid changelogs of one side against its model.
type hjGen struct {
	rng   *rand.Rand
	right bool
	rows  map[int64]hjRow
	tab   *schema.Table
}

func (g *hjGen) val(domain int64, nullOne int) *int64 {
	if g.rng.IntN(nullOne) == 0 {
		return nil
	}
	v := g.rng.Int64N(domain)
	return &v
}

func (g *hjGen) newRow(pk int64) hjRow {
	r := hjRow{&pk, g.val(4, 8), g.val(8, 10)}
	if g.right {
		r = append(r, g.val(3, 4))
	}
	return r
}

func (g *hjGen) appendRow(cb *vec.ChunkBuilder, op vec.Op, r hjRow) error {
	vals := make([]any, len(r))
	for i, v := range r {
		if v != nil {
			vals[i] = *v
			if i == 3 {
				vals[i] = "s" + hjStr(v)
			}
		}
	}
	return cb.AppendRow(op, vals...)
}

func (g *hjGen) live() []int64 {
	ks := make([]int64, 0, len(g.rows))
	for k := range g.rows {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// chunk generates n operations (inserts of absent pks from a small domain, deletes and
// update pairs of live rows, some of them moving to another pk) and invisible rows.
func (g *hjGen) chunk(t testing.TB, mem memory.Allocator, n int) *vec.Chunk {
	t.Helper()
	cb := vec.NewChunkBuilder(mem, g.tab)
	defer cb.Release()
	var visible []bool
	add := func(op vec.Op, r hjRow, vis bool) {
		if err := g.appendRow(cb, op, r); err != nil {
			t.Fatal(err)
		}
		visible = append(visible, vis)
	}
	absent := func() (int64, bool) {
		for range 20 {
			pk := g.rng.Int64N(40)
			if _, ok := g.rows[pk]; !ok {
				return pk, true
			}
		}
		return 0, false
	}
	for range n {
		if g.rng.IntN(8) == 0 { // an invisible row: garbage that must be ignored
			op := []vec.Op{vec.Insert, vec.Delete}[g.rng.IntN(2)]
			add(op, g.newRow(g.rng.Int64N(40)), false)
			continue
		}
		live := g.live()
		switch x := g.rng.IntN(10); {
		case x < 4 || len(live) == 0:
			if pk, ok := absent(); ok {
				r := g.newRow(pk)
				add(vec.Insert, r, true)
				g.rows[pk] = r
			}
		case x < 6:
			pk := live[g.rng.IntN(len(live))]
			add(vec.Delete, g.rows[pk], true)
			delete(g.rows, pk)
		default:
			pk := live[g.rng.IntN(len(live))]
			old := g.rows[pk]
			npk := pk
			if g.rng.IntN(4) == 0 {
				if p, ok := absent(); ok {
					npk = p
				}
			}
			nr := g.newRow(npk)
			if g.rng.IntN(2) == 0 {
				nr[1] = old[1] // often keep the key
			}
			add(vec.UpdateDelete, old, true)
			add(vec.UpdateInsert, nr, true)
			delete(g.rows, pk)
			g.rows[npk] = nr
		}
	}
	c, err := cb.Build()
	if err != nil {
		t.Fatal(err)
	}
	vis := vec.NewBitmap(mem, len(visible))
	for i, v := range visible {
		if v {
			vis.Bytes()[i>>3] |= 1 << (i & 7)
		}
	}
	out := c.WithVisibility(vis)
	vis.Release()
	c.Release()
	return out
}

func hjCloneRows(m map[int64]hjRow) map[int64]hjRow {
	out := make(map[int64]hjRow, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func hjClone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func hjDiff(want, got map[string]string) string {
	var b strings.Builder
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	var ks []string
	for k := range keys {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		if want[k] != got[k] {
			fmt.Fprintf(&b, "\n  pair %s: want %q got %q", k, want[k], got[k])
		}
	}
	return b.String()
}

// TestHashJoinRandom runs seeded random changelogs on both sides (inserts, deletes,
// update pairs keeping or changing the key and the pk, invisible rows, NULL keys and
// timestamps, a key domain of 4 so that keys collide) through HashJoin with a residual
// condition, and after every barrier checks that the output changelog applied to a map
// equals the nested-loop join of the models. Odd rounds crash at a random epoch and
// restart a new HashJoin on a new node from the committed state.
func TestHashJoinRandom(t *testing.T) {
	var total [3]int
	var cached executors.StateCacheStats
	for round := 0; round < 12; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			c, st := runHashJoinRandom(t, vectest.Seed(t), round%2 == 1)
			for i := range total {
				total[i] += c[i]
			}
			cached = cached.Add(st)
		})
	}
	if t.Failed() || vectest.SeedGiven() { // one seed replayed: no coverage to check
		return
	}
	t.Logf("emitted inserts, deletes, chunks: %v; cache %+v", total, cached)
	if total[0] == 0 || total[1] == 0 {
		t.Errorf("a case never happened: %v", total)
	}
	if cached.Hits == 0 || cached.Loads == 0 || cached.Absent == 0 || cached.Evictions == 0 {
		t.Errorf("a cache case never happened: %+v", cached)
	}
}

func runHashJoinRandom(t *testing.T, seed uint64, crash bool) ([3]int, executors.StateCacheStats) {
	start := time.Now()
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(seed)
	store := mvOpenStore(t)
	cfg := hjCfg()
	if rng.IntN(2) == 0 {
		cfg.MaxChunkRows = 1 + rng.IntN(8) // split the output of a chunk
	}
	cfg.ExactInputs = rng.IntN(2) == 0 // the generators' changelogs are exact per pk
	switch rng.IntN(3) {
	case 0: // no cache: every probe reads the other side's table
	case 1: // a budget that holds a few keys at most: constant eviction and refill
		cfg.Cache = executors.NewStateCache(int64(1 + rng.IntN(2000)))
	default:
		cfg.Cache = executors.NewStateCache(1 << 30)
	}
	lt, _ := executors.HashJoinLeftTable("hj_left", hjLeftSchema, cfg)
	rt, _ := executors.HashJoinRightTable("hj_right", hjRightSchema, cfg)
	gl := &hjGen{rng: rng, rows: map[int64]hjRow{}, tab: lt}
	gr := &hjGen{rng: rng, right: true, rows: map[int64]hjRow{}, tab: rt}
	a := newHJActor(t, store.AddNode(), mem, cfg)
	defer func() { a.j.Close() }()
	var cnt [3]int

	out := map[string]string{}
	barrier := func(b executors.Message) {
		a.l.ch <- b
		a.r.ch <- b
	}
	barrier(mvBarrier(0, 1, executors.Checkpoint))
	a.run(t, out, false)
	if _, err := store.Checkpoint(uint64(mvEpoch(0))); err != nil {
		t.Fatal(err)
	}
	committedL, committedR, committedOut := map[int64]hjRow{}, map[int64]hjRow{}, map[string]string{}
	const epochs = 25
	crashAt := -1
	if crash {
		crashAt = 4 + rng.IntN(epochs-8)
	}
	for epoch := 1; epoch <= epochs; epoch++ {
		for range rng.IntN(6) {
			if rng.IntN(2) == 0 {
				a.l.ch <- executors.ChunkMessage(gl.chunk(t, mem, 1+rng.IntN(20)))
			} else {
				a.r.ch <- executors.ChunkMessage(gr.chunk(t, mem, 1+rng.IntN(20)))
			}
		}
		kind := executors.Plain
		if rng.IntN(3) != 0 {
			kind = executors.Checkpoint
		}
		barrier(mvBarrier(epoch, epoch+1, kind))
		b := a.run(t, out, false)
		if b.Prev != mvEpoch(epoch) {
			t.Fatalf("got %v after epoch %d", b, epoch)
		}
		if d := hjDiff(hjNested(gl.rows, gr.rows), out); d != "" {
			t.Fatalf("seed %d: after epoch %d: the applied changelog differs from the nested-loop join:%s", seed, epoch, d)
		}
		if kind == executors.Checkpoint {
			if _, err := store.Checkpoint(uint64(mvEpoch(epoch))); err != nil {
				t.Fatal(err)
			}
			committedL, committedR, committedOut = hjCloneRows(gl.rows), hjCloneRows(gr.rows), hjClone(out)
			// The state tables' row counts: the rows of each side with a join key
			// (ExactInputs: counted from the ops, else probed).
			for _, side := range []struct {
				id   uint32
				rows map[int64]hjRow
			}{{41, gl.rows}, {42, gr.rows}} {
				want := int64(0)
				for _, r := range side.rows {
					if r[1] != nil {
						want++
					}
				}
				if got, err := store.TableRowCount(side.id); err != nil || got != want {
					t.Fatalf("seed %d: after epoch %d (exact inputs %v): state table %d counts %d rows (%v), want %d", seed, epoch, cfg.ExactInputs, side.id, got, err, want)
				}
			}
		}
		if epoch == crashAt {
			for i := range a.cnt {
				cnt[i] += a.cnt[i]
			}
			a.j.Close()
			store.DropUncommitted()
			gl.rows, gr.rows, out = hjCloneRows(committedL), hjCloneRows(committedR), hjClone(committedOut)
			a = newHJActor(t, store.AddNode(), mem, cfg)
			committed := store.CommittedEpoch()
			barrier(executors.BarrierMessage(&executors.Barrier{Prev: executors.Epoch(committed), Curr: mvEpoch(epoch + 1), Kind: executors.Checkpoint}))
			a.run(t, out, false)
			t.Logf("crashed after epoch %d, resumed from committed epoch %d", epoch, committed)
		}
	}
	for i := range a.cnt {
		cnt[i] += a.cnt[i]
	}
	t.Logf("seed %d: %d epochs, %d/%d live rows, %d pairs, %v", seed, epochs, len(gl.rows), len(gr.rows), len(out), time.Since(start))
	if cfg.Cache == nil {
		return cnt, executors.StateCacheStats{}
	}
	a.j.Close()
	st := cfg.Cache.Stats()
	if st.Used != 0 {
		t.Fatalf("seed %d: the closed join left %d bytes accounted in its cache budget", seed, st.Used)
	}
	t.Logf("cache of %d bytes: %+v", st.Limit, st)
	return cnt, st
}

// TestHashJoinEOF: inputs that end stop taking part in the alignment, and the join
// ends when both have; Close after a partial read releases everything.
func TestHashJoinEOF(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	store := mvOpenStore(t)
	a := newHJActor(t, store.AddNode(), mem, hjCfg())
	defer a.j.Close()
	a.l.ch <- mvBarrier(0, 1, executors.Checkpoint)
	a.r.ch <- mvBarrier(0, 1, executors.Checkpoint)
	close(a.l.ch)
	out := map[string]string{}
	a.run(t, out, false)
	if _, err := store.Checkpoint(uint64(mvEpoch(0))); err != nil {
		t.Fatal(err)
	}
	a.r.ch <- mvBarrier(1, 2, executors.Plain)
	if b := a.run(t, out, false); b.Prev != mvEpoch(1) {
		t.Fatalf("got %v", b)
	}
	// A pending chunk is released by Close.
	rt, _ := executors.HashJoinRightTable("hj_right", hjRightSchema, hjCfg())
	g := &hjGen{rng: vectest.NewRand(1), right: true, rows: map[int64]hjRow{}, tab: rt}
	a.r.ch <- executors.ChunkMessage(g.chunk(t, mem, 5))
	close(a.r.ch)
	for {
		m, err := a.j.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		m.Release()
	}
}

// TestHashJoinConfigErrors: mismatched key types and a state table of the wrong shape
// are refused.
func TestHashJoinConfigErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	store := mvOpenStore(t)
	node := store.AddNode()
	cfg := hjCfg()
	lt, _ := executors.HashJoinLeftTable("hj_left", hjLeftSchema, cfg)
	rt, _ := executors.HashJoinRightTable("hj_right", hjRightSchema, cfg)
	ls, _ := storage.NewStateTable(node, 41, lt, vnode.Full(lt.VnodeCount))
	rs, _ := storage.NewStateTable(node, 42, rt, vnode.Full(rt.VnodeCount))
	cfg.LeftState, cfg.RightState, cfg.Node, cfg.Mem = ls, rs, node, mem
	bad := cfg
	bad.RightKeys = []int{3} // varchar against int64
	if _, err := executors.NewHashJoin(newHJSource(hjLeftSchema), newHJSource(hjRightSchema), bad); err == nil {
		t.Error("mismatched key types accepted")
	}
	bad = cfg
	bad.LeftState = rs
	if _, err := executors.NewHashJoin(newHJSource(hjLeftSchema), newHJSource(hjRightSchema), bad); err == nil {
		t.Error("a state table of the wrong shape accepted")
	}
	bad = cfg
	bad.Residual = executors.Col(0)
	if _, err := executors.NewHashJoin(newHJSource(hjLeftSchema), newHJSource(hjRightSchema), bad); err == nil {
		t.Error("a non-boolean residual accepted")
	}
}

// A side whose pk is exactly its join key stores rows under the probe's key prefix
// itself: the probe must include it (regression: an exclusive lower bound skipped
// every such row, so auction ⋈ bid on auction.id found almost nothing).
func TestHashJoinPKIsKey(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	store := mvOpenStore(t)
	node := store.AddNode()
	ls := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	rs := arrow.NewSchema([]arrow.Field{{Name: "rid", Type: arrow.PrimitiveTypes.Int64}, {Name: "k", Type: arrow.PrimitiveTypes.Int64}}, nil)
	cfg := executors.HashJoinConfig{LeftKeys: []int{0}, RightKeys: []int{1}, LeftPK: []int{0}, RightPK: []int{0}, VnodeCount: 4}
	lt, err := executors.HashJoinLeftTable("pk_left", ls, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := executors.HashJoinRightTable("pk_right", rs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LeftState, err = storage.NewStateTable(node, 51, lt, vnode.Full(4)); err != nil {
		t.Fatal(err)
	}
	if cfg.RightState, err = storage.NewStateTable(node, 52, rt, vnode.Full(4)); err != nil {
		t.Fatal(err)
	}
	cfg.Node, cfg.Mem = node, mem
	l, r := newHJSource(ls), newHJSource(rs)
	j, err := executors.NewHashJoin(l, r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	chunk := func(tab *schema.Table, rows ...[]any) executors.Message {
		b := vec.NewChunkBuilder(mem, tab)
		defer b.Release()
		for _, row := range rows {
			if err := b.AppendRow(vec.Insert, row...); err != nil {
				t.Fatal(err)
			}
		}
		c, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return executors.ChunkMessage(c)
	}
	pairs := 0
	drain := func() {
		for {
			m, err := j.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if m.Barrier != nil {
				return
			}
			pairs += m.Chunk.CountVisible()
			m.Release()
		}
	}
	for _, c := range []chan executors.Message{l.ch, r.ch} {
		c <- mvBarrier(0, 1, executors.Checkpoint)
	}
	drain()
	if _, err := store.Checkpoint(uint64(mvEpoch(0))); err != nil {
		t.Fatal(err)
	}
	// Epoch 1: the left row, then (in the same epoch) a right row with its key.
	l.ch <- chunk(lt, []any{int64(7)})
	time.Sleep(10 * time.Millisecond) // let the join take the left chunk first
	r.ch <- chunk(rt, []any{int64(1), int64(7)})
	for _, c := range []chan executors.Message{l.ch, r.ch} {
		c <- mvBarrier(1, 2, executors.Checkpoint)
	}
	drain()
	if _, err := store.Checkpoint(uint64(mvEpoch(1))); err != nil {
		t.Fatal(err)
	}
	// Epoch 2: another right row, probing the committed left row.
	r.ch <- chunk(rt, []any{int64(2), int64(7)})
	for _, c := range []chan executors.Message{l.ch, r.ch} {
		c <- mvBarrier(2, 3, executors.Plain)
	}
	drain()
	if pairs != 2 {
		t.Fatalf("%d pairs, want 2", pairs)
	}
}
