package storage

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// DefaultSnapshotBatchSize is the rows per snapshot batch when a request leaves
// BatchSize at zero. Handing a batch over costs a fixed number of Go allocations, the
// headers Arrow allocates for each array (five per fixed-width column, six per
// variable-width one) and record (two), whatever the rows; 4096 rows keep that below
// 0.01 allocations per row for up to seven columns. A rate limiter asks for fewer.
const DefaultSnapshotBatchSize = 4096

// VnodeSource opens iterators over the vnodes of one table: the source of a snapshot
// read. Iter may be called from several goroutines at once, each call for a different
// vnode; each returned iterator is used by one goroutine.
type VnodeSource interface {
	// Table is the schema of the rows (S1: values hold every column).
	Table() *schema.Table
	// Iter iterates vnode v in pk order after the memcomparable pk after (nil: from the
	// vnode's first row).
	Iter(v uint16, after []byte) (*Iter, error)
}

// ReplicatedSource is a snapshot source over a backfill's replicated table read
// through view (from r.View): the committed upstream plus the replicated epochs above
// the view's epoch. The epochs are captured now, so writes and seals of r after this
// call are not seen by the source and do not race with it; view must stay unreleased
// while the source is in use. Iterating a vnode the actor does not own is an error.
func ReplicatedSource(r *ReplicatedTable, view *View) VnodeSource {
	extra, err := r.runsFor(view)
	return &replicatedSource{id: r.id, t: r.t, vnodes: r.vnodes, view: view, extra: extra, err: err}
}

type replicatedSource struct {
	id     uint32
	t      *schema.Table
	vnodes *vnode.Bitmap
	view   *View
	extra  []*run // sealed, immutable
	err    error  // a released view, reported by Iter
}

func (s *replicatedSource) Table() *schema.Table { return s.t }

func (s *replicatedSource) Iter(v uint16, after []byte) (*Iter, error) {
	if s.err != nil {
		return nil, s.err
	}
	if !s.vnodes.Contains(vnode.Vnode(v)) {
		return nil, fmt.Errorf("storage: snapshot: replicated table %s: vnode %d is not owned by this actor", s.t.Name, v)
	}
	return s.view.newIter(s.id, v, IterBounds{After: after}, s.extra)
}

// ViewSource is a snapshot source over table id (schema t) read through view: the
// committed rows, overlaid with the node's sealed epochs for a node's view. view must
// stay unreleased while the source is in use.
func ViewSource(view *View, id uint32, t *schema.Table) VnodeSource {
	return &viewSource{view: view, id: id, t: t}
}

type viewSource struct {
	view *View
	id   uint32
	t    *schema.Table
}

func (s *viewSource) Table() *schema.Table { return s.t }

func (s *viewSource) Iter(v uint16, after []byte) (*Iter, error) {
	if int(v) >= s.t.VnodeCount {
		return nil, fmt.Errorf("storage: snapshot: table %s has %d vnodes, not vnode %d", s.t.Name, s.t.VnodeCount, v)
	}
	return s.view.newIter(s.id, v, IterBounds{After: after}, nil)
}

// VnodeStart is a vnode to read and the position to read it after: the memcomparable
// pk of the last row already consumed, or nil to read the whole vnode.
type VnodeStart struct {
	Vnode uint16
	After []byte
}

// SnapshotLimiter is the rate-limit hook of a snapshot read. A worker calls it before
// each batch of vnode v, with want = the batch size, and before it moves its iterator
// onto the batch's first row (or opens it, for the vnode's first batch): moving on
// skips the deleted keys before that row, work that a stop during the wait would
// otherwise throw away. It returns how many rows the batch may hold (1 to want),
// blocking until they are granted, or an error (ctx is done when the read is closed
// or stopped). A batch holds fewer rows than granted when the vnode ends (none when
// it had no row left) or the read is stopped; see SnapshotRequest.Unused. It is
// called from several workers at once.
type SnapshotLimiter func(ctx context.Context, v uint16, want int) (int, error)

