package storage

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// snapStopStore holds n bid rows committed at epoch 1 and extra more rows (new pks)
// sealed at epoch 2 on its node, not committed: a committed view reads them through
// the committed loop (fillCommitted), a node view through the merging one.
type snapStopStore struct {
	s                *Store
	node             *Node
	committed, whole *snapModel
}

func newSnapStopStore(t *testing.T, n, extra int, seed uint64) *snapStopStore {
	t.Helper()
	s, m := snapBidStore(t, n, seed)
	node := s.AddNode()
	st, err := NewStateTable(node, snapBidID, m.t, vnode.Full(m.t.VnodeCount))
	if err != nil {
		t.Fatal(err)
	}
	whole := m.clone()
	mem := memory.NewGoAllocator()
	for start := n; start < n+extra; start += 4096 {
		c := snapBidChunk(mem, start, min(4096, n+extra-start), seed)
		if err := st.Write(c); err != nil {
			t.Fatal(err)
		}
		whole.apply(snapBidID, c, c.Record(), vectest.AllColumns(m.t))
		c.Release()
	}
	st.Seal(2)
	t.Cleanup(whole.release)
	return &snapStopStore{s: s, node: node, committed: m, whole: whole}
}

// sources returns the two ways of reading the store, each with its model; release
// the views when done.
func (ss *snapStopStore) sources(t *testing.T) (names []string, srcs []VnodeSource, models []*snapModel, release func()) {
	t.Helper()
	cv, err := ss.s.View()
	if err != nil {
		t.Fatal(err)
	}
	nv, err := ss.node.View()
	if err != nil {
		cv.Release()
		t.Fatal(err)
	}
	tbl := ss.committed.t
	return []string{"committed view", "node view"},
		[]VnodeSource{ViewSource(cv, snapBidID, tbl), ViewSource(nv, snapBidID, tbl)},
		[]*snapModel{ss.committed, ss.whole},
		func() { cv.Release(); nv.Release() }
}

// A read stopped while its worker fills a batch hands that batch over, cut at
// stopCheckRows rows, not marked End, with the LastPK of its last row; the channel
// then closes with no error, and a read from that LastPK gives the rest of the vnode.
// The limiter here stops the read just before the worker fills its first batch, so
// the cut is deterministic; a rate-limited read does not look past the cut, so a cut
// on the vnode's last row is not End either (the rest is an End alone). The worker's
// fill itself, stopped, marks such a cut End when it looks ahead (an unlimited read)
// and leaves its iterator on the row when it does not.
func TestSnapshotStopCutsTheBatchBeingFilled(t *testing.T) {
	_, seed := vectest.Rand(t)
	ss := newSnapStopStore(t, 20000, 5000, seed)
	names, srcs, models, release := ss.sources(t)
	defer release()
	tbl := ss.committed.t
	for i, src := range srcs {
		m := models[i]
		// The vnode with the most rows: more than a cut's.
		var v uint16
		var most int
		for cand := range tbl.VnodeCount {
			if pks, _ := m.vnodeRows(snapBidID, uint16(cand), nil); len(pks) > most {
				v, most = uint16(cand), len(pks)
			}
		}
		if most <= stopCheckRows {
			t.Fatalf("seed %d: %s: the largest vnode has %d rows, want more than %d", seed, names[i], most, stopCheckRows)
		}
		pks, _ := m.vnodeRows(snapBidID, v, nil)
		for _, c := range []struct {
			from   string
			after  []byte
			ending bool
		}{
			{"its start", nil, false},
			{"its last 64 rows", pks[len(pks)-stopCheckRows-1], true},
		} {
			what := fmt.Sprintf("seed %d: %s: vnode %d (%d rows) from %s", seed, names[i], v, most, c.from)
			mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
			snapStopFill(t, what, src, VnodeStart{Vnode: v, After: c.after}, c.ending, mem)
			b := snapStopFirst(t, what, src, VnodeStart{Vnode: v, After: c.after}, mem)
			if b.Rows != stopCheckRows || b.End {
				t.Fatalf("%s: a stopped read gave a batch of %d rows, end %v; want %d rows, not end", what, b.Rows, b.End, stopCheckRows)
			}
			rows, refs := m.vnodeRows(snapBidID, v, c.after)
			snapCheckRows(t, what, m, snapQ0, b, rows, refs, 0)
			rest := SnapshotRequest{Vnodes: []VnodeStart{{Vnode: v, After: b.LastPK}}, Projection: snapQ0, BatchSize: 4096, Workers: 1, Mem: mem}
			b.Release()
			snapReadRest(t, what, m, src, rest)
			mem.AssertSize(t, 0)
		}
	}
}

