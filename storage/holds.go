package storage

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/seed04fbb902/weir/vnode"
)

// A partial store (Options.Partial) holds the committed data of some vnodes of some
// tables only: a cluster node's copy of the committed state of the vnodes its actors
// write and read (docs/design.md §8). It is exactly a whole store restricted to the
// vnodes it holds: its rows and its row counts are those of the held vnodes, and it
// holds nothing of any other vnode. IngestFiles keeps only the held vnodes' keys of
// what it ingests and their row count changes; Gain adds vnodes to it, from the
// commit log's objects of every commit up to the store's. The catalog, the committed
// epoch and the applied sequence are kept whole.

// The metadata of a partial store.
const (
	metaPartial byte = 'p' // present: the store is partial
	metaHolds   byte = 'h' // + table (4 BE): the table's held vnodes, vnode.Bitmap's encoding
)

func holdsKey(table uint32) []byte {
	return metaKey(metaHolds, binary.BigEndian.AppendUint32(nil, table))
}

// openHolds reads what a partial store holds; with partial, an empty store becomes
// partial, holding nothing.
func (s *Store) openHolds(partial bool) error {
	_, closer, err := s.db.Get(metaKey(metaPartial))
	switch {
	case err == nil:
		closer.Close()
		s.partial = true
	case !errors.Is(err, pebble.ErrNotFound):
		return err
	case partial && s.committed.Load() == 0:
		applied, err := readApplied(s.db)
		if err != nil {
			return err
		}
		if applied != 0 {
			break // not empty: it stays whole
		}
		if err := s.db.Set(metaKey(metaPartial), nil, pebble.Sync); err != nil {
			return err
		}
		s.partial = true
	}
	s.holds = map[uint32]*vnode.Bitmap{}
	if !s.partial {
		return nil
	}
	lo := metaKey(metaHolds)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != len(lo)+4 {
			return fmt.Errorf("held vnodes record %x has a key of %d bytes", k, len(k))
		}
		t := binary.BigEndian.Uint32(k[len(lo):])
		b, err := vnode.UnmarshalBitmap(it.Value())
		if err != nil {
			return fmt.Errorf("held vnodes of table %d: %w", t, err)
		}
		s.holds[t] = b
	}
	return it.Error()
}

// Partial reports whether the store holds only some vnodes (Options.Partial).
func (s *Store) Partial() bool { return s.partial }

// Holds returns a copy of the vnodes a partial store holds, per table (nil for a
// whole store).
func (s *Store) Holds() map[uint32]*vnode.Bitmap {
	if !s.partial {
		return nil
	}
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	out := make(map[uint32]*vnode.Bitmap, len(s.holds))
	for t, b := range s.holds {
		out[t] = b.Clone()
	}
	return out
}

// Missing returns the vnodes of needs that the store does not hold, per table, or
// nil when it holds them all (a whole store holds every vnode). A need whose vnode
// count differs from that of the vnodes held of its table is an error.
func (s *Store) Missing(needs map[uint32]*vnode.Bitmap) (map[uint32]*vnode.Bitmap, error) {
	if !s.partial {
		return nil, nil
	}
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	var out map[uint32]*vnode.Bitmap
	for t, b := range needs {
		m := b
		if h := s.holds[t]; h != nil {
			var err error
			if m, err = b.AndNot(h); err != nil {
				return nil, fmt.Errorf("storage: vnodes of table %d: %w", t, err)
			}
		}
		if m.Len() == 0 {
			continue
		}
		if out == nil {
			out = map[uint32]*vnode.Bitmap{}
		}
		out[t] = m
	}
	return out, nil
}

// AddVnodes adds vnodes of table to m (vnodes per table), a copy when m had none of
// the table's; vnodes of another count than those m has of the table are an error.
func AddVnodes(m map[uint32]*vnode.Bitmap, table uint32, vnodes *vnode.Bitmap) error {
	cur := m[table]
	if cur == nil {
		m[table] = vnodes.Clone()
		return nil
	}
	u, err := cur.Or(vnodes)
	if err != nil {
		return fmt.Errorf("the vnodes of table %d: %w", table, err)
	}
	m[table] = u
	return nil
}

// MayHold reports whether a key between lo and hi (inclusive) may be of a vnode the
// store holds: always for a whole store; for a partial one, whether a held vnode lies
// between the table and vnode prefixes of lo and hi.
func (s *Store) MayHold(lo, hi []byte) bool {
	if !s.partial {
		return true
	}
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	return RangesBetween(s.holds, lo, hi)
}

