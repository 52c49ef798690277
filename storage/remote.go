package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/vnode"
)

// DefaultExportTableBytes is the size (key and value bytes) from which an export
// starts a new sstable at the next vnode boundary: see ExportCheckpoint.
const DefaultExportTableBytes = 64 << 20

// SSTable is one sstable an export wrote.
type SSTable struct {
	Name string // as create named it
	// Smallest and Largest are the first and last keys it holds (copies).
	Smallest, Largest []byte
	Size              int64 // bytes written
	Keys              int   // puts and deletes
}

// ExportOptions shape the sstables of an export.
type ExportOptions struct {
	// TableBytes is the size (key and value bytes) from which an sstable ends at the
	// next vnode boundary (0 or less: DefaultExportTableBytes).
	TableBytes int
	// Whole says that the exporting store's nodes own every vnode of every table
	// they write (one process commits everything: engine/cluster/commitlog), so no
	// other store's export can fall between its keys: sstables then end by size
	// only (and across a table the commit drops), not also where the table changes
	// or a vnode its writers do not own lies between.
	Whole bool
}

// Aborter is implemented by a writer that can drop what was written to it instead of
// keeping it: ExportCheckpoint aborts, rather than closes, the writer of an sstable
// it fails to write.
type Aborter interface {
	Abort()
}

// ExportCheckpoint writes the sealed, uncommitted runs of every node up to epoch as
// sstables through create, instead of committing them: the storage half of a cluster
// node's checkpoint (docs/design.md §8, "Checkpoint commit" step 2). It returns the
// sstables in ascending key order, and the row count changes their writes make to
// the store's committed data, counted as a Checkpoint counts them (a probe of the
// committed data for each key whose writer did not know whether it existed): the
// store must hold the committed data of every vnode it exports, as every store that
// applies the commit does. The sstables hold no metadata (table 0) keys: the
// committed epoch and the row counts are written by IngestFiles on every store that
// applies them, from the changes counted here (Changes.RowDeltas). Each holds consecutive vnodes of one table, each of them written or
// owned by the writers of the export's runs (see exportCuts), so that the sstables
// of one epoch exported by stores whose nodes own different vnodes do not overlap,
// and one IngestFiles takes them all.
//
// create is called with k = 0, 1, ... for each sstable in turn and returns its name
// and its writer, which receives the sstable's bytes and is closed once it is
// complete. An sstable also ends at the first vnode boundary once it holds
// o.TableBytes key and value bytes: a vnode's writes are in one sstable. With o.Whole
// it ends only so (see ExportOptions). On a failed write the writer is aborted when it implements Aborter,
// and closed otherwise; the sstables completed before it stay where create put them,
// and are returned with the error.
//
// Nothing is committed and the runs stay sealed on their nodes: IngestFiles of the
// same epoch drops them. While the export runs a seal at or below epoch is refused;
// after it, the barrier protocol must keep seals above epoch (a seal at or below it
// would not be exported, and IngestFiles would drop it). The staged catalog entries
// and table drops are left staged (Staged returns them, for the commit that carries
// them to IngestFiles); the runs of a table staged for drop are not exported, as a
// Checkpoint does not write them. epoch must be above the committed epoch.
func (s *Store) ExportCheckpoint(epoch uint64, o ExportOptions, create func(k int) (string, io.WriteCloser, error)) ([]SSTable, []RowDelta, error) {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if err := s.usable(); err != nil {
		return nil, nil, fmt.Errorf("storage: export epoch %d: %w", epoch, err)
	}
	if c := s.committed.Load(); epoch <= c {
		return nil, nil, fmt.Errorf("storage: export epoch %d is not above the committed epoch %d", epoch, c)
	}
	if o.TableBytes <= 0 {
		o.TableBytes = DefaultExportTableBytes
	}
	runs := s.beginRemote(epoch)
	defer s.endRemote()
	entries := 0
	live := runs[:0:0]
	var drops []uint32
	for t := range s.pendingDrops {
		drops = append(drops, t)
	}
	slices.Sort(drops)
	owned := map[uint32][]*vnode.Bitmap{} // per table, the bitmaps its runs' writers owned
	for _, r := range runs {
		if r.table == MetaTable {
			return nil, nil, fmt.Errorf("storage: export epoch %d: a run of table %d, reserved for metadata", epoch, MetaTable)
		}
		if !s.pendingDrops[r.table] {
			live = append(live, r)
			entries += len(r.entries)
			if r.owned != nil && slices.Index(owned[r.table], r.owned) < 0 {
				owned[r.table] = append(owned[r.table], r.owned)
			}
		}
	}
	probe, err := s.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		return nil, nil, fmt.Errorf("storage: export epoch %d: %w", epoch, err)
	}
	defer probe.Close()
	counter := newRowCounter(probe)
	merged, buf, err := mergeRuns(live, func() []entry { return s.mergeBuf(entries) }, func(e entry, b before) error {
		return counter.add(e.key, e.del, b)
	})
	if buf != nil {
		defer s.keepMergeBuf(buf)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("storage: export epoch %d: %w", epoch, err)
	}
	wo := s.po.MakeWriterOptions(0, s.db.TableFormat())
	var out []SSTable
	for _, es := range exportCuts(merged, o, drops, owned) {
		t, err := exportSSTable(wo, len(out), es, create)
		if err != nil {
			return out, nil, fmt.Errorf("storage: export epoch %d: %w", epoch, err)
		}
		out = append(out, t)
	}
	return out, counter.result(), nil
}