// SnapshotRequest describes a snapshot read.
type SnapshotRequest struct {
	// Vnodes to read, each after its position. Workers take them in this order.
	Vnodes []VnodeStart
	// Projection is the columns to decode (indexes into the source table's columns,
	// i.e. S2 as S1 indexes), in output order. Other columns are never decoded.
	Projection vec.Projection
	// BatchSize is the most rows per batch; 0 means DefaultSnapshotBatchSize.
	BatchSize int
	// Workers is the number of goroutines reading vnodes, each with one iterator open
	// at a time; 0 means 1. At most len(Vnodes) are started.
	Workers int
	// Buffer is the capacity of the batch channel; 0 means Workers.
	Buffer int
	// Mem allocates the batches' Arrow buffers (vec.PoolAllocator on hot paths); nil
	// means memory.DefaultAllocator.
	Mem memory.Allocator
	// Kernels decode the values; nil means vec.For(source table) (the generated
	// kernels when registered, else the generic ones).
	Kernels vec.Kernels
	// Limit, when set, is called before every batch (see SnapshotLimiter).
	Limit SnapshotLimiter
	// Unused, when set with Limit, is called with the rows a batch was granted but did
	// not hold (its vnode ended, or Stop cut it), so that a token bucket can take them
	// back. It is called from several workers at once.
	Unused func(n int)
}

// SnapshotBatch is a run of consecutive rows of one vnode, in pk order, or the end of a
// vnode's snapshot. Batches of one vnode arrive in pk order; batches of different
// vnodes interleave freely.
type SnapshotBatch struct {
	Vnode uint16
	// Record holds the rows, with the request's projection as columns; nil when Rows
	// is 0. The receiver owns it: Release the batch when done.
	Record arrow.RecordBatch
	// LastPK is the memcomparable pk of the batch's last row (nil when Rows is 0). It
	// is owned by the batch: never written again by the reader, valid after Release.
	LastPK []byte
	// Rows is the number of rows.
	Rows int
	// End reports that the vnode has no rows after this batch's: its snapshot is
	// exhausted. An empty vnode gets one batch with Rows 0 and End set; so may a
	// rate-limited read's vnode after the batch of its last row, when that batch took
	// every row granted (see fill).
	End bool
}

// Release releases the batch's record (a no-op for an end marker).
func (b *SnapshotBatch) Release() {
	if b.Record != nil {
		b.Record.Release()
		b.Record = nil
	}
}

// SnapshotReader reads many vnodes of a source on a bounded pool of workers and
// delivers their rows as projected Arrow batches on a bounded channel (see Batches).
// A worker decodes each row value as it reads it, with the generated kernels' row
// decoder, into reused builders (kernels without one, such as Generic, get the value
// copied into a reused arena and a whole batch decoded at once), and hands the batch
// over; in steady state it allocates only the Arrow array headers of each batch.
//
// The channel is closed when every vnode has delivered its End batch, when a worker
// fails (see Err), after Stop once the workers have handed over their last batches,
// or after Close. The receiver must either read until the channel is closed or call
// Close. Close may be called at any time, from any goroutine: it stops the workers,
// releases every batch not yet received and waits for the workers to exit, so a read
// stopped early leaks neither goroutines nor Arrow memory. Batches already received
// stay the receiver's.
//
// Stop ends a read early without losing what it has read: each worker hands over the
// rows it has read so far as a last, possibly short, batch and exits, so the
// receiver reading on to the channel's close has every row read, and each vnode's
// batches still form a prefix of it in pk order.
//
// A backfill's actor loop selects on Batches next to its upstream input: a batch with
// rows is emitted and moves the vnode's position to LastPK; a batch with End completes
// the vnode; a closed channel with a nil Err completes the snapshot, unless the read
// was stopped (its vnodes without an End batch are then not done). At a barrier that
// ends the read it calls Stop, takes every batch until the channel closes (the rows
// the workers were in the middle of included: docs/design.md §6's flush of partial
// batches), then calls Close and releases the view the source reads.
type SnapshotReader struct {
	src     VnodeSource
	k       vec.Kernels
	proj    vec.Projection
	schema  *arrow.Schema
	mem     memory.Allocator
	batch   int
	limit   SnapshotLimiter
	unused  func(n int)
	vnodes  []VnodeStart
	next    atomic.Int64 // index of the next vnode to take
	out     chan SnapshotBatch
	parent  context.Context
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{} // closed after out is closed
	closing atomic.Bool
	// stopping is set by Stop: workers end their batches early and exit. wait is the
	// limiter's context, cancelled by Stop too, so that no worker waits for a token.
	stopping   atomic.Bool
	wait       context.Context
	cancelWait context.CancelFunc

	mu  sync.Mutex
	err error
}

