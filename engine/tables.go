package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vnode"
)

// CreateTable creates table t (its name, columns, pk, distribution key and vnode
// count; a zero vnode count takes Options.VnodeCount). It returns once the table is
// committed.
func (e *Engine) CreateTable(ctx context.Context, t *schema.Table, opts TableOptions) error {
	t = cloneTable(t)
	if t.VnodeCount == 0 {
		t.VnodeCount = e.opts.VnodeCount
	}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("create table %s: %w", t.Name, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if _, ok := e.cat.objects[t.Name]; ok {
		return fmt.Errorf("create table %s: a table or materialized view of that name exists", t.Name)
	}
	if err := opts.validate(t); err != nil {
		return fmt.Errorf("create table %s: %w", t.Name, err)
	}
	p := opts.Parallelism
	if p == 0 {
		p = min(len(e.nodes), t.VnodeCount)
	}
	mapping, err := vnode.EvenSplit(t.VnodeCount, p)
	if err != nil {
		return fmt.Errorf("create table %s: parallelism %d: %w", t.Name, p, err)
	}
	o := &object{ID: e.cat.nextID, Name: t.Name, Kind: kindTable, Def: tableToJSON(t), Parallelism: p, Mapping: mapping, t: t}
	f, err := e.g.addTable(o)
	if err != nil {
		return fmt.Errorf("create table %s: %w", t.Name, err)
	}
	ids := []executors.ActorID{f.dml.id}
	for _, a := range f.actors {
		ids = append(ids, a.id)
	}
	if err := e.start(ctx, append([]*actor{f.dml}, f.actors...)); err != nil {
		return fmt.Errorf("create table %s: %w", t.Name, err)
	}
	_, err = e.round(ctx, roundSpec{mutation: executors.Add{Actors: ids}, stage: func() error {
		e.cat.nextID++
		e.cat.objects[o.Name] = o
		return e.cat.stage(e.store, o, false)
	}})
	if err != nil {
		return fmt.Errorf("create table %s: %w", t.Name, err)
	}
	e.gmu.RLock()
	if in := e.g.dml[t.Name]; in != nil {
		in.ready.Store(true)
	}
	e.gmu.RUnlock()
	return nil
}

func cloneTable(t *schema.Table) *schema.Table {
	return &schema.Table{
		Name:       t.Name,
		GoName:     t.GoName,
		Columns:    slices.Clone(t.Columns),
		PK:         slices.Clone(t.PK),
		DistKey:    slices.Clone(t.DistKey),
		VnodeCount: t.VnodeCount,
	}
}

// Table returns the schema of a table or materialized view: a copy of the catalog's,
// which the caller may change.
func (e *Engine) Table(name string) (*schema.Table, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	o, ok := e.cat.objects[name]
	if !ok {
		return nil, fmt.Errorf("no table or materialized view %q", name)
	}
	return cloneTable(o.t), nil
}

// The writes. Each one's rec stays the caller's, to release when it likes: the
// engine retains what it keeps of it. A write that returns nil has sent its rows to the table's actors: they
// are in the next checkpoint (see WaitCheckpoint), and in the one Close commits,
// unless the engine crashes first, which loses every write since the last
// checkpoint. A recovery does not lose it: it sends the writes since the last
// checkpoint again (dmllog.go), except a write sent four times with a recovery
// after each (one that fails a view each time), which it drops and LostWrites
// counts. A write cut short by a recovery returns an error and is not applied. A write during or after Close or Crash returns an error that
// is ErrClosed (errors.Is), and is not written. Nothing is acknowledged and then
// dropped by Close. A write into a materialized view is refused: views are
// read-only.

// Insert writes rows into a table; a row whose pk exists replaces it. rec must have
// the table's columns (names, Arrow types, order; no NULL in a NOT NULL column).
func (e *Engine) Insert(ctx context.Context, table string, rec arrow.RecordBatch) error {
	return e.write(ctx, table, executors.DMLInsert, rec)
}

// Upsert is Insert.
func (e *Engine) Upsert(ctx context.Context, table string, rec arrow.RecordBatch) error {
	return e.write(ctx, table, executors.DMLUpsert, rec)
}

// Update replaces the rows with rec's pks (rec has the table's columns); rows whose
// pk does not exist are ignored.
func (e *Engine) Update(ctx context.Context, table string, rec arrow.RecordBatch) error {
	return e.write(ctx, table, executors.DMLUpdate, rec)
}

// Delete deletes the rows with rec's pks; rows whose pk does not exist are ignored.
// rec has either the table's columns (only the pk columns are read) or exactly its
// pk columns, by name, in any order.
func (e *Engine) Delete(ctx context.Context, table string, rec arrow.RecordBatch) error {
	return e.write(ctx, table, executors.DMLDelete, rec)
}

func (e *Engine) write(ctx context.Context, table string, kind executors.DMLKind, rec arrow.RecordBatch) error {
	if err := e.writable(); err != nil {
		return fmt.Errorf("%s %s: %w", kind, table, err)
	}
	e.gmu.RLock()
	g := e.g
	in := g.dml[table]
	e.gmu.RUnlock()
	if in == nil || !in.ready.Load() {
		return e.noTable(kind, table)
	}
	c, err := executors.DMLChunk(in.t, kind, rec, e.mem)
	if err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	in.mu.RLock()
	defer in.mu.RUnlock()
	if err := e.writable(); err != nil {
		c.Release()
		return fmt.Errorf("%s %s: %w", kind, table, err)
	}
	select {
	case <-g.dead:
		// Torn down (a recovery, or Close): its input has room, but no actor
		// would ever read this chunk.
		c.Release()
		if e.closing.Load() {
			return fmt.Errorf("%s %s: %w", kind, table, ErrClosed)
		}
		return fmt.Errorf("%s %s: interrupted by a recovery; not written", kind, table)
	default:
	}
	dead := func() error {
		c.Release()
		if e.closing.Load() {
			return fmt.Errorf("%s %s: %w", kind, table, ErrClosed)
		}
		return fmt.Errorf("%s %s: interrupted by a recovery; not written", kind, table)
	}
	// The slot orders the input's log with its channel: the log keeps the write
	// until a checkpoint commits it, for a recovery to send again (dmllog.go).
	if err := in.lock(ctx, g.dead, nil, nil); errors.Is(err, errTornDown) {
		return dead()
	} else if err != nil {
		c.Release()
		return fmt.Errorf("%s %s: %w", kind, table, err)
	}
	defer in.unlock()
	in.logChunk(dmlWrite{c: c})
	select {
	case in.c <- executors.ChunkMessage(c):
		return nil
	case <-g.dead:
		in.unlogChunk()
		return dead()
	case <-ctx.Done():
		in.unlogChunk()
		c.Release()
		return fmt.Errorf("%s %s: %w", kind, table, ctx.Err())
	}
}

// writable is the error of a write that must not be taken: the engine is closing,
// or has failed.
func (e *Engine) writable() error {
	if e.closing.Load() {
		return ErrClosed
	}
	if err := e.broken.Load(); err != nil {
		return *err
	}
	return nil
}

// noTable is the error of a write into a name that has no DML input: a view, or no
// object at all.
func (e *Engine) noTable(kind executors.DMLKind, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return fmt.Errorf("%s %s: %w", kind, name, err)
	}
	if o, ok := e.cat.objects[name]; ok && o.Kind == kindMV {
		return fmt.Errorf("%s %s: %s is a materialized view, which is read-only; write into its upstream tables (%s)", kind, name, name, strings.Join(o.Upstreams, ", "))
	}
	return fmt.Errorf("%s %s: no such table", kind, name)
}
