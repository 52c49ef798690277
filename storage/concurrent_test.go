package storage_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// The state after epoch j of the concurrent workload: bid id (0 <= id < concIDs) is
// present iff (id+j)%5 != 0, with price j. Epoch 0 is the empty table. Every epoch
// changes every id (a price or its presence), so a view that mixed two epochs, or
// lost an older epoch's rows under a newer one's, would show it.
const concIDs = 240

func concPresent(id int64, j int) bool { return j > 0 && (id+int64(j))%5 != 0 }

func concOps(id int64, from, to int) []bidOp {
	old := bidVal{Price: int64(from), Channel: fmt.Sprint(from)}
	nv := bidVal{Price: int64(to), Channel: fmt.Sprint(to)}
	switch was, is := concPresent(id, from), concPresent(id, to); {
	case was && is:
		return []bidOp{{Op: vec.UpdateDelete, ID: id, V: old}, {Op: vec.UpdateInsert, ID: id, V: nv}}
	case is:
		return []bidOp{{Op: vec.Insert, ID: id, V: nv}}
	case was:
		return []bidOp{{Op: vec.Delete, ID: id, V: old}}
	}
	return nil
}

func epochIndex(e uint64) int {
	if e == 0 {
		return 0
	}
	return int(e>>16) - int(ep(0)>>16)
}

// half is the vnodes one writer owns, with the ids that live there.
type half struct {
	own  *vnode.Bitmap
	node int // the writer's node
	ids  map[uint16][]int64
	vns  []uint16
}

// checkHalf reads some vnodes (Iter) and ids (Get) of h through view and returns the
// epoch index the rows come from: it is an error when rows of two epochs appear, or
// the rows present are not exactly those of that epoch. -1: no row was present in what
// was read, which only tells the view is consistent with the ids read being absent.
func checkHalf(rng *rand.Rand, st *storage.StateTable, view *storage.View, h *half, place map[int64]uint16) (int, error) {
	j := -1
	agree := func(got int, what string) error {
		if j >= 0 && got != j {
			return fmt.Errorf("%s: rows of epochs %d and %d in one view", what, j, got)
		}
		j = got
		return nil
	}
	iterated := map[uint16]bidState{}
	for k := 0; k < 6; k++ {
		v := h.vns[rng.IntN(len(h.vns))]
		got := bidState{}
		if err := readBidVnode(st, view, v, place, got); err != nil {
			return 0, err
		}
		for id, val := range got {
			if err := agree(int(val.Price), fmt.Sprintf("vnode %d id %d", v, id)); err != nil {
				return 0, err
			}
			if val.Channel != fmt.Sprint(val.Price) {
				return 0, fmt.Errorf("id %d: channel %q with price %d", id, val.Channel, val.Price)
			}
		}
		iterated[v] = got
	}
	probes := map[int64]bool{}
	for k := 0; k < 6; k++ {
		v := h.vns[rng.IntN(len(h.vns))]
		id := h.ids[v][rng.IntN(len(h.ids[v]))]
		val, ok, err := st.Get(view, v, concKey(id))
		if err != nil {
			return 0, err
		}
		if ok {
			price, err := decodeBidPrice(val)
			if err != nil {
				return 0, fmt.Errorf("get of id %d: %w", id, err)
			}
			if err := agree(int(price), fmt.Sprintf("get of id %d", id)); err != nil {
				return 0, err
			}
		}
		probes[id] = ok
	}
	for v, got := range iterated {
		for _, id := range h.ids[v] {
			if _, ok := got[id]; ok != concPresent(id, j) {
				return 0, fmt.Errorf("vnode %d: id %d present=%v at epoch %d", v, id, ok, j)
			}
		}
	}
	for id, ok := range probes {
		if ok != concPresent(id, j) {
			return 0, fmt.Errorf("get of id %d: present=%v at epoch %d", id, ok, j)
		}
	}
	return j, nil
}

var concPKs sync.Map // id -> pk, filled before the goroutines start

func concKey(id int64) []byte {
	pk, _ := concPKs.Load(id)
	return pk.([]byte)
}

