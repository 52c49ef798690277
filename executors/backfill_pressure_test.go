package executors_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/vec"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
)

// pacedBarriers is an idle upstream: a barrier every interval, nothing else.
type pacedBarriers struct {
	tab      *schema.Table
	interval time.Duration
	epoch    executors.Epoch
}

func (u *pacedBarriers) Next(ctx context.Context) (executors.Message, error) {
	if u.epoch > 1 {
		select {
		case <-time.After(u.interval):
		case <-ctx.Done():
			return executors.Message{}, ctx.Err()
		}
	}
	b := &executors.Barrier{Prev: u.epoch, Curr: u.epoch + 1}
	u.epoch++
	return executors.BarrierMessage(b), nil
}

func (u *pacedBarriers) Schema() *arrow.Schema { return u.tab.ArrowSchema() }
func (u *pacedBarriers) Close() error          { return nil }

// drainEpochs pulls bf until the barrier after which it is Done (at most limit
// barriers): the rows emitted between barriers (the first count is before the first
// barrier), their total, and bf's stats at the end; it closes bf.
func drainEpochs(t *testing.T, bf *executors.ArrangementBackfill, limit int) (epochs []int, total int, st executors.BackfillStats) {
	t.Helper()
	ctx := context.Background()
	epochRows := 0
	for done := false; !done && len(epochs) < limit; {
		m, err := bf.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Chunk != nil {
			total += m.Chunk.NumRows()
			epochRows += m.Chunk.NumRows()
		}
		if m.Barrier != nil {
			epochs, epochRows = append(epochs, epochRows), 0
			done = bf.Stats().Done // the rows before this barrier are all out
		}
		m.Release()
	}
	st = bf.Stats()
	if err := bf.Close(); err != nil {
		t.Fatal(err)
	}
	return epochs, total, st
}

// Memory pressure (BackfillConfig.Pressure): while it holds, an epoch that has
// snapshot rows takes no more snapshot batches, so each epoch reads at most its
// first batch plus the batches ready at its barrier (at most twice the read's
// channel, one batch per worker); the backfill still finishes, with every row once.
// Without pressure the same epochs read far more, and HeldBack stays 0.
func TestBackfillHoldsBackUnderPressure(t *testing.T) {
	const rows, batch, workers = 20000, 64, 2
	bound := (1 + 2*workers) * batch
	for _, pressure := range []bool{true, false} {
		mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
		tab := fairTable()
		store, node, _ := committedUpstream(t, mem, tab, rows)
		full := vnode.Full(tab.VnodeCount)
		prog, err := storage.NewProgressTable(node, 2, "pressure_progress", tab, full)
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		bf, err := executors.NewArrangementBackfill(&pacedBarriers{tab: tab, interval: 20 * time.Millisecond, epoch: 1}, executors.BackfillConfig{
			Actor: 1, Fragment: 1, Upstream: tab, UpstreamID: 1, S2: []int{0, 1}, Vnodes: full,
			Node: node, Progress: prog, BatchSize: batch, Workers: workers, Mem: mem,
			Pressure: func() bool { calls.Add(1); return pressure },
		})
		if err != nil {
			t.Fatal(err)
		}
		epochs, total, st := drainEpochs(t, bf, 5000)
		barriers, maxEpoch := len(epochs), slices.Max(epochs)
		store.Close()
		mem.AssertSize(t, 0)
		t.Logf("pressure %v: %d rows in %d barriers, at most %d in an epoch, %d epochs held back, Pressure called %d times",
			pressure, total, barriers, maxEpoch, st.HeldBack, calls.Load())
		if !st.Done || total != rows || st.Rows != rows {
			t.Fatalf("pressure %v: not done with every row once: %d rows emitted, stats %+v", pressure, total, st)
		}
		switch {
		case pressure && (maxEpoch > bound || st.HeldBack == 0):
			t.Fatalf("under pressure: an epoch of %d rows (want at most %d), %d epochs held back", maxEpoch, bound, st.HeldBack)
		case !pressure && st.HeldBack != 0:
			t.Fatalf("without pressure: %d epochs held back", st.HeldBack)
		case !pressure && maxEpoch <= bound:
			t.Logf("without pressure no epoch read more than %d rows: a slow machine; the bound above is then untested", bound)
		}
	}
}

// Relief (BackfillConfig.Relief): a backfill held back by pressure asks again when the
// channel Relief gave is closed (a checkpoint commit, in the engine), so it resumes
// within the epoch instead of waiting for the barrier: here pressure eases 30 ms into a
// 300 ms epoch, and that epoch reads far more than a held epoch can.
func TestBackfillResumesOnRelief(t *testing.T) {
	const rows, batch, workers = 20000, 64, 2
	bound := (1 + 2*workers) * batch
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	tab := fairTable()
	store, node, _ := committedUpstream(t, mem, tab, rows)
	defer store.Close()
	full := vnode.Full(tab.VnodeCount)
	prog, err := storage.NewProgressTable(node, 2, "relief_progress", tab, full)
	if err != nil {
		t.Fatal(err)
	}
	var eased atomic.Bool
	relief := make(chan struct{})
	var easeOnce atomic.Bool
	bf, err := executors.NewArrangementBackfill(&pacedBarriers{tab: tab, interval: 300 * time.Millisecond, epoch: 1}, executors.BackfillConfig{
		Actor: 1, Fragment: 1, Upstream: tab, UpstreamID: 1, S2: []int{0, 1}, Vnodes: full,
		Node: node, Progress: prog, BatchSize: batch, Workers: workers, Mem: mem,
		Pressure: func() bool {
			if easeOnce.CompareAndSwap(false, true) { // first held: ease 30 ms later
				time.AfterFunc(30*time.Millisecond, func() { eased.Store(true); close(relief) })
			}
			return !eased.Load()
		},
		Relief: func() <-chan struct{} { return relief },
	})
	if err != nil {
		t.Fatal(err)
	}
	epochs, total, st := drainEpochs(t, bf, 1000) // rows per epoch; the first is before the first barrier
	t.Logf("%d rows in %d barriers, rows per epoch %v, %d epochs held back", total, len(epochs), epochs, st.HeldBack)
	if !st.Done || total != rows {
		t.Fatalf("not done with every row once: %d rows emitted, stats %+v", total, st)
	}
	// The first epoch that reads (the second) is the one held and relieved: without
	// the relief it would end at most bound rows in.
	if st.HeldBack != 1 || len(epochs) < 2 || epochs[1] <= bound {
		t.Fatalf("%d epochs held back, rows per epoch %v: want the held epoch to read on after the relief (more than %d rows)", st.HeldBack, epochs, bound)
	}
}
