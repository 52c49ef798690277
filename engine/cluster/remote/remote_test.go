package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// orders is the tests' table.
var orders = &schema.Table{
	Name: "orders",
	Columns: []schema.Column{
		{Name: "id", Type: schema.Type{Kind: schema.Int64}},
		{Name: "customer", Type: schema.Type{Kind: schema.Varchar}},
		{Name: "amount", Type: schema.Type{Kind: schema.Int64}, Nullable: true},
	},
	PK: []schema.KeyColumn{{Column: 0}},
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// serveEngine serves e on 127.0.0.1 until the test ends and returns the address.
func serveEngine(t *testing.T, e engine.DB, mem memory.Allocator) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := NewFlightServer(NewServer(e, mem))
	fs.InitListener(lis)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = fs.Serve()
	}()
	t.Cleanup(func() {
		fs.Shutdown()
		<-done
	})
	return lis.Addr().String()
}

func dialT(t *testing.T, addr string, mem memory.Allocator) *Client {
	t.Helper()
	c, err := Dial(testCtx(t), addr, mem)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openEngine opens an engine in a new directory, closed when the test ends.
func openEngine(t *testing.T) *engine.Engine {
	t.Helper()
	e, err := engine.Open(testCtx(t), t.TempDir(), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// servedEngine is a new engine served in this process and a client of it.
func servedEngine(t *testing.T) (*engine.Engine, *Client) {
	t.Helper()
	e := openEngine(t)
	return e, dialT(t, serveEngine(t, e, memory.NewGoAllocator()), nil)
}

// write applies op to rows of orders (nil amounts are NULL).
func write(ctx context.Context, op func(context.Context, string, arrow.RecordBatch) error, rows ...[]any) error {
	b := vec.NewChunkBuilder(memory.DefaultAllocator, orders)
	defer b.Release()
	for _, r := range rows {
		if err := b.AppendRow(vec.Insert, r...); err != nil {
			return err
		}
	}
	chunk, err := b.Build()
	if err != nil {
		return err
	}
	defer chunk.Release()
	return op(ctx, "orders", chunk.Record())
}

// scanText is every row of name as text, sorted.
func scanText(ctx context.Context, db engine.DB, name string) ([]string, error) {
	r, err := db.Scan(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Release()
	var out []string
	for r.Next() {
		rec := r.RecordBatch()
		for i := range int(rec.NumRows()) {
			var row []string
			for c := range int(rec.NumCols()) {
				row = append(row, rec.Column(c).ValueStr(i))
			}
			out = append(out, strings.Join(row, " "))
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// program is a program written against engine.DB: it runs unchanged on an embedded
// engine and on a remote one, and returns what it read.
func program(ctx context.Context, db engine.DB) (map[string][]string, error) {
	if err := db.CreateTable(ctx, orders, engine.TableOptions{Parallelism: 2}); err != nil {
		return nil, err
	}
	if err := write(ctx, db.Insert, []any{1, "ada", 50}, []any{2, "bob", 150}, []any{3, "cy", nil}, []any{4, "ada", 120}); err != nil {
		return nil, err
	}
	big := engine.Project(engine.Filter(engine.Scan("orders"), engine.Call("greater", engine.Column("amount"), engine.Int(100))),
		engine.As(engine.Column("customer"), "customer"), engine.As(engine.Column("amount"), "amount"))
	if err := db.CreateMV(ctx, "big", big, engine.MVOptions{Parallelism: 2}); err != nil {
		return nil, err
	}
	byCustomer := engine.Aggregate(engine.Scan("orders"), []string{"customer"}, engine.Agg("count_star", "", "n"), engine.Agg("sum", "amount", "total"))
	if err := db.CreateMV(ctx, "by_customer", byCustomer, engine.MVOptions{}); err != nil {
		return nil, err
	}
	if err := write(ctx, db.Update, []any{1, "ada", 500}); err != nil {
		return nil, err
	}
	if err := write(ctx, db.Upsert, []any{5, "dee", 101}); err != nil {
		return nil, err
	}
	if err := write(ctx, db.Delete, []any{2, "bob", 150}); err != nil {
		return nil, err
	}
	if err := db.RescheduleMV(ctx, "big", 3); err != nil {
		return nil, err
	}
	// The controls: each rides on a barrier; the views are done, so they change no
	// rows, and a bad one fails the same way on both.
	for _, f := range []func() error{
		func() error { return db.PauseMV(ctx, "by_customer") },
		func() error { return db.SetRateLimit(ctx, "by_customer", engine.RowsPerSecond(10)) },
		func() error { return db.SetRateLimit(ctx, "by_customer", nil) },
		func() error { return db.ResumeMV(ctx, "by_customer") },
		func() error { return db.Pause(ctx) },
		func() error { return db.Resume(ctx) },
	} {
		if err := f(); err != nil {
			return nil, err
		}
	}
	if err := db.SetRateLimit(ctx, "by_customer", engine.RowsPerSecond(-1)); err == nil {
		return nil, errors.New("a negative rate limit was accepted")
	}
	if _, err := db.WaitCheckpoint(ctx); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, name := range []string{"orders", "big", "by_customer"} {
		rows, err := scanText(ctx, db, name)
		if err != nil {
			return nil, err
		}
		out[name] = rows
	}
	if err := db.DropMV(ctx, "big"); err != nil {
		return nil, err
	}
	if _, err := db.Scan(ctx, "big"); err == nil {
		return nil, errors.New("scan of a dropped view succeeded")
	}
	return out, nil
}

// The same program gives the same results on an embedded engine and, through a
// Client, on an engine served in this process; scanned and written records leak
// nothing on either side.
func TestOneAPI(t *testing.T) {
	ctx := testCtx(t)
	want, err := program(ctx, openEngine(t))
	if err != nil {
		t.Fatalf("embedded: %v", err)
	}

	served := openEngine(t)
	serverMem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	clientMem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	c := dialT(t, serveEngine(t, served, serverMem), clientMem)
	got, err := program(ctx, c)
	if err != nil {
		t.Fatalf("remote: %v", err)
	}
	for name, rows := range want {
		if !slices.Equal(got[name], rows) {
			t.Errorf("%s: remote %v, embedded %v", name, got[name], rows)
		}
	}
	if len(want["by_customer"]) == 0 {
		t.Fatal("the program read nothing")
	}
	clientMem.AssertSize(t, 0)
	serverMem.AssertSize(t, 0)
}

// A remote engine's errors keep their text and name the server; a closed client and
// a server that is gone are told apart.
func TestErrors(t *testing.T) {
	ctx := testCtx(t)
	e := openEngine(t)
	addr := serveEngine(t, e, memory.NewGoAllocator())
	c := dialT(t, addr, nil)
	if err := c.CreateTable(ctx, orders, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		what string
		err  error
		want string
	}{
		{"duplicate table", c.CreateTable(ctx, orders, engine.TableOptions{}), "create table orders: a table or materialized view of that name exists"},
		{"write to no table", func() error {
			b := vec.NewChunkBuilder(memory.DefaultAllocator, orders)
			defer b.Release()
			_ = b.AppendRow(vec.Insert, 1, "a", 2)
			ch, _ := b.Build()
			defer ch.Release()
			return c.Insert(ctx, "nope", ch.Record())
		}(), "nope"},
		{"scan of no view", func() error { _, err := c.Scan(ctx, "nope"); return err }(), "nope"},
		{"view over no table", c.CreateMV(ctx, "v", engine.Scan("nope"), engine.MVOptions{}), "nope"},
		{"bad parallelism", c.RescheduleMV(ctx, "v", 2), "v"},
	}
	for _, tc := range cases {
		if tc.err == nil || !strings.Contains(tc.err.Error(), "remote "+addr) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s and %q", tc.what, tc.err, addr, tc.want)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitCheckpoint(ctx); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	// An engine that is closing refuses with ErrClosed through the server.
	c2 := dialT(t, addr, nil)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, c2.Insert, []any{9, "z", 1}); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("write to a closed engine: %v, want ErrClosed", err)
	}
	// Nobody at an address.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := lis.Addr().String()
	lis.Close()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := Dial(dctx, gone, nil); err == nil || !strings.Contains(err.Error(), gone) {
		t.Errorf("dial of nobody: %v, want an error naming %s", err, gone)
	} else {
		t.Logf("dial of nobody: %v", err)
	}
}

// FuzzDecodeRequest: whatever a client sends as an action body, a write command or
// a ticket decodes to a request or an error, and its table and plan decode the same
// way, never a panic.
func FuzzDecodeRequest(f *testing.F) {
	tj, _ := engine.MarshalTable(orders)
	pj, _ := engine.MarshalPlan(engine.Aggregate(engine.Scan("orders"), []string{"customer"}, engine.Agg("count_star", "", "n")))
	for _, r := range []request{{Table: tj}, {Name: "v", Plan: pj, MVOpts: engine.MVOptions{Parallelism: 2}}, {Name: "orders", Op: "insert"}, {Name: "v", Parallelism: 3}} {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte(`{"plan":{"kind":"join","inputs":[{"kind":"scan"}]}}`))
	f.Add([]byte(`{"table":{"name":"t","table":{"columns":[{"name":"a","type":"decimal(99,2)"}],"pk":[{"column":7}]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRequest("fuzz", data)
		if err != nil {
			return
		}
		_ = r.checkOp()
		if tab, err := engine.UnmarshalTable(r.Table); err == nil {
			if _, err := engine.MarshalTable(tab); err != nil {
				t.Fatalf("a decoded table does not encode: %v", err)
			}
		}
		if p, err := engine.UnmarshalPlan(r.Plan); err == nil {
			if _, err := engine.MarshalPlan(p); err != nil {
				t.Fatalf("a decoded plan does not encode: %v", err)
			}
		}
	})
}

// Progress over the wire is the served engine's: a view created paused in the
// background reports itself paused and not done, with its vnodes; resumed, it gets
// done.
func TestProgress(t *testing.T) {
	ctx := testCtx(t)
	e, c := servedEngine(t)
	if err := c.CreateTable(ctx, orders, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	var rows [][]any
	for i := range 500 {
		rows = append(rows, []any{i, fmt.Sprint("c", i%7), i})
	}
	if err := write(ctx, c.Insert, rows...); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateMV(ctx, "all", engine.Scan("orders"), engine.MVOptions{Paused: true, Background: true}); err != nil {
		t.Fatal(err)
	}
	ps, err := c.Progress(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Name != "all" || !ps[0].Paused || ps[0].Done || ps[0].VnodesTotal != 256 {
		t.Fatalf("progress of a paused view: %+v", ps)
	}
	vs, err := c.VnodeProgress(ctx, "all")
	if err != nil {
		t.Fatal(err)
	}
	local, err := e.VnodeProgress("all")
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 256 || len(vs) != len(local) || vs[0].Upstream != "orders" || vs[0].State != local[0].State {
		t.Fatalf("%d vnodes over the wire (first %+v), %d in the engine (first %+v)", len(vs), vs[0], len(local), local[0])
	}
	if _, err := c.VnodeProgress(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("progress per vnode of no view: %v", err)
	}
	if err := c.ResumeMV(ctx, "all"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		ps, err := c.Progress(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ps[0].Done {
			if ps[0].RowsConsumed != 500 || ps[0].Paused {
				t.Fatalf("done: %+v", ps[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done after a minute: %+v", ps[0])
		}
	}
}

// A write of 300,000 rows (about 10 MiB, over grpc's default 4 MiB message) goes
// through whole, and its rows scan back.
func TestBigWrite(t *testing.T) {
	ctx := testCtx(t)
	_, c := servedEngine(t)
	if err := c.CreateTable(ctx, orders, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	rows := make([][]any, 300_000)
	for i := range rows {
		rows[i] = []any{i, "a customer's name", i}
	}
	if err := write(ctx, c.Insert, rows...); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := scanText(ctx, c, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d rows scanned back, want %d", len(got), len(rows))
	}
}
