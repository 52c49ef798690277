package storage_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// What pebble v2 (v2.1.7) does with I/O errors, as these tests pin it down:
//
//   - A failed WAL write or sync during a commit makes pebble call Logger.Fatalf
//     ("pebble: fatal commit error") on the committing goroutine. The batch has by then
//     been applied to the memtable and published (pebble publishes before the sync
//     result is known), so new reads of that pebble instance would see the failed
//     checkpoint. The log writer's error is sticky: every later commit fails the same
//     way, so a retry on the same instance never succeeds. The store turns the Fatalf
//     into an error from Checkpoint naming the epoch (wrapping the I/O error), keeps
//     CommittedEpoch where it was, and refuses views, row counts, the catalog and
//     checkpoints until it is closed and reopened. Close returns the sticky error. A
//     reopen holds exactly one committed epoch: the last one before the fault when the
//     WAL write failed, and either that or the failed one after a failed sync (the
//     record reached the file; a crash clone taken before the reopen never has it).
//   - A failed sstable create, write, sync or remove during a flush or compaction is
//     reported to the event listener and retried; checkpoints and reads carry on.
//   - Fatal, and not turned into an error: a failed MANIFEST update on a background
//     flush or compaction (Fatalf on pebble's goroutine), and any failure while
//     rotating the WAL (closing the old log or creating the next one, on a flush or
//     when a commit fills the memtable), where rotateWAL panics with the raw error with
//     its mutex unlocked and the unwinding unlock turns that into an unrecoverable
//     "fatal error: sync: unlock of unlocked mutex". So does a failed WAL rotation or
//     write of a checkpoint's ingest that overlaps the memtable (pebble logs such an
//     ingest in a WAL of its own, rotating twice). TestFatalFaultsEndProcess pins
//     them down in child processes. During Open a failed MANIFEST write happens on the
//     caller's goroutine and Open returns it as an error (TestOpenFault).
//   - errorfs does not wrap the files ReuseForWrite returns (pebble recycles WAL files
//     that way), so faults and crash points would silently miss recycled WALs; the
//     tests wrap them themselves (faultFS).

// faulter injects errors into file writes with the test's seeded generator.
type faulter struct {
	mu    sync.Mutex
	rng   *rand.Rand
	p     float64 // chance per matching op
	match func(errorfs.Op) bool
	errs  []error
	hits  map[string]int
	last  string
	armed atomic.Bool
}

func (f *faulter) maybe(op errorfs.Op) error {
	if !f.armed.Load() || op.Kind.ReadOrWrite() != errorfs.OpIsWrite || !f.match(op) {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rng.Float64() >= f.p {
		return nil
	}
	err := f.errs[f.rng.IntN(len(f.errs))]
	k := fmt.Sprintf("%s %s", opName(op.Kind), fileKind(op.Path))
	f.hits[k]++
	f.last = fmt.Sprintf("%s %s: %v", opName(op.Kind), op.Path, err)
	return err
}

func (f *faulter) total(kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for k, v := range f.hits {
		if strings.HasSuffix(k, kind) {
			n += v
		}
	}
	return n
}

func fileKind(path string) string {
	switch {
	case strings.HasSuffix(path, ".log"):
		return "wal"
	case strings.HasSuffix(path, ".sst"):
		return "sstable"
	case strings.Contains(path, "MANIFEST"):
		return "manifest"
	}
	return "other"
}

// reopenAfterFault closes a store whose checkpoint failed, reopens it on fs and checks
// it holds exactly one of the allowed committed epochs.
func reopenAfterFault(t *testing.T, s *storage.Store, fs vfs.FS, what string, allowed []uint64, w *bidWorkload) (*storage.Store, uint64) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Logf("%s: close: %v", what, err)
	}
	s2, err := storage.Open("db", testOptions(fs))
	if err != nil {
		t.Fatalf("%s: reopen: %v", what, err)
	}
	e := verifyStore(t, s2, what+", reopened", allowed, w.states, w.catalogs, w.p)
	return s2, e
}