// decodeBidPrice decodes the price of a bid value.
func decodeBidPrice(val []byte) (int64, error) {
	b := array.NewInt64Builder(memory.NewGoAllocator())
	defer b.Release()
	if err := vec.NewGeneric(bidT).DecodeValues(bytesOf(val), vec.Projection{tables.BidColPrice}, []vec.Builder{b}); err != nil {
		return 0, err
	}
	a := b.NewInt64Array()
	defer a.Release()
	return a.Value(0), nil
}

// TestConcurrentViews runs one goroutine that writes, seals and checkpoints epochs on
// two nodes while reader goroutines take node views, store views and replicated-table
// views, iterate and Get. Every view must be internally consistent: for the vnodes of
// the reader's own node, the rows of one sealed epoch at or above the view's committed
// epoch; for the other node's vnodes and for committed-only views, exactly the rows of
// the view's committed epoch. Run it with -race.
func TestConcurrentViews(t *testing.T) {
	seed := vectest.Seed(t)
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	nodes := []*storage.Node{s.AddNode(), s.AddNode()}
	p := newBidPlacer()
	cut := bidT.VnodeCount / 2
	halves := []*half{
		{own: vnode.FromRange(bidT.VnodeCount, 0, cut), node: 0, ids: map[uint16][]int64{}},
		{own: vnode.FromRange(bidT.VnodeCount, cut, bidT.VnodeCount), node: 1, ids: map[uint16][]int64{}},
	}
	for id := int64(0); id < concIDs; id++ {
		v, pk := p.place(id)
		concPKs.Store(id, pk)
		for _, h := range halves {
			if h.own.Contains(v) {
				if len(h.ids[v]) == 0 {
					h.vns = append(h.vns, v)
				}
				h.ids[v] = append(h.ids[v], id)
			}
		}
	}
	place := p.vn
	var writers []*storage.StateTable
	for _, h := range halves {
		st, err := storage.NewStateTable(nodes[h.node], bidTableID, bidT, h.own)
		if err != nil {
			t.Fatal(err)
		}
		writers = append(writers, st)
	}

	epochs := budget(60, 40, 400)
	// The writer stores j in sealing before it seals epoch j, and in sealed once both
	// writers have: a view taken after sealed = j sees at least j, and no view sees
	// more than sealing.
	var sealing, sealedIdx atomic.Int64
	var done atomic.Bool
	var views, checkpoints atomic.Int64
	errc := make(chan error, 16)
	var wg sync.WaitGroup

	// The writer and checkpointer.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer done.Store(true)
		wrng := vectest.NewRand(seed + 1)
		for j := 1; j <= epochs; j++ {
			for hi, h := range halves {
				var ops []bidOp
				for _, vn := range h.vns {
					for _, id := range h.ids[vn] {
						ops = append(ops, concOps(id, j-1, j)...)
					}
				}
				c := bidChunk(mem, ops)
				err := writers[hi].Write(c)
				c.Release()
				if err != nil {
					errc <- err
					return
				}
			}
			sealing.Store(int64(j))
			for _, w := range writers {
				w.Seal(ep(j))
			}
			sealedIdx.Store(int64(j))
			if wrng.IntN(3) != 0 || j == epochs {
				if _, err := s.Checkpoint(ep(j)); err != nil {
					errc <- err
					return
				}
				checkpoints.Add(1)
			}
			if wrng.IntN(4) == 0 {
				time.Sleep(time.Duration(wrng.IntN(200)) * time.Microsecond)
			}
		}
	}()

	reader := func(r int) {
		defer wg.Done()
		rrng := vectest.NewRand(seed + 100 + uint64(r))
		sts := map[int]*storage.StateTable{}
		for n := range nodes {
			st, err := storage.NewStateTable(nodes[n], bidTableID, bidT, vnode.Full(bidT.VnodeCount))
			if err != nil {
				errc <- err
				return
			}
			sts[n] = st
		}
		rep, err := storage.NewReplicatedTable(s, bidTableID, bidT, vectest.AllColumns(bidT), vnode.Full(bidT.VnodeCount), mem)
		if err != nil {
			errc <- err
			return
		}
		for !done.Load() {
			kind := rrng.IntN(4)
			var view *storage.View
			var err error
			node := -1
			lo := sealedIdx.Load()
			switch kind {
			case 0, 1:
				node = kind
				view, err = nodes[node].View()
			case 2:
				view, err = s.View()
			default:
				view, err = rep.View()
			}
			if err != nil {
				errc <- err
				return
			}
			c := epochIndex(view.Epoch)
			for hi, h := range halves {
				var j int
				if kind == 3 {
					// Read through the replicated table's iterator.
					j, err = checkReplicated(rrng, rep, view, h)
				} else {
					st := sts[max(node, 0)]
					j, err = checkHalf(rrng, st, view, h, place)
				}
				if err != nil {
					errc <- fmt.Errorf("reader %d, view kind %d at committed epoch %d, half %d: %w", r, kind, c, hi, err)
					view.Release()
					return
				}
				hi64 := sealing.Load()
				switch {
				case j < 0: // nothing present in what was read: no epoch to check
				case node == h.node:
					if j < c || int64(j) < lo || int64(j) > hi64 {
						err = fmt.Errorf("node view sees epoch %d of its own node, committed %d, sealed %d..%d", j, c, lo, hi64)
					}
				case j != c:
					err = fmt.Errorf("sees epoch %d, its committed epoch is %d", j, c)
				}
				if err != nil {
					errc <- fmt.Errorf("reader %d, view kind %d, half %d: %w", r, kind, hi, err)
					view.Release()
					return
				}
			}
			view.Release()
			views.Add(1)
		}
	}
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go reader(r)
	}
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if s.CommittedEpoch() != ep(epochs) {
		t.Fatalf("committed epoch %d", s.CommittedEpoch())
	}
	t.Logf("%d epochs, %d checkpoints, %d views checked", epochs, checkpoints.Load(), views.Load())
	if views.Load() < 10 {
		t.Errorf("only %d views checked", views.Load())
	}
}

