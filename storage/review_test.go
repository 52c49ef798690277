package storage_test

import (
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/internal/invariants"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

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

// A snapshot source built on an older replicated view sees the private epochs that
// view covered, as ReplicatedTable.Iter does, even after a newer view dropped them.
func TestReplicatedSourceOlderView(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	s.AddNode()
	kt := kvTable(1)
	r, err := storage.NewReplicatedTable(s, 5, kt, []int{0, 1, 2, 3}, vnode.Full(1), mem)
	if err != nil {
		t.Fatal(err)
	}
	c := kvChunk(mem, kt, []int64{1, 2, 3})
	defer c.Release()
	if err := r.WriteChunk(c); err != nil {
		t.Fatal(err)
	}
	r.Seal(ep(1))
	v1, err := r.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v1.Release()
	if _, err := s.Checkpoint(ep(1)); err != nil {
		t.Fatal(err)
	}
	v2, err := r.View() // drops private epoch 1: the committed epoch covers it
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Release()
	count := func(src storage.VnodeSource) int {
		it, err := src.Iter(0, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		n := 0
		for it.Next() {
			n++
		}
		return n
	}
	if n := count(storage.ReplicatedSource(r, v1)); n != 3 {
		t.Fatalf("source on the older view sees %d rows, want 3", n)
	}
	if _, err := storage.ReplicatedSource(r, nil).Iter(0, nil); err == nil {
		t.Fatal("a source on a nil view iterated")
	}
	if _, err := r.Iter(nil, 0, nil); err == nil {
		t.Fatal("Iter on a nil view succeeded")
	}
}

// Merging committed rows with an overlapping sealed run allocates nothing per row.
func TestMergeIterAllocations(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	n := s.AddNode()
	kt := kvTable(1)
	st, err := storage.NewStateTable(n, 6, kt, vnode.Full(1))
	if err != nil {
		t.Fatal(err)
	}
	ks := make([]int64, 2000)
	for i := range ks {
		ks[i] = int64(i)
	}
	c := kvChunk(mem, kt, ks)
	defer c.Release()
	if err := st.Write(c); err != nil {
		t.Fatal(err)
	}
	st.Seal(ep(1))
	if _, err := s.Checkpoint(ep(1)); err != nil {
		t.Fatal(err)
	}
	one := kvChunk(mem, kt, []int64{1000})
	defer one.Release()
	if err := st.Write(one); err != nil {
		t.Fatal(err)
	}
	st.Seal(ep(2)) // an overlapping run: the merge path
	view, err := n.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	allocs := testing.AllocsPerRun(5, func() {
		it, err := st.Iter(view, 0, storage.IterBounds{})
		if err != nil {
			t.Fatal(err)
		}
		rows := 0
		for it.Next() {
			rows++
		}
		it.Close()
		if rows != len(ks) {
			t.Fatalf("%d rows, want %d", rows, len(ks))
		}
	})
	if allocs > 50 && !invariants.RaceEnabled {
		t.Fatalf("%.0f allocations to merge %d rows: some are per row", allocs, len(ks))
	}
	if _, _, err := st.Get(nil, 0, kvPK(kt, 1)); err == nil {
		t.Fatal("Get on a nil view succeeded")
	}
}
