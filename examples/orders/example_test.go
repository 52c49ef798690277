package orders_test

import (
	"fmt"
	"log"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/examples/orders"
	"github.com/seed04fbb902/weir/vec"
)

// Build a chunk of orders with the generated builder and read it back through the
// generated view. (docs/design.md §3 shows the part between the README markers.)
func ExampleNewOrdersBuilder() {
	amount := decimal128.FromI64(1250) // 12.50 in decimal(12,2)
	ts := arrow.Timestamp(1_700_000_000_000_000)
	// README:begin generated
	b := orders.NewOrdersBuilder(memory.DefaultAllocator)
	defer b.Release()
	b.Append(vec.Insert, &orders.Orders{ID: 1, Customer: "ada", Amount: vec.Some(amount), PlacedAt: ts})
	b.Append(vec.Insert, &orders.Orders{ID: 2, Customer: "bob"}) // Amount NULL

	chunk := b.Build() // chunk.Record() is what engine.Insert takes
	defer chunk.Release()
	view, err := orders.NewOrdersView(chunk) // typed arrays: view.ID.Value(0)
	if err != nil {
		log.Fatal(err)
	}
	for i := range view.NumRows() {
		r := view.Row(i)
		fmt.Println(r.ID, r.Customer, r.Amount.Valid, view.Amount.IsNull(i))
	}
	// README:end

	// Output:
	// 1 ada true false
	// 2 bob false true
}