// OpenSnapshot starts a snapshot read of src. It returns an error, and starts nothing,
// when the request is malformed (a projection or vnode out of range, a vnode listed
// twice). Cancelling ctx stops the workers as Close does, and Err then returns ctx's
// error; the receiver still reads until the channel closes, or calls Close.
func OpenSnapshot(ctx context.Context, src VnodeSource, req SnapshotRequest) (*SnapshotReader, error) {
	t := src.Table()
	k, proj, sch, err := snapshotSetup(src, req.Kernels, req.Projection)
	if err != nil {
		return nil, err
	}
	batch := req.BatchSize
	if batch == 0 {
		batch = DefaultSnapshotBatchSize
	}
	if batch < 0 {
		return nil, fmt.Errorf("storage: snapshot of table %s: batch size %d", t.Name, batch)
	}
	workers := req.Workers
	if workers == 0 {
		workers = 1
	}
	if workers < 0 {
		return nil, fmt.Errorf("storage: snapshot of table %s: %d workers", t.Name, workers)
	}
	workers = min(workers, len(req.Vnodes))
	buffer := req.Buffer
	if buffer <= 0 {
		buffer = max(workers, 1)
	}
	mem := req.Mem
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	// Copy the positions into one buffer: the caller may reuse its slices at once.
	size := 0
	seen := make([]bool, t.VnodeCount)
	for _, vs := range req.Vnodes {
		if int(vs.Vnode) >= t.VnodeCount {
			return nil, fmt.Errorf("storage: snapshot of table %s: vnode %d out of range (%d vnodes)", t.Name, vs.Vnode, t.VnodeCount)
		}
		if seen[vs.Vnode] {
			return nil, fmt.Errorf("storage: snapshot of table %s: vnode %d listed twice", t.Name, vs.Vnode)
		}
		seen[vs.Vnode] = true
		size += len(vs.After)
	}
	buf := make([]byte, 0, size)
	vnodes := make([]VnodeStart, len(req.Vnodes))
	for i, vs := range req.Vnodes {
		vnodes[i].Vnode = vs.Vnode
		if vs.After != nil {
			start := len(buf)
			buf = append(buf, vs.After...)
			vnodes[i].After = buf[start:len(buf):len(buf)]
		}
	}

	r := &SnapshotReader{
		src: src, k: k, proj: proj, schema: sch, mem: mem, batch: batch, limit: req.Limit, unused: req.Unused,
		vnodes: vnodes, out: make(chan SnapshotBatch, buffer), parent: ctx, done: make(chan struct{}),
	}
	ws := make([]*snapWorker, workers)
	for i := range ws {
		w, err := newSnapWorker(t, k, proj, sch, mem)
		if err != nil {
			for _, w := range ws[:i] {
				w.release()
			}
			return nil, err
		}
		w.stop = &r.stopping
		ws[i] = w
	}
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.wait, r.cancelWait = context.WithCancel(r.ctx)
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.release()
			if err := r.work(w); err != nil {
				r.fail(err)
			}
		}()
	}
	go func() {
		wg.Wait()
		r.cancelWait()
		r.cancel()
		close(r.out)
		close(r.done)
	}()
	return r, nil
}