// RangesBetween reports whether one of ranges (vnodes per table) lies between the
// table and vnode prefixes of keys lo and hi (inclusive): whether an sstable whose
// keys lie from lo to hi may hold a key of them. A key shorter than the prefix may
// be anywhere.
func RangesBetween(ranges map[uint32]*vnode.Bitmap, lo, hi []byte) bool {
	if len(lo) < KeyPrefixLen || len(hi) < KeyPrefixLen {
		return true
	}
	tlo, vlo := binary.BigEndian.Uint32(lo), binary.BigEndian.Uint16(lo[4:])
	thi, vhi := binary.BigEndian.Uint32(hi), binary.BigEndian.Uint16(hi[4:])
	for t, b := range ranges {
		if t < tlo || t > thi {
			continue
		}
		from, to := 0, b.Count()-1
		if t == tlo {
			from = int(vlo)
		}
		if t == thi {
			to = min(to, int(vhi))
		}
		if from > to {
			continue
		}
		if b.Intersects(vnode.FromRange(b.Count(), from, to+1)) {
			return true
		}
	}
	return false
}

// inRanges reports whether vnode v of table t is one of ranges' (vnodes per table).
func inRanges(ranges map[uint32]*vnode.Bitmap, t uint32, v uint16) bool {
	b := ranges[t]
	return b != nil && int(v) < b.Count() && b.Contains(vnode.Vnode(v))
}

// keyFilter is inRanges of a key's table and vnode (keys at least KeyPrefixLen long),
// remembering the answer for the last prefix: a file's keys come in order, each
// vnode's together, so that a scan asks the bitmap once per vnode, not per key.
type keyFilter struct {
	ranges map[uint32]*vnode.Bitmap
	prefix [KeyPrefixLen]byte
	set    bool
	in     bool
}

func (f *keyFilter) has(key []byte) bool {
	if f.set && [KeyPrefixLen]byte(key[:KeyPrefixLen]) == f.prefix {
		return f.in
	}
	f.prefix, f.set = [KeyPrefixLen]byte(key[:KeyPrefixLen]), true
	f.in = inRanges(f.ranges, binary.BigEndian.Uint32(key), binary.BigEndian.Uint16(key[4:]))
	return f.in
}

// heldRowDeltas returns the changes of ds of the vnodes the store holds; ckptMu is
// held.
func (s *Store) heldRowDeltas(ds []RowDelta) []RowDelta {
	if !s.partial {
		return ds
	}
	out := make([]RowDelta, 0, len(ds))
	for _, d := range ds {
		if inRanges(s.holds, d.Table, d.Vnode) {
			out = append(out, d)
		}
	}
	return out
}

// Gain adds ranges (vnodes per table) to what a partial store holds, at the store's
// applied sequence seq: paths are the sstables of every commit of the log up to seq
// that may hold keys of ranges (a base's, then each later commit's, oldest first: a
// key of a later one replaces the same key of an earlier one, a delete removes it),
// downloaded into the ingest directory (NewIngestFile). Their keys in ranges, merged
// so, are ingested in one atomic step with the ranges' row counts, counted from them,
// and the new held vnodes. The files are consumed. It fails, changing nothing, when
// the store is whole, is not at seq, or already holds one of ranges' vnodes, and for
// a file that IngestFiles would refuse.
//
// The merge runs without holding the store's commits back (an export or a checkpoint
// commit of its nodes' data goes on meanwhile); the checks are made again before the
// ingest.
func (s *Store) Gain(seq uint64, ranges map[uint32]*vnode.Bitmap, paths []string) error {
	defer s.DiscardIngestFiles(paths)
	s.ckptMu.Lock()
	_, err := s.gainable(seq, ranges)
	s.ckptMu.Unlock()
	if err != nil {
		return err
	}
	dir := s.po.FS.PathJoin(s.dir, IngestDirName)
	name := s.scratch.Add(1)
	dataPath := s.po.FS.PathJoin(dir, fmt.Sprintf("gain-%d.sst", name))
	metaPath := s.po.FS.PathJoin(dir, fmt.Sprintf("gain-meta-%d.sst", name))
	defer s.removeWritten(dataPath, metaPath)
	wo := s.po.MakeWriterOptions(6, s.db.TableFormat()) // puts of distinct keys only
	counts, n, err := s.mergeFiles(paths, dataPath, wo, &keyFilter{ranges: ranges}, false)
	if err != nil {
		return fmt.Errorf("storage: gain vnodes at sequence %d: %w", seq, err)
	}
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	next, err := s.gainable(seq, ranges)
	if err != nil {
		return err
	}
	var meta []entry
	for t, b := range ranges {
		for _, v := range b.ToSlice() {
			k := rowCountKey(t, uint16(v))
			if c := counts[vnodeKey{t, uint16(v)}]; c > 0 {
				meta = append(meta, entry{key: k, value: binary.BigEndian.AppendUint64(nil, uint64(c))})
			} else {
				meta = append(meta, entry{key: k, del: true})
			}
		}
		enc, err := next[t].MarshalBinary()
		if err != nil {
			return fmt.Errorf("storage: gain vnodes of table %d: %w", t, err)
		}
		meta = append(meta, entry{key: holdsKey(t), value: enc})
	}
	slices.SortFunc(meta, entryLess)
	if err := writeSSTable(s.po.FS, metaPath, s.po.MakeWriterOptions(0, s.db.TableFormat()), entryChunks{meta}, nil); err != nil {
		return fmt.Errorf("storage: gain vnodes at sequence %d: %w", seq, err)
	}
	files := []string{metaPath}
	if n > 0 {
		files = append(files, dataPath)
	}
	if err := ingestFatal(s.db, files); err != nil {
		return s.commitFailed(s.committed.Load(), err)
	}
	s.holds = next
	return nil
}

