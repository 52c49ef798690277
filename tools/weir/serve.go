package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/seed04fbb902/weir/executors"
	"github.com/spf13/cobra"
)

// serveOptions are weir serve's flags.
type serveOptions struct {
	dir, addr    string
	meta, bucket string // a commit log (both or neither)
	node         uint64
	leaseTTL     time.Duration
	exchange     string // channel or flight
	control      string // channel or grpc
	metricsAddr  string
	replica      bool     // a read-only replica following the commit log
	nodes        int      // engine.Options.Nodes (0: its default)
	nodeRoles    []string // engine.Options.NodeRoles
	nodeStores   bool     // engine.Options.NodeStores
	compute      int      // weir meta: compute processes run nodes 1 to compute
	controlAddr  string   // weir meta: the coordinator's listen address
}

func newServe() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve an engine directory to remote clients over Arrow Flight (engine/cluster/remote)",
		Long: `serve opens the engine in --dir (created when missing) and serves it on --addr
over Arrow Flight: a Go program reaches it with remote.Dial, whose Client is an
engine.DB like the embedded engine. It prints "serving ADDR" once it listens, and on
SIGINT or SIGTERM stops serving and closes the engine (a last checkpoint).

With --meta DSN and --bucket URL its checkpoints commit through a commit log
(engine/cluster/commitlog) as node --node, which holds the leader lease: a second
serve on the same meta store is refused while the lease (--lease-ttl) lasts, naming
its holder. The directory is then a copy, rebuilt from the log when it starts empty;
--node-stores gives each of the engine's nodes a store of its own in it, as a
compute process has, exported apart and committed together at every checkpoint.
--exchange flight makes the edges between the engine's nodes Arrow Flight streams,
--control grpc the actors' reports frames of per-node control streams;
--metrics-addr serves Prometheus metrics (labeled with the node) and pprof. Logs go
to stderr with the node's number.

With --replica (and --meta, --bucket) it serves a read-only replica instead
(engine.Replica): its directory follows the commit log, catching up every 100ms and
at each client's WaitCheckpoint, so reads go on while the committing server is down;
writes, catalog changes and controls fail as read-only. It takes no lease.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serve(ctx, o, func(a string) { fmt.Fprintf(cmd.OutOrStdout(), "serving %s\n", a) }, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "engine directory")
	f.StringVar(&o.addr, "addr", "127.0.0.1:7070", "address to listen on (port 0: any free port)")
	f.StringVar(&o.meta, "meta", "", "PostgreSQL DSN of the commit log (with --bucket)")
	f.StringVar(&o.bucket, "bucket", "", "bucket URL (file:///dir, s3://...) of the commit log's sstables (with --meta)")
	f.Uint64Var(&o.node, "node", 1, "this process's node number (from 1): its lease holder name, log and metrics label")
	f.DurationVar(&o.leaseTTL, "lease-ttl", 0, "the leader lease's time to live (0: the commit log's default, 10s)")
	f.StringVar(&o.exchange, "exchange", "channel", "how edges between the engine's nodes travel: channel or flight")
	f.StringVar(&o.control, "control", "channel", "how the actors' reports reach the coordinator: channel or grpc")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics and pprof on this address")
	f.BoolVar(&o.replica, "replica", false, "serve a read-only replica that follows the commit log of --meta and --bucket (no lease)")
	f.IntVar(&o.nodes, "nodes", 0, "the engine's simulated compute nodes (0: the engine's default, 2)")
	f.BoolVar(&o.nodeStores, "node-stores", false, "give every node of the engine a store of its own, committed together through the commit log (with --meta and --bucket)")
	f.StringSliceVar(&o.nodeRoles, "node-roles", nil, `node i's role, comma-separated ("" or missing: regular), for views created with MVOptions.BackfillOn, such as ",,backfill"`)
	return cmd
}

