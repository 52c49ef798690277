package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// maxKeptMerge is the most entries of a checkpoint's merge buffer its store keeps for
// the next checkpoint (3.5 MiB). A larger one, from a heap merge of large epochs whose
// runs overlap (a table rewriting its keys), goes to mergeBufs, up to maxPooledMerge
// entries (56 MiB), and beyond that is dropped. Runs that do not overlap, such as a
// view's being backfilled, need no buffer (see mergeRuns).
const (
	maxKeptMerge   = 1 << 16
	maxPooledMerge = 1 << 20
)

// mergeBufs keeps the large merge buffers of checkpoints for the next large
// checkpoint of any store.
var mergeBufs slicePool[entry]

// mergeBuf is an empty merge buffer with room for n entries: the store's own, or a
// pooled one when the store's is smaller and the pool's next is large enough.
func (s *Store) mergeBuf(n int) []entry {
	buf := s.merged[:0]
	if cap(buf) < n && n > maxKeptMerge {
		if p := mergeBufs.get(n, maxPooledMerge); p != nil {
			buf = p
		}
	}
	return slices.Grow(buf, n)
}

// keepMergeBuf clears merged (its entries point into the runs) and keeps it for the
// next checkpoint: on the store when small, in mergeBufs when large.
func (s *Store) keepMergeBuf(merged []entry) {
	switch c := cap(merged); {
	case c <= maxKeptMerge:
		clear(merged)
		s.merged = merged[:0]
	case c <= maxPooledMerge:
		mergeBufs.put(merged)
	}
}

// CheckpointStats describes one committed checkpoint.
type CheckpointStats struct {
	Epoch   uint64
	Runs    int // sealed runs written
	Keys    int // distinct keys written (puts and deletes)
	Bytes   int // key and value bytes written
	Catalog int // catalog entries written or deleted
	// Ingested is the number of sstables the checkpoint was committed as (see
	// Options.IngestBytes); 0 when it was committed as a batch.
	Ingested int
}

// SetCatalog stages a catalog entry; the next checkpoint commits it with its data.
// A nil value deletes the entry.
func (s *Store) SetCatalog(name string, value []byte) {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if s.pendingCatalog == nil {
		s.pendingCatalog = map[string][]byte{}
	}
	if value == nil {
		s.pendingCatalog[name] = nil
	} else {
		// Never nil, even when empty: nil means delete.
		s.pendingCatalog[name] = append([]byte{}, value...)
	}
}

// StageDropTable stages the deletion of every row and row count of a table; the next
// checkpoint deletes them atomically with its data (and, typically, with the catalog
// entry that named the table). Runs of the table still sealed on nodes at that
// checkpoint are discarded, not written.
func (s *Store) StageDropTable(table uint32) error {
	if table == MetaTable {
		return fmt.Errorf("storage: table id %d is reserved for metadata", MetaTable)
	}
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if s.pendingDrops == nil {
		s.pendingDrops = map[uint32]bool{}
	}
	s.pendingDrops[table] = true
	return nil
}

// DiscardStaged drops the staged catalog entries and table drops, so that the next
// checkpoint does not commit them (a DDL that failed before its checkpoint).
func (s *Store) DiscardStaged() {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	s.pendingCatalog = nil
	s.pendingDrops = nil
}

// Catalog returns every committed catalog entry.
func (s *Store) Catalog() (map[string][]byte, error) {
	s.viewMu.RLock() // keeps Close out while pebble is read
	defer s.viewMu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	return readCatalog(s.db)
}

// readCatalog reads every catalog entry from r (the store's pebble, or a snapshot).
func readCatalog(r pebble.Reader) (map[string][]byte, error) {
	prefix := metaKey(metaCatalog)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("storage: read catalog: %w", err)
	}
	defer it.Close()
	out := map[string][]byte{}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key()[len(prefix):])] = append([]byte(nil), it.Value()...)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("storage: read catalog: %w", err)
	}
	return out, nil
}

