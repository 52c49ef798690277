package commitlog_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/engine/cluster/control"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/storage"
)

// views are the test's views over kv: a filter and projection, an aggregate, and
// one that the workload drops.
var views = []struct {
	name string
	plan engine.Plan
}{
	{"big", engine.Project(engine.Filter(engine.Scan("kv"), engine.Call("greater", engine.Column("n"), engine.Int(50))),
		engine.As(engine.Column("v"), "v"), engine.As(engine.Column("n"), "n"))},
	{"byv", engine.Aggregate(engine.Scan("kv"), []string{"v"}, engine.Agg("count_star", "", "c"), engine.Agg("sum", "n", "s"))},
	{"doomed", engine.Filter(engine.Scan("kv"), engine.Call("greater", engine.Column("n"), engine.Int(10)))},
	{"joined", engine.Join(engine.Scan("kv"),
		engine.Project(engine.Aggregate(engine.Scan("kv"), []string{"v"}, engine.Agg("count_star", "", "c")),
			engine.As(engine.Column("v"), "gv"), engine.As(engine.Column("c"), "c")),
		[]string{"v"}, []string{"gv"}, nil)},
}

// pair is the same seeded workload applied to an engine committing through a log
// and to an embedded one committing into its directory.
type pair struct {
	t    *testing.T
	c    *cluster
	base string // the log's engines' directories are in it
	log  *commitlog.Log
	// watch is log, recording the node stores it serves (with nodeStores).
	watch  *storesLog
	remote *engine.Engine
	local  *engine.Engine
	dirs   int
	// nodeStores gives the log's engine a store per node (engine.Options.NodeStores).
	nodeStores bool
	// ctl, when set, reaches the log's engine's nodes over control streams.
	ctl *control.Local
}

func (p *pair) both(f func(e *engine.Engine)) {
	f(p.remote)
	f(p.local)
}

// same checks that both engines hold the same rows in every table and view, the
// same committed progress rows of every view's backfill, and the same upstream row
// counts.
func (p *pair) same(what string, names ...string) {
	p.t.Helper()
	for _, n := range names {
		want, got := scan(p.t, p.local, n), scan(p.t, p.remote, n)
		if !slices.Equal(want, got) {
			p.t.Fatalf("%s: %s over the log holds %d rows, embedded %d:\nlog      %v\nembedded %v", what, n, len(got), len(want), got, want)
		}
		if n == "kv" {
			continue
		}
		want, got = progressRows(p.t, p.local, n), progressRows(p.t, p.remote, n)
		if !slices.Equal(want, got) {
			p.t.Fatalf("%s: the progress of %s over the log is\n%v\nembedded\n%v", what, n, got, want)
		}
	}
	rows := func(e *engine.Engine) []string {
		var out []string
		for _, j := range e.Progress() {
			out = append(out, fmt.Sprintf("%s/%s: %d upstream rows, %d consumed, done %v", j.Name, j.Upstream, j.UpstreamRows, j.RowsConsumed, j.Done))
		}
		slices.Sort(out)
		return out
	}
	if want, got := rows(p.local), rows(p.remote); !slices.Equal(want, got) {
		p.t.Fatalf("%s: the jobs' progress over the log is\n%v\nembedded\n%v", what, got, want)
	}
}

// progressRows are view name's committed progress rows, without the actors that own
// them (placement differs between the engines), as text.
func progressRows(t *testing.T, e *engine.Engine, name string) []string {
	t.Helper()
	ps, err := e.VnodeProgress(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(ps))
	for i, v := range ps {
		out[i] = fmt.Sprintf("scan %d of %s vnode %d: %v at %x, %d rows", v.Scan, v.Upstream, v.Vnode, v.State, v.Position, v.Rows)
	}
	return out
}

