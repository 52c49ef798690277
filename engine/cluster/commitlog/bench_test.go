package commitlog_test

import (
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/vec"
)

// BenchmarkBaseStall commits checkpoints of 100 rows each over a table of 200,000
// rows through a log that writes a base every 4 commits, with the base inside the
// commit (inline) or in the background, and reports the mean of the longest quarter
// of the checkpoint commits and the median one (top-quarter-ms, median-ms): inline,
// every fourth commit waits for the export of the whole table. Run it with
// -benchtime 16x, alternating the two (scripts/base-stall-pairs.sh).
func BenchmarkBaseStall(b *testing.B) {
	for _, mode := range []string{"inline", "background"} {
		b.Run(mode, func(b *testing.B) {
			c := newCluster(b)
			ctx := testContext(b)
			cfg := c.config(1)
			cfg.BaseEvery, cfg.BaseInline = 4, mode == "inline"
			cfg.TableBytes = 0 // the default sstable size
			log, err := commitlog.Open(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer log.Close()
			var mu sync.Mutex
			var durs []time.Duration
			var measuring atomic.Bool
			e, err := engine.Open(ctx, filepath.Join(b.TempDir(), "leader"), engine.Options{
				BarrierInterval: -1, Nodes: 2, CommitLog: log,
				OnBarrier: func(bs engine.BarrierStats) {
					if measuring.Load() && bs.Checkpoint {
						mu.Lock()
						durs = append(durs, bs.CheckpointDuration)
						mu.Unlock()
					}
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			if err := e.CreateTable(ctx, kv, engine.TableOptions{}); err != nil {
				b.Fatal(err)
			}
			insert := func(from, n int) {
				bl := vec.NewChunkBuilder(memory.DefaultAllocator, kv)
				defer bl.Release()
				for k := from; k < from+n; k++ {
					if err := bl.AppendRow(vec.Insert, int64(k), "a value of some thirty bytes..", int64(k)); err != nil {
						b.Fatal(err)
					}
				}
				chunk, err := bl.Build()
				if err != nil {
					b.Fatal(err)
				}
				defer chunk.Release()
				if err := e.Insert(ctx, "kv", chunk.Record()); err != nil {
					b.Fatal(err)
				}
			}
			for from := 0; from < 200_000; from += 10_000 {
				insert(from, 10_000)
			}
			if _, err := e.WaitCheckpoint(ctx); err != nil {
				b.Fatal(err)
			}
			log.WaitBase()
			measuring.Store(true)
			b.ResetTimer()
			for i := range b.N {
				insert(1_000_000+i*100, 100)
				if _, err := e.WaitCheckpoint(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			measuring.Store(false)
			log.WaitBase()
			if written, _ := log.Bases(); written == 0 && b.N >= 4 {
				b.Fatal("no base written")
			}
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(durs)
			if len(durs) > 0 {
				// The longest quarter: with a base due every 4 commits, the commits
				// that wrote one (inline) or ran beside one (background).
				top := durs[len(durs)-max(len(durs)/4, 1):]
				var sum time.Duration
				for _, d := range top {
					sum += d
				}
				b.ReportMetric(float64(sum.Microseconds())/1000/float64(len(top)), "top-quarter-ms")
				b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "median-ms")
			}
		})
	}
}