// Checkpoint commits epoch: every sealed run of every node with an epoch up to it, the
// exact row-count changes they make, the staged catalog entries and the new committed
// epoch, in one atomic, durable step: a synced pebble batch or, from
// Options.IngestBytes written, sstables that pebble ingests together (cut where
// committed keys lie between, so that a view's new vnode ranges go straight to the
// last level; writes mostly scattered among committed keys, and table drops, take
// the batch). On error nothing is committed: the runs stay
// sealed on their nodes, the committed epoch does not move, and a later checkpoint
// may retry. Epochs must increase.
//
// A failed WAL write or sync of a batch is fatal to pebble: the error is returned,
// and the store then refuses views, checkpoints, row counts and the catalog (pebble
// would show the failed epoch to new reads) until it is closed and reopened. The
// reopened store holds the last committed epoch or, when only the sync failed,
// possibly this one, never a mix. A failed sstable write of an ingest is an ordinary
// error; a failed WAL rotation or write of an ingest that overlaps pebble's memtable
// ends the process, as a failed WAL rotation does anywhere in pebble (see the notes
// of errorfs_test.go).
func (s *Store) Checkpoint(epoch uint64) (CheckpointStats, error) {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	st := CheckpointStats{Epoch: epoch}
	if err := s.usable(); err != nil {
		return st, fmt.Errorf("storage: checkpoint %d: %w", epoch, err)
	}
	if s.partial {
		// Its commits come from a log, which a partial store applies as a part.
		return st, fmt.Errorf("storage: checkpoint %d: the store is partial (it holds some vnodes only), which only a commit log's IngestFiles commits", epoch)
	}
	if c := s.committed.Load(); epoch <= c {
		return st, fmt.Errorf("storage: checkpoint epoch %d is not above the committed epoch %d", epoch, c)
	}

	// Collect the runs to commit, oldest first, per table; from now on no seal at or
	// below epoch is accepted.
	s.viewMu.Lock()
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
	s.viewMu.Unlock()
	defer func() {
		s.viewMu.Lock()
		s.checkpointing = 0
		s.viewMu.Unlock()
	}()
	written := make(map[*run]bool, len(runs))
	for _, r := range runs {
		written[r] = true
	}
	sortRunsByEpoch(runs)
	st.Runs = len(runs)

	// The final write per key, in key order: a merge of the sorted runs in which a
	// later epoch's write overrides an earlier one's. Vnodes are owned by one actor at
	// a time, so runs of one epoch never share a key.
	var size, entries int
	var live []*run
	for _, r := range runs {
		if !s.pendingDrops[r.table] {
			live = append(live, r)
			size += r.bytes
			entries += len(r.entries)
		}
	}
	// Whether each key existed, for the row counts, for the keys whose writer did not
	// know: one probe, the keys in ascending order (see rowCounter).
	probe, err := s.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		return st, fmt.Errorf("storage: checkpoint %d: %w", epoch, err)
	}
	defer probe.Close()
	counter := newRowCounter(probe)
	// The batch is written in key order, which makes pebble's sort of a large batch
	// (one it turns into a memtable of its own) a single pass: the metadata keys
	// (table 0) first, then the merged runs. The merged writes are kept to be written
	// after the row counts they change: runs that do not overlap (a view being
	// backfilled) are their own entries, not copied; a heap merge's go to a buffer
	// sized for every entry up front (a checkpoint merges up to hundreds of thousands,
	// which growing by doubling would copy at each doubling): a run holds one entry
	// per key, so entries exceed the keys merged only by the keys rewritten across the
	// epochs committed together, and the buffer is at most the size of the runs' own
	// entries.
	merged, buf, err := mergeRuns(live, func() []entry { return s.mergeBuf(entries) }, func(e entry, b before) error {
		if err := counter.add(e.key, e.del, b); err != nil {
			return err
		}
		st.Keys++
		st.Bytes += len(e.key) + len(e.value)
		return nil
	})
	if buf != nil {
		defer s.keepMergeBuf(buf) // the memory for the next checkpoint, not the runs
	}
	if err != nil {
		return st, fmt.Errorf("storage: checkpoint %d: %w", epoch, err)
	}
	meta, err := s.rowCountWrites(counter.result())
	if err != nil {
		return st, fmt.Errorf("storage: checkpoint %d: %w", epoch, err)
	}
	for name, v := range s.pendingCatalog {
		meta = append(meta, entry{key: metaKey(metaCatalog, []byte(name)), value: v, del: v == nil})
		st.Catalog++
	}
	meta = append(meta, entry{key: metaKey(metaEpoch), value: binary.BigEndian.AppendUint64(nil, epoch)})
	slices.SortFunc(meta, entryLess)
	if s.ingestBytes > 0 && st.Bytes >= s.ingestBytes && len(s.pendingDrops) == 0 {
		files, buf, ok, err := ingestPlan(probe, meta, merged, s.ingestBytes/ingestSegmentDiv, s.ingestBuf)
		s.ingestBuf = buf[:0]
		if err != nil {
			return st, fmt.Errorf("storage: checkpoint %d: %w", epoch, err)
		}
		if ok {
			if err := s.ingest(epoch, files); err != nil {
				return st, s.commitFailed(epoch, err)
			}
			st.Ingested = len(files)
			s.published(epoch, written)
			return st, nil
		}
	}
	b := s.db.NewBatchWithSize(size + size/4)
	defer b.Close()
	for _, es := range append(entryChunks{meta}, merged...) {
		for _, e := range es {
			if e.del {
				err = b.Delete(e.key, nil)
			} else {
				err = b.Set(e.key, e.value, nil)
			}
			if err != nil {
				return st, fmt.Errorf("storage: checkpoint %d: %w", epoch, err)
			}
		}
	}
	for table := range s.pendingDrops {
		lo := binary.BigEndian.AppendUint32(nil, table)
		if err := b.DeleteRange(lo, prefixEnd(lo), nil); err != nil {
			return st, fmt.Errorf("storage: checkpoint %d: drop table %d: %w", epoch, table, err)
		}
		rc := metaKey(metaRowCount, lo)
		if err := b.DeleteRange(rc, prefixEnd(rc), nil); err != nil {
			return st, fmt.Errorf("storage: checkpoint %d: drop table %d: %w", epoch, table, err)
		}
	}
	if err := commitSync(b); err != nil {
		return st, s.commitFailed(epoch, err)
	}
	s.published(epoch, written)
	return st, nil
}

