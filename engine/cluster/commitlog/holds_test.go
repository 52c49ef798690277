package commitlog_test

import (
	"context"
	"maps"
	"sync"
	"testing"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/storage/storetest"
	"github.com/seed04fbb902/weir/vnode"
)

// storesLog is a log that records the node stores it serves, by node.
type storesLog struct {
	*commitlog.Log
	mu     sync.Mutex
	stores map[int]*storage.Store
}

func watchStores(l *commitlog.Log) *storesLog {
	return &storesLog{Log: l, stores: map[int]*storage.Store{}}
}

func (l *storesLog) saw(node int, store *storage.Store) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stores[node] = store
}

func (l *storesLog) ServeNode(ctx context.Context, node int, store *storage.Store, req []byte) ([]byte, error) {
	l.saw(node, store)
	return l.Log.ServeNode(ctx, node, store, req)
}

func (l *storesLog) Hold(ctx context.Context, node int, store *storage.Store, needs map[uint32]*vnode.Bitmap) error {
	l.saw(node, store)
	return l.Log.Hold(ctx, node, store, needs)
}

// stores are the node stores the log served, by node.
func (l *storesLog) served() map[int]*storage.Store {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.stores)
}

// checkHolds checks stores, node stores of log's engine, against a whole store
// rebuilt from the log in dir: each is partial, at the log's sequence, and holds
// exactly the whole store's keys, values and row counts of the vnodes it holds, with
// the same metadata, and nothing of another vnode. It returns the vnodes the node
// stores hold together and how many of the tables' vnodes there are, summed over the
// nodes.
func checkHolds(t *testing.T, l engine.CommitLog, stores map[int]*storage.Store, dir string) (held, all int) {
	t.Helper()
	ctx := testContext(t)
	whole, err := storage.Open(dir, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	if _, err := l.CatchUp(ctx, whole); err != nil {
		t.Fatal(err)
	}
	seq, err := whole.AppliedSequence()
	if err != nil {
		t.Fatal(err)
	}
	wholeScan := storetest.RawScan(t, whole)
	if len(stores) == 0 {
		t.Fatal("no node store to check")
	}
	for node, s := range stores {
		if !s.Partial() {
			t.Fatalf("node %d's store in %s is whole", node, s.Dir())
		}
		if got, err := s.AppliedSequence(); err != nil || got != seq {
			t.Fatalf("node %d's store is at sequence %d (%v), the log at %d", node, got, err, seq)
		}
		holds := s.Holds()
		if stray := storetest.Stray(t, storetest.RawScan(t, s), holds); len(stray) > 0 {
			t.Fatalf("node %d's store holding %v holds %d entries of other vnodes, the first %s", node, holds, len(stray), stray[0])
		}
		want, got := storetest.Restrict(t, wholeScan, holds), storetest.Restrict(t, storetest.RawScan(t, s), holds)
		for i := range min(len(want), len(got)) {
			if want[i] != got[i] {
				t.Fatalf("node %d's store holding %v: key %d is %s, the whole store's %s (%d keys, the whole store %d of those vnodes)", node, holds, i, got[i], want[i], len(got), len(want))
			}
		}
		if len(want) != len(got) {
			t.Fatalf("node %d's store holding %v: %d keys, the whole store %d of those vnodes", node, holds, len(got), len(want))
		}
		for _, b := range holds {
			held += b.Len()
			all += b.Count()
		}
	}
	return held, all
}

// heldOnce checks that every vnode of every table the stores hold is held by one of
// them only: what a graph's actors read once no backfill reads a snapshot (each
// vnode of a state table is one actor's).
func heldOnce(t *testing.T, stores map[int]*storage.Store) {
	t.Helper()
	held := map[uint32]*vnode.Bitmap{}
	for node, s := range stores {
		for tb, b := range s.Holds() {
			h := held[tb]
			if h == nil {
				held[tb] = b.Clone()
				continue
			}
			if h.Intersects(b) {
				both, _ := h.And(b)
				t.Fatalf("vnodes %v of table %d are held by node %d's store and another's", both, tb, node)
			}
			held[tb], _ = h.Or(b)
		}
	}
}
