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
func BenchmarkCheckpoint(b *testing.B) {
	const rows = 50_000
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
		lo := int64(i) * rows
		writeBids(b, mem, st, inserts(idRange(lo, lo+rows), bidVal{Price: int64(i), Channel: "web"}))
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
}