// beginRemote marks epoch as committing, so that no seal at or below it is accepted,
// and returns the runs up to it of every node, oldest first. endRemote undoes the mark.
func (s *Store) beginRemote(epoch uint64) []*run {
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	s.checkpointing = epoch
	var runs []*run
	for _, n := range s.nodes {
		for _, rs := range n.runs {
			for _, r := range rs {
				if r.epoch <= epoch {
					runs = append(runs, r)
				}
			}
		}
	}
	sortRunsByEpoch(runs)
	return runs
}

func (s *Store) endRemote() {
	s.viewMu.Lock()
	s.checkpointing = 0
	s.viewMu.Unlock()
}

// exportCuts splits merged into the sstables of an export. Unless o.Whole, each holds
// the writes of consecutive vnodes of one table, every one of which has writes in it
// or is owned by the export's writers (owned, per table): a change of table, or a
// vnode between two that neither has writes nor is owned, ends it, so that the
// sstables of stores whose nodes own different vnodes never overlap. Each also ends
// at the first vnode boundary once it holds o.TableBytes. With o.Whole, one also ends
// where the table changes across one of drops (ascending): the table ranges that the
// commit deletes must not fall within an sstable's bounds, which IngestFiles refuses
// (pebble takes no overlapping files in one ingest).
func exportCuts(merged entryChunks, o ExportOptions, drops []uint32, owned map[uint32][]*vnode.Bitmap) []entryChunks {
	var files []entryChunks
	start, i, size := 0, 0, 0
	var prev []byte
	for _, es := range merged {
		for _, e := range es {
			if i > start && !sameVnode(prev, e.key) && (size >= o.TableBytes || !o.Whole && !ownedBetween(owned, prev, e.key) || dropBetween(drops, prev, e.key)) {
				files = append(files, merged.span(start, i))
				start, size = i, 0
			}
			size += len(e.key) + len(e.value)
			prev = e.key
			i++
		}
	}
	if i > start {
		files = append(files, merged.span(start, i))
	}
	return files
}

// dropBetween reports whether one of drops (ascending) is a table id between the
// tables of keys a and b (a's below b's).
func dropBetween(drops []uint32, a, b []byte) bool {
	if len(drops) == 0 || len(a) < 4 || len(b) < 4 {
		return false
	}
	ta, tb := binary.BigEndian.Uint32(a), binary.BigEndian.Uint32(b)
	i, _ := slices.BinarySearch(drops, ta+1)
	return i < len(drops) && drops[i] < tb
}

// sameVnode reports whether keys a and b share their table and vnode prefix.
func sameVnode(a, b []byte) bool {
	return len(a) >= KeyPrefixLen && len(b) >= KeyPrefixLen && bytes.Equal(a[:KeyPrefixLen], b[:KeyPrefixLen])
}

