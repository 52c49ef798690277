package storage_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// WaitCommitted returns at once for a committed epoch, blocks until a checkpoint
// reaches the epoch, honours ctx, and fails when the store closes.
func TestWaitCommitted(t *testing.T) {
	s := openStore(t, vfs.NewMem())
	ctx := context.Background()
	if err := s.WaitCommitted(ctx, 0); err != nil {
		t.Fatalf("wait for epoch 0: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.WaitCommitted(ctx, ep(2)) }()
	if _, err := s.Checkpoint(ep(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("returned (%v) before epoch 2 was committed", err)
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := s.Checkpoint(ep(2)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("wait: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- s.WaitCommitted(cctx, ep(9)) }()
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("cancelled wait: %v", err)
	}

	go func() { done <- s.WaitCommitted(ctx, ep(9)) }()
	time.Sleep(5 * time.Millisecond)
	s.Close()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("wait on a closed store: %v", err)
	}
}

// DropUncommitted discards sealed runs: a node view then shows only committed rows.
func TestDropUncommitted(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	n := s.AddNode()
	kv := kvTable(8)
	st, err := storage.NewStateTable(n, 3, kv, vnode.Full(8))
	if err != nil {
		t.Fatal(err)
	}
	write := func(ks ...int64) {
		c := kvChunk(mem, kv, ks)
		defer c.Release()
		if err := st.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	write(1, 2)
	if err := st.Seal(ep(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint(ep(1)); err != nil {
		t.Fatal(err)
	}
	write(3)
	if err := st.Seal(ep(2)); err != nil {
		t.Fatal(err)
	}
	if n.UncommittedBytes() == 0 {
		t.Fatal("no uncommitted bytes after a seal")
	}
	s.DropUncommitted()
	if b := n.UncommittedBytes(); b != 0 {
		t.Fatalf("%d uncommitted bytes after DropUncommitted", b)
	}
	view, err := n.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	for k, want := range map[int64]bool{1: true, 2: true, 3: false} {
		v := vnodeOfKV(t, kv, k)
		_, ok, err := st.Get(view, v, kvPK(kv, k))
		if err != nil || ok != want {
			t.Errorf("row %d: found=%v err=%v, want found=%v", k, ok, err, want)
		}
	}
}

// StageDropTable deletes a table's rows and row counts in the next checkpoint, and
// leaves other tables alone; runs of the dropped table still on nodes are not written.
func TestStageDropTable(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	s := openStore(t, vfs.NewMem())
	n := s.AddNode()
	kv := kvTable(4)
	a, _ := storage.NewStateTable(n, 3, kv, vnode.Full(4))
	b, _ := storage.NewStateTable(n, 4, kv, vnode.Full(4))
	for _, st := range []*storage.StateTable{a, b} {
		c := kvChunk(mem, kv, []int64{1, 2, 3, 4, 5})
		if err := st.Write(c); err != nil {
			t.Fatal(err)
		}
		c.Release()
		if err := st.Seal(ep(1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Checkpoint(ep(1)); err != nil {
		t.Fatal(err)
	}
	c := kvChunk(mem, kv, []int64{6})
	if err := a.Write(c); err != nil {
		t.Fatal(err)
	}
	c.Release()
	if err := a.Seal(ep(2)); err != nil {
		t.Fatal(err)
	}
	if err := s.StageDropTable(storage.MetaTable); err == nil {
		t.Fatal("dropping the metadata table was accepted")
	}
	if err := s.StageDropTable(3); err != nil {
		t.Fatal(err)
	}
	s.SetCatalog("t3", nil)
	if _, err := s.Checkpoint(ep(2)); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[uint32]int64{3: 0, 4: 5} {
		got, err := s.TableRowCount(table)
		if err != nil || got != want {
			t.Errorf("table %d: %d rows (err %v), want %d", table, got, err, want)
		}
	}
	view, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Release()
	src := storage.ViewSource(view, 3, kv)
	for v := uint16(0); v < 4; v++ {
		it, err := src.Iter(v, nil)
		if err != nil {
			t.Fatal(err)
		}
		if it.Next() {
			t.Errorf("dropped table 3 still has a row in vnode %d", v)
		}
		it.Close()
	}
}

// vnodeOfKV is the vnode of kv row (k, "x").
func vnodeOfKV(t *testing.T, kv *schema.Table, k int64) uint16 {
	t.Helper()
	mem := memory.NewGoAllocator()
	c := kvChunk(mem, kv, []int64{k})
	defer c.Release()
	vn := make([]uint16, 1)
	vec.For(kv).Vnodes(c, vn)
	return vn[0]
}