// checkReplicated is checkHalf through a replicated table's iterator (committed data
// only: the table is never written).
func checkReplicated(rng *rand.Rand, rep *storage.ReplicatedTable, view *storage.View, h *half) (int, error) {
	j := -1
	iterated := map[uint16]map[string]bool{}
	for k := 0; k < 6; k++ {
		v := h.vns[rng.IntN(len(h.vns))]
		it, err := rep.Iter(view, v, nil)
		if err != nil {
			return 0, err
		}
		got := map[string]bool{}
		for it.Next() {
			price, err := decodeBidPrice(it.Value())
			if err == nil && j >= 0 && int(price) != j {
				err = fmt.Errorf("vnode %d: rows of epochs %d and %d in one view", v, j, price)
			}
			if err != nil {
				it.Close()
				return 0, err
			}
			j = int(price)
			got[string(it.PK())] = true
		}
		if err := it.Close(); err != nil {
			return 0, err
		}
		iterated[v] = got
	}
	for v, got := range iterated {
		n := 0
		for _, id := range h.ids[v] {
			if got[string(concKey(id))] != concPresent(id, j) {
				return 0, fmt.Errorf("vnode %d: id %d present=%v at epoch %d", v, id, got[string(concKey(id))], j)
			}
			if concPresent(id, j) {
				n++
			}
		}
		if n != len(got) {
			return 0, fmt.Errorf("vnode %d: %d rows, want %d", v, len(got), n)
		}
	}
	return j, nil
}

// Close waits for calls that read pebble; calls racing with it get an error, never a
// pebble panic.
func TestCloseRacingReaders(t *testing.T) {
	for trial := 0; trial < 10; trial++ {
		s, err := storage.Open("db", testOptions(vfs.NewMem()))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if v, err := s.View(); err == nil {
						v.Release()
					}
					s.RowCount(9, 0)
					s.TableRowCount(9)
					s.Catalog()
				}
			}()
		}
		time.Sleep(time.Millisecond)
		// Views may be open at this instant: Close then reports leaked snapshots, which
		// is the documented contract, not a failure of this test.
		s.Close()
		close(stop)
		wg.Wait()
		if _, err := s.RowCount(9, 0); err == nil {
			t.Fatal("RowCount after Close succeeded")
		}
	}
}