// gainable checks that Gain may add ranges at sequence seq, and returns the vnodes
// the store then holds; ckptMu is held.
func (s *Store) gainable(seq uint64, ranges map[uint32]*vnode.Bitmap) (map[uint32]*vnode.Bitmap, error) {
	if err := s.usable(); err != nil {
		return nil, fmt.Errorf("storage: gain vnodes: %w", err)
	}
	if !s.partial {
		return nil, errors.New("storage: gain vnodes: the store is whole")
	}
	applied, err := s.AppliedSequence()
	if err != nil {
		return nil, fmt.Errorf("storage: gain vnodes: %w", err)
	}
	if applied != seq {
		return nil, fmt.Errorf("storage: gain vnodes at sequence %d: the store applied sequence %d", seq, applied)
	}
	next := maps.Clone(s.holds)
	for _, t := range slices.Sorted(maps.Keys(ranges)) {
		b := ranges[t]
		if t == MetaTable || t == math.MaxUint32 {
			return nil, fmt.Errorf("storage: gain vnodes of table %d, which is reserved", t)
		}
		h := next[t]
		if h == nil {
			next[t] = b.Clone()
			continue
		}
		if h.Count() != b.Count() {
			return nil, fmt.Errorf("storage: gain vnodes of table %d: %d vnodes, the store holds them of %d", t, b.Count(), h.Count())
		}
		if h.Intersects(b) {
			return nil, fmt.Errorf("storage: gain vnodes of table %d: the store holds some of %s already", t, b)
		}
		if next[t], err = h.Or(b); err != nil {
			return nil, fmt.Errorf("storage: gain vnodes of table %d: %w", t, err)
		}
	}
	return next, nil
}

