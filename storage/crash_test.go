package storage_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// crashPoint is a crash-consistent copy of the file system taken at one moment, with
// the committed epochs that a store reopened on it may legitimately find.
type crashPoint struct {
	fs      *vfs.MemFS
	what    string
	allowed []uint64
}

// crasher takes crash clones of a MemFS: on demand, and from an errorfs hook before
// file writes while armed. It is driven by the test's seeded generator.
type crasher struct {
	mem *vfs.MemFS
	// nested is held for reading through every operation of the store's file
	// system (fs) that takes pebble's MemFS clone lock for reading twice (Link;
	// ReuseForWrite, which renames, as a WAL's reuse does; Lock, which creates the
	// lock file), and for writing by a clone: a CrashClone queued between the two
	// (a compaction's write hook cloning meanwhile) would wait on the operation, and
	// the operation's second read lock on the queued clone, forever.
	nested sync.RWMutex

	mu      sync.Mutex
	rng     *rand.Rand
	allowed []uint64
	phase   string
	every   bool // clone before every write op (else one in four)
	points  []crashPoint
	limit   int

	armed atomic.Bool
}

func (c *crasher) set(phase string, every bool, allowed ...uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.phase, c.every, c.allowed = phase, every, allowed
}

// unsyncedPercents are the shares of unsynced data a clone keeps: nothing, everything,
// and in between.
var unsyncedPercents = []int{0, 0, 10, 50, 90, 100}

// cloneLocked takes a crash point and returns its index, unless the limit is reached.
func (c *crasher) cloneLocked(what string) (int, bool) {
	if len(c.points) >= c.limit {
		return 0, false
	}
	pct := unsyncedPercents[c.rng.IntN(len(unsyncedPercents))]
	cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: pct}
	if pct > 0 {
		cfg.RNG = rand.New(rand.NewPCG(c.rng.Uint64(), c.rng.Uint64()))
	}
	c.nested.Lock()
	clone := c.mem.CrashClone(cfg)
	c.nested.Unlock()
	c.points = append(c.points, crashPoint{
		fs:      clone,
		what:    fmt.Sprintf("%s (%d%% of unsynced data kept)", what, pct),
		allowed: append([]uint64(nil), c.allowed...),
	})
	return len(c.points) - 1, true
}

func (c *crasher) clone(what string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cloneLocked(c.phase + ": " + what)
}

// fs is the file system of a store under test: the MemFS with every write op
// hooked (hook) and the operations that nest its clone lock serialised against the
// clones (nested).
func (c *crasher) fs() vfs.FS {
	return faultFS(nestGuard{FS: c.mem, mu: &c.nested}, errorfs.InjectorFunc(c.hook))
}

// nestGuard holds mu for reading through each operation of FS that takes MemFS's
// clone lock twice; under errorfs, so that an operation's hook runs before mu is
// taken.
type nestGuard struct {
	vfs.FS
	mu *sync.RWMutex
}

func (g nestGuard) Link(oldname, newname string) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.FS.Link(oldname, newname)
}

func (g nestGuard) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.FS.ReuseForWrite(oldname, newname, category)
}

func (g nestGuard) Lock(name string) (io.Closer, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.FS.Lock(name)
}

func (c *crasher) hook(op errorfs.Op) error {
	if !c.armed.Load() || op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.every || c.rng.IntN(4) == 0 {
		c.cloneLocked(fmt.Sprintf("%s: before %s %s", c.phase, opName(op.Kind), op.Path))
	}
	return nil
}

func opName(k errorfs.OpKind) string {
	names := map[errorfs.OpKind]string{
		errorfs.OpCreate: "create", errorfs.OpLink: "link", errorfs.OpRemove: "remove",
		errorfs.OpRemoveAll: "remove-all", errorfs.OpRename: "rename",
		errorfs.OpReuseForWrite: "reuse-for-write", errorfs.OpMkdirAll: "mkdir",
		errorfs.OpLock: "lock", errorfs.OpFileClose: "close",
		errorfs.OpFilePreallocate: "preallocate", errorfs.OpFileWrite: "write",
		errorfs.OpFileWriteAt: "write-at", errorfs.OpFileSync: "sync",
		errorfs.OpFileSyncData: "sync-data", errorfs.OpFileSyncTo: "sync-to",
		errorfs.OpFileFlush: "flush",
	}
	if n, ok := names[k]; ok {
		return n
	}
	return fmt.Sprintf("op%d", int(k))
}

