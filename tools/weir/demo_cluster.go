package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/views"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
)

// demoKillAt is the share of the views' snapshot rows read at which weir demo
// --cluster kills a compute process.
const demoKillAt = 0.4

// runClusterDemo is weir demo --cluster N: the Nexmark demo on a local cluster of N
// compute processes under a weir meta leader (weir cluster up --nodes N in the
// demo's directory), through a client of the leader. While the views backfill, at
// about 40% of their snapshot rows, it kills the last compute process with SIGKILL
// and restarts it on its directory; when every backfill is done it stops the
// writer and checks every view against its oracle. It stops the cluster at the end.
func runClusterDemo(ctx context.Context, o demoOptions, logw io.Writer) (res demoResult, err error) {
	switch {
	case o.cluster < 1 || o.cluster > 63:
		return res, fmt.Errorf("demo: --cluster %d, want 1 to 63 compute processes", o.cluster)
	case o.nodeStores || o.exchange != "channel" || o.control != "channel" || o.bucket != "" || o.metricsAddr != "":
		return res, errors.New("demo: --cluster runs compute processes with their own stores, Flight edges and control streams, its own bucket and per-process metrics: drop --node-stores, --exchange, --control, --bucket and --metrics-addr")
	case o.parallelism < 1 || o.rate < 0:
		return res, fmt.Errorf("demo: parallelism %d and rate %v, want at least 1 and at least 0", o.parallelism, o.rate)
	}
	t0 := time.Now()
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "weir-demo-cluster-"); err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
	} else {
		res.Dir, _ = filepath.Abs(dir)
	}
	say := func(format string, args ...any) {
		if o.progress != "none" {
			fmt.Fprintf(logw, "demo: "+format+"\n", args...)
		}
	}
	st, err := clusterUp(ctx, filepath.Join(dir, "cluster"), clusterUpOptions{meta: o.meta, exchange: "channel", control: "channel", nodes: o.cluster})
	if err != nil {
		return res, fmt.Errorf("demo: %w", err)
	}
	defer func() {
		if serr := stopCluster(st, io.Discard); err == nil && serr != nil {
			err = fmt.Errorf("demo: stop the cluster: %w", serr)
		}
	}()
	leader := st.Processes[len(st.Processes)-1]
	say("a cluster of %d compute processes and a weir meta leader at %s (meta store %s, bucket %s; logs in %s)",
		o.cluster, leader.Addr, st.Meta, st.Bucket, filepath.Join(dir, "cluster", "logs"))
	res.Exchange, res.Control = "flight", "grpc"
	mem := memory.NewGoAllocator()
	c, err := remote.Dial(ctx, leader.Addr, mem)
	if err != nil {
		return res, fmt.Errorf("demo: %w", err)
	}
	defer c.Close()
	w, created, pace, err := startDemo(ctx, c, o, &res, say)
	if err != nil {
		return res, err
	}
	stopWriter := sync.OnceFunc(func() { close(w.stop); <-w.done })
	defer stopWriter()
	say("created the views %v across the compute processes, paced at %d snapshot rows/s per actor", views.Queries, pace)

	disp := newProgressDisplay(o.progress, logw)
	finished := map[string]time.Duration{}
	killed, kills := false, 0
	for len(finished) < len(views.Queries) {
		ps, err := c.Progress(ctx)
		if err != nil {
			// The leader recovers while a compute process is away.
			say("progress: %v", err)
		}
		disp.update(ps)
		var read, total int64
		for _, p := range ps {
			read, total = read+p.RowsConsumed, total+p.UpstreamRows
			if _, ok := finished[p.Name]; !ok && p.Done {
				finished[p.Name] = time.Since(created[p.Name])
			}
		}
		if !killed && total > 0 && float64(read) >= demoKillAt*float64(total) {
			killed = true
			i := len(st.Processes) - 2 // the last compute process
			disp.note(fmt.Sprintf("SIGKILL %s (pid %d) at %.0f%% of the snapshot rows, then restart it", st.Processes[i].Role, st.Processes[i].PID, 100*float64(read)/float64(total)))
			if err := syscall.Kill(st.Processes[i].PID, syscall.SIGKILL); err != nil {
				return res, fmt.Errorf("demo: kill %s: %w", st.Processes[i].Role, err)
			}
			if err := awaitExit(st.Processes[i].PID); err != nil {
				return res, fmt.Errorf("demo: %w", err)
			}
			kills++
			if st.Processes[i], err = st.Processes[i].restart(); err != nil {
				return res, fmt.Errorf("demo: %w", err)
			}
			if err := writeClusterState(filepath.Join(dir, "cluster"), st); err != nil {
				return res, fmt.Errorf("demo: %w", err)
			}
			for _, q := range views.Queries {
				if err := c.SetRateLimit(ctx, q, nil); err != nil {
					return res, fmt.Errorf("demo: lift the pace of %s: %w", q, err)
				}
			}
			res.ControlsMidway++
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	disp.done()
	stopWriter()
	if err := verifyDemo(ctx, c, w, finished, &res, say); err != nil {
		return res, err
	}
	res.Cluster, res.NodeKills, res.LeaderChanges = o.cluster, &kills, new(int)
	res.Seconds = time.Since(t0).Seconds()
	return res, nil
}
