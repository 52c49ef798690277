package engine

import (
	"context"
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
// process, or when recoveries follow one another without a commit between them
// (maxReplays: a write that fails the graph each time it is sent is then dropped,
// and LostWrites counts it).

// maxReplays is how many recoveries in a row, without a commit between them, send
// the logged writes again; the next one drops them.
const maxReplays = 3

// dmlMark is a barrier sent into a DML input: upto of the log's chunks went before it.
type dmlMark struct {
	curr executors.Epoch
	upto int
}

// lock takes the input's slot (a lock that a select can wait on), unless the graph
// is torn down or ctx ends first; take, when set, takes the reports that arrive
// meanwhile, as the coordinator must while it waits. It reports whether it took it.
func (in *dmlInput) lock(ctx context.Context, dead <-chan struct{}, reports <-chan report, take func(report) error) (bool, error) {
	for {
		select {
		case in.slot <- struct{}{}:
			return true, nil
		case <-dead:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case r := <-reports:
			if err := take(r); err != nil {
				return false, err
			}
		}
	}
}

func (in *dmlInput) unlock() { <-in.slot }

// markBarrier records barrier b, just sent into the input (the slot is held).
func (in *dmlInput) markBarrier(b *executors.Barrier) {
	in.marks = append(in.marks, dmlMark{curr: b.Curr, upto: len(in.log)})
}

// logChunk records chunk c, about to be sent into the input (the slot is held): the
// log takes a reference of its own. unlogChunk undoes it when the send fails.
func (in *dmlInput) logChunk(c *vec.Chunk) {
	c.Retain()
	in.log = append(in.log, c)
}

func (in *dmlInput) unlogChunk() {
	last := len(in.log) - 1
	in.log[last].Release()
	in.log = in.log[:last]
}

// committed drops the chunks sent before barrier curr, whose checkpoint committed
// (the slot is held).
func (in *dmlInput) committed(curr executors.Epoch) {
	i := slices.IndexFunc(in.marks, func(m dmlMark) bool { return m.curr == curr })
	if i < 0 {
		return
	}
	upto := in.marks[i].upto
	for _, c := range in.log[:upto] {
		c.Release()
	}
	in.log = slices.Delete(in.log, 0, upto)
	in.marks = slices.Delete(in.marks, 0, i+1)
	for j := range in.marks {
		in.marks[j].upto -= upto
	}
}

// committedAt drops, at every DML input of g, the chunks that the checkpoint of
// barrier curr committed.
func (g *graph) committedAt(curr executors.Epoch) {
	for _, in := range g.inputs() {
		if ok, _ := in.lock(context.Background(), g.dead, nil, nil); !ok {
			return // torn down: the recovery takes the logs
		}
		in.committed(curr)
		in.unlock()
	}
}

// takeLogs moves the logged chunks of every DML input of g, torn down, into the
// engine's writes to send again, by table, after what is there already.
func (e *Engine) takeLogs(g *graph) {
	for _, in := range g.inputs() {
		if len(in.log) == 0 {
			continue
		}
		if e.unsent == nil {
			e.unsent = map[string][]*vec.Chunk{}
		}
		e.unsent[in.t.Name] = append(e.unsent[in.t.Name], in.log...)
		in.log, in.marks = nil, nil
	}
}

// dropUnsent releases the writes waiting to be sent again, counting them lost.
func (e *Engine) dropUnsent() {
	for _, cs := range e.unsent {
		for _, c := range cs {
			e.lostWrites.Add(int64(c.NumRows()))
			c.Release()
		}
	}
	e.unsent = nil
}

// resend sends the writes a recovery kept into the DML inputs of g, whose first
// barrier has passed, in their order, before any new write.
func (e *Engine) resend(ctx context.Context, g *graph) error {
	if len(e.unsent) == 0 {
		return nil
	}
	if e.replays >= maxReplays {
		n := 0
		for _, cs := range e.unsent {
			n += len(cs)
		}
		e.log.Warn("dropping the writes since the last checkpoint: recoveries followed one another without a commit", "recoveries", e.replays+1, "chunks", n)
		e.dropUnsent()
		return nil
	}
	e.replays++
	tables := make([]string, 0, len(e.unsent))
	for t := range e.unsent {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	for _, t := range tables {
		in := g.dml[t]
		if in == nil {
			continue // not rebuilt (it stays in e.unsent: dropped below)
		}
		for len(e.unsent[t]) > 0 {
			c := e.unsent[t][0]
			if ok, err := in.lock(ctx, g.dead, nil, nil); !ok {
				if err == nil {
					err = context.Canceled
				}
				return err
			}
			in.logChunk(c)
			select {
			case in.c <- executors.ChunkMessage(c): // the unsent list's reference
				e.unsent[t] = e.unsent[t][1:]
				e.resent.Add(int64(c.NumRows()))
				in.unlock()
			case <-g.dead:
				in.unlogChunk()
				in.unlock()
				return context.Canceled
			case <-ctx.Done():
				in.unlogChunk()
				in.unlock()
				return ctx.Err()
			}
		}
		delete(e.unsent, t)
	}
	e.dropUnsent() // a table that is gone
	return nil
}

// LostWrites counts the rows of writes that returned nil and that recoveries
// dropped (see maxReplays); ResentWrites the rows recoveries sent again.
func (e *Engine) LostWrites() int64 { return e.lostWrites.Load() }

// ResentWrites counts the rows of writes that recoveries sent again into the new
// graph, so that no write that returned nil is lost to a recovery.
func (e *Engine) ResentWrites() int64 { return e.resent.Load() }
