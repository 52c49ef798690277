package commitlog

import (
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/storage"
)

// An export whose parts' objects overlap, or whose row count changes name a vnode
// none of the part's objects holds, table 0 or a table the commit drops, is refused
// before the commit point, naming the part, the table and the vnode.
func TestExportCheck(t *testing.T) {
	key := func(table uint32, vnode uint16, pk string) []byte {
		return storage.AppendKey(nil, table, vnode, []byte(pk))
	}
	// Node 1 wrote vnodes 2 to 5 of table 7, node 2 vnodes 6 to 9.
	obj := func(name string, lo, hi uint16) objstore.Object {
		return objstore.Object{Name: name, Smallest: key(7, lo, "a"), Largest: key(7, hi, "z"), Size: 1}
	}
	part := func(what string, o objstore.Object, ds ...storage.RowDelta) exportPart {
		return exportPart{what: what, objs: []objstore.Object{o}, deltas: ds}
	}
	for _, c := range []struct {
		name  string
		parts []exportPart
		drops []uint32
		want  string // "" accepts
	}{
		{"counted within its objects", []exportPart{
			part("node 1", obj("a", 2, 5), storage.RowDelta{Table: 7, Vnode: 2, Delta: 3}, storage.RowDelta{Table: 7, Vnode: 5, Delta: -1}),
			part("node 2", obj("b", 6, 9), storage.RowDelta{Table: 7, Vnode: 9, Delta: 1}),
		}, nil, ""},
		{"a vnode of another part", []exportPart{
			part("node 1", obj("a", 2, 5), storage.RowDelta{Table: 7, Vnode: 6, Delta: 1}),
			part("node 2", obj("b", 6, 9)),
		}, nil, "node 1 counted a row count change of table 7 vnode 6, which none of its objects holds"},
		{"another table", []exportPart{
			part("node 1", obj("a", 2, 5), storage.RowDelta{Table: 8, Vnode: 3, Delta: 1}),
		}, nil, "node 1 counted a row count change of table 8 vnode 3, which none of its objects holds"},
		{"table 0", []exportPart{
			part("node 1", obj("a", 2, 5), storage.RowDelta{Table: 0, Vnode: 3, Delta: 1}),
		}, nil, "node 1 counted a row count change of table 0 vnode 3, which is reserved or which the commit drops"},
		{"a dropped table", []exportPart{
			part("node 1", obj("a", 2, 5)),
			part("node 2", obj("b", 6, 9), storage.RowDelta{Table: 4, Vnode: 1, Delta: -2}),
		}, []uint32{4}, "node 2 counted a row count change of table 4 vnode 1, which is reserved or which the commit drops"},
		{"overlapping objects", []exportPart{
			part("node 1", obj("a", 2, 6)),
			part("node 2", obj("b", 6, 9)),
		}, nil, "objects a (of node 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := (&export{parts: c.parts}).check(c.drops)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("check = %v, want an error with %q", err, c.want)
			}
		})
	}
}
