package main

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
)

// BenchmarkServeRecovery measures the recovery of a weir serve over a commit log from
// a SIGKILL: the time from the kill to the first checkpoint committed after it (a
// new process started, the lease taken, the copy caught up, the client's
// WaitCheckpoint returned). The engine holds a table of 200,000 rows and an aggregate
// over it. Each iteration kills the server twice, restarting it once on its own
// directory (keep) and once on an empty one (rebuild: the copy comes from PostgreSQL
// and the bucket), in alternating order; it reports both times and their ratio.
func BenchmarkServeRecovery(b *testing.B) {
	ctx := context.Background()
	pg := startPostgres(b)
	dsn := pg.NewDatabase(b, "recovery")
	bucket := clusterBucket(b, "recovery")
	dirs := 0
	start := func(dir string) (func(), *remote.Client) {
		cmd, addr, ok := startWeir(b, "serve", "--dir", dir, "--addr", "127.0.0.1:0", "--meta", dsn, "--bucket", bucket)
		if !ok {
			b.Fatalf("serve: %s", addr)
		}
		c, err := remote.Dial(ctx, addr, nil)
		if err != nil {
			b.Fatal(err)
		}
		return func() {
			c.Close()
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				b.Fatal(err)
			}
			_ = cmd.Wait()
		}, c
	}
	dir := filepath.Join(b.TempDir(), "d0")
	kill, c := start(dir)
	if err := c.CreateTable(ctx, kvTable, engine.TableOptions{}); err != nil {
		b.Fatal(err)
	}
	for lo := 0; lo < 200_000; lo += 10_000 {
		if err := insertKV(ctx, c, lo, lo+10_000, 100); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.CreateMV(ctx, "by_g", byG, engine.MVOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		b.Fatal(err)
	}
	recover := func(rebuild bool) time.Duration {
		kill()
		t0 := time.Now()
		if rebuild {
			dirs++
			dir = filepath.Join(b.TempDir(), fmt.Sprint("d", dirs))
		}
		kill, c = start(dir)
		if _, err := c.WaitCheckpoint(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var keep, rebuild time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			keep += recover(false)
			rebuild += recover(true)
		} else {
			rebuild += recover(true)
			keep += recover(false)
		}
	}
	b.StopTimer()
	kill()
	b.ReportMetric(keep.Seconds()/float64(b.N), "keep_s")
	b.ReportMetric(rebuild.Seconds()/float64(b.N), "rebuild_s")
	b.ReportMetric(rebuild.Seconds()/keep.Seconds(), "rebuild/keep")
}
