package executors_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
)

// At a barrier that closes the snapshot read, the batches the read has ready are
// taken (emitted before the barrier, positions advanced) rather than dropped. Every
// epoch here brings an upstream insert, so that every barrier closes the read, and
// the test waits a little after each snapshot chunk so that the read's buffer fills.
// The view must still get every row exactly once: a taken batch's rows must be
// emitted, and its positions must govern the marking of the epoch's buffer (the
// inserts land in vnodes all along the read).
func TestBackfillTakesReadyBatchesAtBarrier(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	tab := fairTable()
	const loaded = 20000
	store, node, st := committedUpstream(t, mem, tab, loaded)
	defer store.Close()
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

	rows := map[int64]int{} // k -> net count emitted (v == k throughout)
	apply := func(m executors.Message) {
		rec := m.Chunk.Record()
		ks := rec.Column(0).(*array.Int64)
		for i, op := range m.Chunk.Ops() {
			if !m.Chunk.Visible(i) {
				continue
			}
			if op.IsInsert() {
				rows[ks.Value(i)]++
			} else {
				rows[ks.Value(i)]--
			}
		}
	}
	in.c <- executors.BarrierMessage(&executors.Barrier{Prev: 1, Curr: 2, Kind: executors.Checkpoint})
	if m, err := bf.Next(ctx); err != nil || m.Barrier == nil {
		t.Fatalf("first message: %+v, %v; want the first barrier", m, err)
	}
	inserted := int64(0)
	for e := executors.Epoch(2); !bf.Stats().Done; e++ {
		if e > 2000 {
			t.Fatalf("not done after %d epochs: %+v", e, bf.Stats())
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
		// The upstream actor applies and seals the epoch's insert, then sends it on.
		k := loaded + inserted
		inserted++
		c := fairChunk(t, mem, tab, int(k), 1)
		if err := st.Write(c); err != nil {
			t.Fatal(err)
		}
		if err := st.Seal(uint64(e)); err != nil {
			t.Fatal(err)
		}
		in.c <- executors.ChunkMessage(c)
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
	for k := int64(0); k < loaded+inserted; k++ {
		if rows[k] != 1 {
			t.Fatalf("k=%d emitted %d times net, want once (%d loaded, %d inserted; stats %+v)", k, rows[k], loaded, inserted, bf.Stats())
		}
	}
	if len(rows) != int(loaded+inserted) {
		t.Fatalf("%d keys emitted, want %d", len(rows), loaded+inserted)
	}
	s := bf.Stats()
	if s.ReadyTaken == 0 {
		t.Fatalf("no ready batch taken at a barrier in %d barriers: %+v", inserted, s)
	}
	t.Logf("%d barriers, %d ready batches taken, %d snapshot batches", inserted, s.ReadyTaken, s.SnapshotBatches)
}
