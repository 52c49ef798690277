package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
)

// A base is a store's whole committed state at one applied sequence of a version log:
// every table's rows as sstables, and the catalog. A version log compacts its history
// into bases (engine/cluster/commitlog), so that a store starting empty ingests the
// last base and the deltas after it instead of every delta ever committed, and the
// objects of the deltas before it can be collected.

// BaseInfo is what a base holds besides its rows.
type BaseInfo struct {
	// Epoch and Sequence are the committed epoch and the applied sequence the base
	// holds.
	Epoch, Sequence uint64
	// Catalog is every committed catalog entry.
	Catalog map[string][]byte
}

// errPartialBase refuses a base of a partial store, which holds some vnodes only.
var errPartialBase = errors.New("storage: export the committed state: the store is partial (it holds some vnodes only)")

// ExportCommitted writes the store's committed rows, every table's and no metadata,
// as sstables through create, in ascending key order, and returns them with what the
// base holds besides: the committed epoch, the applied sequence and the catalog. An
// sstable ends once it holds o.TableBytes key and value bytes (o.Whole is implied:
// the store holds the whole state). create is called as ExportCheckpoint calls it,
// and a failed write is handled as there. The store's checkpoints wait while the
// export runs, so that what it writes is one committed state (ExportView reads a
// View instead, and holds nothing back).
//
// IngestFiles of the sstables into an empty store, with the base's epoch and a
// Changes of its catalog and sequence, gives a store whose committed rows, row counts
// and catalog equal this one's. A store that applied no sequence (not a version
// log's copy) is refused, and so is a partial store (Options.Partial).
func (s *Store) ExportCommitted(o ExportOptions, create func(k int) (string, io.WriteCloser, error)) (BaseInfo, []SSTable, error) {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if err := s.usable(); err != nil {
		return BaseInfo{}, nil, fmt.Errorf("storage: export the committed state: %w", err)
	}
	if s.partial {
		return BaseInfo{}, nil, errPartialBase
	}
	return s.exportBase(s.db, o, create)
}

// ExportView is ExportCommitted of the committed state that v holds: a View of the
// store's own committed state (Store.View, with no node's data), read from its
// snapshot, so that checkpoints go on committing while the export runs. v stays the
// caller's, who releases it after the export returns and before closing the store.
//
// Close waits for a running ExportView; one that starts once the store is closed
// fails.
func (s *Store) ExportView(v *View, o ExportOptions, create func(k int) (string, io.WriteCloser, error)) (BaseInfo, []SSTable, error) {
	switch {
	case v == nil || v.snap == nil:
		return BaseInfo{}, nil, fmt.Errorf("storage: export a view: the view is released")
	case v.store != s:
		return BaseInfo{}, nil, fmt.Errorf("storage: export a view: the view is of another store")
	case v.runs != nil || v.rep != nil || v.private != nil:
		return BaseInfo{}, nil, fmt.Errorf("storage: export a view: not a view of the committed state alone (a node's)")
	case s.partial:
		return BaseInfo{}, nil, errPartialBase
	}
	s.viewMu.RLock()
	if err := s.usable(); err != nil {
		s.viewMu.RUnlock()
		return BaseInfo{}, nil, fmt.Errorf("storage: export the committed state: %w", err)
	}
	s.exports.Add(1)
	s.viewMu.RUnlock()
	defer s.exports.Done()
	return s.exportBase(v.snap, o, create)
}

// exportBase exports the committed state r holds (the store's pebble, or a snapshot
// of it).
func (s *Store) exportBase(r pebble.Reader, o ExportOptions, create func(k int) (string, io.WriteCloser, error)) (BaseInfo, []SSTable, error) {
	var info BaseInfo
	seq, err := readApplied(r)
	if err != nil {
		return info, nil, fmt.Errorf("storage: export the committed state: %w", err)
	}
	if seq == 0 {
		return info, nil, fmt.Errorf("storage: export the committed state: the store applied no version-log sequence")
	}
	info.Sequence = seq
	if info.Epoch, err = readEpoch(r); err != nil {
		return info, nil, fmt.Errorf("storage: export the committed state: %w", err)
	}
	if info.Catalog, err = readCatalog(r); err != nil {
		return info, nil, fmt.Errorf("storage: export the committed state: %w", err)
	}
	if o.TableBytes <= 0 {
		o.TableBytes = DefaultExportTableBytes
	}
	it, err := r.NewIter(&pebble.IterOptions{
		LowerBound: binary.BigEndian.AppendUint32(nil, MetaTable+1),
		UpperBound: binary.BigEndian.AppendUint32(nil, math.MaxUint32),
	})
	if err != nil {
		return info, nil, fmt.Errorf("storage: export the committed state: %w", err)
	}
	defer it.Close()
	wo := s.po.MakeWriterOptions(0, s.db.TableFormat())
	var out []SSTable
	var cur *baseWriter
	for ok := it.First(); ok; ok = it.Next() {
		if cur == nil {
			if cur, err = newBaseWriter(wo, len(out), create); err != nil {
				return info, out, fmt.Errorf("storage: export the committed state: %w", err)
			}
		}
		v, err := it.ValueAndErr()
		if err == nil {
			err = cur.set(it.Key(), v)
		}
		if err != nil {
			cur.abort()
			return info, out, fmt.Errorf("storage: export the committed state: %w", err)
		}
		if cur.bytes >= o.TableBytes {
			t, err := cur.finish()
			if err != nil {
				return info, out, fmt.Errorf("storage: export the committed state: %w", err)
			}
			out, cur = append(out, t), nil
		}
	}
	if err := it.Error(); err != nil {
		if cur != nil {
			cur.abort()
		}
		return info, out, fmt.Errorf("storage: export the committed state: %w", err)
	}
	if cur != nil {
		t, err := cur.finish()
		if err != nil {
			return info, out, fmt.Errorf("storage: export the committed state: %w", err)
		}
		out = append(out, t)
	}
	return info, out, nil
}

// baseWriter is one sstable of ExportCommitted being written.
type baseWriter struct {
	cw    *exportWritable
	w     *sstable.Writer
	t     SSTable
	last  []byte
	bytes int
}

func newBaseWriter(wo sstable.WriterOptions, k int, create func(k int) (string, io.WriteCloser, error)) (*baseWriter, error) {
	name, wc, err := create(k)
	if err != nil {
		return nil, fmt.Errorf("create sstable %d: %w", k, err)
	}
	cw := &exportWritable{w: wc}
	return &baseWriter{cw: cw, w: sstable.NewWriter(cw, wo), t: SSTable{Name: name}}, nil
}

func (b *baseWriter) set(key, value []byte) error {
	if err := b.w.Set(key, value); err != nil {
		return fmt.Errorf("write sstable %s: %w", b.t.Name, err)
	}
	if b.t.Keys == 0 {
		b.t.Smallest = slices.Clone(key)
	}
	b.last = append(b.last[:0], key...)
	b.t.Keys++
	b.bytes += len(key) + len(value)
	return nil
}

func (b *baseWriter) abort() {
	b.cw.failed = true
	b.w.Close()
}

func (b *baseWriter) finish() (SSTable, error) {
	if err := b.w.Close(); err != nil {
		return SSTable{}, fmt.Errorf("write sstable %s: %w", b.t.Name, err)
	}
	b.t.Largest = slices.Clone(b.last)
	b.t.Size = b.cw.n
	return b.t, nil
}