// ownedBetween reports whether keys a and b (a's below b's) are of one table and
// every vnode between theirs is one that a bitmap of owned[table] holds (none is
// between: the vnode after a's is b's).
func ownedBetween(owned map[uint32][]*vnode.Bitmap, a, b []byte) bool {
	if len(a) < KeyPrefixLen || len(b) < KeyPrefixLen || !bytes.Equal(a[:4], b[:4]) {
		return false
	}
	bms := owned[binary.BigEndian.Uint32(a)]
	for v := int(binary.BigEndian.Uint16(a[4:])) + 1; v < int(binary.BigEndian.Uint16(b[4:])); v++ {
		if !slices.ContainsFunc(bms, func(bm *vnode.Bitmap) bool { return bm.Contains(vnode.Vnode(v)) }) {
			return false
		}
	}
	return true
}

// exportSSTable writes es as sstable k through create.
func exportSSTable(wo sstable.WriterOptions, k int, es entryChunks, create func(k int) (string, io.WriteCloser, error)) (SSTable, error) {
	name, wc, err := create(k)
	if err != nil {
		return SSTable{}, fmt.Errorf("create sstable %d: %w", k, err)
	}
	cw := &exportWritable{w: wc}
	w := sstable.NewWriter(cw, wo)
	t := SSTable{Name: name}
	for _, c := range es {
		for _, e := range c {
			if e.del {
				err = w.Delete(e.key)
			} else {
				err = w.Set(e.key, e.value)
			}
			if err != nil {
				cw.failed = true
				w.Close()
				return SSTable{}, fmt.Errorf("write sstable %s: %w", name, err)
			}
			if t.Keys == 0 {
				t.Smallest = slices.Clone(e.key)
			}
			t.Keys++
		}
	}
	t.Largest = slices.Clone(es[len(es)-1][len(es[len(es)-1])-1].key)
	if err := w.Close(); err != nil {
		return SSTable{}, fmt.Errorf("write sstable %s: %w", name, err)
	}
	t.Size = cw.n
	return t, nil
}

// exportWritable is the sstable writer's output: an export's io.WriteCloser, with the
// bytes written counted. Abort (the writer's on a failure) aborts it when it can.
type exportWritable struct {
	w      io.WriteCloser
	n      int64
	failed bool // a write failed: Finish aborts
}

func (e *exportWritable) Write(p []byte) error {
	n, err := e.w.Write(p)
	e.n += int64(n)
	return err
}

func (e *exportWritable) Finish() error {
	if e.failed {
		e.Abort()
		return errors.New("sstable write failed")
	}
	return e.w.Close()
}

func (e *exportWritable) Abort() {
	if a, ok := e.w.(Aborter); ok {
		a.Abort()
		return
	}
	e.w.Close()
}

// downloadPrefix names the files NewIngestFile creates in the ingest directory.
const downloadPrefix = "download-"

// NewIngestFile creates a file for IngestFiles in the store's ingest directory
// (IngestDirName, which Open empties), through the store's file system: where a
// downloaded sstable is written. name is the file's name there after a fixed prefix,
// and may not hold a path separator. The writer syncs the file when it is closed;
// path is the file's path for IngestFiles.
func (s *Store) NewIngestFile(name string) (w io.WriteCloser, path string, err error) {
	if err := s.usable(); err != nil {
		return nil, "", fmt.Errorf("storage: ingest file %q: %w", name, err)
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return nil, "", fmt.Errorf("storage: ingest file %q: not a plain file name", name)
	}
	path = s.po.FS.PathJoin(s.dir, IngestDirName, downloadPrefix+name)
	f, err := s.po.FS.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, "", fmt.Errorf("storage: ingest file %s: %w", path, err)
	}
	return syncCloser{f}, path, nil
}

// DiscardIngestFiles removes files that NewIngestFile created and that will not be
// ingested (a download that failed), best-effort: what is left of them is removed
// when the store next opens.
func (s *Store) DiscardIngestFiles(paths []string) {
	for _, p := range paths {
		if err := s.po.FS.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.po.Logger.Infof("storage: discard ingest file %s: %v", p, err)
		}
	}
}

// syncCloser is a file that is synced when closed.
type syncCloser struct{ f vfs.File }

func (c syncCloser) Write(p []byte) (int, error) { return c.f.Write(p) }