// commitFailed is the error of a checkpoint whose commit (a batch or an ingest)
// failed. A pebble fatal fault also fails the store: pebble may show the epoch to new
// reads (a batch applied to its memtable, an ingest logged in a WAL that failed)
// without having made it durable, so the store refuses them until a reopen decides.
func (s *Store) commitFailed(epoch uint64, err error) error {
	err = fmt.Errorf("storage: checkpoint %d: commit: %w", epoch, err)
	var fe *fatalError
	if errors.As(err, &fe) {
		s.failed.Store(&err)
	}
	return err
}

// published ends a committed checkpoint: it clears the staged catalog entries and
// drops, then advances the committed epoch and drops the runs now in pebble, together.
// Only the runs this checkpoint wrote are dropped.
func (s *Store) published(epoch uint64, written map[*run]bool) {
	s.pendingCatalog = nil
	s.pendingDrops = nil
	s.viewMu.Lock()
	s.committed.Store(epoch)
	s.publishCommitLocked()
	s.dropRunsLocked(func(r *run) bool { return written[r] })
	s.viewMu.Unlock()
}

// dropRunsLocked drops every node's runs that drop selects, now that pebble holds
// them; s.viewMu is held.
func (s *Store) dropRunsLocked(drop func(*run) bool) {
	for _, n := range s.nodes {
		for t, rs := range n.runs {
			keep := rs[:0:0]
			for _, r := range rs {
				if drop(r) {
					n.sealed.Add(-int64(r.bytes))
				} else {
					keep = append(keep, r)
				}
			}
			if len(keep) == 0 {
				delete(n.runs, t)
			} else {
				n.runs[t] = keep
			}
		}
	}
}

