package executors

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// backfillCore holds the decisions of an arrangement backfill (docs/design.md §6) as a state
// machine without goroutines, clocks or I/O: events come in (an upstream chunk, a
// snapshot batch, a barrier), actions go out (chunks to emit downstream, chunks to
// replicate, progress rows to persist). The executor feeds it from its input and its
// snapshot reader; tests feed it seeded interleavings directly.
//
// Chunks in are upstream chunks of the full upstream schema S1; chunks out have the
// backfill's columns S2 (the needed upstream columns plus the pk, in upstream order).
type backfillCore struct {
	up     *schema.Table
	k      vec.Kernels
	s2     []int
	schema *arrow.Schema // S2
	mem    memory.Allocator
	owned  []uint16

	pos   *vec.Positions // per upstream vnode
	rows  []int64        // snapshot rows emitted per vnode
	dirty []bool         // progress changed since the last barrier

	phase backfillPhase
	buf   *epochBuffer // this epoch's upstream chunks (S1), while backfilling
	err   error        // a failed spill, reported by the next barrier

	epochRows int64 // snapshot rows emitted since the last barrier

	vn      []uint16
	scratch []vec.Op
}

type backfillPhase uint8

const (
	// backfilling: snapshot reads run; upstream chunks are buffered until the barrier.
	backfilling backfillPhase = iota
	// finishing: every owned vnode's snapshot has ended this epoch; upstream chunks
	// are forwarded; the next barrier persists and reports done.
	finishing
	// done: the backfill is over; everything passes through.
	done
)

func (p backfillPhase) String() string {
	return [...]string{"backfilling", "finishing", "done"}[p]
}

// progressUpdate is a progress row to persist.
type progressUpdate struct {
	Vnode    uint16
	Progress storage.VnodeProgress
}

// newBackfillCore starts from the loaded progress (positions over every upstream
// vnode, rows per vnode) of the owned vnodes.
func newBackfillCore(up *schema.Table, k vec.Kernels, s2 []int, owned *vnode.Bitmap, pos *vec.Positions, rows []int64, mem memory.Allocator) (*backfillCore, error) {
	if k == nil {
		k = vec.For(up)
	}
	if len(pos.State) != up.VnodeCount || len(rows) != up.VnodeCount {
		return nil, fmt.Errorf("backfill of %s: progress covers %d vnodes, the table has %d", up.Name, len(pos.State), up.VnodeCount)
	}
	c := &backfillCore{up: up, k: k, s2: slices.Clone(s2), schema: up.ProjectedArrowSchema(s2), mem: mem,
		pos: pos, rows: rows, dirty: make([]bool, up.VnodeCount), buf: newEpochBuffer(up.Name, mem, 0, "")}
	for _, v := range owned.ToSlice() {
		c.owned = append(c.owned, uint16(v))
	}
	if c.allCompleted() {
		c.phase = done
	}
	return c, nil
}

func (c *backfillCore) allCompleted() bool {
	for _, v := range c.owned {
		if c.pos.State[v] != vec.Completed {
			return false
		}
	}
	return true
}

// Schema is S2, the schema of every chunk the core emits.
func (c *backfillCore) Schema() *arrow.Schema { return c.schema }

// Phase is the core's phase.
func (c *backfillCore) Phase() backfillPhase { return c.phase }

// pending lists the owned vnodes whose snapshot is not over, each from its position.
func (c *backfillCore) pending() []storage.VnodeStart {
	var out []storage.VnodeStart
	for _, v := range c.owned {
		switch c.pos.State[v] {
		case vec.NotStarted:
			out = append(out, storage.VnodeStart{Vnode: v})
		case vec.InProgress:
			out = append(out, storage.VnodeStart{Vnode: v, After: c.pos.Pos[v]})
		}
	}
	return out
}

// project returns ch with the S2 columns (sharing ch's arrays, ops and visibility).
func (c *backfillCore) project(ch *vec.Chunk) *vec.Chunk {
	rec := ch.Record()
	cols := make([]arrow.Array, len(c.s2))
	for i, s := range c.s2 {
		cols[i] = rec.Column(s)
	}
	r := array.NewRecordBatch(c.schema, cols, rec.NumRows())
	defer r.Release()
	return ch.WithRecord(r)
}

// upstream takes an upstream chunk (owned by the core) and returns what to emit now:
// nothing while backfilling (the chunk waits for the barrier), the chunk projected to
// S2 afterwards.
func (c *backfillCore) upstream(ch *vec.Chunk) []*vec.Chunk {
	if c.phase != backfilling {
		defer ch.Release()
		return []*vec.Chunk{c.project(ch)}
	}
	if err := c.buf.add(ch); err != nil && c.err == nil {
		c.err = err
	}
	return nil
}

// setBuffer sets the epoch buffer's memory budget and spill directory ("": the
// system's temporary directory).
func (c *backfillCore) setBuffer(budget int64, dir string) {
	c.buf.release()
	c.buf = newEpochBuffer(c.up.Name, c.mem, budget, dir)
}

