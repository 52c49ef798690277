package storage_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// TestStateTableEmpty: Empty sees the rows of a table's own vnodes as its iterators do
// (unsealed, sealed, then committed), and not rows of other vnodes.
func TestStateTableEmpty(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	tab := &schema.Table{Name: "kv", Columns: []schema.Column{
		{Name: "k", Type: schema.Type{Kind: schema.Int64}},
		{Name: "v", Type: schema.Type{Kind: schema.Int64}},
	}, PK: []schema.KeyColumn{{Column: 0}}, VnodeCount: 16}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := storage.Open("db", testOptions(vfs.NewMem()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	node := s.AddNode()
	b := vec.NewChunkBuilder(mem, tab)
	if err := b.AppendRow(vec.Insert, int64(7), int64(70)); err != nil {
		t.Fatal(err)
	}
	c, err := b.Build()
	b.Release()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	vn := make([]uint16, 1)
	vec.For(tab).Vnodes(c, vn)
	others := vnode.NewBitmap(tab.VnodeCount)
	for v := range tab.VnodeCount {
		if uint16(v) != vn[0] {
			others.Add(vnode.Vnode(v))
		}
	}
	own, err := storage.NewStateTable(node, 11, tab, vnode.Full(tab.VnodeCount))
	if err != nil {
		t.Fatal(err)
	}
	other, err := storage.NewStateTable(node, 11, tab, others)
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string, st *storage.StateTable, want bool) {
		t.Helper()
		view, err := node.View()
		if err != nil {
			t.Fatal(err)
		}
		defer view.Release()
		if got, err := st.Empty(view); err != nil || got != want {
			t.Fatalf("%s: Empty %v, %v; want %v", when, got, err, want)
		}
	}
	check("new", own, true)
	if err := own.WriteExact(c); err != nil {
		t.Fatal(err)
	}
	check("written, unsealed", own, false)
	if err := own.Seal(1); err != nil {
		t.Fatal(err)
	}
	check("sealed", own, false)
	check("sealed, the other vnodes", other, true)
	if _, err := s.Checkpoint(1); err != nil {
		t.Fatal(err)
	}
	check("committed", own, false)
	check("committed, the other vnodes", other, true)
}