// reopenRemote crashes the log's engine and its log, and opens both again with the
// engine in a new, empty directory (the engine rebuilds its copy from the log), or
// in the same one when inPlace (it catches up from what the directory applied).
func (p *pair) reopenRemote(inPlace bool) {
	p.t.Helper()
	if err := p.remote.Crash(); err != nil {
		p.t.Fatal(err)
	}
	if err := p.log.Close(); err != nil {
		p.t.Fatal(err)
	}
	p.log = p.c.open(p.t, 1)
	if !inPlace {
		p.dirs++
	}
	p.remote = openEngineControl(p.t, filepath.Join(p.base, fmt.Sprint("copy", p.dirs)), p.engineLog(), p.nodeStores, p.control())
}

// engineLog is the log the log's engine commits through: with node stores, one that
// records them (p.watch).
func (p *pair) engineLog() engine.CommitLog {
	if !p.nodeStores {
		return p.log
	}
	p.watch = watchStores(p.log)
	return p.watch
}

// control is the log's engine's Control: nil without one.
func (p *pair) control() engine.Control {
	if p.ctl == nil {
		return nil
	}
	return p.ctl
}

// TestEquivalence runs a seeded workload of inserts, updates and deletes, view
// creations and a drop on an engine committing through the log and on an embedded
// engine, checkpoint by checkpoint: both hold the same rows, the same progress rows
// and the same row counts after every checkpoint, after the log's engine restarts in
// an empty directory (rebuilt from the log alone), and at the end; the bucket then
// holds exactly the objects the log references. Seeds 3 to 5 give the log's engine
// a store per node, which every checkpoint exports apart and commits together; seed 5
// reaches the nodes over control streams, so that every build, barrier, export,
// apply and recovery of a node travels as frames.
func TestEquivalence(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			nodeStores := seed > 2
			t.Logf("seed %d, node stores %v, control streams %v", seed, nodeStores, seed == 5)
			rng := rand.New(rand.NewPCG(seed, 0xc0117))
			c := newCluster(t)
			p := &pair{t: t, c: c, base: t.TempDir(), log: c.open(t, 1), nodeStores: nodeStores}
			if seed == 5 {
				l, err := control.NewLocal()
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				p.ctl = l
			}
			p.remote = openEngineControl(t, filepath.Join(p.base, "copy0"), p.engineLog(), nodeStores, p.control())
			if nodeStores {
				for i := range 2 {
					if _, err := os.Stat(filepath.Join(p.base, "copy0", storage.NodeStoresDirName, fmt.Sprintf("node-%d", i), "LOCK")); err != nil {
						t.Fatalf("no store of node %d: %v", i, err)
					}
				}
			}
			p.local = openEngine(t, filepath.Join(t.TempDir(), "embedded"), nil)
			defer func() { p.remote.Close(); p.local.Close() }()
			p.both(func(e *engine.Engine) {
				if err := e.CreateTable(testContext(t), kv, engine.TableOptions{}); err != nil {
					t.Fatal(err)
				}
			})
			live := map[int64]bool{}
			names := []string{"kv"}
			partly := false         // a node store held only some vnodes of a table
			heldAt := map[int]int{} // the vnodes the node stores held after each round
			for round := 1; round <= 10; round++ {
				var ins, upd, del [][]any
				for range 40 + rng.IntN(80) {
					k := int64(rng.IntN(300))
					row := []any{k, fmt.Sprint("g", rng.IntN(7)), int64(rng.IntN(100))}
					switch {
					case !live[k]:
						ins, live[k] = append(ins, row), true
					case rng.IntN(3) == 0:
						del, live[k] = append(del, row), false
					default:
						upd = append(upd, row)
					}
				}
				ins, upd, del = dedup(ins), dedup(upd), dedup(del)
				p.both(func(e *engine.Engine) {
					if len(ins) > 0 {
						write(t, e, e.Insert, ins...)
					}
					if len(upd) > 0 {
						write(t, e, e.Update, upd...)
					}
					if len(del) > 0 {
						write(t, e, e.Delete, del...)
					}
				})
				switch round {
				case 2, 3, 4, 5:
					// Committed first and built before the next writes, so that each
					// engine's backfill reads the same snapshot and no change beside
					// it: the progress rows are then the same.
					v := views[round-2]
					p.both(func(e *engine.Engine) {
						checkpoint(t, e)
						if err := e.CreateMV(testContext(t), v.name, v.plan, engine.MVOptions{Parallelism: 2}); err != nil {
							t.Fatalf("create %s: %v", v.name, err)
						}
						if err := e.WaitBackfill(testContext(t), v.name); err != nil {
							t.Fatalf("backfill %s: %v", v.name, err)
						}
					})
					names = append(names, v.name)
				case 6:
					p.both(func(e *engine.Engine) {
						if err := e.DropMV(testContext(t), "doomed"); err != nil {
							t.Fatal(err)
						}
					})
					names = slices.DeleteFunc(names, func(n string) bool { return n == "doomed" })
				case 7:
					// Vnodes move between actors, and so between nodes: with node
					// stores, the committed state of a moved vnode is in its new
					// node's store already.
					p.both(func(e *engine.Engine) {
						for name, n := range map[string]int{"joined": 3, "byv": 1} {
							if err := e.RescheduleMV(testContext(t), name, n); err != nil {
								t.Fatalf("reschedule %s to %d: %v", name, n, err)
							}
						}
					})
				}
				p.both(func(e *engine.Engine) { checkpoint(t, e) })
				p.same(fmt.Sprintf("round %d", round), names...)
				if nodeStores {
					// Each node's store holds the committed state of the vnodes
					// its actors read, and only of those.
					held, all := checkHolds(t, p.log, p.watch.served(), filepath.Join(t.TempDir(), "whole"))
					t.Logf("round %d: the node stores hold %d of their tables' %d vnodes", round, held, all)
					partly = partly || held < all
					heldAt[round] = held
					if round >= 9 {
						// Every view is done: no node holds its upstream's vnodes
						// for a snapshot, so each vnode is held once.
						heldOnce(t, p.watch.served())
					}
				}
				if round == 5 || round == 8 {
					p.reopenRemote(round == 8)
					p.same(fmt.Sprintf("round %d, rebuilt from the log", round), names...)
				}
			}
			if nodeStores && !partly {
				t.Fatal("every node store held every vnode of the tables it held")
			}
			// The rescale of round 7 adds vnodes to the stores, which keep the
			// old ones until the recovery of round 8's reopen in place: its first
			// commit gives them up.
			if nodeStores && heldAt[9] >= heldAt[7] {
				t.Fatalf("the node stores held %d vnodes after the rescale and %d after the recovery", heldAt[7], heldAt[9])
			}
			checkBucket(t, c)
			// Every delta carries the row count changes its exports counted, which
			// the rebuilt stores applied (p.same compared their row counts).
			ds, err := c.meta.Deltas(testContext(t), 0)
			if err != nil {
				t.Fatal(err)
			}
			counted := 0
			for _, d := range ds {
				if !d.Counted {
					t.Fatalf("delta %d (epoch %d) has no row count changes", d.Seq, d.Epoch)
				}
				counted += len(d.RowDeltas)
			}
			if counted == 0 {
				t.Fatalf("no delta of %d changed a row count", len(ds))
			}
			if p.ctl != nil && p.ctl.Calls() == 0 {
				t.Fatal("no request reached a node over its control stream")
			}
		})
	}
}

