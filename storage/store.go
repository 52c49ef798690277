package storage

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable/block"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/seed04fbb902/weir/vnode"
)

// Options configures the committed store. The defaults suit a snapshot-scan-heavy
// workload: a large block cache so that repeated backfill scans stay warm, 64 MiB
// memtables, and Snappy block compression (cheap to decompress on the scan path).
type Options struct {
	FS        vfs.FS // default: the OS file system
	CacheSize int64  // block cache bytes; default 256 MiB
	// Cache, when set, is a block cache shared with other stores (pebble.NewCache)
	// instead of one of CacheSize of the store's own. The store takes a reference
	// of its own for as long as it is open; the caller Unrefs its own when done.
	Cache        *pebble.Cache
	MemTableSize uint64 // default 64 MiB
	Compression  string // DefaultCompression ("snappy"), "zstd", "minlz" or "none"
	// BlockSize is the target uncompressed size of an sstable's data blocks (default
	// DefaultBlockSize): a scan that misses the block cache reads, checksums,
	// decompresses and caches a block at a time, and pays for each.
	BlockSize int
	// Logger receives pebble's messages; nil discards them. Pebble's Fatalf (a fault it
	// cannot continue from, such as a failed WAL write or sync) is passed on as Errorf:
	// the store turns it into an error where pebble allows (see Checkpoint) instead
	// of exiting the process.
	Logger pebble.Logger
	// IngestBytes is the size (key and value bytes of the tables' writes; the
	// metadata is not counted) from which a checkpoint is committed by writing its
	// keys as sstables and ingesting them instead of as a synced batch: its data
	// skips the WAL and the memtable, and a view's new vnode ranges mostly go straight
	// to the last level. An ingest that overlaps pebble's memtable (whose keys a batch
	// checkpoint wrote) rotates it and logs the ingest in a new WAL. A checkpoint that
	// drops a table, or whose writes are mostly scattered among committed keys (runs
	// below IngestBytes/32 between committed keys), takes the batch. 0 means
	// DefaultIngestBytes; negative, never.
	IngestBytes int
	// Partial makes a store that is empty (no committed epoch) a partial store, which
	// holds the committed data of the vnodes given to Gain only (see holds.go): a
	// cluster node's. A store opened partial once stays partial; one that is not
	// empty and was not stays whole.
	Partial bool
}