// Keep has a partial store give up every vnode it holds but those of keep (vnodes
// per table): their rows and row counts are deleted, in one atomic ingest of range
// deletions with the new set of held vnodes. Nothing may read the vnodes given up,
// and the store's nodes may hold no uncommitted data of them: the caller knows that
// no actor uses them any more. It returns the vnodes given up (nil: none, or a whole
// store). A vnode given up is gained again as any other (Gain).
func (s *Store) Keep(keep map[uint32]*vnode.Bitmap) (map[uint32]*vnode.Bitmap, error) {
	if !s.partial {
		return nil, nil
	}
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if err := s.usable(); err != nil {
		return nil, fmt.Errorf("storage: give up vnodes: %w", err)
	}
	next := map[uint32]*vnode.Bitmap{}
	var gone map[uint32]*vnode.Bitmap
	var meta []entry
	var dels [][2][]byte
	for _, t := range slices.Sorted(maps.Keys(s.holds)) {
		h := s.holds[t]
		drop := h
		if k := keep[t]; k != nil {
			var err error
			if drop, err = h.AndNot(k); err != nil {
				return nil, fmt.Errorf("storage: give up vnodes of table %d: %w", t, err)
			}
		}
		if drop.Len() == 0 {
			next[t] = h
			continue
		}
		if gone == nil {
			gone = map[uint32]*vnode.Bitmap{}
		}
		gone[t] = drop
		kept, err := h.AndNot(drop)
		if err != nil {
			return nil, fmt.Errorf("storage: give up vnodes of table %d: %w", t, err)
		}
		if kept.Len() > 0 {
			next[t] = kept
			enc, err := kept.MarshalBinary()
			if err != nil {
				return nil, fmt.Errorf("storage: give up vnodes of table %d: %w", t, err)
			}
			meta = append(meta, entry{key: holdsKey(t), value: enc})
		} else {
			meta = append(meta, entry{key: holdsKey(t), del: true})
		}
		// One range deletion per run of consecutive vnodes.
		vs := drop.ToSlice()
		for i, v := range vs {
			meta = append(meta, entry{key: rowCountKey(t, uint16(v)), del: true})
			if i > 0 && vs[i-1]+1 == v {
				dels[len(dels)-1][1] = vnodeEnd(t, uint16(v))
				continue
			}
			dels = append(dels, [2][]byte{VnodePrefix(t, uint16(v)), vnodeEnd(t, uint16(v))})
		}
	}
	if gone == nil {
		return nil, nil
	}
	slices.SortFunc(meta, entryLess)
	dir := s.po.FS.PathJoin(s.dir, IngestDirName)
	name := s.scratch.Add(1)
	metaPath := s.po.FS.PathJoin(dir, fmt.Sprintf("keep-meta-%d.sst", name))
	delPath := s.po.FS.PathJoin(dir, fmt.Sprintf("keep-del-%d.sst", name))
	defer s.removeWritten(metaPath, delPath)
	wo := s.po.MakeWriterOptions(0, s.db.TableFormat())
	if err := writeSSTable(s.po.FS, metaPath, wo, entryChunks{meta}, nil); err != nil {
		return nil, fmt.Errorf("storage: give up vnodes: %w", err)
	}
	if err := writeSSTable(s.po.FS, delPath, wo, nil, dels); err != nil {
		return nil, fmt.Errorf("storage: give up vnodes: %w", err)
	}
	if err := ingestFatal(s.db, []string{metaPath, delPath}); err != nil {
		return nil, s.commitFailed(s.committed.Load(), err)
	}
	s.holds = next
	return gone, nil
}

// vnodeEnd is the smallest key above every key of vnode v of table t.
func vnodeEnd(t uint32, v uint16) []byte {
	if v == math.MaxUint16 {
		return binary.BigEndian.AppendUint32(nil, t+1) // t is below MaxUint32: a table's id
	}
	return VnodePrefix(t, v+1)
}

// removeWritten removes files the store wrote into its ingest directory, which an
// ingest has moved or which were never ingested, best-effort.
func (s *Store) removeWritten(paths ...string) {
	for _, p := range paths {
		if err := s.po.FS.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.po.Logger.Infof("storage: remove %s: %v", p, err)
		}
	}
}

// mergeFiles writes the keys of the sstables at paths (later ones replacing the same
// keys of earlier ones) that in has into a new sstable at out, and returns the
// rows it holds per vnode and how many keys it wrote. With deletes, a delete is
// written as one; without, it only removes the key. Every file is checked as
// IngestFiles checks it.
func (s *Store) mergeFiles(paths []string, out string, wo sstable.WriterOptions, in *keyFilter, deletes bool) (map[vnodeKey]int64, int, error) {
	var srcs mergeHeap
	defer func() {
		for _, m := range srcs {
			m.close()
		}
	}()
	for i, p := range paths {
		f, err := s.openIngestFile(p)
		if err != nil {
			return nil, 0, err
		}
		f.order = i
		if !f.next(true) {
			if err := f.it.Error(); err != nil {
				f.close()
				return nil, 0, fmt.Errorf("sstable %s: %w", p, err)
			}
			f.close()
			continue
		}
		srcs = append(srcs, f)
	}
	heap.Init(&srcs)
	fw, err := s.po.FS.Create(out, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, 0, fmt.Errorf("write sstable %s: %w", out, err)
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(fw), wo)
	counts := map[vnodeKey]int64{}
	n := 0
	var last []byte
	var buf []byte
	for len(srcs) > 0 {
		f := srcs[0]
		kv, key := f.kv, f.key
		if err := checkIngestKey(f.path, key, kv.Kind()); err != nil {
			w.Close()
			return nil, 0, err
		}
		fresh := last == nil || !bytes.Equal(key, last)
		if fresh && in.has(key) {
			del := kv.Kind() == pebble.InternalKeyKindDelete
			switch {
			case del && deletes:
				err = w.Delete(key)
				n++
			case !del:
				var v []byte
				var owned bool
				v, owned, err = kv.Value(buf[:0])
				if err == nil {
					err = w.Set(key, v)
				}
				if owned {
					buf = v
				}
				n++
				counts[vnodeKey{binary.BigEndian.Uint32(key), binary.BigEndian.Uint16(key[4:])}]++
			}
			if err != nil {
				w.Close()
				return nil, 0, fmt.Errorf("write sstable %s: %w", out, err)
			}
		}
		if fresh {
			last = append(last[:0], key...)
		}
		if !f.next(false) {
			err := f.it.Error()
			heap.Pop(&srcs)
			f.close()
			if err != nil {
				w.Close()
				return nil, 0, fmt.Errorf("sstable %s: %w", f.path, err)
			}
			continue
		}
		heap.Fix(&srcs, 0)
	}
	if err := w.Close(); err != nil {
		return nil, 0, fmt.Errorf("write sstable %s: %w", out, err)
	}
	return counts, n, nil
}

