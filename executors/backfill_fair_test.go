package executors_test

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// fairTable is a small upstream: k int64 pk, v int64; 8 vnodes.
func fairTable() *schema.Table {
	t := &schema.Table{
		Name: "up",
		Columns: []schema.Column{
			{Name: "k", Type: schema.Type{Kind: schema.Int64}},
			{Name: "v", Type: schema.Type{Kind: schema.Int64}},
		},
		PK:         []schema.KeyColumn{{Column: 0}},
		VnodeCount: 8,
	}
	if err := t.Validate(); err != nil {
		panic(err)
	}
	return t
}

func fairChunk(t testing.TB, mem memory.Allocator, tab *schema.Table, from, n int) *vec.Chunk {
	t.Helper()
	b := vec.NewChunkBuilder(mem, tab)
	defer b.Release()
	for k := from; k < from+n; k++ {
		if err := b.AppendRow(vec.Insert, int64(k), int64(k)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fairVnodes is the vnode of each key 0..n-1 of tab (fairTable's layout).
func fairVnodes(t testing.TB, mem memory.Allocator, tab *schema.Table, n int) []uint16 {
	t.Helper()
	all := fairChunk(t, mem, tab, 0, n)
	defer all.Release()
	vn := make([]uint16, n)
	vec.For(tab).Vnodes(all, vn)
	return vn
}

// committedUpstream opens an in-memory store with one node and commits rows rows of
// tab (k = v = 0..rows-1) under table id 1 at epoch 1, through a state table on the
// node, which it returns too. The caller closes the store.
func committedUpstream(t testing.TB, mem memory.Allocator, tab *schema.Table, rows int) (*storage.Store, *storage.Node, *storage.StateTable) {
	t.Helper()
	store, err := storage.Open("db", storage.Options{FS: vfs.NewMem(), CacheSize: 4 << 20, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	node := store.AddNode()
	st, err := storage.NewStateTable(node, 1, tab, vnode.Full(tab.VnodeCount))
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	for k := 0; k < rows; k += 1000 {
		c := fairChunk(t, mem, tab, k, min(1000, rows-k))
		err := st.Write(c)
		c.Release()
		if err != nil {
			store.Close()
			t.Fatal(err)
		}
	}
	if err := st.Seal(1); err != nil {
		store.Close()
		t.Fatal(err)
	}
	if _, err := store.Checkpoint(1); err != nil {
		store.Close()
		t.Fatal(err)
	}
	return store, node, st
}

// busyUpstream is an input that always has a chunk ready: a new key range per chunk,
// and a barrier after every perEpoch chunks, forever.
type busyUpstream struct {
	t        *testing.T
	mem      memory.Allocator
	tab      *schema.Table
	epoch    executors.Epoch
	perEpoch int
	sent     int
	ready    *vec.Chunk
}

func (u *busyUpstream) Next(ctx context.Context) (executors.Message, error) {
	if err := ctx.Err(); err != nil {
		return executors.Message{}, err
	}
	if u.sent%(u.perEpoch+1) == 0 {
		u.sent++
		b := &executors.Barrier{Prev: u.epoch, Curr: u.epoch + 1}
		u.epoch++
		return executors.BarrierMessage(b), nil
	}
	u.sent++
	if u.ready == nil {
		u.ready = fairChunk(u.t, u.mem, u.tab, 1_000_000, 4)
	}
	// The same prebuilt chunk each time: an upstream as fast as a channel receive.
	u.ready.Retain()
	return executors.ChunkMessage(u.ready), nil
}

func (u *busyUpstream) Schema() *arrow.Schema { return u.tab.ArrowSchema() }
func (u *busyUpstream) Close() error {
	if u.ready != nil {
		u.ready.Release()
	}
	return nil
}

// The fairness rule: with an upstream that always has a message ready, the backfill
// still takes a snapshot batch after every upstream message, so the snapshot gets about
// half of the messages of each epoch instead of one row per barrier. The share is
// logged: go test -run TestBackfillFairness -v ./executors/
func TestBackfillFairness(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	tab := fairTable()
	const rows = 20000
	store, node, _ := committedUpstream(t, mem, tab, rows)
	defer store.Close()
	full := vnode.Full(tab.VnodeCount)
	prog, err := storage.NewProgressTable(node, 2, "fair_progress", tab, full)
	if err != nil {
		t.Fatal(err)
	}
	up := &busyUpstream{t: t, mem: mem, tab: tab, epoch: 1, perEpoch: 40}
	bf, err := executors.NewArrangementBackfill(up, executors.BackfillConfig{
		Actor: 1, Fragment: 1, Upstream: tab, UpstreamID: 1, S2: []int{0, 1}, Vnodes: full,
		Node: node, Progress: prog, BatchSize: 64, Workers: 2, Mem: mem,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	barriers := 0
	for !bf.Stats().Done && barriers < 10_000 {
		m, err := bf.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Barrier != nil {
			barriers++
		}
		m.Release()
	}
	st2 := bf.Stats()
	if err := bf.Close(); err != nil {
		t.Fatal(err)
	}
	share := float64(st2.SnapshotBatches) / float64(st2.SnapshotBatches+st2.UpstreamMessages)
	t.Logf("%d snapshot rows in %d barriers (%d upstream chunks per epoch): %d snapshot batches, %d upstream messages while backfilling: snapshot share %.2f",
		st2.Rows, barriers, up.perEpoch, st2.SnapshotBatches, st2.UpstreamMessages, share)
	if !st2.Done || st2.Rows < rows {
		t.Fatalf("backfill not done after %d barriers: %+v", barriers, st2)
	}
	// One row per barrier would need 20000 barriers; the rule gives the snapshot about
	// every other message.
	if share < 0.45 {
		t.Fatalf("snapshot share %.2f under a busy upstream, want >= 0.45", share)
	}
}
