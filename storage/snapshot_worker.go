package storage

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// work reads vnodes until none is left or the read stops.
func (r *SnapshotReader) work(w *snapWorker) error {
	for {
		if r.stopping.Load() {
			return nil
		}
		i := int(r.next.Add(1)) - 1
		if i >= len(r.vnodes) {
			return nil
		}
		if err := r.readVnode(w, r.vnodes[i]); err != nil {
			return err
		}
	}
}

// stopped is the error of a worker that saw the read stop: nil when closed (or when
// another worker failed first), the context's error otherwise.
func (r *SnapshotReader) stopped() error {
	if r.closing.Load() {
		return nil
	}
	if err := r.parent.Err(); err != nil {
		return fmt.Errorf("storage: snapshot of table %s: %w", r.src.Table().Name, err)
	}
	return nil
}

func (r *SnapshotReader) readVnode(w *snapWorker, vs VnodeStart) error {
	if r.ctx.Err() != nil {
		return r.stopped()
	}
	// A rate-limited read holds a batch's tokens before it moves its iterator onto the
	// batch's first row: opening the iterator moves it onto the vnode's first row after
	// the position, so the first batch's tokens come before the open (see fill).
	// granted: the tokens held for the next batch.
	limited := r.limit != nil
	granted := 0
	if limited {
		if r.stopping.Load() {
			return nil
		}
		n, stop, err := r.take(vs.Vnode)
		if stop {
			return err
		}
		granted = n
	}
	it, err := r.src.Iter(vs.Vnode, vs.After)
	if err != nil {
		r.giveBack(granted)
		return err
	}
	defer it.Close()
	// ok: the vnode may have a row left; moved: the iterator is on a row not read yet.
	// An unlimited read moves on as it reads (fill looks one row ahead); a limited one
	// moves on once it holds the next batch's tokens.
	ok, moved := it.Next(), true
	for {
		// A stop ends the read before it takes tokens for another batch (a batch
		// whose tokens are held is read, and the stop cuts it: see fill).
		if ok && granted == 0 && r.stopping.Load() {
			return nil
		}
		if ok && limited && granted == 0 {
			n, stop, err := r.take(vs.Vnode)
			if stop {
				return err
			}
			granted = n
		}
		if ok && !moved {
			ok = it.Next()
		}
		var b SnapshotBatch
		if !ok {
			if err := it.Error(); err != nil {
				r.giveBack(granted)
				return fmt.Errorf("storage: snapshot of table %s vnode %d: %w", r.src.Table().Name, vs.Vnode, err)
			}
			b = SnapshotBatch{Vnode: vs.Vnode, End: true}
		} else {
			want := r.batch
			if limited {
				want = granted
			}
			b, ok, err = w.fill(it, vs.Vnode, want, !limited)
			if err != nil {
				r.giveBack(granted)
				return err
			}
			moved = !limited
		}
		r.giveBack(granted - b.Rows)
		granted = 0
		select {
		case r.out <- b:
		case <-r.ctx.Done():
			b.Release()
			return r.stopped()
		}
		if b.End || r.stopping.Load() {
			return nil
		}
	}
}

// take waits for the tokens of vnode v's next batch (SnapshotRequest.Limit): n rows
// granted, or stop when the read ends here, with an error unless it was stopped or
// closed while it waited.
func (r *SnapshotReader) take(v uint16) (n int, stop bool, err error) {
	n, err = r.limit(r.wait, v, r.batch)
	if err != nil {
		if r.ctx.Err() != nil {
			return 0, true, r.stopped()
		}
		if r.wait.Err() != nil && errors.Is(err, r.wait.Err()) {
			return 0, true, nil // stopped while waiting for tokens
		}
		return 0, true, fmt.Errorf("storage: snapshot of table %s vnode %d: rate limit: %w", r.src.Table().Name, v, err)
	}
	if n < 1 || n > r.batch {
		return 0, true, fmt.Errorf("storage: snapshot of table %s vnode %d: rate limiter granted %d rows (want 1 to %d)", r.src.Table().Name, v, n, r.batch)
	}
	return n, false, nil
}

// giveBack returns n tokens granted for rows not read (SnapshotRequest.Unused).
func (r *SnapshotReader) giveBack(n int) {
	if n > 0 && r.unused != nil {
		r.unused(n)
	}
}

// snapWorker holds one worker's reused buffers: the builders of the projected columns
// (whose buffers come from the request's allocator) and the row decoder that fills
// them (vec.NewRowDecoder: the generated kernels' decodes each value as it is read),
// the last key read, and a slab that batches' LastPKs are carved from.
type snapWorker struct {
	proj   vec.Projection
	t      *schema.Table
	schema *arrow.Schema
	bs     []vec.Builder
	cols   []arrow.Array
	rd     vec.RowDecoder
	last   []byte
	slab   []byte
	// stop, when set, ends a batch early (SnapshotReader.Stop); nil for ReadOne.
	stop *atomic.Bool
}

const pkSlabSize = 4096

// stopCheckRows is how often, in rows, a worker filling a batch looks whether the read
// is stopping: a power of two, so that the test is a mask of the row count, and small
// enough that a stopping read waits for no more than a few microseconds of copying.
const stopCheckRows = 64

// stopped reports whether the read is stopping (see SnapshotReader.Stop).
func (w *snapWorker) stopped() bool { return w.stop != nil && w.stop.Load() }

