package storage_test

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// TestStateTableWriteExact writes the same seeded exact changelogs (inserts of
// absent keys, deletes, updates in place, updates that move a row to an absent key,
// a key inserted and deleted within a chunk, invisible rows of any op) into one table
// with WriteExact and into another with Write, sealing every epoch and
// checkpointing at random ones (ingested in half the seeds): after every checkpoint
// and a reopen both hold the same rows, their per-vnode row counts are equal, and the
// totals are the model's.
func TestStateTableWriteExact(t *testing.T) {
	base := vectest.Seed(t)
	for i := range scale(6, 30) {
		seed := base + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed=%d", seed)
			runWriteExact(t, seed)
		})
	}
}

func runWriteExact(t *testing.T, seed uint64) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(seed)
	tab := &schema.Table{Name: "kv", Columns: []schema.Column{
		{Name: "k", Type: schema.Type{Kind: schema.Int64}},
		{Name: "v", Type: schema.Type{Kind: schema.Int64}},
	}, PK: []schema.KeyColumn{{Column: 0}}, VnodeCount: 16}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	const exactID, probedID = 11, 12
	fs := vfs.NewMem()
	s, err := storage.Open("db", seedOptions(fs, seed))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	node := s.AddNode()
	full := vnode.Full(tab.VnodeCount)
	exact, err := storage.NewStateTable(node, exactID, tab, full)
	if err != nil {
		t.Fatal(err)
	}
	probed, err := storage.NewStateTable(node, probedID, tab, full)
	if err != nil {
		t.Fatal(err)
	}
	live := map[int64]int64{} // the model: key -> value
	const domain = 120
	absent := func() (int64, bool) {
		for range 50 {
			if k := rng.Int64N(domain); func() bool { _, ok := live[k]; return !ok }() {
				return k, true
			}
		}
		return 0, false
	}
	present := func() (int64, bool) {
		for range 200 {
			if k := rng.Int64N(domain); func() bool { _, ok := live[k]; return ok }() {
				return k, true
			}
		}
		return 0, false
	}
	type row struct {
		op      vec.Op
		k, v    int64
		visible bool
	}
	chunk := func() *vec.Chunk {
		var rows []row
		for range 1 + rng.IntN(24) {
			v := rng.Int64N(1000)
			switch rng.IntN(7) {
			case 0, 1:
				if k, ok := absent(); ok {
					rows = append(rows, row{vec.Insert, k, v, true})
					live[k] = v
				}
			case 2:
				if k, ok := present(); ok {
					rows = append(rows, row{vec.Delete, k, live[k], true})
					delete(live, k)
				}
			case 3:
				if k, ok := present(); ok {
					rows = append(rows, row{vec.UpdateDelete, k, live[k], true}, row{vec.UpdateInsert, k, v, true})
					live[k] = v
				}
			case 4: // a move: the old key deleted, an absent one inserted
				k, ok1 := present()
				k2, ok2 := absent()
				if ok1 && ok2 {
					rows = append(rows, row{vec.UpdateDelete, k, live[k], true}, row{vec.UpdateInsert, k2, v, true})
					delete(live, k)
					live[k2] = v
				}
			case 5: // inserted and deleted again within the chunk
				if k, ok := absent(); ok {
					rows = append(rows, row{vec.Insert, k, v, true}, row{vec.Delete, k, v, true})
				}
			default: // an invisible row of any op and key
				rows = append(rows, row{vec.Op(rng.IntN(4)), rng.Int64N(domain), v, false})
			}
		}
		b := vec.NewChunkBuilder(mem, tab)
		defer b.Release()
		ops := make([]vec.Op, len(rows))
		vis := make([]bool, len(rows))
		for i, r := range rows {
			if err := b.AppendRow(vec.Insert, r.k, r.v); err != nil {
				t.Fatal(err)
			}
			ops[i], vis[i] = r.op, r.visible
		}
		c, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		return vectest.ChunkOf(mem, c.Record(), ops, vis)
	}
	committedLen := 0 // the model's rows at the last checkpoint
	compare := func(s *storage.Store, when string) {
		t.Helper()
		for v := range tab.VnodeCount {
			a, err := s.RowCount(exactID, uint16(v))
			if err != nil {
				t.Fatal(err)
			}
			b, err := s.RowCount(probedID, uint16(v))
			if err != nil {
				t.Fatal(err)
			}
			if a != b {
				t.Fatalf("%s: vnode %d counts %d rows written exactly, %d probed", when, v, a, b)
			}
		}
		for _, id := range []uint32{exactID, probedID} {
			n, err := s.TableRowCount(id)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(committedLen) {
				t.Fatalf("%s: table %d counts %d rows, the model %d", when, id, n, committedLen)
			}
		}
	}
	epochs := 30
	for i := 1; i <= epochs; i++ {
		for range 1 + rng.IntN(3) {
			c := chunk()
			if err := exact.WriteExact(c); err != nil {
				t.Fatal(err)
			}
			if err := probed.Write(c); err != nil {
				t.Fatal(err)
			}
			c.Release()
		}
		for _, st := range []*storage.StateTable{exact, probed} {
			if err := st.Seal(ep(i)); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(2) == 0 || i == epochs {
			mustCheckpoint(t, s, ep(i))
			committedLen = len(live)
			compare(s, fmt.Sprintf("checkpoint %d", i))
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = storage.Open("db", seedOptions(fs, seed)); err != nil {
		t.Fatal(err)
	}
	compare(s, "reopened")
}