// snapshot takes a snapshot batch (the core releases it) and returns what to emit: its
// rows as Inserts; when it ends the last pending vnode, also the whole epoch buffer,
// unfiltered (every vnode is Completed, so every change of the epoch applies).
func (c *backfillCore) snapshot(b storage.SnapshotBatch) ([]*vec.Chunk, error) {
	defer b.Release()
	v := b.Vnode
	if int(v) >= len(c.pos.State) || !slices.Contains(c.owned, v) {
		return nil, fmt.Errorf("backfill of %s: snapshot batch of vnode %d, which this actor does not own", c.up.Name, v)
	}
	if c.phase != backfilling || c.pos.State[v] == vec.Completed {
		return nil, fmt.Errorf("backfill of %s: snapshot batch of vnode %d, whose snapshot is over (%s)", c.up.Name, v, c.pos.State[v])
	}
	var out []*vec.Chunk
	if b.Rows > 0 {
		rec := array.NewRecordBatch(c.schema, b.Record.Columns(), int64(b.Rows))
		ops := vec.NewOps(c.mem, b.Rows, vec.Insert)
		out = append(out, vec.NewChunk(rec, ops, nil))
		rec.Release()
		ops.Release()
		c.pos.State[v] = vec.InProgress
		c.pos.Pos[v] = slices.Clone(b.LastPK)
		c.rows[v] += int64(b.Rows)
		c.epochRows += int64(b.Rows)
		c.dirty[v] = true
	}
	if b.End {
		c.pos.State[v] = vec.Completed
		c.dirty[v] = true
		if c.allCompleted() {
			c.phase = finishing
			err := c.buf.drain(func(ch *vec.Chunk) error {
				out = append(out, c.project(ch))
				ch.Release()
				return nil
			})
			if err != nil {
				for _, o := range out {
					o.Release()
				}
				return nil, err
			}
		}
	}
	return out, nil
}

// barrier ends the epoch. It returns, in order: the buffered upstream chunks marked
// per row (Completed vnode: keep; NotStarted: drop; InProgress: keep iff pk <= the
// position), with split update pairs repaired, to emit; the whole buffer projected to
// S2, to write into the replicated table; and the changed progress rows to persist.
// The caller releases every returned chunk.
func (c *backfillCore) barrier() (emit, replicate []*vec.Chunk, progress []progressUpdate, err error) {
	if c.err != nil {
		return nil, nil, nil, c.err
	}
	if c.phase == backfilling && c.buf.len() > 0 {
		marker, err := c.k.NewMarker(c.pos)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("backfill of %s: %w", c.up.Name, err)
		}
		err = c.buf.drain(func(ch *vec.Chunk) error {
			if m := c.mark(marker, ch); m != nil {
				emit = append(emit, m)
			}
			replicate = append(replicate, c.project(ch))
			ch.Release()
			return nil
		})
		if err != nil {
			for _, x := range append(emit, replicate...) {
				x.Release()
			}
			return nil, nil, nil, err
		}
	}
	for _, v := range c.owned {
		if !c.dirty[v] {
			continue
		}
		c.dirty[v] = false
		vp := storage.VnodeProgress{State: c.pos.State[v], Rows: c.rows[v]}
		if c.rows[v] > 0 {
			vp.Pos = c.pos.Pos[v]
		}
		progress = append(progress, progressUpdate{Vnode: v, Progress: vp})
	}
	if c.phase == finishing {
		c.phase = done
	}
	c.epochRows = 0
	return emit, replicate, progress, nil
}

// mark returns the rows of ch that the backfill forwards (projected to S2), or nil
// when none is.
func (c *backfillCore) mark(marker vec.Marker, ch *vec.Chunk) *vec.Chunk {
	n := ch.NumRows()
	if cap(c.vn) < n {
		c.vn = make([]uint16, n)
	}
	vn := c.vn[:n]
	c.k.Vnodes(ch, vn)
	vis := vec.NewBitmap(c.mem, n)
	defer vis.Release()
	bits := vis.Bytes()
	marker.Mark(ch, vn, bits)
	marked := keepRows(ch, vis, c.mem, &c.scratch)
	if marked == nil {
		return nil
	}
	defer marked.Release()
	return c.project(marked)
}

// stats are the core's counters: snapshot rows emitted and vnodes Completed, of the
// owned vnodes.
func (c *backfillCore) stats() (rows int64, completed, owned int) {
	for _, v := range c.owned {
		rows += c.rows[v]
		if c.pos.State[v] == vec.Completed {
			completed++
		}
	}
	return rows, completed, len(c.owned)
}

// firstPending is the first owned vnode whose snapshot is not over, for the "at least
// one row" read.
func (c *backfillCore) firstPending() (storage.VnodeStart, bool) {
	p := c.pending()
	if len(p) == 0 {
		return storage.VnodeStart{}, false
	}
	return p[0], true
}

// release drops the buffer (Close).
func (c *backfillCore) release() {
	c.buf.release()
}