// newSnapWorker makes a worker's builders and its row decoder.
func newSnapWorker(t *schema.Table, k vec.Kernels, proj vec.Projection, sch *arrow.Schema, mem memory.Allocator) (*snapWorker, error) {
	w := &snapWorker{proj: proj, t: t, schema: sch, bs: make([]vec.Builder, len(proj)), cols: make([]arrow.Array, len(proj))}
	for i, c := range proj {
		w.bs[i] = vec.NewBuilder(mem, t.Columns[c].Type.ArrowType())
	}
	rd, err := vec.NewRowDecoder(k, proj, w.bs)
	if err != nil {
		w.release()
		return nil, fmt.Errorf("storage: snapshot of table %s: %w", t.Name, err)
	}
	w.rd = rd
	return w, nil
}

func (w *snapWorker) release() {
	for _, b := range w.bs {
		b.Release()
	}
}

// fill reads up to want rows from it, which is positioned on a row, into a batch.
// With ahead, it moves the iterator past every row it reads and returns whether that
// found a further row (false: the vnode is exhausted or the iterator failed; the
// caller checks it.Error()), so that a batch that ends its vnode says so (End).
// Without ahead, a batch that reaches want rows, or that a stop cuts, leaves the
// iterator on its last row and returns true; the caller moves it on (Iter.Next)
// before the next fill. A rate-limited read does so once it holds the next batch's
// tokens: moving on skips every deleted key up to the next live row, and a stop that
// came while the read waited for tokens would throw that work away, for the next
// epoch's read to repeat (over a long run of deleted keys, at every barrier).
func (w *snapWorker) fill(it *Iter, v uint16, want int, ahead bool) (SnapshotBatch, bool, error) {
	w.rd.Begin(want)
	var n int
	var ok bool
	var err error
	if len(it.runs) == 0 {
		n, ok, err = w.fillCommitted(it, want, ahead)
	} else {
		ok = true
		for ok {
			if err = w.rd.Append(it.Value()); err != nil {
				err = fmt.Errorf("row of pk %x: %w", it.PK(), err)
				break
			}
			w.last = append(w.last[:0], it.PK()...)
			n++
			cut := n == want || n&(stopCheckRows-1) == 0 && w.stopped()
			if cut && !ahead {
				break
			}
			ok = it.Next()
			if cut {
				break
			}
		}
	}
	if err != nil {
		return SnapshotBatch{}, false, fmt.Errorf("storage: snapshot of table %s vnode %d: %w", w.t.Name, v, err)
	}
	if !ok && it.Error() != nil {
		return SnapshotBatch{}, false, fmt.Errorf("storage: snapshot of table %s vnode %d: %w", w.t.Name, v, it.Error())
	}
	rec, err := w.build(n)
	if err != nil {
		return SnapshotBatch{}, false, fmt.Errorf("storage: snapshot of table %s vnode %d: %w", w.t.Name, v, err)
	}
	return SnapshotBatch{Vnode: v, Record: rec, LastPK: w.carve(w.last), Rows: n, End: !ok}, ok, nil
}

// fillCommitted is fill's loop for an iterator with no sealed runs to merge (a
// committed view): it drives pebble directly, and copies a key only for the batch's
// last row. A stopping read (SnapshotReader.Stop) ends the batch early, at a multiple
// of stopCheckRows. When the vnode ends before the batch does, the last key read is
// gone; the iterator is then moved back to the vnode's last key, which is that row's
// (the bounds and the pebble snapshot are fixed). It leaves it in Iter's state: on
// the batch's last row when the batch was cut without ahead (see fill).
func (w *snapWorker) fillCommitted(it *Iter, want int, ahead bool) (n int, ok bool, err error) {
	pit := it.pit
	val := it.value
	cut := false // the batch ended on a row whose key is copied
	for {
		if err := w.rd.Append(val); err != nil {
			return n, false, fmt.Errorf("row of pk %x: %w", pit.Key()[KeyPrefixLen:], err)
		}
		n++
		if n == want || n&(stopCheckRows-1) == 0 && w.stopped() {
			w.last = append(w.last[:0], pit.Key()[KeyPrefixLen:]...)
			if !ahead { // stay on this row: Iter.Next moves on from it
				it.pok, it.key, it.value = true, pit.Key(), val
				return n, true, nil
			}
			cut = true
			ok = pit.Next()
			break
		}
		if !pit.Next() {
			break
		}
		val = pit.Value()
	}
	it.pok = ok
	if ok {
		it.key, it.value = pit.Key(), pit.Value()
		return n, true, nil
	}
	it.key, it.value = nil, nil
	if it.err = pit.Error(); it.err != nil || cut {
		return n, false, nil
	}
	if !pit.Last() {
		if it.err = pit.Error(); it.err == nil {
			it.err = fmt.Errorf("iterator found no last row after reading %d", n)
		}
		return n, false, nil
	}
	w.last = append(w.last[:0], pit.Key()[KeyPrefixLen:]...)
	return n, false, nil
}

// build makes the row decoder's n rows a record.
func (w *snapWorker) build(n int) (arrow.RecordBatch, error) {
	err := w.rd.Flush()
	for i, b := range w.bs {
		w.cols[i] = b.NewArray()
	}
	defer func() {
		for i, a := range w.cols {
			a.Release()
			w.cols[i] = nil
		}
	}()
	if err != nil {
		return nil, err
	}
	for i, a := range w.cols {
		if a.Len() != n {
			return nil, fmt.Errorf("column %s: decoded %d values of %d", w.t.Columns[w.proj[i]].Name, a.Len(), n)
		}
	}
	return array.NewRecordBatch(w.schema, w.cols, int64(n)), nil
}

// carve copies pk into the slab and returns the copy, capped so that appends to it
// never reach the slab's next copy.
func (w *snapWorker) carve(pk []byte) []byte {
	if cap(w.slab)-len(w.slab) < len(pk) {
		w.slab = make([]byte, 0, max(pkSlabSize, len(pk)))
	}
	start := len(w.slab)
	w.slab = append(w.slab, pk...)
	return w.slab[start:len(w.slab):len(w.slab)]
}