// bidWorkload is a seeded stream of changes to bid rows spread over two writers on
// two nodes (each owning half of the vnodes), with the reference state of every
// committed epoch.
type bidWorkload struct {
	rng     *rand.Rand
	mem     memory.Allocator
	p       *bidPlacer
	s       *storage.Store
	writers []*storage.StateTable
	pending [][]bidOp // per writer: written, not sealed
	sealed  bidState  // every sealed write applied
	live    bidState  // every write applied (sealed or not)

	committed   uint64
	states      map[uint64]bidState          // committed epoch -> rows
	catalogs    map[uint64]map[string]string // committed epoch -> catalog
	catalog     map[string]string            // committed + staged
	idSpace     int64
	channelSize int
}

func newBidWorkload(t testing.TB, rng *rand.Rand, mem memory.Allocator, s *storage.Store, committed bidState, epoch uint64, catalog map[string]string) *bidWorkload {
	w := &bidWorkload{
		rng: rng, mem: mem, p: newBidPlacer(), s: s,
		sealed: committed.clone(), live: committed.clone(),
		committed: epoch,
		states:    map[uint64]bidState{epoch: committed.clone()},
		catalogs:  map[uint64]map[string]string{epoch: cloneStrings(catalog)},
		catalog:   cloneStrings(catalog),
		idSpace:   400, channelSize: 64 + rng.IntN(256),
	}
	half := bidT.VnodeCount / 2
	for _, b := range []*vnode.Bitmap{vnode.FromRange(bidT.VnodeCount, 0, half), vnode.FromRange(bidT.VnodeCount, half, bidT.VnodeCount)} {
		st, err := storage.NewStateTable(s.AddNode(), bidTableID, bidT, b)
		if err != nil {
			t.Fatal(err)
		}
		w.writers = append(w.writers, st)
		w.pending = append(w.pending, nil)
	}
	return w
}

