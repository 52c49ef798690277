package storage_test

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// A seal at or below the committed epoch breaks the barrier protocol: it is refused,
// and the writes stay unsealed, to be sealed at a valid epoch and committed.
func TestSealBelowCommittedIsRefused(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	n := s.AddNode()
	kt := kvTable(8)
	st, err := storage.NewStateTable(n, 7, kt, vnode.Full(kt.VnodeCount))
	if err != nil {
		t.Fatal(err)
	}
	c := kvChunk(mem, kt, []int64{1, 2, 3})
	defer c.Release()
	if err := st.Write(c); err != nil {
		t.Fatal(err)
	}
	if err := st.Seal(ep(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint(ep(2)); err != nil {
		t.Fatal(err)
	}
	c2 := kvChunk(mem, kt, []int64{4})
	defer c2.Release()
	if err := st.Write(c2); err != nil {
		t.Fatal(err)
	}
	for _, e := range []uint64{ep(1), ep(2)} {
		err := st.Seal(e)
		if err == nil || !strings.Contains(err.Error(), "at or below the committed or committing epoch") {
			t.Fatalf("Seal(%d) after committing %d = %v, want a refusal", e, ep(2), err)
		}
	}
	if st.UnsealedBytes() == 0 {
		t.Fatal("a refused seal lost the writes")
	}
	if err := st.Seal(ep(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint(ep(3)); err != nil {
		t.Fatal(err)
	}
	var total int64
	for v := 0; v < kt.VnodeCount; v++ {
		c, err := s.RowCount(7, uint16(v))
		if err != nil {
			t.Fatal(err)
		}
		total += c
	}
	if total != 4 {
		t.Fatalf("%d rows committed, want 4", total)
	}
}
