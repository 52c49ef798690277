package vec_test

// Bad input (docs/testing.md, layer 5), row "a chunk whose schema does not match the
// table": vec.CheckChunk, the check every state table write makes before writing
// anything (storage.StateTable.Write; executors check their inputs the same way), names
// the table and the column. That nothing is written is shown by storage
// TestStateTableWriteErrors, executors TestMaterializeErrors and engine
// TestBadInputRecordShape; the other rows are mapped in engine/badinput_test.go.

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

func TestBadInputCheckChunk(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(vectest.Seed(t))
	tab := &schema.Table{
		Name: "orders",
		Columns: []schema.Column{
			{Name: "id", Type: schema.Type{Kind: schema.Int64}},
			{Name: "price", Type: schema.Type{Kind: schema.Decimal, Precision: 10, Scale: 2}},
			{Name: "ts", Type: schema.Type{Kind: schema.Timestamp}},
			{Name: "note", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
		},
		PK:         []schema.KeyColumn{{Column: 0}},
		VnodeCount: 16,
	}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	const n = 20
	// arr is n random values of typ, NULL with probability nullFrac.
	arr := func(typ schema.Type, nullFrac float64) arrow.Array {
		return vectest.RandomArray(rng, mem, typ, n, nullFrac, nil)
	}
	good := func() []arrow.Array {
		var out []arrow.Array
		for _, c := range tab.Columns {
			out = append(out, arr(c.Type, 0))
		}
		return out
	}
	// with is the good columns with column i replaced by a (i == len: a added; a nil:
	// column i dropped).
	with := func(i int, a arrow.Array) []arrow.Array {
		cols := good()
		switch {
		case i == len(cols):
			return append(cols, a)
		case a == nil:
			cols[i].Release()
			return append(cols[:i], cols[i+1:]...)
		}
		cols[i].Release()
		cols[i] = a
		return cols
	}
	typ := func(k schema.Kind) schema.Type { return schema.Type{Kind: k} }
	for _, c := range []struct {
		name string
		cols func() []arrow.Array
		want string // "": the chunk matches
	}{
		{"matching", good, ""},
		{"NULLs in a nullable column", func() []arrow.Array { return with(3, arr(typ(schema.Varchar), 0.5)) }, ""},
		{"a column missing", func() []arrow.Array { return with(3, nil) }, "table orders: column note: missing (the chunk has 3 columns, the table 4)"},
		{"a column too many", func() []arrow.Array { return with(4, arr(typ(schema.Int64), 0)) }, `table orders: column "x": not in the table (the chunk has 5 columns, the table 4)`},
		{"pk of a narrower type", func() []arrow.Array { return with(0, arr(typ(schema.Int32), 0)) }, "table orders: column id: chunk has type int32, want int64"},
		{"decimal of another precision", func() []arrow.Array {
			return with(1, arr(schema.Type{Kind: schema.Decimal, Precision: 12, Scale: 2}, 0))
		}, "table orders: column price: chunk has type decimal(12, 2), want decimal(10, 2)"},
		{"decimal of another scale", func() []arrow.Array {
			return with(1, arr(schema.Type{Kind: schema.Decimal, Precision: 10, Scale: 3}, 0))
		}, "table orders: column price: chunk has type decimal(10, 3)"},
		{"timestamp with a time zone", func() []arrow.Array { return with(2, arr(typ(schema.Timestamptz), 0)) }, "table orders: column ts: chunk has type timestamp[us, tz=UTC], want timestamp[us]"},
		{"bytes for a varchar", func() []arrow.Array { return with(3, arr(typ(schema.Bytea), 0)) }, "table orders: column note: chunk has type binary, want utf8"},
		{"NULL in the pk", func() []arrow.Array { return with(0, arr(typ(schema.Int64), 1)) }, "table orders: column id: 20 NULLs in a NOT NULL column"},
		{"NULLs in a NOT NULL column", func() []arrow.Array { return with(2, arr(typ(schema.Timestamp), 1)) }, "table orders: column ts: 20 NULLs in a NOT NULL column"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cols := c.cols()
			var fields []arrow.Field
			for i, a := range cols {
				name := "x"
				if i < len(tab.Columns) {
					name = tab.Columns[i].Name
				}
				fields = append(fields, arrow.Field{Name: name, Type: a.DataType(), Nullable: true})
			}
			rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, n)
			for _, a := range cols {
				a.Release()
			}
			ch := vectest.ChunkOf(mem, rec, vectest.RandomOps(rng, n), nil)
			rec.Release()
			defer ch.Release()
			err := vec.CheckChunk(tab, ch)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("a matching chunk: %v", err)
			case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}