// snapStoppedRead opens the read that mk returns over src, reads its channel to the
// close and returns the batches, failing unless the read ends with no error. The
// request's limiter may call r for the reader: every call of it waits until the read
// is open.
func snapStoppedRead(t *testing.T, what string, src VnodeSource, mk func(r func() *SnapshotReader) SnapshotRequest) []SnapshotBatch {
	t.Helper()
	var r *SnapshotReader
	opened := make(chan struct{})
	req := mk(func() *SnapshotReader { return r })
	limit := req.Limit
	req.Limit = func(ctx context.Context, v uint16, want int) (int, error) {
		<-opened
		return limit(ctx, v, want)
	}
	var err error
	r, err = OpenSnapshot(context.Background(), src, req)
	if err != nil {
		t.Fatal(err)
	}
	close(opened)
	var got []SnapshotBatch
	for b := range r.Batches() {
		got = append(got, b)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("%s: a stopped read's error: %v", what, err)
	}
	return got
}

// snapStopFill fills one batch from vs with a stopped worker, looking ahead and not:
// both cut at stopCheckRows rows; looking ahead, the batch is End when the cut is the
// vnode's last row (ending) and fill reports no further row; not looking ahead, it is
// never End, fill reports one, and the iterator stays on the cut row, so that its next
// step finds a further row exactly when the cut is not the last.
func snapStopFill(t *testing.T, what string, src VnodeSource, vs VnodeStart, ending bool, mem memory.Allocator) {
	t.Helper()
	k, proj, sch, err := snapshotSetup(src, nil, snapQ0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ahead := range []bool{true, false} {
		w, err := newSnapWorker(src.Table(), k, proj, sch, mem)
		if err != nil {
			t.Fatal(err)
		}
		w.stop = new(atomic.Bool)
		w.stop.Store(true)
		it, err := src.Iter(vs.Vnode, vs.After)
		if err != nil {
			t.Fatal(err)
		}
		if !it.Next() {
			t.Fatalf("%s: no row", what)
		}
		b, ok, err := w.fill(it, vs.Vnode, 4096, ahead)
		if err != nil {
			t.Fatal(err)
		}
		wantEnd := ahead && ending
		if b.Rows != stopCheckRows || b.End != wantEnd || ok == wantEnd {
			t.Fatalf("%s: a stopped fill (ahead %v) gave %d rows, end %v, ok %v; want %d rows, end %v", what, ahead, b.Rows, b.End, ok, stopCheckRows, wantEnd)
		}
		if !ahead {
			if !bytes.Equal(it.PK(), b.LastPK) {
				t.Fatalf("%s: a fill that did not look ahead left its iterator on %x, not on its last row %x", what, it.PK(), b.LastPK)
			}
			if more := it.Next(); more == ending {
				t.Fatalf("%s: after a fill that did not look ahead, a further row: %v (the cut ends the vnode: %v)", what, more, ending)
			}
		}
		b.Release()
		it.Close()
		w.release()
	}
}

// snapReadRest reads what a stopped read left (rest: the vnodes from their positions)
// to the end and checks it against the model.
func snapReadRest(t *testing.T, what string, m *snapModel, src VnodeSource, rest SnapshotRequest) {
	t.Helper()
	r, err := OpenSnapshot(context.Background(), src, rest)
	if err != nil {
		t.Fatal(err)
	}
	more := snapCollect(t, r)
	snapCheck(t, what+": the rest", m, snapBidID, rest, more)
	snapRelease(more)
}

// snapStopFirst reads vnode vs with one worker and batches of 4096 rows, stopping the
// read from the limiter just before the first batch is filled, and returns the one
// batch the read must then deliver.
func snapStopFirst(t *testing.T, what string, src VnodeSource, vs VnodeStart, mem memory.Allocator) SnapshotBatch {
	t.Helper()
	calls := 0
	got := snapStoppedRead(t, what, src, func(r func() *SnapshotReader) SnapshotRequest {
		return SnapshotRequest{Vnodes: []VnodeStart{vs}, Projection: snapQ0, BatchSize: 4096, Workers: 1, Mem: mem,
			Limit: func(ctx context.Context, _ uint16, want int) (int, error) {
				if calls++; calls == 1 {
					r().Stop()
				}
				return want, nil
			}}
	})
	if len(got) != 1 {
		for i := range got {
			got[i].Release()
		}
		t.Fatalf("%s: a stopped read gave %d batches, want one", what, len(got))
	}
	if calls != 1 {
		t.Fatalf("%s: the limiter was called %d times, want once (no batch after the stop)", what, calls)
	}
	return got[0]
}

// TestSnapshotStopRandom stops reads at random points (after some batches, from the
// receiving goroutine or another one, once or twice, with and without a limiter that
// grants few rows, and takes back those not read) and reads on to the channel's close: every vnode's batches are a
// prefix of its rows in pk order, End only on a last batch that ends the vnode, and a
// new read from the positions they leave gives the rest exactly, so a stopped read
// loses no row and duplicates none. Some stopped reads are then closed without being
// drained: no Arrow memory and no goroutine is left behind.
func TestSnapshotStopRandom(t *testing.T) {
	rng, seed := vectest.Rand(t)
	ss := newSnapStopStore(t, 20000, 5000, seed)
	names, srcs, models, release := ss.sources(t)
	defer release()
	tbl := ss.committed.t
	rounds := 60
	if testing.Short() {
		rounds = 12
	}
	cuts := 0
	for round := range rounds {
		i := rng.IntN(len(srcs))
		m, src := models[i], srcs[i]
		req := snapRequest(rng, m, snapBidID, tbl, vectest.AllColumns(tbl))
		if rng.IntN(2) == 0 {
			req.BatchSize = 1000 + rng.IntN(8000) // batches long enough to be cut
		}
		batch := req.BatchSize
		what := fmt.Sprintf("seed %d round %d: %s: batch %d workers %d", seed, round, names[i], batch, req.Workers)
		mem := memory.NewCheckedAllocator(vec.NewPoolAllocator())
		req.Mem = mem
		var calls, granted, unused atomic.Int64 // the limiter is called from several workers
		if rng.IntN(3) == 0 {
			req.Limit = func(ctx context.Context, _ uint16, want int) (int, error) {
				n := 1 + int(calls.Add(1)*7919%int64(want))
				granted.Add(int64(n))
				return n, nil
			}
			req.Unused = func(n int) { unused.Add(int64(n)) }
		}
		base := runtime.NumGoroutine()
		r, err := OpenSnapshot(context.Background(), src, req)
		if err != nil {
			t.Fatal(err)
		}
		got := map[uint16][]SnapshotBatch{}
		for range rng.IntN(30) {
			b, ok := <-r.Batches()
			if !ok {
				break
			}
			got[b.Vnode] = append(got[b.Vnode], b)
		}
		switch rng.IntN(3) {
		case 0:
			r.Stop()
		case 1:
			r.Stop()
			r.Stop()
		default:
			go r.Stop()
		}
		if rng.IntN(4) == 0 {
			// Closed without draining: what is left is dropped.
			if err := r.Close(); err != nil {
				t.Fatalf("%s: close after stop: %v", what, err)
			}
			snapRelease(got)
			mem.AssertSize(t, 0)
			snapWaitGoroutines(t, base)
			continue
		}
		for b := range r.Batches() {
			got[b.Vnode] = append(got[b.Vnode], b)
		}
		if err := r.Err(); err != nil {
			t.Fatalf("%s: a stopped read's error: %v", what, err)
		}
		if req.Limit != nil {
			// Every row granted was read into a batch or given back.
			delivered := 0
			for _, bs := range got {
				for _, b := range bs {
					delivered += b.Rows
				}
			}
			if g, u := granted.Load(), unused.Load(); g-u != int64(delivered) {
				t.Fatalf("%s: %d rows granted, %d given back, %d delivered", what, g, u, delivered)
			}
		}
		// Each vnode's batches are a prefix of its rows; the rest is read again.
		var rest SnapshotRequest
		rest.Projection, rest.BatchSize, rest.Workers, rest.Mem = req.Projection, 4096, 2, mem
		for _, vs := range req.Vnodes {
			pks, refs := m.vnodeRows(snapBidID, vs.Vnode, vs.After)
			bs := got[vs.Vnode]
			row, after, ended := 0, vs.After, false
			for bi, b := range bs {
				where := fmt.Sprintf("%s: vnode %d batch %d/%d (%d rows, end %v)", what, vs.Vnode, bi, len(bs), b.Rows, b.End)
				if ended {
					t.Fatalf("%s: a batch after the End", where)
				}
				if b.Rows > batch {
					t.Fatalf("%s: more rows than the batch size", where)
				}
				if b.Rows > 0 {
					row = snapCheckRows(t, where, m, req.Projection, b, pks, refs, row)
					after = b.LastPK
					if req.Limit == nil && b.Rows < batch && !b.End {
						cuts++
					}
				}
				if b.End {
					if row != len(pks) {
						t.Fatalf("%s: End after %d of the vnode's %d rows", where, row, len(pks))
					}
					ended = true
				}
			}
			if !ended {
				rest.Vnodes = append(rest.Vnodes, VnodeStart{Vnode: vs.Vnode, After: after})
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if len(rest.Vnodes) > 0 {
			snapReadRest(t, what, m, src, rest)
		}
		snapRelease(got)
		mem.AssertSize(t, 0)
		snapWaitGoroutines(t, base)
	}
	t.Logf("seed %d: %d batches cut short by a stop in %d rounds", seed, cuts, rounds)
}

// iterRecorder is a VnodeSource that keeps the iterators it opens.
type iterRecorder struct {
	VnodeSource
	its []*Iter
}

func (s *iterRecorder) Iter(v uint16, after []byte) (*Iter, error) {
	it, err := s.VnodeSource.Iter(v, after)
	if err == nil {
		s.its = append(s.its, it)
	}
	return it, err
}

// A rate-limited read moves its iterator to a batch's first row only once it holds
// the batch's tokens: while it waits for them, the iterator is still on the last row
// it read. Moving on skips every deleted key before the next live row, so a read that
// moved first and was then stopped in the wait (a barrier, for a backfill throttled
// to a row per second or so) would throw that work away, and the next epoch's read
// would skip the same run of deleted keys again, at every barrier. Here the second
// call of the limiter stops the read and waits; the iterator must then be on the
// first batch's one row, and the read must end with that batch alone, not End. The
// first call must come before the iterator is opened, since opening it moves it onto
// the vnode's first row (past the deleted keys before it, committed ones included).
func TestSnapshotLimitedReadMovesOnlyWithTokens(t *testing.T) {
	_, seed := vectest.Rand(t)
	ss := newSnapStopStore(t, 5000, 1000, seed)
	names, srcs, models, release := ss.sources(t)
	defer release()
	for i, src := range srcs {
		m := models[i]
		var v uint16
		var most int
		for cand := range ss.committed.t.VnodeCount {
			if pks, _ := m.vnodeRows(snapBidID, uint16(cand), nil); len(pks) > most {
				v, most = uint16(cand), len(pks)
			}
		}
		pks, _ := m.vnodeRows(snapBidID, v, nil)
		what := fmt.Sprintf("seed %d: %s: vnode %d (%d rows)", seed, names[i], v, most)
		rec := &iterRecorder{VnodeSource: src}
		mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
		calls, openedFirst := 0, 0
		var onRow []byte // the iterator's row at the second call
		got := snapStoppedRead(t, what, rec, func(r func() *SnapshotReader) SnapshotRequest {
			return SnapshotRequest{Vnodes: []VnodeStart{{Vnode: v}}, Projection: snapQ0, BatchSize: 4096, Workers: 1, Mem: mem,
				Limit: func(ctx context.Context, _ uint16, want int) (int, error) {
					if calls++; calls == 1 {
						openedFirst = len(rec.its)
						return 1, nil
					}
					if it := rec.its[0]; it.Key() != nil {
						onRow = bytes.Clone(it.PK())
					}
					r().Stop()
					<-ctx.Done()
					return 0, ctx.Err()
				}}
		})
		if len(got) != 1 || got[0].Rows != 1 || got[0].End || !bytes.Equal(got[0].LastPK, pks[0]) {
			for i := range got {
				got[i].Release()
			}
			t.Fatalf("%s: %d batches, want one of the vnode's first row, not End", what, len(got))
		}
		if openedFirst != 0 {
			t.Fatalf("%s: %d iterators open at the limiter's first call, want none", what, openedFirst)
		}
		if calls != 2 || !bytes.Equal(onRow, pks[0]) {
			t.Fatalf("%s: at the limiter's call %d the iterator was on %x, want the row read, %x", what, calls, onRow, pks[0])
		}
		got[0].Release()
		mem.AssertSize(t, 0)
	}
}