// serve serves the engine of o until ctx is done, then closes the engine (and its
// commit log, exchange and metrics). listening gets the address once it listens.
func serve(ctx context.Context, o serveOptions, listening func(addr string), logw io.Writer) (err error) {
	if o.dir == "" {
		return fmt.Errorf("serve: --dir is required")
	}
	if o.node == 0 {
		return fmt.Errorf("serve: --node 0: node numbers start at 1")
	}
	logger := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", o.node)
	if o.nodeStores && (o.meta == "" || o.bucket == "" || o.replica) {
		return fmt.Errorf("serve: --node-stores commits the nodes' stores together through a commit log: it takes --meta and --bucket, without --replica")
	}
	opts := engine.Options{Logger: logger, Nodes: o.nodes, NodeRoles: o.nodeRoles, NodeStores: o.nodeStores}
	if o.compute > 0 {
		if o.meta == "" || o.bucket == "" || o.replica {
			return fmt.Errorf("meta: compute processes commit through a commit log: --meta and --bucket are required, without --replica")
		}
		// Node 0 is this process's: the tables' DML actors, which the writers send
		// into; every other actor runs on the compute processes.
		opts.Nodes, opts.NodeStores, opts.RemoteNodes = 1+o.compute, true, computeRange(o.compute)
		opts.NodeRoles = append([]string{"meta"}, o.nodeRoles...)
	}
	var metrics *demoMetrics
	if o.metricsAddr != "" {
		if metrics, err = serveMetrics(o.metricsAddr, prometheus.Labels{"node": strconv.FormatUint(o.node, 10)}); err != nil {
			return fmt.Errorf("serve: metrics: %w", err)
		}
		defer metrics.close()
		opts.OnBarrier = metrics.onBarrier
		logger.Info("metrics and pprof", "addr", metrics.addr)
	}
	if o.replica && (o.meta == "" || o.bucket == "") {
		return fmt.Errorf("serve: --replica follows a commit log: --meta and --bucket are required")
	}
	var clog *clusterLog
	if o.meta != "" || o.bucket != "" {
		if clog, err = openClusterLog(ctx, "serve", o.meta, o.bucket, o.node, o.leaseTTL, o.replica, logger); err != nil {
			return err
		}
		defer func() {
			if cerr := clog.close(); err == nil && cerr != nil {
				err = fmt.Errorf("serve: close the commit log: %w", cerr)
			}
		}()
		opts.CommitLog = clog.log
	}
	if o.compute > 0 {
		closeCluster, err := openComputeCluster(ctx, o, clog, &opts, logger)
		if err != nil {
			return fmt.Errorf("meta: %w", err)
		}
		defer closeCluster()
	} else {
		mesh, err := openExchange(o.exchange, &opts)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		if mesh != nil {
			defer mesh.Close()
		}
		ctl, err := openControl(o.control, &opts)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		if ctl != nil {
			defer ctl.Close()
		}
	}
	if o.replica {
		r, err := engine.OpenReplica(ctx, o.dir, opts)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		defer func() {
			if cerr := r.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("serve: close the replica in %s: %w", o.dir, cerr)
			}
		}()
		return serveDB(ctx, r, o, r.CommittedEpoch(), logger, listening)
	}
	e, err := engine.Open(ctx, o.dir, opts)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer func() {
		if cerr := e.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("serve: close the engine in %s: %w", o.dir, cerr)
		}
	}()
	if metrics != nil {
		// The jobs' progress, sampled every second (the barriers report themselves).
		tick := time.NewTicker(time.Second)
		stopped, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-tick.C:
					metrics.observe(e, e.Progress())
				case <-stopped:
					return
				}
			}
		}()
		defer func() { tick.Stop(); close(stopped); <-done }()
	}
	return serveDB(ctx, e, o, e.CommittedEpoch(), logger, listening)
}

// serveDB serves db on o.addr over Flight until ctx is done.
func serveDB(ctx context.Context, db engine.DB, o serveOptions, epoch executors.Epoch, logger *slog.Logger, listening func(addr string)) error {
	lis, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	fs := remote.NewFlightServer(remote.NewServer(db, memory.NewGoAllocator()))
	fs.InitListener(lis)
	served := make(chan struct{})
	defer close(served)
	go func() {
		select {
		case <-ctx.Done():
		case <-served:
		}
		fs.Shutdown()
	}()
	logger.Info("serving", "dir", o.dir, "addr", lis.Addr().String(), "committed_epoch", uint64(epoch), "replica", o.replica)
	listening(lis.Addr().String())
	if err := fs.Serve(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