func cloneStrings(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (w *bidWorkload) owner(id int64) int {
	v, _ := w.p.place(id)
	for i, st := range w.writers {
		if st.Vnodes().Contains(v) {
			return i
		}
	}
	panic("no owner")
}

func (w *bidWorkload) channel(epoch int) string {
	return fmt.Sprintf("e%d-", epoch) + strings.Repeat("x", w.rng.IntN(w.channelSize))
}

// write makes a random batch of changes with price = epoch index: inserts of new ids,
// in-place updates, pk-changing updates, deletes of present and missing ids.
func (w *bidWorkload) write(t testing.TB, epoch int) {
	per := make([][]bidOp, len(w.writers))
	n := 1 + w.rng.IntN(40)
	for i := 0; i < n; i++ {
		id := w.rng.Int64N(w.idSpace)
		v := bidVal{Price: int64(epoch), Channel: w.channel(epoch)}
		old, present := w.live[id]
		o := w.owner(id)
		var ops []bidOp
		switch r := w.rng.IntN(10); {
		case r < 4 || !present && r < 8:
			if present {
				ops = []bidOp{{Op: vec.UpdateDelete, ID: id, V: old}, {Op: vec.UpdateInsert, ID: id, V: v}}
			} else {
				ops = []bidOp{{Op: vec.Insert, ID: id, V: v}}
			}
		case r < 6:
			// A pk-changing update; its two halves stay with one owner (across owners a
			// dispatcher sends a Delete and an Insert instead).
			nid := w.rng.Int64N(w.idSpace)
			if _, taken := w.live[nid]; taken || w.owner(nid) != o {
				ops = []bidOp{{Op: vec.Delete, ID: id, V: old}}
			} else {
				ops = []bidOp{{Op: vec.UpdateDelete, ID: id, V: old}, {Op: vec.UpdateInsert, ID: nid, V: v}}
			}
		default:
			ops = []bidOp{{Op: vec.Delete, ID: id, V: old}} // present or not
		}
		w.live.apply(ops)
		per[o] = append(per[o], ops...)
	}
	for i, ops := range per {
		if len(ops) == 0 {
			continue
		}
		writeBids(t, w.mem, w.writers[i], ops)
		w.pending[i] = append(w.pending[i], ops...)
	}
}

// seal seals every writer at epoch, except those the generator skips (their writes
// move to a later epoch).
func (w *bidWorkload) seal(epoch uint64, mayskip bool) {
	for i, st := range w.writers {
		if mayskip && w.rng.IntN(5) == 0 {
			continue
		}
		st.Seal(epoch)
		w.sealed.apply(w.pending[i])
		w.pending[i] = nil
	}
}

func (w *bidWorkload) stageCatalog(epoch int) {
	k := fmt.Sprintf("entry/%d", w.rng.IntN(4))
	if w.rng.IntN(4) == 0 {
		w.s.SetCatalog(k, nil)
		delete(w.catalog, k)
	} else {
		v := fmt.Sprintf("written at %d", epoch)
		w.s.SetCatalog(k, []byte(v))
		w.catalog[k] = v
	}
}

// committedAt records a successful checkpoint at epoch.
func (w *bidWorkload) committedAt(epoch uint64) {
	w.committed = epoch
	w.states[epoch] = w.sealed.clone()
	w.catalogs[epoch] = cloneStrings(w.catalog)
}

// verifyStore checks that s holds exactly the committed state of its epoch, which must
// be one of allowed (any recorded epoch when allowed is nil).
func verifyStore(t testing.TB, s *storage.Store, what string, allowed []uint64, states map[uint64]bidState, catalogs map[uint64]map[string]string, p *bidPlacer) uint64 {
	t.Helper()
	e := s.CommittedEpoch()
	ok := allowed == nil
	for _, a := range allowed {
		ok = ok || a == e
	}
	want, known := states[e]
	if !ok || !known {
		t.Fatalf("%s: reopened at epoch %d, want one of %v", what, e, allowed)
	}
	r, err := storage.NewStateTable(s.AddNode(), bidTableID, bidT, vnode.Full(bidT.VnodeCount))
	if err != nil {
		t.Fatal(err)
	}
	got, ve := readBidsAt(t, s, nil, r, p)
	if ve != e {
		t.Fatalf("%s: view epoch %d, store epoch %d", what, ve, e)
	}
	if d := want.diff(got); d != "" {
		t.Fatalf("%s: reopened at epoch %d: %s", what, e, d)
	}
	checkRowCounts(t, s, bidTableID, p.counts(want), bidT.VnodeCount)
	c, err := s.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	gc := map[string]string{}
	for k, v := range c {
		gc[k] = string(v)
	}
	if fmt.Sprint(gc) != fmt.Sprint(catalogs[e]) {
		t.Fatalf("%s: catalog at epoch %d is %v, want %v", what, e, gc, catalogs[e])
	}
	return e
}

// TestCrashDuringCheckpoints runs a seeded workload on a crashable in-memory file
// system and takes crash clones mid-epoch, with sealed but uncommitted epochs, before
// every file write of every checkpoint (WAL writes, syncs and rotations), during
// flushes, and right after checkpoints return; each clone, reopened, must hold exactly
// one committed epoch that was legal at that moment (I6), and work must go on from it.
func TestCrashDuringCheckpoints(t *testing.T) {
	base := vectest.Seed(t)
	for i := 0; i < budget(3, 1, 25); i++ {
		seed := base + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed=%d", seed)
			runCrashScenario(t, seed, budget(14, 10, 30))
		})
	}
}