func (o Options) pebbleOptions() (*pebble.Options, error) {
	po := &pebble.Options{FS: o.FS, Cache: o.Cache, CacheSize: o.CacheSize, MemTableSize: o.MemTableSize, Logger: o.Logger}
	if po.FS == nil {
		po.FS = vfs.Default
	}
	if po.CacheSize == 0 {
		po.CacheSize = DefaultCacheSize
	}
	if po.MemTableSize == 0 {
		po.MemTableSize = 64 << 20
	}
	po.Logger = fatalLogger{o.Logger}
	// Virtual sstables let an ingested sstable split a last-level file whose bounds
	// span its keys but that holds none of them (a compaction's output that covers
	// two actors' vnode ranges, between which a backfill goes on writing): the
	// ingest then goes to the last level instead of above it, to be compacted down.
	po.FormatMajorVersion = pebble.FormatVirtualSSTables
	po.Experimental.IngestSplit = func() bool { return true }
	var prof *block.CompressionProfile
	switch o.Compression {
	case "", DefaultCompression:
		prof = block.SnappyCompression
	case "zstd":
		prof = block.ZstdCompression
	case "minlz":
		prof = block.MinLZCompression
	case "none":
		prof = block.NoCompression
	default:
		return nil, fmt.Errorf("storage: unknown compression %q (want snappy, zstd, minlz or none)", o.Compression)
	}
	for i := range po.Levels {
		po.Levels[i].Compression = func() *block.CompressionProfile { return prof }
		po.Levels[i].BlockSize = cmp.Or(o.BlockSize, DefaultBlockSize)
		// GetMany and the checkpoint's existence probe (for the row counts of
		// writes that do not know it) read missing keys, mostly new ones, with
		// prefix seeks on iterators that use every level's filters (L6's too): the
		// filters answer them without reading blocks.
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	return po, nil
}

// DefaultCacheSize is Options.CacheSize's default.
const DefaultCacheSize = 256 << 20

// DefaultCompression is Options.Compression's default: Snappy, cheap to decompress
// on the scan path.
const DefaultCompression = "snappy"

// DefaultBlockSize is Options.BlockSize's default, 32 KiB rather than pebble's 4 KiB:
// a snapshot read of 4,000,000 bid rows that misses the block cache went from 3.2 to
// 6.9 M rows/s with it (scripts/snapshot-curve.sh with --block-size 4096 and 32768,
// 2026-12-03), the per-block costs of a miss being most of such a read's
// (bench/RESULTS.md, "Snapshot read path").
const DefaultBlockSize = 32 << 10

// fatalLogger passes pebble's messages on to a Logger (nil: discards them) and turns
// Fatalf into a panic with a *fatalError. Pebble calls Fatalf when it cannot go on: on
// the committing goroutine when a WAL write, sync or rotation fails (the batch has then
// been applied to the memtable and is visible to new reads, though not durable), and
// on background goroutines when a MANIFEST update fails. Checkpoint and Open recover
// the panic on their own goroutine and return it as an error; a Fatalf on one of
// pebble's goroutines still ends the process, as pebble intends.
type fatalLogger struct{ l pebble.Logger }

func (f fatalLogger) Infof(format string, args ...any) {
	if f.l != nil {
		f.l.Infof(format, args...)
	}
}

func (f fatalLogger) Errorf(format string, args ...any) {
	if f.l != nil {
		f.l.Errorf(format, args...)
	}
}

func (f fatalLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if f.l != nil {
		f.l.Errorf("%s", msg)
	}
	fe := &fatalError{msg: msg}
	for _, a := range args {
		if err, ok := a.(error); ok {
			fe.cause = err
			break
		}
	}
	panic(fe)
}

// fatalError is a fault pebble could not continue from; it wraps the error pebble
// reported (so that errors.Is finds, say, syscall.ENOSPC).
type fatalError struct {
	msg   string
	cause error
}

func (e *fatalError) Error() string { return e.msg }
func (e *fatalError) Unwrap() error { return e.cause }

// recoverFatal turns a pebble Fatalf panic on this goroutine into *err; any other
// panic goes on.
func recoverFatal(err *error) {
	if r := recover(); r != nil {
		fe, ok := r.(*fatalError)
		if !ok {
			panic(r)
		}
		*err = fe
	}
}

// Store is the committed store of one engine directory, and the registry of its
// nodes' uncommitted stores. It is safe for concurrent use.
type Store struct {
	db   *pebble.DB
	lock *pebble.Lock // dir's, taken before db was opened; released after it is closed
	dir  string
	po   *pebble.Options // what db was opened with (the ingest's sstable writer options)
	// ingestBytes is Options.IngestBytes with its default: a checkpoint of at least
	// that many bytes ingests sstables; negative, never.
	ingestBytes int

	// viewMu orders views against the end of checkpoints: a view is taken under
	// RLock; a checkpoint advances committed and drops the runs it wrote under Lock.
	viewMu    sync.RWMutex
	committed atomic.Uint64
	// exports counts the running ExportViews, which Close waits for; one joins
	// under viewMu's RLock while the store is not closed.
	exports sync.WaitGroup
	// checkpointing is the epoch of the checkpoint in progress (0: none); under viewMu.
	checkpointing uint64
	nodes         []*Node
	// ckptMu serialises checkpoints and guards pendingCatalog.
	ckptMu         sync.Mutex
	pendingCatalog map[string][]byte
	merged         []entry // a checkpoint's merged writes, reused (under ckptMu)
	ingestBuf      []byte  // the ingest plan's scratch key (under ckptMu)
	pendingDrops   map[uint32]bool
	// partial is set at Open for a partial store (Options.Partial), and holds are
	// the vnodes it holds, per table (under ckptMu).
	partial bool
	holds   map[uint32]*vnode.Bitmap
	scratch atomic.Uint64 // numbers the files of Gain and Keep
	closed  atomic.Bool
	// commitCh is closed and replaced whenever committed advances (under viewMu), so
	// that WaitCommitted can wait without polling.
	commitCh chan struct{}
	// failed is set when pebble hit a fatal fault in a checkpoint's commit: pebble then
	// holds (and shows to new reads) a batch that is not durable, so the store refuses
	// views and checkpoints until it is closed and reopened.
	failed atomic.Pointer[error]
}

// Open opens (or creates) the committed store in dir. Uncommitted data does not
// survive a close or crash by construction: a reopened store holds exactly the last
// committed checkpoint.
//
// dir may be missing or empty: the store is created in it. Otherwise it must hold a
// store, which is any directory with at least one of the files pebble names (LOCK,
// CURRENT, MANIFEST-n, OPTIONS-n, marker.*, n.log, n-i.log, n.sst, n.blob,
// temporary.n.dbtmp, CURRENT.n.dbtmp) or the store's IngestDirName directory in it,
// whatever else it holds; so a crash image, which may hold only some of a store's
// files (a LOCK alone, say), is opened (and recovered by pebble). A non-empty
// directory with none of them is refused with an error naming the directory, so that
// pebble's files are never created among someone else's: nothing is written to it.
//
// One store at a time has dir open, in any process: Open takes pebble's lock on the
// directory (its LOCK file) first, and while another store holds it, in this process
// or another, Open fails with an error naming the directory ("in use by another
// engine") that wraps the lock's error (across processes, syscall.EAGAIN or EACCES).
func Open(dir string, opts Options) (*Store, error) {
	po, err := opts.pebbleOptions()
	if err != nil {
		return nil, err
	}
	po.EnsureDefaults() // the ingest's sstable writer options come from po
	if err := checkStoreDir(po.FS, dir); err != nil {
		return nil, err
	}
	lock, err := lockStoreDir(po.FS, dir)
	if err != nil {
		return nil, err
	}
	po.Lock = lock
	db, err := openPebble(dir, po)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	closeAll := func() {
		db.Close()
		lock.Close()
	}
	if err := resetIngestDir(po.FS, dir); err != nil {
		closeAll()
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	s := &Store{db: db, lock: lock, dir: dir, po: po, ingestBytes: opts.IngestBytes, commitCh: make(chan struct{})}
	if s.ingestBytes == 0 {
		s.ingestBytes = DefaultIngestBytes
	}
	epoch, err := readEpoch(db)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	s.committed.Store(epoch)
	if err := s.openHolds(opts.Partial); err != nil {
		closeAll()
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	return s, nil
}

func openPebble(dir string, po *pebble.Options) (db *pebble.DB, err error) {
	defer recoverFatal(&err)
	return pebble.Open(dir, po)
}

// usable returns an error when the store is closed or has failed.
func (s *Store) usable() error {
	if s.closed.Load() {
		return errors.New("storage: store is closed")
	}
	if err := s.failed.Load(); err != nil {
		return fmt.Errorf("storage: store failed, close and reopen it: %w", *err)
	}
	return nil
}

type getter interface {
	Get(key []byte) ([]byte, io.Closer, error)
}

func readEpoch(r getter) (uint64, error) {
	v, closer, err := r.Get(metaKey(metaEpoch))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("committed epoch record has %d bytes, want 8", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Close closes the store. Uncommitted data is dropped.
//
// Close waits for a running checkpoint, a running ExportView and calls reading pebble
// to finish; calls
// after it return "store is closed". Release every View first: pebble refuses to close
// with a snapshot open (the error names the leaked snapshots).
func (s *Store) Close() error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	s.viewMu.Lock()
	if s.closed.Swap(true) {
		s.viewMu.Unlock()
		return nil
	}
	s.viewMu.Unlock()
	// A running ExportView reads pebble without a lock: it ends first (no new one
	// starts once the store is marked closed).
	s.exports.Wait()
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	s.publishCommitLocked()
	err := s.db.Close()
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// DB is the underlying pebble database (for raw-scan baselines and tools).
func (s *Store) DB() *pebble.DB { return s.db }

// CommittedEpoch is the epoch of the last committed checkpoint (0: none yet).
func (s *Store) CommittedEpoch() uint64 { return s.committed.Load() }

// WaitCommitted blocks until the committed epoch is at least epoch, ctx is done, or
// the store is closed or failed.
func (s *Store) WaitCommitted(ctx context.Context, epoch uint64) error {
	for {
		s.viewMu.RLock()
		ch := s.commitCh
		err := s.usable()
		s.viewMu.RUnlock()
		if s.committed.Load() >= epoch {
			return nil
		}
		if err != nil {
			return fmt.Errorf("storage: wait for epoch %d: %w", epoch, err)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("storage: wait for epoch %d (committed %d): %w", epoch, s.committed.Load(), ctx.Err())
		}
	}
}

// CommitSignal returns a channel closed at the next checkpoint commit (a caller waits
// on its own context too: a store that is closed or failed commits no more).
func (s *Store) CommitSignal() <-chan struct{} {
	s.viewMu.RLock()
	defer s.viewMu.RUnlock()
	return s.commitCh
}

// publishCommitLocked wakes the waiters of WaitCommitted; viewMu is held for writing.
func (s *Store) publishCommitLocked() {
	close(s.commitCh)
	s.commitCh = make(chan struct{})
}

// DropUncommitted discards every node's sealed, uncommitted runs: what recovery does
// to in-memory state after actors fail, leaving exactly the committed checkpoint.
func (s *Store) DropUncommitted() {
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	for _, n := range s.nodes {
		n.runs = map[uint32][]*run{}
		// The state tables that wrote since their seals are discarded with their
		// actors: recovery builds new ones.
		n.sealed.Store(0)
		n.unsealed.Store(0)
	}
}

// AddNode registers a new node and returns its uncommitted store.
func (s *Store) AddNode() *Node {
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	n := &Node{store: s, id: len(s.nodes), runs: map[uint32][]*run{}}
	s.nodes = append(s.nodes, n)
	return n
}

// Node is the uncommitted store of one simulated compute node: the sealed, not yet
// committed epochs written by its actors. Only readers on the node see them.
type Node struct {
	store *Store
	id    int
	// runs per table, sorted by epoch; replaced (never mutated) under store.viewMu.
	runs map[uint32][]*run
	// sealed is the bytes of runs (changed with them, under store.viewMu), unsealed
	// those written to the node's state tables since their last seal (added by their
	// writers): PendingBytes.
	sealed, unsealed atomic.Int64
}

// Store is the committed store the node belongs to.
func (n *Node) Store() *Store { return n.store }

// ID is the node's index.
func (n *Node) ID() int { return n.id }

// addRun publishes a sealed run on the node.
//
// A seal must be for an epoch above every committed or committing checkpoint: the
// barrier protocol guarantees it, and a run below would be hidden from every view yet
// written by a later checkpoint over newer data. Such a seal is refused.
func (n *Node) addRun(r *run) error {
	if len(r.entries) == 0 {
		return nil
	}
	s := n.store
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	if floor := max(s.committed.Load(), s.checkpointing); r.epoch <= floor {
		return fmt.Errorf("storage: seal of table %d at epoch %d, at or below the committed or committing epoch %d", r.table, r.epoch, floor)
	}
	n.sealed.Add(int64(r.bytes))
	old := n.runs[r.table]
	rs := make([]*run, 0, len(old)+1)
	rs = append(rs, old...)
	rs = append(rs, r)
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].epoch < rs[j].epoch })
	n.runs[r.table] = rs
	return nil
}

// UncommittedBytes is the size of the node's sealed, uncommitted data.
func (n *Node) UncommittedBytes() int {
	s := n.store
	s.viewMu.RLock()
	defer s.viewMu.RUnlock()
	total := 0
	for _, rs := range n.runs {
		for _, r := range rs {
			for _, e := range r.entries {
				total += len(e.key) + len(e.value)
			}
		}
	}
	return total
}

// PendingBytes is the key and value bytes the node holds that no checkpoint has
// committed yet: its sealed runs, and what its state tables wrote since their last
// seal. It is two atomic loads (safe from any goroutine), for a backfill to hold back
// its snapshot read while checkpoints fall behind (engine.Options.BackfillMemoryBudget).
// A row written again within an epoch counts at each write made before its vnode was
// read in the epoch (the writer's memtable, then its run, holds each such version
// until the checkpoint commits it); once the vnode was read, a rewrite counts its new
// value only. Progress tables count once sealed;
// replicated tables, which keep their epochs to themselves, never count.
func (n *Node) PendingBytes() int64 { return n.sealed.Load() + n.unsealed.Load() }

// View is a consistent read state: a pebble snapshot, the committed epoch read through
// it, and (for a node's view) the node's sealed runs above that epoch. Release it when
// done.
type View struct {
	snap  *pebble.Snapshot
	store *Store // whose view it is
	Epoch uint64
	runs  map[uint32][]*run // per table, epochs > Epoch, ascending
	// The replicated epochs above Epoch that rep held when it opened the view: its
	// iterators on this view keep seeing them after a newer view drops them.
	rep     *ReplicatedTable
	private []*run
}

// View returns the committed state with no uncommitted data.
func (s *Store) View() (*View, error) { return s.view(nil, math.MaxUint64) }

// View returns the committed state overlaid with this node's sealed epochs.
func (n *Node) View() (*View, error) { return n.store.view(n, math.MaxUint64) }

// ViewAt returns the committed state overlaid with this node's sealed epochs up to and
// including epoch: the state as of epoch even when writers on the node have sealed
// later epochs since (a reader that follows those writers' change streams, such as a
// backfill reading its node's store, must not see changes it has not received yet).
// It is an error when a checkpoint above epoch is committed: that state is gone.
func (n *Node) ViewAt(epoch uint64) (*View, error) {
	v, err := n.store.view(n, epoch)
	if err == nil && v.Epoch > epoch {
		v.Release()
		return nil, fmt.Errorf("storage: view at epoch %d: epoch %d is committed", epoch, v.Epoch)
	}
	return v, err
}

func (s *Store) view(n *Node, upTo uint64) (*View, error) {
	s.viewMu.RLock()
	defer s.viewMu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	snap := s.db.NewSnapshot()
	epoch, err := readEpoch(snap)
	if err != nil {
		snap.Close()
		return nil, fmt.Errorf("storage: read committed epoch: %w", err)
	}
	v := &View{snap: snap, Epoch: epoch, store: s}
	if n != nil {
		v.runs = map[uint32][]*run{}
		for t, rs := range n.runs {
			for _, r := range rs {
				if r.epoch > epoch && r.epoch <= upTo {
					v.runs[t] = append(v.runs[t], r)
				}
			}
		}
	}
	return v, nil
}

// Release frees the view's snapshot.
func (v *View) Release() {
	if v.snap != nil {
		v.snap.Close()
		v.snap = nil
	}
}

// get reads one key through the view: the newest sealed run that has it, else pebble.
// The returned value is a copy.
func (v *View) get(table uint32, key []byte) ([]byte, bool, error) {
	if v == nil || v.snap == nil {
		return nil, false, errors.New("the view is released")
	}
	if e, ok := newestWrite(v.runs[table], key); ok {
		if e.del {
			return nil, false, nil
		}
		return append([]byte(nil), e.value...), true, nil
	}
	val, closer, err := v.snap.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := append([]byte(nil), val...)
	closer.Close()
	return out, true, nil
}

// newestWrite finds key's write in runs (oldest first), searching the newest first.
func newestWrite(rs []*run, key []byte) (entry, bool) {
	for i := len(rs) - 1; i >= 0; i-- {
		if e, ok := rs[i].get(key); ok {
			return e, true
		}
	}
	return entry{}, false
}

// RowCount is the committed number of rows of a table's vnode.
func (s *Store) RowCount(table uint32, vnode uint16) (int64, error) {
	s.viewMu.RLock() // keeps Close out while pebble is read
	defer s.viewMu.RUnlock()
	if err := s.usable(); err != nil {
		return 0, err
	}
	v, closer, err := s.db.Get(rowCountKey(table, vnode))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("storage: row count of table %d vnode %d: %w", table, vnode, err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("storage: row count of table %d vnode %d: record has %d bytes", table, vnode, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// TableRowCount is the committed number of rows of a table, summed over its vnodes.
func (s *Store) TableRowCount(table uint32) (int64, error) {
	s.viewMu.RLock() // keeps Close out while pebble is read
	defer s.viewMu.RUnlock()
	if err := s.usable(); err != nil {
		return 0, err
	}
	prefix := metaKey(metaRowCount, binary.BigEndian.AppendUint32(nil, table))
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, fmt.Errorf("storage: row count of table %d: %w", table, err)
	}
	defer it.Close()
	var total int64
	for ok := it.First(); ok; ok = it.Next() {
		v := it.Value()
		if len(v) != 8 {
			_, vn, _, _ := SplitKey(it.Key()[len(prefix)-4:])
			return 0, fmt.Errorf("storage: row count of table %d vnode %d: record has %d bytes", table, vn, len(v))
		}
		total += int64(binary.BigEndian.Uint64(v))
	}
	if err := it.Error(); err != nil {
		return 0, fmt.Errorf("storage: row count of table %d: %w", table, err)
	}
	return total, nil
}
