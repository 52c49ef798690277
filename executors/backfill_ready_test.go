package executors_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// At a barrier that closes the snapshot read, the batches the read has ready are
// taken (emitted before the barrier, positions advanced) rather than dropped, and
// their positions govern the marking of the epoch's buffer. Each epoch here updates
// the keys just above the position of the vnode being read, after a pause that lets
// the read fill its buffer with them: those updates fall inside the batches taken at
// the barrier, so they must be kept (the taken rows hold the old values). The view
// must end with every key's last value exactly once.
func TestBackfillTakesReadyBatchesAtBarrier(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	tab := fairTable()
	const loaded = 20000
	store, node, st := committedUpstream(t, mem, tab, loaded)
	defer store.Close()
	// Each vnode's keys in pk order, and the vnode of each key.
	all := fairChunk(t, mem, tab, 0, loaded)
	vnOf := make([]uint16, loaded)
	vec.For(tab).Vnodes(all, vnOf)
	all.Release()
	keysOf := make([][]int64, tab.VnodeCount)
	idx := make([]int, loaded) // k's index in keysOf[vnOf[k]]
	for k, v := range vnOf {
		idx[k] = len(keysOf[v])
		keysOf[v] = append(keysOf[v], int64(k))
	}
	full := vnode.Full(tab.VnodeCount)
	prog, err := storage.NewProgressTable(node, 2, "ready_progress", tab, full)
	if err != nil {
		t.Fatal(err)
	}
	in := &scripted{tab: tab, c: make(chan executors.Message, 64)}
	bf, err := executors.NewArrangementBackfill(in, executors.BackfillConfig{
		Actor: 1, Fragment: 1, Upstream: tab, UpstreamID: 1, S2: []int{0, 1}, Vnodes: full,
		Node: node, Progress: prog, BatchSize: 20, Workers: 1, Mem: mem, LocalUpstream: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cur := make([]int64, loaded) // each key's value upstream
	for k := range cur {
		cur[k] = int64(k)
	}
	rows := map[[2]int64]int{}   // (k, v) -> net count emitted
	read, readV := -1, uint16(0) // the last snapshot row's key, and its vnode
	apply := func(m executors.Message) {
		applyKV(t, rows, m.Chunk, func(op vec.Op, k int64) {
			if op == vec.Insert { // a snapshot row (the upstream sends updates only)
				read, readV = int(k), vnOf[k]
			}
		})
	}
	update := func(ks []int64) *vec.Chunk {
		b := vec.NewChunkBuilder(mem, tab)
		defer b.Release()
		for _, k := range ks {
			if err := b.AppendRow(vec.UpdateDelete, k, cur[k]); err != nil {
				t.Fatal(err)
			}
			if err := b.AppendRow(vec.UpdateInsert, k, cur[k]+loaded); err != nil {
				t.Fatal(err)
			}
		}
		c, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	in.c <- executors.BarrierMessage(&executors.Barrier{Prev: 1, Curr: 2, Kind: executors.Checkpoint})
	if m, err := bf.Next(ctx); err != nil || m.Barrier == nil {
		t.Fatalf("first message: %+v, %v; want the first barrier", m, err)
	}
	epochs := 0
	for e := executors.Epoch(2); !bf.Stats().Done; e++ {
		if epochs++; epochs > 2000 {
			t.Fatalf("not done after %d epochs: %+v", epochs, bf.Stats())
		}
		// Wait for a snapshot chunk of this epoch (none once every vnode is done).
		for bf.Stats().Completed < bf.Stats().Owned {
			m, err := bf.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m.Barrier != nil {
				t.Fatalf("epoch %d: an unexpected barrier %+v", e, m.Barrier)
			}
			got := m.Chunk != nil
			if got {
				apply(m)
			}
			m.Release()
			if got {
				break
			}
		}
		time.Sleep(2 * time.Millisecond) // the read fills its buffer meanwhile
		// The next keys of the vnode being read (or its first ones, if it is done).
		ks := keysOf[readV][:min(5, len(keysOf[readV]))]
		if read >= 0 {
			if rest := keysOf[readV][idx[read]+1:]; len(rest) > 0 {
				ks = rest[:min(30, len(rest))]
			}
		}
		// The upstream actor applies and seals the epoch's updates, then sends them on.
		c := update(ks)
		if err := st.Write(c); err != nil {
			t.Fatal(err)
		}
		c.Release()
		if err := st.Seal(uint64(e)); err != nil {
			t.Fatal(err)
		}
		in.c <- executors.ChunkMessage(update(ks))
		for _, k := range ks {
			cur[k] += loaded
		}
		in.c <- executors.BarrierMessage(&executors.Barrier{Prev: e, Curr: e + 1})
		for {
			m, err := bf.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m.Chunk != nil {
				apply(m)
			}
			isBarrier := m.Barrier != nil
			m.Release()
			if isBarrier {
				break
			}
		}
	}
	for k := range cur {
		if n := rows[[2]int64{int64(k), cur[k]}]; n != 1 {
			t.Fatalf("k=%d: (k, %d) emitted %d times net, want once (stats %+v)", k, cur[k], n, bf.Stats())
		}
	}
	total := 0
	for _, n := range rows {
		total += n
	}
	if total != loaded {
		t.Fatalf("%d rows net, want %d", total, loaded)
	}
	s := bf.Stats()
	if s.ReadyTaken == 0 {
		t.Fatalf("no ready batch taken at a barrier in %d barriers: %+v", epochs, s)
	}
	t.Logf("%d barriers, %d ready batches taken, %d snapshot batches", epochs, s.ReadyTaken, s.SnapshotBatches)
}