// snapshotSetup resolves the kernels and checks the projection.
func snapshotSetup(src VnodeSource, k vec.Kernels, proj vec.Projection) (vec.Kernels, vec.Projection, *arrow.Schema, error) {
	t := src.Table()
	if k == nil {
		k = vec.For(t)
	}
	if k.Table().Fingerprint() != t.Fingerprint() {
		return nil, nil, nil, fmt.Errorf("storage: snapshot of table %s: kernels are for table %s of another shape", t.Name, k.Table().Name)
	}
	for _, c := range proj {
		if c < 0 || c >= len(t.Columns) {
			return nil, nil, nil, fmt.Errorf("storage: snapshot of table %s: projection names column %d, the table has %d", t.Name, c, len(t.Columns))
		}
	}
	proj = append(vec.Projection(nil), proj...)
	var sch *arrow.Schema
	if len(proj) == 0 {
		sch = arrow.NewSchema(nil, nil)
	} else {
		sch = t.ProjectedArrowSchema(proj)
	}
	return k, proj, sch, nil
}

// Batches is the channel of batches (see SnapshotReader). It is closed at the end of
// the read; then Err tells whether it failed. A read not stopped (by Stop, Close or
// its context) and without error has read every vnode to its end.
func (r *SnapshotReader) Batches() <-chan SnapshotBatch { return r.out }

// Err is the error that ended the read early, or nil. It is final once the channel is
// closed. A read stopped by Close has no error; one stopped by its context has the
// context's error.
func (r *SnapshotReader) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *SnapshotReader) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.cancel()
}

// Stop asks the workers to end the read at once, but without dropping rows: a worker
// filling a batch ends it after at most stopCheckRows more rows and sends it (it is not
// marked End unless its vnode ended there), a worker waiting for rate-limit tokens
// stops waiting and sends nothing, and no worker starts another batch or vnode. The
// channel closes once every worker has exited, with a nil Err unless a worker failed;
// the receiver reads it to the close (or calls Close, which drops what is left). It
// may be called at any time, from any goroutine, more than once.
func (r *SnapshotReader) Stop() {
	r.stopping.Store(true)
	r.cancelWait()
}

// Close stops the read: it cancels the workers, releases every batch not yet received,
// and returns once every worker has exited and released its buffers. It returns Err.
// Calling it again, or after the channel closed, is harmless.
func (r *SnapshotReader) Close() error {
	r.closing.Store(true)
	r.cancel()
	for b := range r.out {
		b.Release()
	}
	<-r.done
	return r.Err()
}

// ReadOne reads the first row of vnode v after the position after, synchronously: a
// batch of at most one row, with End set when the vnode has no row after it (Rows 0
// when it had none at all). The batch's record is allocated from mem (nil: the
// default allocator); release it. It is the backfill's "at least one more row" read.
func ReadOne(src VnodeSource, v uint16, after []byte, proj vec.Projection, mem memory.Allocator) (SnapshotBatch, error) {
	k, proj, sch, err := snapshotSetup(src, nil, proj)
	if err != nil {
		return SnapshotBatch{}, err
	}
	if int(v) >= src.Table().VnodeCount {
		return SnapshotBatch{}, fmt.Errorf("storage: snapshot of table %s: vnode %d out of range (%d vnodes)", src.Table().Name, v, src.Table().VnodeCount)
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	it, err := src.Iter(v, after)
	if err != nil {
		return SnapshotBatch{}, err
	}
	defer it.Close()
	if !it.Next() {
		if err := it.Error(); err != nil {
			return SnapshotBatch{}, fmt.Errorf("storage: snapshot of table %s vnode %d: %w", src.Table().Name, v, err)
		}
		return SnapshotBatch{Vnode: v, End: true}, nil
	}
	w, err := newSnapWorker(src.Table(), k, proj, sch, mem)
	if err != nil {
		return SnapshotBatch{}, err
	}
	defer w.release()
	b, _, err := w.fill(it, v, 1, true)
	return b, err
}
