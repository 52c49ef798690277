package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
)

// Raw store and graph checks for the backfill control tests (backfill_control_test.go,
// package engine_test). They are exported from this test-only file, as export_test.go
// files do, so that the external tests can keep using their shared helpers.

// BackfillTestView is what a view leaves behind to look for after it is dropped: its
// table and progress table ids and its actors.
type BackfillTestView struct {
	Name           string
	ID, ProgressID uint32
	Actors         []executors.ActorID
}

// BackfillTestViewOf returns view name's ids and actors, from the catalog and the graph.
func BackfillTestViewOf(e *Engine, name string) (BackfillTestView, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	o, ok := e.cat.objects[name]
	if !ok || o.Kind != kindMV {
		return BackfillTestView{}, fmt.Errorf("no materialized view %s in the catalog", name)
	}
	v := BackfillTestView{Name: name, ID: o.ID, ProgressID: o.ProgressID}
	f, ok := e.g.frags[name]
	if !ok {
		return BackfillTestView{}, fmt.Errorf("materialized view %s has no fragment", name)
	}
	for _, a := range f.actors {
		v.Actors = append(v.Actors, a.id)
	}
	return v, nil
}

// committedKeys counts the committed pebble keys of table id: the key range
// [id, id+1) of 4-byte big-endian table ids.
func committedKeys(e *Engine, id uint32) (int, error) {
	lo := binary.BigEndian.AppendUint32(nil, id)
	hi := binary.BigEndian.AppendUint32(nil, id+1)
	it, err := e.store.DB().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n, errors.Join(it.Error(), it.Close())
}

// BackfillTestStored describes what the committed store holds of view v: keys and row
// counts under its table id and its progress table id.
func BackfillTestStored(e *Engine, v BackfillTestView) (rowKeys, progressKeys int, rowCount, progressCount int64, err error) {
	if rowKeys, err = committedKeys(e, v.ID); err != nil {
		return
	}
	if progressKeys, err = committedKeys(e, v.ProgressID); err != nil {
		return
	}
	if rowCount, err = e.store.TableRowCount(v.ID); err != nil {
		return
	}
	progressCount, err = e.store.TableRowCount(v.ProgressID)
	return
}

// BackfillTestLeftovers lists what view v, dropped, left behind: committed keys or row
// counts under its ids, its actors in the graph or its exchange channels, its fragment,
// a catalog entry with its ids, an upstream fragment still listing it downstream.
func BackfillTestLeftovers(e *Engine, v BackfillTestView) []string {
	var out []string
	rowKeys, progressKeys, rowCount, progressCount, err := BackfillTestStored(e, v)
	if err != nil {
		return []string{fmt.Sprintf("reading the store: %v", err)}
	}
	if rowKeys != 0 || rowCount != 0 {
		out = append(out, fmt.Sprintf("table id %d: %d committed keys, row count %d", v.ID, rowKeys, rowCount))
	}
	if progressKeys != 0 || progressCount != 0 {
		out = append(out, fmt.Sprintf("progress table id %d: %d committed keys, row count %d", v.ProgressID, progressKeys, progressCount))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range v.Actors {
		if _, ok := e.g.actors[id]; ok {
			out = append(out, fmt.Sprintf("actor %d is still in the graph", id))
		}
	}
	for _, n := range e.g.nodes {
		n.lmu.Lock()
		for k := range n.links {
			if slices.Contains(v.Actors, k.from) || slices.Contains(v.Actors, k.to) {
				out = append(out, fmt.Sprintf("edge %d -> %d is still on node %d", k.from, k.to, n.node))
			}
		}
		n.lmu.Unlock()
	}
	if f, ok := e.g.frags[v.Name]; ok {
		for _, a := range f.actors {
			if slices.Contains(v.Actors, a.id) {
				out = append(out, fmt.Sprintf("fragment %s still has actor %d", v.Name, a.id))
			}
		}
	}
	for _, f := range e.g.frags {
		for _, d := range f.downstream {
			for _, a := range d.actors {
				if slices.Contains(v.Actors, a.id) {
					out = append(out, fmt.Sprintf("%s still lists the dropped fragment of %s downstream", f.obj.Name, v.Name))
				}
			}
		}
	}
	for _, o := range e.cat.objects {
		if o.ID == v.ID || o.ProgressID == v.ProgressID || o.ID == v.ProgressID {
			out = append(out, fmt.Sprintf("catalog object %s has the dropped ids %d/%d", o.Name, o.ID, o.ProgressID))
		}
	}
	return out
}

// The raw checks see what they should: a table's committed rows and row counts, and
// nothing under an id that was never used.
func TestBackfillRawStoreChecks(t *testing.T) {
	e := rawTestEngine(t)
	defer e.Close()
	e.mu.Lock()
	o := e.cat.objects["t"]
	next := e.cat.nextID
	e.mu.Unlock()
	n, err := committedKeys(e, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := e.store.TableRowCount(o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || rows != 3 {
		t.Fatalf("table t (id %d): %d committed keys, row count %d; want 3 and 3", o.ID, n, rows)
	}
	if n, err := committedKeys(e, next); err != nil || n != 0 {
		t.Fatalf("unused id %d: %d keys (err %v)", next, n, err)
	}
}

// rawTestEngine opens an in-memory engine with table t (k int64 pk, v int64) holding
// three committed rows.
func rawTestEngine(t *testing.T) *Engine {
	t.Helper()
	ctx := context.Background()
	e, err := Open(ctx, "db", Options{FS: vfs.NewMem(), BarrierInterval: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tab := &schema.Table{
		Name:       "t",
		Columns:    []schema.Column{{Name: "k", Type: schema.Type{Kind: schema.Int64}}, {Name: "v", Type: schema.Type{Kind: schema.Int64}}},
		PK:         []schema.KeyColumn{{Column: 0}},
		VnodeCount: 4,
	}
	if err := e.CreateTable(ctx, tab, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	kb, vb := array.NewInt64Builder(memory.DefaultAllocator), array.NewInt64Builder(memory.DefaultAllocator)
	kb.AppendValues([]int64{1, 2, 3}, nil)
	vb.AppendValues([]int64{10, 20, 30}, nil)
	ka, va := kb.NewArray(), vb.NewArray()
	rec := array.NewRecordBatch(tab.ArrowSchema(), []arrow.Array{ka, va}, 3)
	ka.Release()
	va.Release()
	kb.Release()
	vb.Release()
	err = e.Insert(ctx, "t", rec)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}