// ingestFile is an sstable of an ingest, open for reading.
type ingestFile struct {
	path string
	r    *sstable.Reader
	it   sstable.Iterator
	// key and kv are the iterator's current key and its kind and value (a
	// merge's); kv is nil at the end.
	key   []byte
	kv    ingestKV
	order int // the file's place in a merge: a higher one is newer
}

// ingestKV is what a merge uses of an sstable iterator's current key.
type ingestKV interface {
	Kind() pebble.InternalKeyKind
	Value(buf []byte) (val []byte, callerOwned bool, err error)
}

// next moves f's iterator to its next key (first, at the start) and reports whether
// there is one.
func (f *ingestFile) next(first bool) bool {
	step := f.it.First
	if !first {
		step = f.it.Next
	}
	kv := step()
	if kv == nil {
		f.key, f.kv = nil, nil
		return false
	}
	f.key, f.kv = kv.K.UserKey, kv
	return true
}

func (f *ingestFile) close() {
	if f.it != nil {
		f.it.Close()
		f.it = nil
	}
	if f.r != nil {
		f.r.Close()
		f.r = nil
	}
}

// openIngestFile opens the sstable at p for reading, refusing one that holds what an
// export never writes (range deletions, range keys, merges, sized deletions).
func (s *Store) openIngestFile(p string) (*ingestFile, error) {
	f, err := s.po.FS.Open(p)
	if err != nil {
		return nil, fmt.Errorf("sstable %s: %w", p, err)
	}
	readable, err := objstorageprovider.NewFileReadable(f, s.po.FS, objstorageprovider.NewReadaheadConfig(), p)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("sstable %s: %w", p, err)
	}
	ctx := context.Background()
	r, err := sstable.NewReader(ctx, readable, s.po.MakeReaderOptions())
	if err != nil {
		readable.Close()
		return nil, fmt.Errorf("sstable %s: %w", p, err)
	}
	props, err := r.ReadPropertiesBlock(ctx, nil)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("sstable %s: %w", p, err)
	}
	if props.NumRangeDeletions > 0 || props.NumRangeKeys() > 0 || props.NumMergeOperands > 0 || props.NumSizedDeletions > 0 {
		r.Close()
		return nil, fmt.Errorf("sstable %s holds range deletions, range keys, merges or sized deletions, which an export never writes", p)
	}
	it, err := r.NewIter(sstable.NoTransforms, nil, nil, sstable.TableBlobContext{})
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("sstable %s: %w", p, err)
	}
	return &ingestFile{path: p, r: r, it: it}, nil
}

// checkIngestKey refuses a key of file p that an export never writes: one shorter
// than a table and vnode prefix, one of the metadata table, one neither a put nor a
// delete.
func checkIngestKey(p string, key []byte, kind pebble.InternalKeyKind) error {
	if len(key) < KeyPrefixLen {
		return fmt.Errorf("sstable %s: key %x is shorter than a table and vnode prefix", p, key)
	}
	if binary.BigEndian.Uint32(key) == MetaTable {
		return fmt.Errorf("sstable %s holds key %x of table %d, reserved for metadata", p, key, MetaTable)
	}
	if kind != pebble.InternalKeyKindSet && kind != pebble.InternalKeyKindDelete {
		return fmt.Errorf("sstable %s: key %x is a %s, not a put or a delete", p, key, kind)
	}
	return nil
}

// mergeHeap orders open files by their current key, the newest file first among
// equal keys.
type mergeHeap []*ingestFile

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if c := bytes.Compare(h[i].key, h[j].key); c != 0 {
		return c < 0
	}
	return h[i].order > h[j].order
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(*ingestFile)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
