package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/seed04fbb902/weir/schema"
)

// catalogSeeds returns the catalog entries of an engine with a table and two views
// (a filter and an aggregate over a join).
func catalogSeeds(tb testing.TB) map[string][]byte {
	ctx := context.Background()
	e, err := Open(ctx, "db", Options{FS: vfs.NewMem(), BarrierInterval: -1, VnodeCount: 16})
	if err != nil {
		tb.Fatal(err)
	}
	defer e.Close()
	t := &schema.Table{Name: "t", Columns: []schema.Column{
		{Name: "k", Type: schema.Type{Kind: schema.Int64}},
		{Name: "v", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
	}, PK: []schema.KeyColumn{{Column: 0, Desc: true}}, VnodeCount: 8}
	if err := e.CreateTable(ctx, t, TableOptions{Parallelism: 2}); err != nil {
		tb.Fatal(err)
	}
	if err := e.CreateMV(ctx, "f", Filter(Scan("t"), Call("greater", Column("k"), Int(3))), MVOptions{}); err != nil {
		tb.Fatal(err)
	}
	f2 := Project(Scan("f"), As(Column("k"), "k2"), As(Column("v"), "v2"))
	j := Aggregate(Join(Scan("t"), f2, []string{"k"}, []string{"k2"}, nil), []string{"v"}, Agg("count_star", "", "n"))
	if err := e.CreateMV(ctx, "a", j, MVOptions{Parallelism: 3}); err != nil {
		tb.Fatal(err)
	}
	cat, err := e.store.Catalog()
	if err != nil {
		tb.Fatal(err)
	}
	return cat
}

// FuzzDecodeObject: a catalog entry either decodes into an object that encodes and
// decodes again to the same bytes, or is an error naming the entry; it never panics.
func FuzzDecodeObject(f *testing.F) {
	for _, v := range catalogSeeds(f) {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := decodeObject("k", data)
		if err != nil {
			return
		}
		enc, err := o.encode()
		if err != nil {
			t.Fatalf("encode a decoded entry: %v", err)
		}
		o2, err := decodeObject("k", enc)
		if err != nil {
			t.Fatalf("decode %s: %v", enc, err)
		}
		enc2, err := o2.encode()
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("not stable: %s then %s (%v)", enc, enc2, err)
		}
	})
}