// dedup keeps the last row of each key (a chunk may not write one key twice).
func dedup(rows [][]any) [][]any {
	seen := map[any]int{}
	var out [][]any
	for _, r := range rows {
		if i, ok := seen[r[0]]; ok {
			out[i] = r
			continue
		}
		seen[r[0]] = len(out)
		out = append(out, r)
	}
	return out
}

// checkBucket checks that the bucket holds exactly the objects the log references.
func checkBucket(t *testing.T, c *cluster) {
	t.Helper()
	ctx := testContext(t)
	refs, err := commitlog.Referenced(ctx, c.meta)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(maps.Keys(refs))
	got := bucketObjects(t, c.bucket)
	if len(want) == 0 || !slices.Equal(want, got) {
		t.Fatalf("the bucket holds %d objects %v, the log references %d %v", len(got), got, len(want), want)
	}
}

// A second log beside the first is refused while the first holds the lease, naming
// its holder; once the first closes (releasing it), the second opens.
func TestSecondLeaderRefused(t *testing.T) {
	c := newCluster(t)
	first := c.open(t, 1)
	_, err := commitlog.Open(testContext(t), c.config(2))
	if !errors.Is(err, meta.ErrLeaseHeld) || !strings.Contains(err.Error(), `"node-1"`) || !strings.Contains(err.Error(), "node-2") {
		t.Fatalf("second log = %v, want ErrLeaseHeld naming node-1 and node-2", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := c.open(t, 2)
	if second.Lease().Term <= first.Lease().Term {
		t.Fatalf("term %d after term %d", second.Lease().Term, first.Lease().Term)
	}
}

// An engine whose lease was taken over fails its next checkpoint with ErrDeposed and
// commits nothing; its uploaded objects are collected once unreferenced; the new
// leader's engine, opened in an empty directory, holds the last committed state.
func TestDeposedLeaderCommitsNothing(t *testing.T) {
	c := newCluster(t)
	log1 := c.open(t, 1)
	e1 := openEngine(t, filepath.Join(t.TempDir(), "a"), log1)
	defer e1.Close()
	if err := e1.CreateTable(testContext(t), kv, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	write(t, e1, e1.Insert, []any{1, "a", 10}, []any{2, "b", 20})
	committed := checkpoint(t, e1)
	want := scan(t, e1, "kv")
	ctx := testContext(t)
	before, err := c.meta.Committed(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if err := c.meta.Expire(ctx); err != nil {
		t.Fatal(err)
	}
	log2 := c.open(t, 2)
	write(t, e1, e1.Insert, []any{3, "c", 30})
	_, err = e1.WaitCheckpoint(ctx)
	if !errors.Is(err, meta.ErrDeposed) {
		t.Fatalf("checkpoint of a deposed leader = %v, want ErrDeposed", err)
	}
	if _, err := e1.WaitCheckpoint(ctx); err == nil {
		t.Fatal("a failed engine took another checkpoint")
	}
	after, err := c.meta.Committed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("the deposed leader's commit moved the version from %+v to %+v", before, after)
	}
	if got := e1.CommittedEpoch(); got != committed {
		t.Fatalf("the deposed engine's committed epoch moved from %d to %d", committed, got)
	}

	// An object of an upload that died before its commit recorded it (named as
	// the log's objects are), and a file of another name that is left alone.
	stray := objstore.Name{Epoch: uint64(committed) + 1, Node: 3, Incarnation: 7}.String()
	for _, name := range []string{stray, "notes/readme.txt"} {
		if err := c.bucket.WriteAll(ctx, name, []byte("partial"), nil); err != nil {
			t.Fatal(err)
		}
	}
	n, err := log2.Collect(ctx, 0)
	if err != nil || n < 2 {
		t.Fatalf("collect = %d, %v; want the deposed commit's objects and the stray one deleted", n, err)
	}
	if ok, err := c.bucket.Exists(ctx, stray); err != nil || ok {
		t.Fatalf("stray object %s exists after collect: %v, %v", stray, ok, err)
	}
	if err := c.bucket.Delete(ctx, "notes/readme.txt"); err != nil {
		t.Fatalf("collect deleted an object not named as the log's: %v", err)
	}
	checkBucket(t, c)

	e2 := openEngine(t, filepath.Join(t.TempDir(), "b"), log2)
	defer e2.Close()
	if got := scan(t, e2, "kv"); !slices.Equal(got, want) {
		t.Fatalf("the new leader's engine holds %v, want the last committed %v", got, want)
	}
}

// Bad configuration: a bucket that does not exist is named, a directory an embedded
// engine committed into is refused by the log, and a node number 0 is refused.
func TestBadConfiguration(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	missing := filepath.Join(t.TempDir(), "nosuch")
	url := "file://" + filepath.ToSlash(missing)
	b, err := objstore.OpenBucket(ctx, url)
	if err == nil {
		defer b.Close()
		cfg := c.config(1)
		cfg.Bucket, cfg.BucketURL = b, url
		_, err = commitlog.Open(ctx, cfg)
	}
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("a missing bucket = %v, want an error naming %s", err, missing)
	}
	if _, err := commitlog.Open(ctx, c.config(0)); err == nil {
		t.Fatal("node 0 was accepted")
	}

	dir := filepath.Join(t.TempDir(), "embedded")
	e := openEngine(t, dir, nil)
	if err := e.CreateTable(ctx, kv, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	log := c.open(t, 1)
	_, err = engine.Open(ctx, dir, engine.Options{BarrierInterval: -1, CommitLog: log})
	if err == nil || !strings.Contains(err.Error(), "without the log") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("an embedded engine's directory over a log = %v, want a refusal naming it", err)
	}
}

// The lease is renewed while the log is open: it outlives its ttl.
func TestLeaseRenewed(t *testing.T) {
	c := newCluster(t)
	cfg := c.config(1)
	cfg.LeaseTTL = 2 * time.Second
	l, err := commitlog.Open(testContext(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first := l.Lease().Expires
	time.Sleep(3 * cfg.LeaseTTL)
	if _, err := commitlog.Open(testContext(t), c.config(2)); !errors.Is(err, meta.ErrLeaseHeld) {
		t.Fatalf("a second log after 3 ttls = %v, want ErrLeaseHeld", err)
	}
	if !l.Lease().Expires.After(first) {
		t.Fatalf("the lease's expiry did not move from %s", first)
	}
}

// A directory that follows one cluster's log is refused by another's, whether that
// log is behind it or ahead, naming the sequence and epoch it applied; nothing of
// the other log is applied, and its own log opens it as before.
func TestAnotherClustersDirectory(t *testing.T) {
	ctx := testContext(t)
	a, behind, ahead := newCluster(t), newCluster(t), newCluster(t)
	commits := func(c *cluster, dir string, n int) []string {
		t.Helper()
		log := c.open(t, 1)
		e := openEngine(t, dir, log)
		if err := e.CreateTable(ctx, kv, engine.TableOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			write(t, e, e.Insert, []any{int64(i), fmt.Sprint("v", i), int64(i)})
			checkpoint(t, e)
		}
		rows := scan(t, e, "kv")
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if err := log.Close(); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	dir := filepath.Join(t.TempDir(), "a")
	want := commits(a, dir, 3)
	commits(ahead, filepath.Join(t.TempDir(), "other"), 6)
	for _, c := range []*cluster{behind, ahead} {
		log := c.open(t, 2)
		_, err := engine.Open(ctx, dir, engine.Options{BarrierInterval: -1, CommitLog: log})
		if err == nil || !strings.Contains(err.Error(), "another cluster") || !strings.Contains(err.Error(), "applied sequence") || !strings.Contains(err.Error(), dir) {
			t.Fatalf("a directory of another cluster = %v, want a refusal naming it and its sequence", err)
		}
		if err := log.Close(); err != nil {
			t.Fatal(err)
		}
	}
	log := a.open(t, 3)
	e := openEngine(t, dir, log)
	defer e.Close()
	if got := scan(t, e, "kv"); !slices.Equal(got, want) {
		t.Fatalf("after the refusals the directory holds %v, want %v", got, want)
	}
}