// commitSync commits b with a WAL sync, returning pebble's Fatalf as an error.
func commitSync(b *pebble.Batch) (err error) {
	defer recoverFatal(&err)
	return b.Commit(pebble.Sync)
}

// mergeRuns calls f with the final write of every key of runs (sorted by epoch, each
// sorted by key, one write a key), in ascending key order: of the writes of one key,
// that of the latest run, with what the earliest run's write knew of the key before
// (its existence in the committed data); and returns those writes, in the same order.
//
// The runs are taken apart into pieces, one per vnode of each (the run's spans), and
// the pieces sorted by their first key. A piece whose key range overlaps no other's
// (a vnode's rows of one epoch of a view being backfilled, each epoch's above the
// last) is passed on as it is, and the writes returned are its own entries, not
// copied. Pieces whose ranges overlap (a vnode's keys rewritten across the epochs
// committed together) take a heap merge of one cursor each, whose writes are appended
// to the buffer buf returns (it is called at the first such group); that buffer is
// returned too, for reuse (nil when not called). The writes returned alias the runs
// and the buffer: the sstable writers read them until the checkpoint is committed,
// which holds only because a sealed run's entries are never changed or reused (see
// run); the buffer returned is the only memory to pool.
func mergeRuns(runs []*run, buf func() []entry, f func(entry, before) error) (entryChunks, []entry, error) {
	ps := runPieces(runs)
	var out entryChunks
	var merged []entry
	asked := false
	for i := 0; i < len(ps); {
		// The group ps[i:j]: pieces whose ranges overlap, directly or through others.
		hi := ps[i].es[len(ps[i].es)-1].key
		j := i + 1
		for ; j < len(ps) && bytes.Compare(ps[j].es[0].key, hi) <= 0; j++ {
			if last := ps[j].es[len(ps[j].es)-1].key; bytes.Compare(last, hi) > 0 {
				hi = last
			}
		}
		if j == i+1 {
			for _, e := range ps[i].es {
				if err := f(e, e.before); err != nil {
					return nil, merged, err
				}
			}
			out = append(out, ps[i].es)
			i = j
			continue
		}
		if !asked {
			merged, asked = buf(), true
		}
		start := len(merged)
		err := mergeCursors(ps[i:j], func(e entry, b before) error {
			if err := f(e, b); err != nil {
				return err
			}
			merged = append(merged, e)
			return nil
		})
		if err != nil {
			return nil, merged, err
		}
		// The buffer never grows past its capacity, which counts every entry of the
		// runs; were it to, the earlier slices would keep the old array's writes.
		out = append(out, merged[start:len(merged):len(merged)])
		i = j
	}
	return out, merged, nil
}

// runPieces returns the runs' entries cut by vnode (a run without spans is one piece),
// each with its run's rank in runs, sorted by first key, then latest run first.
func runPieces(runs []*run) []mergeCursor {
	n := 0
	for _, r := range runs {
		n += max(len(r.spans), 1)
	}
	ps := make([]mergeCursor, 0, n)
	for i, r := range runs {
		if len(r.spans) == 0 {
			if len(r.entries) > 0 {
				ps = append(ps, mergeCursor{es: r.entries, rank: i})
			}
			continue
		}
		for _, sp := range r.spans {
			if sp.end > sp.start {
				ps = append(ps, mergeCursor{es: r.entries[sp.start:sp.end:sp.end], rank: i})
			}
		}
	}
	slices.SortFunc(ps, func(a, b mergeCursor) int {
		if c := bytes.Compare(a.es[0].key, b.es[0].key); c != 0 {
			return c
		}
		return b.rank - a.rank
	})
	return ps
}

