package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/engine/cluster/control"
	"github.com/seed04fbb902/weir/engine/cluster/exchange"
	"github.com/spf13/cobra"
)

func newMeta() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "meta",
		Short: "Coordinate a cluster of compute processes: catalog, planner, barriers, checkpoint commits",
		Long: `meta runs the engine of a cluster whose actors run on --compute compute processes
(weir compute --node 1 to N): it holds the leader lease of the commit log in --meta
and --bucket, coordinates the nodes' control streams on --control-addr, keeps the
catalog and the committed copy in --dir, and serves the engine to clients on --addr
over Arrow Flight (remote.Dial), as weir serve does. Its own node, node 0, takes
only the tables' DML actors, which the writers send into; every table's and view's
actors run on the compute nodes, and every edge between processes is an Arrow
Flight stream. It prints "serving ADDR" once the engine is open, which waits (up to
a minute) for every compute process to connect; a compute process that goes away
fails the round in progress, and the engine recovers once it is back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.compute < 1 {
				return errors.New("meta: --compute must be at least 1")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serve(ctx, o, func(a string) { fmt.Fprintf(cmd.OutOrStdout(), "serving %s\n", a) }, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "engine directory (the catalog and the committed copy)")
	f.StringVar(&o.addr, "addr", "127.0.0.1:7070", "address to serve clients on (port 0: any free port)")
	f.StringVar(&o.controlAddr, "control-addr", "127.0.0.1:7071", "address the compute processes' control streams connect to")
	f.IntVar(&o.compute, "compute", 0, "the number of compute processes (nodes 1 to N)")
	f.StringVar(&o.meta, "meta", "", "PostgreSQL DSN of the meta store and commit log")
	f.StringVar(&o.bucket, "bucket", "", "bucket URL (file:///dir, s3://...) of the commit log's sstables")
	f.Uint64Var(&o.node, "node", 1, "this process's number (from 1): its lease holder name, log and metrics label")
	f.DurationVar(&o.leaseTTL, "lease-ttl", 0, "the leader lease's time to live (0: the commit log's default, 10s)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics and pprof on this address")
	f.StringSliceVar(&o.nodeRoles, "node-roles", nil, `compute node i's role, from node 1, comma-separated ("" or missing: regular), such as ",backfill"`)
	return cmd
}

// openComputeCluster sets opts up for weir meta's compute processes: the
// coordinator of their control streams on o.controlAddr, fenced by the commit log's
// lease term and checking their incarnations in its meta store, and node 0's
// exchange, which finds the compute nodes at the addresses their hellos gave. It
// registers node 0's exchange address, where the compute processes find it. The
// returned func closes both (after the engine).
func openComputeCluster(ctx context.Context, o serveOptions, clog *clusterLog, opts *engine.Options, logger *slog.Logger) (func(), error) {
	l, ok := clog.log.(*commitlog.Log)
	if !ok {
		return nil, fmt.Errorf("the commit log is a %T, not a leader's", clog.log)
	}
	var ctl *control.Local
	mesh, err := exchange.NewPeerMesh(exchange.PeerConfig{Node: 0, Mem: memory.NewGoAllocator(), Resolve: func(_ context.Context, node int) (string, error) {
		if addr, ok := ctl.ExchangeAddr(node); ok {
			return addr, nil
		}
		return "", fmt.Errorf("%s has no control stream, so no exchange address", control.ComputeName(node))
	}})
	if err != nil {
		return nil, err
	}
	ctl, err = control.NewCluster(control.ClusterConfig{Listen: o.controlAddr, Term: l.Lease().Term, Remote: opts.RemoteNodes, Roles: opts.NodeRoles, Registry: clog.meta, Logger: logger})
	if err != nil {
		mesh.Close()
		return nil, err
	}
	closeAll := func() {
		ctl.Close()
		mesh.Close()
	}
	if _, err := clog.meta.RegisterNode(ctx, control.ComputeName(0), "meta", mesh.Addr()); err != nil {
		closeAll()
		return nil, err
	}
	opts.Exchange, opts.Control = mesh, ctl
	logger.Info("coordinating", "control", ctl.Addr(), "exchange", mesh.Addr(), "compute", o.compute, "term", l.Lease().Term)
	return closeAll, nil
}