// checkFailed checks the state of a store right after a checkpoint at epoch failed.
func checkFailed(t *testing.T, s *storage.Store, err error, epoch, committed uint64) {
	t.Helper()
	if err == nil {
		t.Fatalf("checkpoint %d succeeded despite the fault", epoch)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("checkpoint %d", epoch)) {
		t.Fatalf("checkpoint error does not name epoch %d: %v", epoch, err)
	}
	if got := s.CommittedEpoch(); got != committed {
		t.Fatalf("failed checkpoint %d moved the committed epoch from %d to %d", epoch, committed, got)
	}
	if v, verr := s.View(); verr == nil {
		t.Fatalf("view after a fatal checkpoint fault sees epoch %d, want an error", v.Epoch)
	}
	if _, err2 := s.Checkpoint(epoch + 1); err2 == nil || !strings.Contains(err2.Error(), "reopen") {
		t.Fatalf("checkpoint after a fatal fault: %v, want an error asking for a reopen", err2)
	}
	if _, rerr := s.RowCount(bidTableID, 0); rerr == nil {
		t.Fatal("row count after a fatal fault")
	}
	if _, cerr := s.Catalog(); cerr == nil {
		t.Fatal("catalog after a fatal fault")
	}
	if got := s.CommittedEpoch(); got != committed {
		t.Fatalf("committed epoch moved to %d", got)
	}
}

// TestCheckpointIOFault injects one kind of fault into the WAL during a checkpoint:
// disk full on the write, an I/O error on the sync. (Disk full on a WAL rotation ends
// the process: TestFatalFaultsEndProcess.)
func TestCheckpointIOFault(t *testing.T) {
	for _, c := range []struct {
		name    string
		match   func(errorfs.Op) bool
		err     error
		mayLand bool // the failed epoch may be found after a reopen
	}{
		{"wal-write-enospc", func(op errorfs.Op) bool {
			return fileKind(op.Path) == "wal" && op.Kind == errorfs.OpFileWrite
		}, syscall.ENOSPC, false},
		{"wal-sync-eio", func(op errorfs.Op) bool {
			return fileKind(op.Path) == "wal" && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData)
		}, syscall.EIO, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			seed := vectest.Seed(t)
			mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
			defer mem.AssertSize(t, 0)
			rng := vectest.NewRand(seed)
			fs := vfs.NewCrashableMem()
			f := &faulter{rng: vectest.NewRand(seed + 1), p: 1, match: c.match, errs: []error{c.err}, hits: map[string]int{}}
			s, err := storage.Open("db", testOptions(faultFS(fs, errorfs.InjectorFunc(f.maybe))))
			if err != nil {
				t.Fatal(err)
			}
			w := newBidWorkload(t, rng, mem, s, bidState{}, 0, nil)
			i := 0
			step := func() error {
				i++
				w.write(t, i)
				w.seal(ep(i), false)
				w.stageCatalog(i)
				_, err := s.Checkpoint(ep(i))
				return err
			}
			for j := 0; j < 3; j++ {
				if err := step(); err != nil {
					t.Fatal(err)
				}
				w.committedAt(ep(i))
			}
			prev := w.committed
			f.armed.Store(true)
			err = step()
			f.armed.Store(false)
			t.Logf("checkpoint %d failed after %s: %v", ep(i), f.last, err)
			if !errors.Is(err, c.err) {
				t.Errorf("checkpoint error does not wrap %v: %v", c.err, err)
			}
			checkFailed(t, s, err, ep(i), prev)
			// The failed epoch is a legal outcome after a reopen only when its WAL
			// record may have been written.
			failed := ep(i)
			w.states[failed], w.catalogs[failed] = w.sealed.clone(), cloneStrings(w.catalog)
			allowed := []uint64{prev}
			if c.mayLand {
				allowed = append(allowed, failed)
			}
			// A crash now loses whatever was not synced: the failed epoch never lands.
			crashed := fs.CrashClone(vfs.CrashCloneCfg{})
			s2, e := reopenAfterFault(t, s, fs, "after the fault", allowed, w)
			t.Logf("reopened at %d (committed before the fault: %d, failed: %d)", e, prev, failed)
			defer s2.Close()
			s3, err := storage.Open("db", testOptions(crashed))
			if err != nil {
				t.Fatal(err)
			}
			verifyStore(t, s3, "crash right after the fault", []uint64{prev}, w.states, w.catalogs, w.p)
			s3.Close()

			// Work goes on from the reopened state.
			w2 := newBidWorkload(t, rng, mem, s2, w.states[e], e, w.catalogs[e])
			for j := 1; j <= 3; j++ {
				w2.write(t, i+j)
				w2.seal(ep(i+j), false)
				if _, err := s2.Checkpoint(ep(i + j)); err != nil {
					t.Fatalf("checkpoint after reopen: %v", err)
				}
				w2.committedAt(ep(i + j))
			}
			verifyStore(t, s2, "after recovery", []uint64{ep(i + 3)}, w2.states, w2.catalogs, w2.p)
		})
	}
}