// entryChunks are writes in ascending key order, held in consecutive slices: a
// checkpoint's merged writes, without copying the runs they come from into one.
type entryChunks [][]entry

// span returns entries [a, b) of c (counting across its slices) as chunks of their
// own, sharing c's memory.
func (c entryChunks) span(a, b int) entryChunks {
	var out entryChunks
	for _, es := range c {
		if b <= 0 {
			break
		}
		lo, hi := max(a, 0), min(b, len(es))
		if lo < hi {
			out = append(out, es[lo:hi])
		}
		a, b = a-len(es), b-len(es)
	}
	return out
}

// mergeCursors calls f with the final write of every key of the cursors' entries in
// ascending key order, by a heap merge (see mergeRuns); the cursors are consumed.
//
// The heap is typed and ordered by each cursor's next key, compared first by its
// leading 16 bytes held as two integers (the table, vnode and the start of the pk:
// most comparisons end there), then whole, then latest run first: container/heap's
// calls through an interface and bytes.Compare of keys that share their prefix were
// most of a checkpoint's merge.
func mergeCursors(cs []mergeCursor, f func(entry, before) error) error {
	h := cs[:0]
	for _, c := range cs {
		if len(c.es) > 0 {
			c.setHead()
			h = append(h, c)
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	var cur entry // the latest write of the key being merged
	var b before  // what its earliest write knew
	have := false
	for len(h) > 0 {
		c := &h[0]
		e := c.es[0]
		if have && bytes.Equal(e.key, cur.key) {
			b = e.before // an earlier run's write: equal keys pop latest first
		} else {
			if have {
				if err := f(cur, b); err != nil {
					return err
				}
			}
			cur, b, have = e, e.before, true
		}
		if c.es = c.es[1:]; len(c.es) == 0 {
			last := len(h) - 1
			h[0] = h[last]
			h = h[:last]
		} else {
			c.setHead()
		}
		if len(h) > 1 {
			siftDown(h, 0)
		}
	}
	if have {
		return f(cur, b)
	}
	return nil
}

// mergeCursor is a run's entries (or a piece of them) not yet merged; rank orders
// runs by epoch. h0 and h1 are the first 16 bytes of its next key, big-endian, zero
// past the key's end: keys ordered by them are ordered so as bytes, and keys whose
// heads are equal are compared whole.
type mergeCursor struct {
	es     []entry
	rank   int
	h0, h1 uint64
}

func (c *mergeCursor) setHead() {
	k := c.es[0].key
	if len(k) >= 16 {
		c.h0, c.h1 = binary.BigEndian.Uint64(k), binary.BigEndian.Uint64(k[8:])
		return
	}
	var pad [16]byte
	copy(pad[:], k)
	c.h0, c.h1 = binary.BigEndian.Uint64(pad[:]), binary.BigEndian.Uint64(pad[8:])
}

// cursorLess orders cursors by their next key, and equal keys latest run first.
func cursorLess(a, b *mergeCursor) bool {
	if a.h0 != b.h0 {
		return a.h0 < b.h0
	}
	if a.h1 != b.h1 {
		return a.h1 < b.h1
	}
	if c := bytes.Compare(a.es[0].key, b.es[0].key); c != 0 {
		return c < 0
	}
	return a.rank > b.rank
}

// siftDown moves h[i] down to its place in the min-heap h.
func siftDown(h []mergeCursor, i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && cursorLess(&h[r], &h[l]) {
			m = r
		}
		if !cursorLess(&h[m], &h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func sortRunsByEpoch(rs []*run) {
	// Insertion sort keeps equal epochs in node order; lists are short.
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].epoch < rs[j-1].epoch; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

func (s *Store) int64At(key []byte) (int64, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("record %x has %d bytes, want 8", key, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}
