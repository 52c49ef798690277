package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"runtime"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sync/errgroup"
)

// DefaultIngestBytes is the checkpoint size (key and value bytes) from which a
// checkpoint is committed by ingesting sstables rather than by a batch: see
// Options.IngestBytes.
const DefaultIngestBytes = 8 << 20

// maxIngestFiles is the most sstables one checkpoint ingests; a checkpoint whose keys
// would need more (large writes scattered among committed keys) is committed as a
// batch.
const maxIngestFiles = 64

// ingestSegmentDiv sets the size from which a run of a checkpoint's keys with no
// committed key between them gets an sstable of its own: IngestBytes / 32 (256 KiB
// by default). Consecutive smaller runs (a table's writes spread over its vnodes,
// among committed rows) share one, which pebble places as it would a flush of them;
// and a checkpoint whose large runs do not hold half its bytes takes the batch, so
// that scattered writes keep going through the memtable (ingested, they would add a
// small sstable to L0 at every checkpoint).
const ingestSegmentDiv = 32

// IngestDirName is the directory, in the store's, where a checkpoint writes the
// sstables it ingests (fault injectors name its files by it). Pebble links them into
// its own directory; what is left here after a crash is removed when the store opens.
const IngestDirName = "weir-ingest"

// NodeStoresDirName is the directory, in an engine's store's, that holds the stores
// of its nodes when each has one (engine.Options.NodeStores): a directory holding it
// is an engine's.
const NodeStoresDirName = "weir-nodes"

// ingestPlan cuts a checkpoint's writes, meta and merged (each in ascending key
// order, meta's keys all below merged's), into the sstables an ingest takes: one for
// meta, and merged cut into segments wherever the committed data has a key between
// two of its consecutive keys of different tables or vnodes. A segment of at least
// minSegment bytes gets an sstable of its own: it spans no committed key it does not
// write, so that pebble can place it in the lowest level whose files it does not
// overlap (the last, for a view's backfilled vnode ranges) instead of putting it in
// L0 to be compacted down. Consecutive smaller segments share one sstable. It returns
// false when that needs more than maxIngestFiles sstables, or when the segments of
// minSegment bytes or more hold less than half of merged's bytes.
//
// probe reads the committed data (pebble's memtables included); buf is scratch.
func ingestPlan(probe *pebble.Iterator, meta []entry, merged entryChunks, minSegment int, buf []byte) ([]entryChunks, []byte, bool, error) {
	files := []entryChunks{{meta}}
	// The segment being built, merged[start:i], its bytes, and whether the file
	// being built, merged[fileStart:start], holds small segments only (then a small
	// segment joins it); positions count across merged's slices.
	start, fileStart, size := 0, 0, 0
	total, bigBytes := 0, 0
	small := false
	cut := func(i int) bool { // ends the segment merged[start:i]
		big := size >= minSegment
		total += size
		if big {
			bigBytes += size
		}
		if small && !big {
			start, size = i, 0 // joins the file of small segments
			return true
		}
		if start > fileStart {
			files = append(files, merged.span(fileStart, start))
		}
		fileStart, start, size, small = start, i, 0, !big
		return len(files) < maxIngestFiles
	}
	var prev []byte // the key before
	i := 0
	for _, es := range merged {
		for j := range es {
			key := es[j].key
			if i > 0 {
				// Keys share their table and vnode prefix (KeyPrefixLen bytes) within a vnode.
				if len(prev) < KeyPrefixLen || len(key) < KeyPrefixLen ||
					binary.BigEndian.Uint32(prev) != binary.BigEndian.Uint32(key) || binary.BigEndian.Uint16(prev[4:]) != binary.BigEndian.Uint16(key[4:]) {
					buf = append(append(buf[:0], prev...), 0) // the least key above prev
					between := probe.SeekGE(buf) && bytes.Compare(probe.Key(), key) < 0
					if err := probe.Error(); err != nil {
						return nil, buf, false, err
					}
					if between && !cut(i) {
						return nil, buf, false, nil
					}
				}
			}
			size += len(key) + len(es[j].value)
			prev = key
			i++
		}
	}
	if i > 0 {
		if !cut(i) {
			return nil, buf, false, nil
		}
		files = append(files, merged.span(fileStart, i))
	}
	if len(files) > maxIngestFiles || 2*bigBytes < total {
		return nil, buf, false, nil
	}
	return files, buf, true, nil
}

// ingest writes each of files as an sstable under the store's ingest directory, up
// to GOMAXPROCS at a time, and ingests them into pebble in one atomic step. Pebble
// removes the sstables it ingested; what is left of them (a failed write, a failed
// ingest) is removed here, best-effort, since the epoch is committed or not by then
// (and Open empties the directory). On error nothing is committed, unless the error
// is a pebble fatal fault (see Checkpoint).
func (s *Store) ingest(epoch uint64, files []entryChunks) error {
	dir := s.po.FS.PathJoin(s.dir, IngestDirName)
	paths := make([]string, len(files))
	for i := range files {
		paths[i] = s.po.FS.PathJoin(dir, fmt.Sprintf("%d-%d.sst", epoch, i))
	}
	defer func() {
		for _, p := range paths {
			if err := s.po.FS.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.po.Logger.Infof("storage: checkpoint %d: remove %s: %v", epoch, p, err)
			}
		}
	}()
	// Level 0's options: those of the last level would let the writer mark a delete
	// obsolete, which is right only for a file that ends in the last level.
	wo := s.po.MakeWriterOptions(0, s.db.TableFormat())
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i := range files {
		g.Go(func() error { return writeSSTable(s.po.FS, paths[i], wo, files[i], nil) })
	}
	if err := g.Wait(); err != nil { // the first: the others are mostly the same fault
		return err
	}
	return ingestFatal(s.db, paths)
}

// writeSSTable writes es, in ascending key order, and the range deletions dels (each
// [start, end), in order, none overlapping another) as the sstable p, and syncs it.
func writeSSTable(fs vfs.FS, p string, wo sstable.WriterOptions, es entryChunks, dels [][2][]byte) error {
	f, err := fs.Create(p, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("write sstable %s: %w", p, err)
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), wo)
	for _, c := range es {
		for _, e := range c {
			if e.del {
				err = w.Delete(e.key)
			} else {
				err = w.Set(e.key, e.value)
			}
			if err != nil {
				w.Close()
				return fmt.Errorf("write sstable %s: %w", p, err)
			}
		}
	}
	for _, d := range dels {
		if err := w.DeleteRange(d[0], d[1]); err != nil {
			w.Close()
			return fmt.Errorf("write sstable %s: %w", p, err)
		}
	}
	if err := w.Close(); err != nil { // flushes and syncs the file
		return fmt.Errorf("write sstable %s: %w", p, err)
	}
	return nil
}

// ingestFatal ingests paths, returning pebble's Fatalf (a failed WAL write of an
// ingest that overlaps the memtable) as an error.
func ingestFatal(db *pebble.DB, paths []string) (err error) {
	defer recoverFatal(&err)
	return db.Ingest(context.Background(), paths)
}

// resetIngestDir empties the store's ingest directory (sstables of a checkpoint that
// a crash interrupted) and creates it.
func resetIngestDir(fs vfs.FS, dir string) error {
	d := fs.PathJoin(dir, IngestDirName)
	if err := fs.RemoveAll(d); err != nil {
		return fmt.Errorf("remove %s: %w", d, err)
	}
	if err := fs.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", d, err)
	}
	return nil
}
