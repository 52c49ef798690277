package commitlog_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// A commit of node stores is refused before its commit point when it could not be
// applied: when two nodes' objects overlap (both claim a vnode of a table), and when a
// node store is not at the engine store's sequence (it would skip the deltas
// between). The log's version does not move, and no store keeps an ingest file.
func TestNodeStoresRefused(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	l := c.open(t, 1)
	dir := t.TempDir()
	open := func(name string) *storage.Store {
		s, err := storage.Open(filepath.Join(dir, name), storage.Options{CacheSize: 1 << 20, MemTableSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	tab := *kv
	tab.VnodeCount = 8
	// write seals, as epoch e, a put of key "a" in each of vnodes to table 7 of a
	// new node of s whose writer owns owned.
	write := func(s *storage.Store, owned *vnode.Bitmap, e uint64, vnodes ...uint16) {
		t.Helper()
		st, err := storage.NewStateTable(s.AddNode(), 7, &tab, owned)
		if err != nil {
			t.Fatal(err)
		}
		var ops []vec.Op
		var keys, vals vec.Bytes
		for range vnodes {
			ops = append(ops, vec.Insert)
			keys.Append([]byte("a"))
			vals.Append([]byte("1"))
		}
		if err := st.WriteEncoded(ops, nil, vnodes, &keys, &vals); err != nil {
			t.Fatal(err)
		}
		if err := st.Seal(e); err != nil {
			t.Fatal(err)
		}
	}
	committed := func() uint64 {
		v, err := c.meta.Committed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v.Seq
	}
	// The refused commit's objects stay in the bucket, so the next commits are of
	// later epochs (an engine fails at a refused commit, and its successor runs as
	// a new incarnation).
	const e1, e2, e3 = 1 << 16, 2 << 16, 3 << 16

	// Node 0 owns vnodes 0 to 3 and writes 0 and 2; node 1 claims vnode 1 too.
	main, x, y := open("engine"), open("x"), open("y")
	write(x, vnode.FromRange(8, 0, 4), e1, 0, 2)
	write(y, vnode.NewBitmap(8, 1), e1, 1)
	_, err := l.Commit(ctx, engine.CommitRequest{Store: main, Nodes: []*storage.Store{x, y}, Epoch: e1, Generation: 1})
	if err == nil || !strings.Contains(err.Error(), "overlap") || !strings.Contains(err.Error(), "own") {
		t.Fatalf("commit of overlapping node stores: %v", err)
	}
	t.Log(err)
	if seq := committed(); seq != 0 {
		t.Fatalf("the refused commit moved the log to sequence %d", seq)
	}
	for _, s := range []*storage.Store{x, y} {
		if files, err := os.ReadDir(filepath.Join(s.Dir(), storage.IngestDirName)); err != nil || len(files) != 0 {
			t.Fatalf("%s keeps ingest files %v (%v) after the refused commit", s.Dir(), files, err)
		}
		if st := s.Staged(); st.Catalog != nil || st.Drops != nil {
			t.Fatalf("%s keeps staged changes %v after the refused commit", s.Dir(), st)
		}
	}

	// Two node stores that own halves commit, and every store applies the commit.
	main, x, y = open("engine2"), open("x2"), open("y2")
	write(x, vnode.FromRange(8, 0, 4), e2, 0, 2)
	write(y, vnode.FromRange(8, 4, 8), e2, 5)
	if _, err := l.Commit(ctx, engine.CommitRequest{Store: main, Nodes: []*storage.Store{x, y}, Epoch: e2, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	for i, s := range []*storage.Store{main, x, y} {
		if n, err := s.TableRowCount(7); err != nil || n != 3 || s.CommittedEpoch() != e2 {
			t.Fatalf("store %d: %d rows (%v) at epoch %d after the commit, want 3 at %d", i, n, err, s.CommittedEpoch(), e2)
		}
	}
	// A node store that starts empty beside them has not caught up: refused.
	z := open("z")
	write(z, vnode.FromRange(8, 4, 8), e3, 6)
	_, err = l.Commit(ctx, engine.CommitRequest{Store: main, Nodes: []*storage.Store{x, z}, Epoch: e3, Generation: 1})
	if want := fmt.Sprintf("the store of node 1 in %s applied sequence 0", filepath.Join(dir, "z")); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("commit with a node store behind: %v, want an error naming %q", err, want)
	}
	if seq := committed(); seq != 1 {
		t.Fatalf("the refused commit moved the log to sequence %d", seq)
	}
}
