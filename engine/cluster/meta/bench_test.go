package meta_test

import (
	"fmt"
	"testing"

	"github.com/seed04fbb902/weir/engine/cluster/meta"
)

// BenchmarkCommit measures one fenced commit on the test server (fsync on): the
// version update, the delta row, two objects, four row deltas and a 1 KiB catalog,
// and the notification, in one transaction.
func BenchmarkCommit(b *testing.B) {
	ctx := testContext(b)
	s, _ := newStore(b)
	l := acquire(b, s, "bench")
	catalog := make([]byte, 1024)
	c := meta.Checkpoint{
		Generation: 1,
		RowDeltas:  []meta.RowDelta{{Table: 1, Vnode: 0, Delta: 5}, {Table: 1, Vnode: 1, Delta: -2}, {Table: 2, Vnode: 0, Delta: 7}, {Table: 2, Vnode: 9, Delta: 1}},
		Catalog:    catalog,
	}
	b.ResetTimer()
	for i := range b.N {
		c.Epoch, c.Seq = uint64(i+1), uint64(i)
		c.Objects = []meta.Object{
			{Name: fmt.Sprintf("e%d-n1-i1-0.sst", i+1), Smallest: []byte{0, 0, 0, 1}, Largest: []byte{0, 0, 0, 1, 0xff}, Size: 1 << 20},
			{Name: fmt.Sprintf("e%d-n2-i1-0.sst", i+1), Smallest: []byte{0, 0, 0, 2}, Largest: []byte{0, 0, 0, 2, 0xff}, Size: 1 << 20},
		}
		if _, err := s.Commit(ctx, l, c); err != nil {
			b.Fatal(err)
		}
	}
}
