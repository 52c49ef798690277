package storage_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/internal/invariants"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

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