// TestRandomIOFaults runs a seeded workload while a seeded injector fails file
// writes with disk full, EIO or a plain injected error: sstable creates, writes, syncs
// and removes at any time (flushes run and are retried), and WAL writes and syncs
// during some checkpoints. Every failed checkpoint must name its epoch and leave the
// committed epoch in place; the store is then closed and reopened with the faults
// cleared, must hold exactly the last committed epoch or (after a failed sync) the
// failed one, and the workload resumes from there with the faults back on.
//
// WAL faults are armed only for checkpoints that cannot rotate the WAL (each follows a
// flush, so the batch fits the fresh memtable): a failed rotation ends the process
// (TestFatalFaultsEndProcess).
func TestRandomIOFaults(t *testing.T) {
	base := vectest.Seed(t)
	totals := map[string]int{}
	for k := 0; k < budget(4, 2, 30); k++ {
		seed := base + uint64(k)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed=%d", seed)
			for k, v := range runRandomIOFaults(t, seed, budget(60, 40, 200)) {
				totals[k] += v
			}
		})
	}
	var ks []string
	for k, v := range totals {
		ks = append(ks, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(ks)
	t.Logf("totals: %s", strings.Join(ks, ", "))
	for _, k := range []string{"failed checkpoints", "reopened at the last committed epoch", "sstable faults", "checkpoints"} {
		if totals[k] == 0 && !t.Failed() {
			t.Errorf("no %s across the seeds: the test does not exercise what it claims", k)
		}
	}
}

func runRandomIOFaults(t *testing.T, seed uint64, epochs int) map[string]int {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(seed)
	fs := vfs.NewMem()
	// Two injectors with their own generators: WAL faults (drawn only during
	// checkpoints, in a deterministic order) and sstable faults (drawn by flushes and
	// by pebble's background compactions, in whatever order they run).
	var walArmed atomic.Bool
	wal := &faulter{
		rng: vectest.NewRand(seed ^ 0xFA17),
		p:   []float64{0.1, 0.2, 0.4}[rng.IntN(3)],
		match: func(op errorfs.Op) bool {
			return walArmed.Load() && fileKind(op.Path) == "wal" &&
				(op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData)
		},
		errs: []error{syscall.ENOSPC, syscall.EIO, errorfs.ErrInjected},
		hits: map[string]int{},
	}
	sst := &faulter{
		rng:   vectest.NewRand(seed ^ 0x557),
		p:     []float64{0.05, 0.1, 0.3}[rng.IntN(3)],
		match: func(op errorfs.Op) bool { return fileKind(op.Path) == "sstable" },
		errs:  []error{syscall.ENOSPC, syscall.EIO, errorfs.ErrInjected},
		hits:  map[string]int{},
	}
	inj := errorfs.Any(errorfs.InjectorFunc(wal.maybe), errorfs.InjectorFunc(sst.maybe))
	arm := func(on bool) { wal.armed.Store(on); sst.armed.Store(on) }
	open := func() *storage.Store {
		s, err := storage.Open("db", testOptions(faultFS(fs, inj)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	stats := map[string]int{}
	s := open()
	w := newBidWorkload(t, rng, mem, s, bidState{}, 0, nil)
	arm(true)
	for i := 1; i <= epochs; i++ {
		for j := rng.IntN(3); j >= 0; j-- {
			w.write(t, i)
		}
		w.seal(ep(i), true)
		if rng.IntN(4) == 0 {
			w.stageCatalog(i)
		}
		faulty := rng.IntN(3) == 0
		if faulty || rng.IntN(6) == 0 {
			if err := s.DB().Flush(); err != nil {
				t.Fatalf("flush: %v", err)
			}
			stats["flushes"]++
		}
		if !faulty && rng.IntN(3) == 0 {
			continue
		}
		prev := w.committed
		walArmed.Store(faulty)
		_, err := s.Checkpoint(ep(i))
		walArmed.Store(false)
		if err == nil {
			w.committedAt(ep(i))
			stats["checkpoints"]++
			continue
		}
		stats["failed checkpoints"]++
		arm(false)
		wal.mu.Lock()
		last := wal.last
		wal.mu.Unlock()
		what := fmt.Sprintf("checkpoint %d (after %s)", ep(i), last)
		checkFailed(t, s, err, ep(i), prev)
		w.states[ep(i)], w.catalogs[ep(i)] = w.sealed.clone(), cloneStrings(w.catalog)
		allowed := []uint64{prev, ep(i)}
		if strings.HasPrefix(last, "write ") {
			allowed = allowed[:1] // the WAL record never reached the file
		}
		s2, e := reopenAfterFault(t, s, fs, what, allowed, w)
		if e == prev {
			stats["reopened at the last committed epoch"]++
		} else {
			stats["reopened at the failed epoch"]++
		}
		s2.Close()
		s = open()
		states, catalogs := w.states, w.catalogs
		w = newBidWorkload(t, rng, mem, s, states[e], e, catalogs[e])
		arm(true)
	}
	arm(false)
	verifyStore(t, s, "end", []uint64{w.committed}, w.states, w.catalogs, w.p)
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	stats["wal faults"] = wal.total("wal")
	stats["sstable faults"] = sst.total("sstable")
	t.Logf("p(wal)=%.2f p(sstable)=%.2f %v faults %v %v", wal.p, sst.p, stats, wal.hits, sst.hits)
	return stats
}

// TestOpenFault: a fatal fault inside pebble.Open (a failed MANIFEST write of a new
// store) is an error from Open, not a crash, and a later Open succeeds.
func TestOpenFault(t *testing.T) {
	fs := vfs.NewMem()
	f := &faulter{rng: vectest.NewRand(1), p: 1, match: func(op errorfs.Op) bool {
		return fileKind(op.Path) == "manifest" && op.Kind == errorfs.OpFileWrite
	}, errs: []error{syscall.ENOSPC}, hits: map[string]int{}}
	f.armed.Store(true)
	s, err := storage.Open("db", testOptions(faultFS(fs, errorfs.InjectorFunc(f.maybe))))
	if err == nil {
		s.Close()
		t.Fatal("open succeeded with every MANIFEST write failing")
	}
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "db") {
		t.Fatalf("open error %v, want one naming the directory and wrapping ENOSPC", err)
	}
	s = openStore(t, fs)
	if s.CommittedEpoch() != 0 {
		t.Fatalf("epoch %d", s.CommittedEpoch())
	}
}

const childEnv = "WEIR_STORAGE_TEST_CHILD"

// TestFatalFaultsEndProcess pins down the faults the store cannot turn into errors,
// each run in a child process that must die with the stated message:
//
//   - a failed MANIFEST write during a background flush: pebble calls Fatalf on its
//     flush goroutine;
//   - disk full while rotating the WAL (on a flush or when a commit fills the
//     memtable): pebble's rotateWAL panics with the raw error while its mutex is
//     unlocked, and unwinding then unlocks it again, a fatal runtime error that no
//     recover can stop.
func TestFatalFaultsEndProcess(t *testing.T) {
	if c := os.Getenv(childEnv); c != "" {
		fatalFaultChild(c)
		return
	}
	if testing.Short() {
		t.Skip("runs child processes")
	}
	for _, c := range []struct {
		name string
		want []string
	}{
		{"manifest-on-flush", []string{"panic: MANIFEST", "no space left on device", "flush"}},
		{"wal-rotation-on-flush", []string{"rotateWAL", "unlock of unlocked mutex"}},
		{"wal-rotation-on-checkpoint", []string{"rotateWAL", "unlock of unlocked mutex", "Checkpoint"}},
		{"wal-rotation-on-ingest", []string{"rotateWAL", "unlock of unlocked mutex", "handleIngestAsFlushable", "Checkpoint"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestFatalFaultsEndProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"="+c.name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("child: %v, want a crash\n%s", err, out)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Fatalf("child ended (%v) without %q in its output:\n%s", err, w, out)
				}
			}
			t.Logf("child ended as expected: %s", strings.SplitN(string(out), "\n", 2)[0])
		})
	}
}

func fatalFaultChild(scenario string) {
	fs := vfs.NewMem()
	var armed atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !armed.Load() {
			return nil
		}
		switch {
		case scenario == "manifest-on-flush" && fileKind(op.Path) == "manifest" && op.Kind.ReadOrWrite() == errorfs.OpIsWrite,
			scenario != "manifest-on-flush" && fileKind(op.Path) == "wal" && (op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpReuseForWrite):
			return syscall.ENOSPC
		}
		return nil
	})
	o := testOptions(faultFS(fs, inj))
	o.MemTableSize = 256 << 10
	o.IngestBytes = 64 << 10
	s, err := storage.Open("db", o)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	s.SetCatalog("x", make([]byte, 1000))
	if _, err := s.Checkpoint(ep(1)); err != nil { // a batch: the memtable holds its keys
		fmt.Println("checkpoint:", err)
		os.Exit(3)
	}
	armed.Store(true)
	if scenario == "wal-rotation-on-ingest" {
		// 200 KiB of rows: an ingest, whose epoch key overlaps the memtable.
		st, err := storage.NewStateTable(s.AddNode(), 9, kvTable(16), vnode.Full(16))
		if err != nil {
			fmt.Println("state table:", err)
			os.Exit(3)
		}
		var keys, vals vec.Bytes
		ops, vn := make([]vec.Op, 2000), make([]uint16, 2000)
		for i := range ops {
			ops[i], vn[i] = vec.Insert, uint16(i%16)
			keys.Append(binary.BigEndian.AppendUint64(nil, uint64(i)))
			vals.Append(make([]byte, 100))
		}
		if err := st.WriteEncoded(ops, nil, vn, &keys, &vals); err != nil {
			fmt.Println("write:", err)
			os.Exit(3)
		}
		if err := st.Seal(ep(2)); err != nil {
			fmt.Println("seal:", err)
			os.Exit(3)
		}
		cs, err := s.Checkpoint(ep(2))
		fmt.Println("checkpoint returned:", cs.Ingested, err)
		os.Exit(0)
	}
	if scenario == "wal-rotation-on-checkpoint" {
		for i := 2; i < 100; i++ {
			s.SetCatalog("x", make([]byte, 100<<10))
			_, err := s.Checkpoint(ep(i))
			fmt.Println("checkpoint returned:", err)
		}
		os.Exit(0)
	}
	err = s.DB().Flush()
	fmt.Println("flush returned:", err)
	os.Exit(0)
}
