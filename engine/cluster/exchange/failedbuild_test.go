package exchange

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
)

// refusingControl is an engine.Control of plain calls whose node 1 refuses every
// build spec while armed.
type refusingControl struct{ armed atomic.Bool }

func (c *refusingControl) Open(_ context.Context, _ uint64, _ int, node engine.ControlNode) (engine.ControlGraph, error) {
	return &refusingGraph{c: c, node: node}, nil
}

type refusingGraph struct {
	c    *refusingControl
	node engine.ControlNode
}

func (g *refusingGraph) Build(ctx context.Context, node int, spec []byte) error {
	if node == 1 && g.c.armed.Load() {
		return errors.New("node 1 refuses the spec")
	}
	return g.node.Build(ctx, node, spec)
}

func (g *refusingGraph) Inject(ctx context.Context, node int, b *executors.Barrier) error {
	return g.node.Inject(ctx, node, b)
}

func (g *refusingGraph) Report(_ context.Context, _ int, r engine.ControlReport) error {
	g.node.Deliver(r)
	return nil
}

func (g *refusingGraph) Call(ctx context.Context, node int, req []byte) ([]byte, error) {
	return g.node.Call(ctx, node, req)
}

func (g *refusingGraph) Close() {}

// A table whose build node 1 refuses, after node 0 built its DML actor (whose
// dispatcher has sending sides of Flight edges into nodes 1 and 2, never opened), is
// not created, and the drop of what node 0 built returns at once: a sending side that
// never sent ends with its dropped actor instead of waiting for a receiver that will
// never expect it. The same table is then created whole and written over Flight.
func TestMeshFailedBuildDrops(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	mesh := newMesh(t, mem)
	c := &refusingControl{}
	e, err := engine.Open(testCtx(t), filepath.Join(t.TempDir(), "e"), engine.Options{BarrierInterval: -1, Nodes: 3, Mem: mem, Exchange: mesh, Control: c})
	if err != nil {
		t.Fatal(err)
	}
	hung := false
	defer func() {
		if !hung { // a hung engine holds its lock: its Close would hang too
			e.Close()
		}
	}()
	c.armed.Store(true)
	ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.CreateTable(ctx, kv, engine.TableOptions{Parallelism: 3}) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "node 1 refuses") {
			t.Fatalf("create kv with node 1 refusing: %v, want the refusal", err)
		}
	case <-time.After(20 * time.Second):
		hung = true
		t.Fatal("create kv hangs after node 1 refused its spec")
	}
	c.armed.Store(false)
	if err := e.CreateTable(ctx, kv, engine.TableOptions{Parallelism: 3}); err != nil {
		t.Fatal(err)
	}
	if err := writeKV(ctx, e, e.Insert, [][]any{{1, "a", 10}, {2, "b", 20}, {3, "c", 30}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if got := scanRows(t, e, "kv"); len(got) != 3 {
		t.Fatalf("kv holds %v, want 3 rows", got)
	}
	if mesh.Opened() == 0 {
		t.Fatal("no Flight edge was opened")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	mem.AssertSize(t, 0)
}
