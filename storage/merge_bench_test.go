package storage

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

// BenchmarkMergeRuns merges the runs of a checkpoint that commits several epochs of
// a join's state at once (spaced checkpoints while a backfill runs): 8 epochs, each
// with writes in every one of 256 vnodes under keys that lead with a random 8-byte
// join key and a 4-byte row id, so that every vnode's pieces overlap and take the
// heap merge. 204,800 entries in all; ns/entry is the cost per write:
//
//	go test ./storage -run XXX -bench MergeRuns
func BenchmarkMergeRuns(b *testing.B) {
	const epochs, vnodes, perVnode = 8, 256, 100
	rng := rand.New(rand.NewPCG(1, 2))
	var rs []*run
	n := 0
	for e := range epochs {
		var es []entry
		for v := range vnodes {
			keys := make([][]byte, perVnode)
			for i := range keys {
				pk := binary.BigEndian.AppendUint64(nil, uint64(rng.IntN(1<<20))|1<<63)
				pk = binary.BigEndian.AppendUint32(pk, rng.Uint32())
				keys[i] = AppendKey(nil, 9, uint16(v), pk)
			}
			slices.SortFunc(keys, bytes.Compare)
			for _, k := range keys {
				es = append(es, entry{key: k, value: make([]byte, 24)})
			}
		}
		n += len(es)
		rs = append(rs, &run{table: 9, epoch: uint64(e + 1), entries: es, spans: spansOf(es)})
	}
	buf := make([]entry, 0, n)
	b.ResetTimer()
	for range b.N {
		keys := 0
		_, _, err := mergeRuns(rs, func() []entry { return buf[:0] }, func(entry, before) error { keys++; return nil })
		if err != nil || keys == 0 {
			b.Fatal(err, keys)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/entry")
}
