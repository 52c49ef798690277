package executors

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// The epoch buffer gives back exactly the chunks it took (columns, ops, visibility), in
// order, whether they stayed in memory, all spilled, or split between the two; over
// several epochs; and it leaks no memory.
func TestEpochBufferRoundTrip(t *testing.T) {
	rng, seed := vectest.Rand(t)
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	for i := 0; i < 20; i++ {
		tab := vectest.RandomTable(rng, fmt.Sprintf("t%d", i))
		for _, budget := range []int64{1, 4096, 1 << 30} {
			buf := newEpochBuffer(tab.Name, mem, budget, t.TempDir())
			for epoch := 0; epoch < 3; epoch++ {
				var want []*vec.Chunk
				for j := 0; j < 1+rng.IntN(6); j++ {
					c := vectest.RandomChunk(rng, mem, tab, rng.IntN(200), 0.2)
					c.Retain()
					want = append(want, c)
					if err := buf.add(c); err != nil {
						t.Fatalf("seed %d: %v", seed, err)
					}
				}
				got := 0
				err := buf.drain(func(c *vec.Chunk) error {
					defer c.Release()
					if err := vectest.ChunksEqual(want[got], c); err != nil {
						return fmt.Errorf("chunk %d: %w", got, err)
					}
					got++
					return nil
				})
				if err != nil || got != len(want) {
					t.Fatalf("seed %d table %d budget %d epoch %d: %d of %d chunks back, %v", seed, i, budget, epoch, got, len(want), err)
				}
				for _, c := range want {
					c.Release()
				}
			}
			if budget == 1 && buf.spills == 0 {
				t.Fatalf("seed %d: a 1-byte budget never spilled", seed)
			}
			if budget == 1<<30 && buf.spills != 0 {
				t.Fatalf("seed %d: %d spills under a 1 GiB budget", seed, buf.spills)
			}
			if err := buf.release(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
