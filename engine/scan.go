package engine

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/storage"
)

// Snapshot is a consistent read of every table and view at one committed epoch.
// Release it when done (after releasing its readers).
type Snapshot struct {
	chunkSize int
	mem       memory.Allocator // the records' (Options.Mem, or Arrow's Go allocator)
	view      *storage.View
	objs      map[string]*object
	refs      atomic.Int64
}

// Snapshot opens a read of the committed state: every Scan of it sees the same epoch.
func (e *Engine) Snapshot() (*Snapshot, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return nil, err
	}
	return newSnapshot(e.store, e.cat, e.opts.ChunkSize, e.scanMem)
}

// newSnapshot opens a read of store's committed state with the objects of cat.
func newSnapshot(store *storage.Store, cat *catalog, chunkSize int, mem memory.Allocator) (*Snapshot, error) {
	view, err := store.View()
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	objs := make(map[string]*object, len(cat.objects))
	for k, o := range cat.objects {
		objs[k] = o
	}
	s := &Snapshot{chunkSize: chunkSize, mem: mem, view: view, objs: objs}
	s.refs.Store(1)
	return s, nil
}

// Epoch is the committed epoch the snapshot reads.
func (s *Snapshot) Epoch() executors.Epoch { return executors.Epoch(s.view.Epoch) }

// Release releases the snapshot once it and its readers are done.
func (s *Snapshot) Release() {
	if s.refs.Add(-1) == 0 {
		s.view.Release()
	}
}

// Scan reads every row of a table or view, vnode by vnode (rows of one vnode in pk
// order), as Arrow records of at most Options.ChunkSize rows with the table's columns.
// The reader holds the snapshot until it is released. The records come from Arrow's
// Go allocator unless Options.Mem was set (then from it: see Options.Mem).
func (s *Snapshot) Scan(ctx context.Context, name string) (array.RecordReader, error) {
	o, ok := s.objs[name]
	if !ok {
		return nil, fmt.Errorf("scan %s: no table or materialized view of that name", name)
	}
	t := o.t
	req := storage.SnapshotRequest{BatchSize: s.chunkSize, Workers: 1, Buffer: 2, Mem: s.mem}
	for v := 0; v < t.VnodeCount; v++ {
		req.Vnodes = append(req.Vnodes, storage.VnodeStart{Vnode: uint16(v)})
	}
	for i := range t.Columns {
		req.Projection = append(req.Projection, i)
	}
	r, err := storage.OpenSnapshot(ctx, storage.ViewSource(s.view, o.ID, t), req)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", name, err)
	}
	s.refs.Add(1)
	sr := &scanReader{snap: s, r: r, schema: t.ArrowSchema(), name: name}
	sr.refs.Store(1)
	return sr, nil
}

// Scan reads a table or view at the committed epoch (see Snapshot.Scan).
func (e *Engine) Scan(ctx context.Context, name string) (array.RecordReader, error) {
	s, err := e.Snapshot()
	if err != nil {
		return nil, err
	}
	defer s.Release()
	return s.Scan(ctx, name)
}

type scanReader struct {
	snap   *Snapshot
	r      *storage.SnapshotReader
	schema *arrow.Schema
	name   string
	cur    arrow.RecordBatch
	err    error
	refs   atomic.Int64
	done   bool
}

func (r *scanReader) Retain() { r.refs.Add(1) }

func (r *scanReader) Release() {
	if r.refs.Add(-1) != 0 {
		return
	}
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	r.r.Close()
	r.snap.Release()
}

func (r *scanReader) Schema() *arrow.Schema { return r.schema }

func (r *scanReader) Next() bool {
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	if r.done {
		return false
	}
	for b := range r.r.Batches() {
		if b.Rows == 0 {
			b.Release()
			continue
		}
		// The batch's record has the table's columns (projection = all), but its
		// schema's metadata may differ; rebuild it on ours.
		r.cur = array.NewRecordBatch(r.schema, b.Record.Columns(), b.Record.NumRows())
		b.Release()
		return true
	}
	r.done = true
	if err := r.r.Err(); err != nil {
		r.err = fmt.Errorf("scan %s: %w", r.name, err)
	}
	return false
}

func (r *scanReader) RecordBatch() arrow.RecordBatch { return r.cur }

// Record is RecordBatch (for the deprecated name in array.RecordReader).
func (r *scanReader) Record() arrow.RecordBatch { return r.cur }

func (r *scanReader) Err() error { return r.err }
