package storage_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
)

// BenchmarkCheckpoint commits one sealed epoch of 50,000 new bid rows per iteration on
// a real directory, the store growing as it goes (the write, and sealing it, are not
// timed): go test -run XXX -bench Checkpoint ./storage/
//
// "ascending-200k" is "ascending" with epochs of 200,000 rows, the size of a
// checkpoint of a view being backfilled (weir bench backfill's idle builds commit
// 100,000 to 500,000 keys at a time).
//
// "ascending": each epoch's ids follow the last epoch's (the pk leads with id%13, so
// a vnode's new keys come in 13 runs, each after the committed keys of its run);
// "interleaved": epoch i writes ids j*64 + i%64, each of which falls between two
// committed ids (new keys among committed ones, as a table's random inserts are;
// past 64 iterations the ids come round again, as overwrites).
func BenchmarkCheckpoint(b *testing.B) {
	for _, layout := range []string{"ascending", "interleaved", "ascending-200k"} {
		b.Run(layout, func(b *testing.B) {
			const stride = 64
			// A copy: b.Run calls this more than once, and each call must see the
			// sub-benchmark's own name.
			rows, lay := 50_000, layout
			if layout == "ascending-200k" {
				rows, lay = 200_000, "ascending"
			}
			s, err := storage.Open(b.TempDir(), storage.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			st, err := storage.NewStateTable(s.AddNode(), bidTableID, bidT, vnode.Full(bidT.VnodeCount))
			if err != nil {
				b.Fatal(err)
			}
			mem := memory.NewGoAllocator()
			keys := 0
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				ids := make([]int64, rows)
				for j := range ids {
					if lay == "ascending" {
						ids[j] = int64(i*rows + j)
					} else {
						ids[j] = int64(j*stride + i%stride)
					}
				}
				writeBids(b, mem, st, inserts(ids, bidVal{Price: int64(i), Channel: "web"}))
				if err := st.Seal(ep(i + 1)); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				cs, err := s.Checkpoint(ep(i + 1))
				if err != nil {
					b.Fatal(err)
				}
				keys += cs.Keys
			}
			b.ReportMetric(float64(keys)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}
