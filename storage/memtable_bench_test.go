package storage

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkScatteredEpoch writes one epoch of a join's or an aggregate's state into a
// memtable and seals it: 100,000 keys over 256 vnodes in no order (a join key then a
// pk, 64-byte values), a share of them written again, as a join side's state table
// takes a snapshot's rows keyed by another column. ns/key is the writes and the seal:
//
//	go test -run XXX -bench ScatteredEpoch ./storage/
func BenchmarkScatteredEpoch(b *testing.B) {
	const keys, vnodes = 100_000, 256
	for _, again := range []int{0, 5} { // percent of writes that rewrite a key
		b.Run(fmt.Sprintf("again=%d%%", again), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, uint64(again)))
			ws := make([][]byte, 0, keys)
			for i := range keys {
				if i > 0 && rng.IntN(100) < again {
					ws = append(ws, ws[rng.IntN(len(ws))])
					continue
				}
				jk := rng.Uint64N(1 << 40)
				pk := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, jk), uint64(i))
				ws = append(ws, AppendKey(nil, 9, uint16(jk%vnodes), pk))
			}
			val := make([]byte, 64)
			mt := newMemtable()
			b.ResetTimer()
			for range b.N {
				for _, k := range ws {
					mt.putKnown(k, val, false, beforeAbsent)
				}
				mt.seal(9, 1)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ws)), "ns/key")
		})
	}
}