func (c syncCloser) Close() error {
	err := c.f.Sync()
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Changes are what a commit carries besides its tables' data: catalog entries (a nil
// value deletes one), the tables it drops, the version-log sequence it applies (0:
// none), and the row count changes its files make (RowDeltas, when Counted: the
// exports' counts; otherwise IngestFiles counts them against the store's committed
// data, reading every key of every file).
type Changes struct {
	Catalog   map[string][]byte
	Drops     []uint32
	Sequence  uint64
	Counted   bool
	RowDeltas []RowDelta
}

// Staged returns copies of the staged catalog entries and table drops (in ascending
// order): what the next commit carries, with Sequence 0.
func (s *Store) Staged() Changes {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	var c Changes
	if len(s.pendingCatalog) > 0 {
		c.Catalog = make(map[string][]byte, len(s.pendingCatalog))
		for k, v := range s.pendingCatalog {
			if v == nil {
				c.Catalog[k] = nil
			} else {
				c.Catalog[k] = slices.Clone(v)
			}
		}
	}
	for t := range s.pendingDrops {
		c.Drops = append(c.Drops, t)
	}
	slices.Sort(c.Drops)
	return c
}

// AppliedSequence is the version-log sequence of the last IngestFiles that named one
// (0: none yet).
func (s *Store) AppliedSequence() (uint64, error) {
	s.viewMu.RLock() // keeps Close out while pebble is read
	defer s.viewMu.RUnlock()
	if err := s.usable(); err != nil {
		return 0, fmt.Errorf("storage: applied sequence: %w", err)
	}
	return readApplied(s.db)
}

// readApplied reads the applied sequence from r (the store's pebble, or a snapshot).
func readApplied(r getter) (uint64, error) {
	v, closer, err := r.Get(metaKey(metaApplied))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("storage: applied sequence: %w", err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("storage: applied sequence record has %d bytes, want 8", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// IngestFiles commits epoch as the sstables at paths (an export's, from any stores,
// downloaded: see NewIngestFile) and the changes ch, in one atomic, durable step:
// pebble ingests them together with an sstable of the metadata, which holds the new
// committed epoch, ch's catalog entries and sequence, and the row counts the files
// change (ch.RowDeltas when ch.Counted, the exports' counts; otherwise counted here
// against this store's committed data), and with an sstable of range
// deletions for each table ch drops (its rows and row counts). The store then holds
// what a local Checkpoint of the same writes would have committed (docs/design.md
// §8, "Checkpoint commit" step 4), and every node's sealed runs up to epoch are
// dropped, as a Checkpoint drops the runs it writes. ch takes the place of the staged
// catalog entries and table drops, which are discarded: the store whose changes were
// staged commits them through Staged.
//
// Each file must hold point puts and deletes only, no metadata (table 0) key and no
// key of a table ch drops, at least one key, and no key range overlapping another
// file's; one that does not is refused with an error naming it, and then nothing is
// committed. So is a counted change of table 0 or of a table ch drops, or one that
// would take a vnode's count below zero, naming the table and vnode. epoch must be above the committed epoch and a sequence above the
// applied one; paths may be empty, which commits the epoch and ch alone. The files
// are consumed: they are removed, whatever the result. A failed ingest is handled as
// a Checkpoint's failed commit is (a pebble fatal fault fails the store).
func (s *Store) IngestFiles(paths []string, epoch uint64, ch Changes) error {
	defer s.DiscardIngestFiles(paths)
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if err := s.usable(); err != nil {
		return fmt.Errorf("storage: ingest epoch %d: %w", epoch, err)
	}
	if c := s.committed.Load(); epoch <= c {
		return fmt.Errorf("storage: ingest epoch %d is not above the committed epoch %d", epoch, c)
	}
	drops := map[uint32]bool{}
	for _, t := range ch.Drops {
		if t == MetaTable || t == math.MaxUint32 {
			return fmt.Errorf("storage: ingest epoch %d: drop of table %d, which is reserved", epoch, t)
		}
		drops[t] = true
	}
	if ch.Sequence != 0 {
		applied, err := s.AppliedSequence()
		if err != nil {
			return fmt.Errorf("storage: ingest epoch %d: %w", epoch, err)
		}
		if ch.Sequence <= applied {
			return fmt.Errorf("storage: ingest epoch %d: sequence %d is not above the applied sequence %d", epoch, ch.Sequence, applied)
		}
	}
	s.beginRemote(epoch)
	defer s.endRemote()
	dir := s.po.FS.PathJoin(s.dir, IngestDirName)
	metaPath := s.po.FS.PathJoin(dir, fmt.Sprintf("meta-%d.sst", epoch))
	written := []string{metaPath}
	var copies []string // ingestMeta's copies of files, ingested from ingest
	defer func() { s.removeWritten(append(written, copies...)...) }()
	meta, ingest, err := s.ingestMeta(paths, epoch, ch, drops, &copies)
	if err != nil {
		return fmt.Errorf("storage: ingest epoch %d: %w", epoch, err)
	}
	wo := s.po.MakeWriterOptions(0, s.db.TableFormat())
	var metaDels [][2][]byte
	for _, t := range ch.Drops {
		rc := metaKey(metaRowCount, binary.BigEndian.AppendUint32(nil, t))
		metaDels = append(metaDels, [2][]byte{rc, prefixEnd(rc)})
	}
	if err := writeSSTable(s.po.FS, metaPath, wo, entryChunks{meta}, metaDels); err != nil {
		return fmt.Errorf("storage: ingest epoch %d: %w", epoch, err)
	}
	for _, t := range ch.Drops {
		p := s.po.FS.PathJoin(dir, fmt.Sprintf("drop-%d-%d.sst", epoch, t))
		written = append(written, p)
		lo := binary.BigEndian.AppendUint32(nil, t)
		if err := writeSSTable(s.po.FS, p, wo, nil, [][2][]byte{{lo, prefixEnd(lo)}}); err != nil {
			return fmt.Errorf("storage: ingest epoch %d: drop table %d: %w", epoch, t, err)
		}
	}
	if err := ingestFatal(s.db, append(ingest, written...)); err != nil {
		return s.commitFailed(epoch, err)
	}
	for _, t := range ch.Drops {
		delete(s.holds, t)
	}
	s.pendingCatalog = nil
	s.pendingDrops = nil
	s.viewMu.Lock()
	s.committed.Store(epoch)
	s.publishCommitLocked()
	s.dropRunsLocked(func(r *run) bool { return r.epoch <= epoch })
	s.viewMu.Unlock()
	return nil
}

// ingestMeta checks the files at paths and returns the metadata writes of their
// ingest at epoch with ch, in key order: the row counts the files change (ch's, when
// ch.Counted; otherwise counted against the committed data), ch's catalog entries and
// sequence, the held vnodes of the tables ch drops (none), and the committed epoch;
// and the files to ingest. A file may not hold a key of a table in drops. A partial
// store ingests the keys of the vnodes it holds and their row count changes only: a
// file with none of them is left out, and one with some of them is copied without
// the others into a new file, added to copies.
func (s *Store) ingestMeta(paths []string, epoch uint64, ch Changes, drops map[uint32]bool, copies *[]string) ([]entry, []string, error) {
	var counter *rowCounter
	if !ch.Counted {
		probe, err := s.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
		if err != nil {
			return nil, nil, err
		}
		defer probe.Close()
		counter = newRowCounter(probe)
	}
	type bounds struct {
		path   string
		lo, hi []byte
	}
	bs := make([]bounds, 0, len(paths))
	var ingest []string
	for i, p := range paths {
		fk, err := s.scanIngestFile(p, counter)
		if err != nil {
			return nil, nil, err
		}
		// Checked on every key of the file, held or not.
		for t := range drops {
			if binary.BigEndian.Uint32(fk.first) <= t && t <= binary.BigEndian.Uint32(fk.last) {
				return nil, nil, fmt.Errorf("sstable %s holds keys of table %d, which the commit drops", p, t)
			}
		}
		bs = append(bs, bounds{p, fk.first, fk.last})
		if fk.lo == nil {
			continue // no key of a vnode the store holds
		}
		if fk.other {
			held := s.po.FS.PathJoin(s.dir, IngestDirName, fmt.Sprintf("held-%d-%d.sst", epoch, i))
			*copies = append(*copies, held)
			wo := s.po.MakeWriterOptions(0, s.db.TableFormat()) // it keeps deletes
			if _, _, err := s.mergeFiles([]string{p}, held, wo, &keyFilter{ranges: s.holds}, true); err != nil {
				return nil, nil, err
			}
			p = held
		}
		ingest = append(ingest, p)
	}
	slices.SortFunc(bs, func(a, b bounds) int { return bytes.Compare(a.lo, b.lo) })
	for i := 1; i < len(bs); i++ {
		if bytes.Compare(bs[i-1].hi, bs[i].lo) >= 0 {
			return nil, nil, fmt.Errorf("sstables %s and %s overlap (keys %x..%x and %x..%x)", bs[i-1].path, bs[i].path, bs[i-1].lo, bs[i-1].hi, bs[i].lo, bs[i].hi)
		}
	}
	var deltas []RowDelta
	if !ch.Counted {
		deltas = counter.result()
	} else {
		deltas = SumRowDeltas(ch.RowDeltas) // one change per vnode
		for _, d := range deltas {
			if d.Table == MetaTable || drops[d.Table] {
				return nil, nil, fmt.Errorf("a row count change of table %d vnode %d, a table which is reserved or which the commit drops", d.Table, d.Vnode)
			}
		}
		deltas = s.heldRowDeltas(deltas)
	}
	meta, err := s.rowCountWrites(deltas)
	if err != nil {
		return nil, nil, err
	}
	if ch.Counted {
		// Counts from elsewhere must fit this store's: a change that takes a count
		// below zero says the commit's counts and the store's data disagree. deltas
		// holds no zero change (SumRowDeltas), so meta[i] is deltas[i]'s count.
		for i, d := range deltas {
			if n := int64(binary.BigEndian.Uint64(meta[i].value)); n < 0 {
				return nil, nil, fmt.Errorf("the row count of table %d vnode %d would be %d: the commit's change of %d does not fit this store's count", d.Table, d.Vnode, n, d.Delta)
			}
		}
	}
	for name, v := range ch.Catalog {
		meta = append(meta, entry{key: metaKey(metaCatalog, []byte(name)), value: v, del: v == nil})
	}
	for _, t := range ch.Drops {
		if s.holds[t] != nil {
			meta = append(meta, entry{key: holdsKey(t), del: true})
		}
	}
	if ch.Sequence != 0 {
		meta = append(meta, entry{key: metaKey(metaApplied), value: binary.BigEndian.AppendUint64(nil, ch.Sequence)})
	}
	meta = append(meta, entry{key: metaKey(metaEpoch), value: binary.BigEndian.AppendUint64(nil, epoch)})
	slices.SortFunc(meta, entryLess)
	return meta, ingest, nil
}

// fileKeys are what scanIngestFile saw of a file: its first and last keys, the first
// and last of those of vnodes the store holds (nil: none), and whether it holds a key
// of a vnode the store does not hold (a partial store's).
type fileKeys struct {
	first, last []byte
	lo, hi      []byte
	other       bool
}

// scanIngestFile reads the sstable at p, checks that every key in it is a point put
// or delete of a table key (a file from a bucket is checked whether or not the commit
// carries its row counts), adds the row count changes its keys of vnodes the store
// holds make to counter unless it is nil, and returns its keys' bounds. ckptMu is
// held.
func (s *Store) scanIngestFile(p string, counter *rowCounter) (fileKeys, error) {
	var fk fileKeys
	f, err := s.openIngestFile(p)
	if err != nil {
		return fk, err
	}
	defer f.close()
	if counter != nil {
		counter.restart() // this file's keys ascend, not those of every file
	}
	held := keyFilter{ranges: s.holds}
	for ok := f.next(true); ok; ok = f.next(false) {
		key, kind := f.key, f.kv.Kind()
		if err := checkIngestKey(p, key, kind); err != nil {
			return fk, err
		}
		if fk.first == nil {
			fk.first = slices.Clone(key)
		}
		fk.last = append(fk.last[:0], key...)
		if s.partial {
			if !held.has(key) {
				fk.other = true
				continue
			}
			if fk.lo == nil {
				fk.lo = slices.Clone(key)
			}
			fk.hi = append(fk.hi[:0], key...)
		}
		if counter != nil {
			if err := counter.add(key, kind == pebble.InternalKeyKindDelete, beforeUnknown); err != nil {
				return fk, fmt.Errorf("sstable %s: key %x: %w", p, key, err)
			}
		}
	}
	if err := f.it.Error(); err != nil {
		return fk, fmt.Errorf("sstable %s: %w", p, err)
	}
	if fk.first == nil {
		return fk, fmt.Errorf("sstable %s holds no keys", p)
	}
	if !s.partial {
		fk.lo, fk.hi = fk.first, fk.last // it holds every key
	}
	return fk, nil
}
