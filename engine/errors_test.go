package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// ordersTable is id (the pk), customer, amount and ts.
func ordersTable() *schema.Table {
	return &schema.Table{
		Name: "orders",
		Columns: []schema.Column{
			{Name: "id", Type: schema.Type{Kind: schema.Int64}},
			{Name: "customer", Type: schema.Type{Kind: schema.Varchar}},
			{Name: "amount", Type: schema.Type{Kind: schema.Int64}},
			{Name: "ts", Type: schema.Type{Kind: schema.Timestamp}},
		},
		PK:         []schema.KeyColumn{{Column: 0}},
		VnodeCount: 16,
	}
}

// TestPlanErrorsNameColumns: the planning errors of a view name the columns of its
// expressions (never their positions, $i), and a reference to a missing column lists
// the columns that the user can choose from: those of the table or view scanned, or
// of the projection, aggregate or join read, not the planner's pruned input (only the
// columns that the rest of the plan reads).
func TestPlanErrorsNameColumns(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	e, err := biOpen(vfs.NewMem(), mem)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.CreateTable(ctx, ordersTable(), engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	col, num, call, as := engine.Column, engine.Int, engine.Call, engine.As
	orders := func() engine.Plan { return engine.Scan("orders") }
	gt := func(x engine.Expr, v int64) engine.Expr { return call("greater", x, num(v)) }
	// big: c, id (the pk, carried) of the orders above 100.
	big := engine.Project(engine.Filter(orders(), gt(col("amount"), 100)), as(col("customer"), "c"))
	if err := e.CreateMV(ctx, "big", big, engine.MVOptions{}); err != nil {
		t.Fatal(err)
	}
	// ids: orders' id as id2, amount as a2.
	ids := func() engine.Plan { return engine.Project(orders(), as(col("id"), "id2"), as(col("amount"), "a2")) }
	residual := func(x engine.Expr) *engine.Expr { return &x }
	const all = "(orders has id, customer, amount, ts)"
	for _, c := range []struct {
		name string
		plan engine.Plan
		want string // the error, after "create materialized view bad: " or the like
	}{
		// Types.
		{"filter that is not boolean", engine.Filter(orders(), col("amount")),
			"filter amount over orders: predicate is int64, want boolean"},
		{"filter of mismatched types", engine.Filter(orders(), gt(col("customer"), 1)),
			"filter greater(customer, 1) over orders: greater(customer, 1): not implemented: function 'greater' has no kernel matching input types (utf8, int64)"},
		{"projection of mismatched types", engine.Project(orders(), as(call("add", col("customer"), num(1)), "x")),
			"column x = add(customer, 1) over orders: add(customer, 1): not implemented: function 'add' has no kernel matching input types (utf8, int64)"},
		{"day of an integer", engine.Project(orders(), as(engine.Day(col("amount")), "d")),
			"column d = day(amount) over orders: day(amount): argument amount is int64, want a timestamp"},
		{"tumble of an integer", engine.Project(orders(), as(engine.TumbleStart(col("amount"), time.Second), "w")),
			"column w = tumble_start(amount, 1000000000) over orders: tumble_start(amount, 1s): argument amount is int64, want a timestamp"},
		{"between of mismatched types", engine.Filter(orders(), engine.Between(col("customer"), num(1), num(2))),
			"filter between(customer, 1, 2) over orders: (customer BETWEEN 1 AND 2): greater_equal(customer, 1): not implemented"},
		{"join residual of mismatched types", engine.Join(orders(), ids(), []string{"id"}, []string{"id2"}, residual(call("greater", col("amount"), engine.String("x")))),
			`join residual greater(amount, "x"): greater(amount, "x"): not implemented: function 'greater' has no kernel matching input types (int64, utf8)`},
		{"join residual that is not boolean", engine.Join(orders(), ids(), []string{"id"}, []string{"id2"}, residual(col("a2"))),
			"join residual a2: predicate is int64, want boolean"},

		// Missing columns.
		{"filter over a missing column", engine.Filter(orders(), gt(col("nope"), 1)),
			`filter greater(nope, 1) over orders: no column "nope" ` + all},
		{"filter over a missing column under a projection", engine.Project(engine.Filter(orders(), gt(col("nope"), 1)), as(col("customer"), "c")),
			`filter greater(nope, 1) over orders: no column "nope" ` + all},
		{"projection of a missing column after a filter", engine.Project(engine.Filter(orders(), gt(col("amount"), 1)), as(col("nope"), "x")),
			`column x = nope over orders: no column "nope" ` + all},
		{"projection of a missing column of a view", engine.Project(engine.Scan("big"), as(col("nope"), "x")),
			`column x = nope over big: no column "nope" (big has c, id)`},
		{"filter over a missing column after a projection", engine.Filter(engine.Project(orders(), as(col("amount"), "a")), gt(col("nope"), 1)),
			`filter greater(nope, 1) over orders: no column "nope" (the projection has a, id)`},
		{"aggregate of a missing column", engine.Aggregate(orders(), []string{"customer"}, engine.Agg("sum", "nope", "s")),
			`aggregate s = sum(nope): no column "nope" ` + all},
		{"group by a missing column", engine.Aggregate(engine.Filter(orders(), gt(col("amount"), 1)), []string{"nope"}),
			`aggregate group by: no column "nope" ` + all},
		{"aggregate filter of a missing column", engine.Aggregate(orders(), []string{"customer"}, engine.Agg("count_star", "", "n").Where("nope")),
			`aggregate n = count_star() filter: no column "nope" ` + all},
		{"projection of a missing column of an aggregate", engine.Project(engine.Aggregate(orders(), []string{"customer"}, engine.Agg("sum", "amount", "s")), as(col("nope"), "x")),
			`column x = nope over the aggregate: no column "nope" (the aggregate has customer, s)`},
		{"missing left join key under a projection", engine.Project(engine.Join(orders(), ids(), []string{"nope"}, []string{"id2"}, nil), as(col("customer"), "c")),
			`join left key: no column "nope" ` + all},
		{"missing right join key under a projection", engine.Project(engine.Join(orders(), ids(), []string{"id"}, []string{"nope"}, nil), as(col("customer"), "c")),
			`join right key: no column "nope" (the projection has id2, a2)`},
		{"join residual over a missing column under a projection", engine.Project(engine.Join(orders(), ids(), []string{"id"}, []string{"id2"}, residual(gt(col("nope"), 1))), as(col("customer"), "c")),
			`join residual greater(nope, 1): no column "nope" (the join has id, customer, amount, ts, id2, a2)`},
		{"projection of a missing column of a join", engine.Project(engine.Join(orders(), ids(), []string{"id"}, []string{"id2"}, nil), as(col("nope"), "x")),
			`column x = nope over the join: no column "nope" (the join has id, customer, amount, ts, id2, a2)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := e.CreateMV(ctx, "bad", c.plan, engine.MVOptions{})
			if err == nil {
				t.Fatal("created")
			}
			msg := err.Error()
			if !strings.Contains(msg, "bad") || !strings.Contains(msg, ": "+c.want) {
				t.Errorf("error\n\t%s\nwant one naming view bad and containing\n\t%s", msg, c.want)
			}
			if strings.Contains(msg, "$") {
				t.Errorf("error %q names a column by its position", msg)
			}
		})
	}
}

// TestOpenDirectoryErrors: Open refuses a non-empty directory that holds no engine,
// naming it and writing nothing to it, and a directory that another engine has open,
// with one message naming it; an empty or missing directory gets a new engine, which
// reopens.
func TestOpenDirectoryErrors(t *testing.T) {
	ctx := context.Background()
	for _, fsName := range []string{"os", "mem"} {
		t.Run(fsName, func(t *testing.T) {
			var fs vfs.FS = vfs.Default
			base := t.TempDir()
			if fsName == "mem" {
				fs, base = vfs.NewMem(), "/x"
				if err := fs.MkdirAll(base, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			opts := engine.Options{FS: fs, BarrierInterval: -1, CacheSize: 4 << 20, MemTableSize: 1 << 20, Logger: quietLogger()}

			foreign := fs.PathJoin(base, "mine")
			if err := fs.MkdirAll(foreign, 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := fs.Create(fs.PathJoin(foreign, "thesis.tex"), vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			if e, err := engine.Open(ctx, foreign, opts); err == nil {
				e.Close()
				t.Fatal("opened an engine among the user's files")
			} else if want := "directory " + foreign + " is not empty and holds no engine (it has thesis.tex)"; !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q, want one containing %q", err, want)
			}
			if names, err := fs.List(foreign); err != nil || !slices.Equal(names, []string{"thesis.tex"}) {
				t.Fatalf("the refused directory holds %v (%v), want only thesis.tex", names, err)
			}

			dir := fs.PathJoin(base, "new", "db")
			e, err := engine.Open(ctx, dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			_, err = engine.Open(ctx, dir, opts)
			if err == nil {
				t.Fatal("opened a directory that an engine has open")
			}
			if want := "engine directory " + dir + " is in use by another engine (locked: "; !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q, want one containing %q", err, want)
			}
			if fsName == "mem" && !errors.Is(err, syscall.EAGAIN) {
				t.Errorf("error %v does not wrap the lock's EAGAIN", err)
			}
			if err := e.CreateTable(ctx, ordersTable(), engine.TableOptions{}); err != nil {
				t.Fatalf("the first engine after the refused open: %v", err)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if e, err = engine.Open(ctx, dir, opts); err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer e.Close()
			if _, err := e.Table("orders"); err != nil {
				t.Fatalf("reopened engine: %v", err)
			}
		})
	}
	// A missing directory on the OS is created.
	dir := filepath.Join(t.TempDir(), "a", "b")
	e, err := engine.Open(ctx, dir, engine.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}

// Node stores commit together only through a commit log: without one, Open refuses
// them before it creates anything.
func TestNodeStoresNeedACommitLog(t *testing.T) {
	fs := vfs.NewMem()
	_, err := engine.Open(context.Background(), "/db", engine.Options{FS: fs, NodeStores: true, BarrierInterval: -1})
	if err == nil || !strings.Contains(err.Error(), "NodeStores needs a CommitLog") {
		t.Fatalf("open with node stores and no commit log: %v", err)
	}
	if _, err := fs.Stat("/db"); err == nil {
		t.Fatal("the refused open created its directory")
	}
}

// neverControl is a Control that no test here reaches: Open refuses the options
// first.
type neverControl struct{}

func (neverControl) Open(context.Context, uint64, int, engine.ControlNode) (engine.ControlGraph, error) {
	return nil, errors.New("not reached")
}

// neverExchange is an Exchange that no test here reaches.
type neverExchange struct{}

func (neverExchange) OpenSend(context.Context, engine.ExchangeEdge) (engine.Output, error) {
	return nil, errors.New("not reached")
}

func (neverExchange) OpenRecv(context.Context, engine.ExchangeEdge) (engine.Inbound, error) {
	return nil, errors.New("not reached")
}

// Remote nodes are refused, before anything is created, without what reaches
// them and when they name a node that cannot be remote.
func TestRemoteNodesRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts engine.Options
		want string
	}{
		{"no node stores", engine.Options{Nodes: 3, RemoteNodes: []int{1}}, "remote nodes need NodeStores"},
		{"no control", engine.Options{Nodes: 3, RemoteNodes: []int{1}, NodeStores: true}, "remote nodes need a Control"},
		{"no exchange", engine.Options{Nodes: 3, RemoteNodes: []int{1}, NodeStores: true, Control: neverControl{}}, "remote nodes need an Exchange"},
		{"node 0", engine.Options{Nodes: 3, RemoteNodes: []int{0}, NodeStores: true, Control: neverControl{}, Exchange: neverExchange{}}, "node 0 cannot be remote"},
		{"out of range", engine.Options{Nodes: 3, RemoteNodes: []int{3}, NodeStores: true, Control: neverControl{}, Exchange: neverExchange{}}, "remote node 3: the engine has nodes 0 to 2"},
		{"twice", engine.Options{Nodes: 3, RemoteNodes: []int{2, 2}, NodeStores: true, Control: neverControl{}, Exchange: neverExchange{}}, "remote node 2 named twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			tc.opts.FS, tc.opts.BarrierInterval = fs, -1
			_, err := engine.Open(context.Background(), "/db", tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("open: %v, want an error saying %q", err, tc.want)
			}
			if _, err := fs.Stat("/db"); err == nil {
				t.Fatal("the refused open created its directory")
			}
		})
	}
}