func runCrashScenario(t *testing.T, seed uint64, epochs int) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(seed)
	cr := &crasher{mem: vfs.NewCrashableMem(), rng: vectest.NewRand(seed ^ 0xC4A5), limit: budget(60, 20, 400)}
	o := seedOptions(cr.fs(), seed)
	o.MemTableSize = 256 << 10 // rotate WALs and flush inside checkpoints
	s, err := storage.Open("db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := newBidWorkload(t, rng, mem, s, bidState{}, 0, nil)
	cr.armed.Store(true)
	var afterCommit []int // indexes of clones taken right after a checkpoint returned
	ingested := 0         // checkpoints committed by ingesting sstables
	for i := 1; i <= epochs; i++ {
		e := ep(i)
		c := w.committed
		cr.set(fmt.Sprintf("epoch %d mid-epoch", i), false, c)
		for j := rng.IntN(3); j >= 0; j-- {
			w.write(t, i)
		}
		if rng.IntN(3) == 0 {
			cr.clone("after writes")
		}
		w.seal(e, true)
		cr.set(fmt.Sprintf("epoch %d sealed", i), false, c)
		if rng.IntN(3) == 0 {
			cr.clone("after seal")
		}
		if rng.IntN(5) == 0 {
			w.stageCatalog(i)
		}
		if rng.IntN(5) < 3 {
			cr.set(fmt.Sprintf("checkpoint %d", i), true, c, e)
			st, err := s.Checkpoint(e)
			if err != nil {
				t.Fatalf("checkpoint %d: %v", e, err)
			}
			if st.Ingested > 0 {
				ingested++
			}
			w.committedAt(e)
			cr.set(fmt.Sprintf("epoch %d committed", i), false, e)
			if i, ok := cr.clone("checkpoint returned"); ok { // not past the clone limit
				afterCommit = append(afterCommit, i)
			}
		}
		if rng.IntN(5) == 0 {
			cr.set(fmt.Sprintf("epoch %d flush", i), false, w.committed)
			if err := s.DB().Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cr.armed.Store(false)
	// Clones taken right after a checkpoint returned must hold it whatever unsynced
	// data they kept.
	if ingestSeed(seed) && ingested == 0 {
		t.Errorf("no checkpoint of this seed was ingested (seedOptions ingests every one it can)")
	}
	for _, i := range afterCommit {
		if i >= 0 && i < len(cr.points) && len(cr.points[i].allowed) != 1 {
			t.Fatalf("clone %d: %s allows %v", i, cr.points[i].what, cr.points[i].allowed)
		}
	}
	seen := map[string]int{}
	for i, cp := range cr.points {
		what := fmt.Sprintf("crash point %d: %s", i, cp.what)
		s2, err := storage.Open("db", seedOptions(cp.fs, seed))
		if err != nil {
			t.Fatalf("%s: reopen: %v", what, err)
		}
		e := verifyStore(t, s2, what, cp.allowed, w.states, w.catalogs, w.p)
		if len(cp.allowed) == 2 {
			seen[fmt.Sprint(e == cp.allowed[1])]++
		}
		// Work goes on from the recovered state: one more epoch on every fourth clone.
		if i%4 == 0 {
			w2 := newBidWorkload(t, vectest.NewRand(seed+uint64(i)), mem, s2, w.states[e], e, w.catalogs[e])
			w2.write(t, epochs+1)
			w2.seal(ep(epochs+1), false)
			w2.stageCatalog(epochs + 1)
			if _, err := s2.Checkpoint(ep(epochs + 1)); err != nil {
				t.Fatalf("%s: checkpoint after recovery: %v", what, err)
			}
			w2.committedAt(ep(epochs + 1))
			verifyStore(t, s2, what+", then one more epoch", []uint64{ep(epochs + 1)}, w2.states, w2.catalogs, w2.p)
		}
		if err := s2.Close(); err != nil {
			t.Fatalf("%s: close: %v", what, err)
		}
	}
	kinds := map[string]int{}
	for _, cp := range cr.points {
		k := cp.what
		if i := strings.Index(k, ": "); i >= 0 {
			k = k[i+2:]
		}
		if i := strings.Index(k, " db"); i >= 0 {
			k = k[:i]
		}
		if i := strings.Index(k, " ("); i >= 0 {
			k = k[:i]
		}
		kinds[k]++
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(ks)
	t.Logf("%d crash points: %s; mid-checkpoint clones holding the new epoch: %v", len(cr.points), strings.Join(ks, ", "), seen)
}
