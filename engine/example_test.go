package engine_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// Open an engine on a directory, create a table and a materialized view over it,
// write, wait for a checkpoint and read the view. (The README shows the part between
// the README markers.)
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "weir-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// README:begin engine
	e, err := engine.Open(ctx, dir, engine.Options{}) // 2 nodes, 256 vnodes, a barrier every 100ms
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close() // a last checkpoint, then stop

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
	// big_orders: customer and amount in cents of the orders above 100 (the pk, id,
	// is kept).
	big := engine.Project(
		engine.Filter(engine.Scan("orders"), engine.Call("greater", engine.Column("amount"), engine.Int(100))),
		engine.As(engine.Column("customer"), "customer"),
		engine.As(engine.Call("multiply", engine.Column("amount"), engine.Int(100)), "cents"),
	)
	if err := e.CreateMV(ctx, "big_orders", big, engine.MVOptions{Parallelism: 2}); err != nil {
		log.Fatal(err)
	}

	// Writes take Arrow records; vec.ChunkBuilder (or a generated builder) makes
	// them from Go values.
	write := func(op func(context.Context, string, arrow.RecordBatch) error, rows ...[]any) {
		b := vec.NewChunkBuilder(memory.DefaultAllocator, orders)
		defer b.Release()
		for _, r := range rows {
			if err := b.AppendRow(vec.Insert, r...); err != nil {
				log.Fatal(err)
			}
		}
		chunk, err := b.Build()
		if err != nil {
			log.Fatal(err)
		}
		defer chunk.Release()
		if err := op(ctx, "orders", chunk.Record()); err != nil {
			log.Fatal(err)
		}
	}
	write(e.Insert, []any{1, "ada", 50}, []any{2, "bob", 150}, []any{3, "cy", 250}, []any{4, "dee", 120})
	write(e.Update, []any{1, "ada", 500}) // by pk
	write(e.Delete, []any{3, "cy", 250})  // by pk (a record of the pk columns alone will do)

	if _, err := e.WaitCheckpoint(ctx); err != nil { // durable, and visible to Scan in every view
		log.Fatal(err)
	}
	r, err := e.Scan(ctx, "big_orders") // an array.RecordReader at the committed epoch
	if err != nil {
		log.Fatal(err)
	}
	defer r.Release()
	for r.Next() {
		rec := r.RecordBatch() // customer, cents, id
		for i := range int(rec.NumRows()) {
			fmt.Println(rec.Column(2).(*array.Int64).Value(i), rec.Column(0).(*array.String).Value(i), rec.Column(1).(*array.Int64).Value(i))
		}
	}
	if err := r.Err(); err != nil {
		log.Fatal(err)
	}

	if err := e.RescheduleMV(ctx, "big_orders", 3); err != nil { // online, one Update barrier
		log.Fatal(err)
	}
	// README:end

	// Unordered output:
	// 1 ada 50000
	// 2 bob 15000
	// 4 dee 12000
}
