package commitlog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/engine/cluster/control"
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
	// nodes are the stores as a log's commit reaches them: each through its
	// NodeServer, here the log's own.
	nodes := func(stores ...*storage.Store) []engine.CommitNode {
		var out []engine.CommitNode
		for i, s := range stores {
			out = append(out, engine.CommitNode{Node: i, Call: func(ctx context.Context, req []byte) ([]byte, error) {
				return l.ServeNode(ctx, i, s, req)
			}})
		}
		return out
	}
	// The refused commit's objects stay in the bucket, so the next commits are of
	// later epochs (an engine fails at a refused commit, and its successor runs as
	// a new incarnation).
	const e1, e2, e3 = 1 << 16, 2 << 16, 3 << 16

	// Node 0 owns vnodes 0 to 3 and writes 0 and 2; node 1 claims vnode 1 too.
	main, x, y := open("engine"), open("x"), open("y")
	write(x, vnode.FromRange(8, 0, 4), e1, 0, 2)
	write(y, vnode.NewBitmap(8, 1), e1, 1)
	_, err := l.Commit(ctx, engine.CommitRequest{Store: main, Nodes: nodes(x, y), Epoch: e1, Generation: 1})
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
	if _, err := l.Commit(ctx, engine.CommitRequest{Store: main, Nodes: nodes(x, y), Epoch: e2, Generation: 1}); err != nil {
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
	_, err = l.Commit(ctx, engine.CommitRequest{Store: main, Nodes: nodes(x, z), Epoch: e3, Generation: 1})
	if want := fmt.Sprintf("node 1 (store in %s): export epoch %d: the store applied sequence 0", filepath.Join(dir, "z"), uint64(e3)); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("commit with a node store behind: %v, want an error naming %q", err, want)
	}
	if seq := committed(); seq != 1 {
		t.Fatalf("the refused commit moved the log to sequence %d", seq)
	}
}

// losingLog is a log whose node 1 loses its control stream at its at-th request of
// the next checkpoint (armed): 1 is its export, 2 the apply of the commit after the
// commit point. With gone, the node then answers an error instead of serving it.
type losingLog struct {
	*commitlog.Log
	ctl   *control.Local
	at    int64
	gone  bool
	armed atomic.Bool
	calls atomic.Int64
	lost  error
}

func (l *losingLog) ServeNode(ctx context.Context, node int, store *storage.Store, req []byte) ([]byte, error) {
	if node == 1 && l.armed.Load() && l.calls.Add(1) == l.at {
		l.armed.Store(false)
		l.lost = l.ctl.Lose(1)
		if l.gone {
			return nil, errors.New("node 1 is gone before it served the request")
		}
	}
	return l.Log.ServeNode(ctx, node, store, req)
}

// losingEngine opens an engine with node stores over control streams, committing
// through a losingLog l, and creates kv in it.
func losingEngine(t *testing.T, at int64, gone bool) (*cluster, *control.Local, *losingLog, *engine.Engine) {
	t.Helper()
	c := newCluster(t)
	ctl, err := control.NewLocal()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	l := &losingLog{Log: c.open(t, 1), ctl: ctl, at: at, gone: gone}
	e := openEngineControl(t, filepath.Join(t.TempDir(), "e"), l, true, ctl)
	t.Cleanup(func() { e.Close() })
	if err := e.CreateTable(testContext(t), kv, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	return c, ctl, l, e
}

// A node whose control stream is lost while it exports its part of a checkpoint
// leaves nothing committed: the checkpoint fails saying so (engine.ErrNotCommitted),
// the engine recovers from its last checkpoint instead of failing, every node
// catches up anew, and the next checkpoint commits the lost round's write, sent
// again, with what is written after.
func TestNodeLostMidCommit(t *testing.T) {
	c, ctl, l, e := losingEngine(t, 1, false)
	ctx := testContext(t)
	write(t, e, e.Insert, []any{1, "a", 10}, []any{2, "b", 20}, []any{3, "c", 30})
	committed := checkpoint(t, e)
	want := scan(t, e, "kv")
	before, err := c.meta.Committed(ctx)
	if err != nil {
		t.Fatal(err)
	}

	write(t, e, e.Insert, []any{4, "d", 40})
	l.armed.Store(true)
	_, err = e.WaitCheckpoint(ctx)
	if l.lost != nil {
		t.Fatalf("lose node 1: %v", l.lost)
	}
	if !errors.Is(err, engine.ErrNotCommitted) || !errors.Is(err, engine.ErrNodeLost) || !strings.Contains(err.Error(), "node 1") {
		t.Fatalf("checkpoint with node 1 lost mid-export: %v, want an error naming node 1, lost, and not committed", err)
	}
	t.Log(err)
	if after, err := c.meta.Committed(ctx); err != nil || after != before {
		t.Fatalf("the failed checkpoint moved the log from %+v to %+v (%v)", before, after, err)
	}
	if got := e.CommittedEpoch(); got != committed {
		t.Fatalf("committed epoch %d after the failed checkpoint, want %d", got, committed)
	}
	// Recovered, not failed: the write of the lost round is not committed yet; the
	// recovery sent it again, and the next checkpoint commits it with the next ones.
	if got := scan(t, e, "kv"); !slices.Equal(got, want) {
		t.Fatalf("after the recovery kv holds %v, want %v", got, want)
	}
	write(t, e, e.Insert, []any{5, "e", 50})
	checkpoint(t, e)
	want = append(want, fmt.Sprint([]string{"4", "d", "40"}), fmt.Sprint([]string{"5", "e", "50"}))
	if got := scan(t, e, "kv"); !slices.Equal(got, want) {
		t.Fatalf("after the next checkpoint kv holds %v, want %v", got, want)
	}
	if ctl.Lost() == 0 {
		t.Fatal("no control stream was lost")
	}
}

// A node whose control stream is lost after the commit point, before it applied the
// commit, does not fail the engine: the checkpoint is committed and returned as such,
// the engine's store holds it, and the recovery has the node catch up from the log,
// so that a view created after it backfills every committed row from the nodes'
// stores.
func TestNodeLostAfterCommitPoint(t *testing.T) {
	_, ctl, l, e := losingEngine(t, 2, true)
	ctx := testContext(t)
	var rows [][]any
	for k := range 64 {
		rows = append(rows, []any{k, fmt.Sprint("g", k%5), k * 10})
	}
	write(t, e, e.Insert, rows...)
	l.armed.Store(true)
	ep, err := e.WaitCheckpoint(ctx)
	if l.lost != nil {
		t.Fatalf("lose node 1: %v", l.lost)
	}
	if err != nil || e.CommittedEpoch() != ep {
		t.Fatalf("checkpoint with node 1 lost at its apply: %v (committed epoch %d, returned %d), want it committed", err, e.CommittedEpoch(), ep)
	}
	if ctl.Lost() == 0 {
		t.Fatal("no control stream was lost")
	}
	got := scan(t, e, "kv")
	if len(got) != len(rows) {
		t.Fatalf("kv holds %d rows after the checkpoint, want its %d", len(got), len(rows))
	}
	// Every node's store holds the commit: a view's backfill reads them.
	if err := e.CreateMV(ctx, "copy", engine.Scan("kv"), engine.MVOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	checkpoint(t, e)
	if view := scan(t, e, "copy"); !slices.Equal(view, got) {
		t.Fatalf("a view backfilled after the recovery holds %d rows, kv %d", len(view), len(got))
	}
}
