package engine_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
)

// Open an engine on a directory, create a table and a materialized view over it,
// write, wait for a checkpoint and read the view. (The README shows this example.)
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "weir-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	e, err := engine.Open(ctx, dir, engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()

	orders := &schema.Table{
		Name: "orders",
		Columns: []schema.Column{
			{Name: "id", Type: schema.Type{Kind: schema.Int64}},
			{Name: "customer", Type: schema.Type{Kind: schema.Varchar}},
			{Name: "amount", Type: schema.Type{Kind: schema.Int64}},
		},
		PK: []schema.KeyColumn{{Column: 0}},
	}
	if err := e.CreateTable(ctx, orders, engine.TableOptions{}); err != nil {
		log.Fatal(err)
	}
	// big_orders: customer and amount * 100 (in cents) of the orders above 100; the
	// pk (id) is kept automatically.
	big := engine.Project(
		engine.Filter(engine.Scan("orders"), engine.Call("greater", engine.Column("amount"), engine.Int(100))),
		engine.As(engine.Column("customer"), "customer"),
		engine.As(engine.Call("multiply", engine.Column("amount"), engine.Int(100)), "cents"),
	)
	if err := e.CreateMV(ctx, "big_orders", big, engine.MVOptions{Parallelism: 2}); err != nil {
		log.Fatal(err)
	}

	// Write a batch of orders, then change one and delete another.
	mem := memory.DefaultAllocator
	write := func(op func(context.Context, string, arrow.RecordBatch) error, ids []int64, customers []string, amounts []int64) {
		ib, cb, ab := array.NewInt64Builder(mem), array.NewStringBuilder(mem), array.NewInt64Builder(mem)
		ib.AppendValues(ids, nil)
		cb.AppendValues(customers, nil)
		ab.AppendValues(amounts, nil)
		cols := []arrow.Array{ib.NewArray(), cb.NewArray(), ab.NewArray()}
		rec := array.NewRecordBatch(orders.ArrowSchema(), cols, int64(len(ids)))
		if err := op(ctx, "orders", rec); err != nil {
			log.Fatal(err)
		}
		rec.Release()
		for _, c := range cols {
			c.Release()
		}
		ib.Release()
		cb.Release()
		ab.Release()
	}
	write(e.Insert, []int64{1, 2, 3, 4}, []string{"ada", "bob", "cy", "dee"}, []int64{50, 150, 250, 120})
	write(e.Update, []int64{1}, []string{"ada"}, []int64{500})
	write(e.Delete, []int64{3}, []string{""}, []int64{0})

	// Everything written so far is durable and visible once a checkpoint commits.
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		log.Fatal(err)
	}
	r, err := e.Scan(ctx, "big_orders")
	if err != nil {
		log.Fatal(err)
	}
	defer r.Release()
	var lines []string
	for r.Next() {
		rec := r.RecordBatch()
		customer := rec.Column(0).(*array.String)
		cents := rec.Column(1).(*array.Int64)
		id := rec.Column(2).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			lines = append(lines, fmt.Sprintf("id=%d customer=%s cents=%d", id.Value(i), customer.Value(i), cents.Value(i)))
		}
	}
	if err := r.Err(); err != nil {
		log.Fatal(err)
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// id=1 customer=ada cents=50000
	// id=2 customer=bob cents=15000
	// id=4 customer=dee cents=12000
}
