package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
)

// The writes a recovery must not lose. A write that returned nil was sent into its
// table's DML input; until the checkpoint after it commits, only the graph holds it,
// and a recovery tears the graph down. So each DML input keeps a log of the chunks
// sent into it and of the barriers injected after them, in the channel's order; a
// committed checkpoint drops the chunks before its barrier, and a recovery sends
// what is left into the new graph's inputs, after its first barrier and before any
// new write, in the same order. A write is lost only to a crash of the engine's
// process, or when it has been sent maxSends times and each time a recovery
// followed before a commit (a write, or an epoch's writes, that fails a view each
// time: they are then dropped, and LostWrites counts them).

// maxSends is how many times a write is sent (the first time and by the recoveries
// after it) before a recovery drops it instead.
const maxSends = 4

// dmlWrite is a chunk sent into a DML input (the log's reference) and how many
// times it was sent.
type dmlWrite struct {
	c     *vec.Chunk
	sends int
}

// dmlMark is a barrier sent into a DML input: upto of the log's chunks went before it.
type dmlMark struct {
	curr executors.Epoch
	upto int
}

// errTornDown is lock's error when the graph is torn down first.
var errTornDown = errors.New("the graph is torn down")

// lock takes the input's slot (a lock that a select can wait on), unless the graph
// is torn down (errTornDown) or ctx ends first; take, when set, takes the reports
// that arrive meanwhile, as the coordinator must while it waits, and its error ends
// the wait. Holding the slot, it drops what a committed checkpoint covers.
func (in *dmlInput) lock(ctx context.Context, dead <-chan struct{}, reports <-chan report, take func(report) error) error {
	for {
		select {
		case in.slot <- struct{}{}:
			in.truncate()
			return nil
		case <-dead:
			return errTornDown
		case <-ctx.Done():
			return ctx.Err()
		case r := <-reports:
			if err := take(r); err != nil {
				return err
			}
		}
	}
}

func (in *dmlInput) unlock() { <-in.slot }

// markBarrier records barrier b, just sent into the input (the slot is held).
func (in *dmlInput) markBarrier(b *executors.Barrier) {
	in.marks = append(in.marks, dmlMark{curr: b.Curr, upto: len(in.log)})
}

// logChunk records w, about to be sent into the input (the slot is held): the log
// takes a reference of its own. unlogChunk undoes it when the send fails.
func (in *dmlInput) logChunk(w dmlWrite) {
	w.c.Retain()
	w.sends++
	in.log = append(in.log, w)
}

func (in *dmlInput) unlogChunk() {
	last := len(in.log) - 1
	in.log[last].c.Release()
	in.log = in.log[:last]
}

// truncate drops the chunks sent before the last barrier whose checkpoint committed
// (the slot is held, or the graph is torn down).
func (in *dmlInput) truncate() {
	committed := executors.Epoch(in.committed.Load())
	i := -1
	for j, m := range in.marks {
		if m.curr <= committed {
			i = j
		}
	}
	if i < 0 {
		return
	}
	upto := in.marks[i].upto
	for _, w := range in.log[:upto] {
		w.c.Release()
	}
	in.log = slices.Delete(in.log, 0, upto)
	in.marks = slices.Delete(in.marks, 0, i+1)
	for j := range in.marks {
		in.marks[j].upto -= upto
	}
}

// committedAt tells every DML input of g that the checkpoint of barrier curr
// committed: each drops what went before it when its slot is next taken.
func (g *graph) committedAt(curr executors.Epoch) {
	for _, in := range g.inputs() {
		for {
			old := in.committed.Load()
			if uint64(curr) <= old || in.committed.CompareAndSwap(old, uint64(curr)) {
				break
			}
		}
	}
}

// takeLogs moves the logged chunks of every DML input of g, torn down, into the
// engine's writes to send again, by table: before those still waiting there, which
// a recovery that failed part-way did not send yet (the graph's log holds what it
// sent, which went first).
func (e *Engine) takeLogs(g *graph) {
	for _, in := range g.inputs() {
		in.truncate()
		if len(in.log) == 0 {
			continue
		}
		if e.unsent == nil {
			e.unsent = map[string][]dmlWrite{}
		}
		e.unsent[in.t.Name] = append(in.log, e.unsent[in.t.Name]...)
		in.log, in.marks = nil, nil
	}
}

// dropUnsent releases the writes waiting to be sent again, counting them lost.
func (e *Engine) dropUnsent() {
	for _, ws := range e.unsent {
		for _, w := range ws {
			e.lostWrites.Add(int64(w.c.NumRows()))
			w.c.Release()
		}
	}
	e.unsent = nil
}

// resendError is the failure of a recovery to send the writes again: the next
// attempt sends them again (recover).
type resendError struct {
	table string
	gen   uint64
	err   error
}

func (r *resendError) Error() string {
	return fmt.Sprintf("send the writes since the last checkpoint into %s again (generation %d): %v", r.table, r.gen, r.err)
}
func (r *resendError) Unwrap() error { return r.err }

// resend sends the writes a recovery kept into the DML inputs of g, whose first
// barrier has passed, in their order, before any new write. A write sent maxSends
// times already is dropped instead (logged, and counted by LostWrites). An actor's
// failure reported meanwhile ends it: the next recovery attempt sends the rest.
func (e *Engine) resend(ctx context.Context, g *graph) error {
	tables := make([]string, 0, len(e.unsent))
	for t := range e.unsent {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	failed := func(r report) error {
		if r.err != nil {
			return r.err
		}
		return nil // a late report of the first barrier
	}
	for _, t := range tables {
		in := g.dml[t]
		if in == nil {
			continue // not rebuilt: dropped below
		}
		fail := func(err error) error { return &resendError{table: t, gen: g.generation, err: err} }
		for len(e.unsent[t]) > 0 {
			w := e.unsent[t][0]
			if w.sends >= maxSends {
				e.log.Warn("dropping a write sent again and again: a recovery followed each time before a commit", "table", t, "rows", w.c.NumRows(), "sends", w.sends)
				e.lostWrites.Add(int64(w.c.NumRows()))
				w.c.Release()
				e.unsent[t] = e.unsent[t][1:]
				continue
			}
			if err := in.lock(ctx, g.dead, g.reports, failed); err != nil {
				return fail(err)
			}
			in.logChunk(w)
			sent := false
			for !sent {
				select {
				case in.c <- executors.ChunkMessage(w.c): // the unsent list's reference
					sent = true
				case r := <-g.reports:
					if err := failed(r); err != nil {
						in.unlogChunk()
						in.unlock()
						return fail(err)
					}
				case <-g.dead:
					in.unlogChunk()
					in.unlock()
					return fail(errTornDown)
				case <-ctx.Done():
					in.unlogChunk()
					in.unlock()
					return fail(ctx.Err())
				}
			}
			in.unlock()
			e.unsent[t] = e.unsent[t][1:]
			e.resent.Add(int64(w.c.NumRows()))
		}
		delete(e.unsent, t)
	}
	e.dropUnsent() // a table that is gone
	return nil
}

// LostWrites counts the rows of writes that returned nil and were dropped without a
// checkpoint committing them: by a recovery, a write sent maxSends times (see
// above), and, at Crash or at the Close of a failed engine, every write since the
// last checkpoint.
func (e *Engine) LostWrites() int64 { return e.lostWrites.Load() }

// ResentWrites counts the rows of writes that recoveries sent again into the new
// graph, so that no write that returned nil is lost to a recovery.
func (e *Engine) ResentWrites() int64 { return e.resent.Load() }
