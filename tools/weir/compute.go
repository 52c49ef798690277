package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/engine/cluster/control"
	"github.com/seed04fbb902/weir/engine/cluster/exchange"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/storage"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// computeOptions are weir compute's flags.
type computeOptions struct {
	dir, meta, bucket string
	coordinator       string // the meta process's control address
	node              int
	role              string
	listen            string // the exchange server's listen address
	metricsAddr       string
}

func newCompute() *cobra.Command {
	var o computeOptions
	cmd := &cobra.Command{
		Use:   "compute",
		Short: "Run one compute node of a cluster: the actors weir meta places on it",
		Long: `compute runs node --node (from 1) of the engine that weir meta --compute N
coordinates: it keeps the node's store in --dir (a rebuildable copy of the commit
log's committed state, caught up from --meta and --bucket whenever the engine
recovers), serves the node's exchange edges over Arrow Flight on --listen, registers
itself in the meta store as compute-<node> with that address and a new incarnation,
and serves its control stream to --coordinator: it builds the actors the coordinator
places on it, sends their reports, and answers the commit log's requests for its
part of each checkpoint. It prints "computing node N at ADDR" once it is
registered, reconnects while the coordinator is away, and on SIGINT or SIGTERM
closes its store.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return compute(ctx, o, func(a string) { fmt.Fprintf(cmd.OutOrStdout(), "computing node %d at %s\n", o.node, a) }, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "the node's store directory")
	f.StringVar(&o.meta, "meta", "", "PostgreSQL DSN of the cluster's meta store")
	f.StringVar(&o.bucket, "bucket", "", "bucket URL (file:///dir, s3://...) of the commit log's sstables")
	f.StringVar(&o.coordinator, "coordinator", "", "the control address weir meta printed (coordinating ADDR)")
	f.IntVar(&o.node, "node", 0, "the node this process runs (1 to weir meta's --compute)")
	f.StringVar(&o.role, "role", "", `the node's role, as weir meta's --node-roles gives it (such as "backfill")`)
	f.StringVar(&o.listen, "listen", "127.0.0.1:0", "the exchange server's listen address")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics and pprof on this address")
	return cmd
}

// compute runs node o.node until ctx is done. ready gets the exchange address once
// the node is registered.
func compute(ctx context.Context, o computeOptions, ready func(addr string), logw io.Writer) (err error) {
	switch {
	case o.dir == "" || o.meta == "" || o.bucket == "" || o.coordinator == "":
		return errors.New("compute: --dir, --meta, --bucket and --coordinator are required")
	case o.node < 1 || o.node > 63:
		return fmt.Errorf("compute: --node %d: compute nodes are 1 to 63 (node 0 is weir meta's own)", o.node)
	}
	name := control.ComputeName(o.node)
	logger := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", name)
	armKillMidUpload(logger, name)
	if o.metricsAddr != "" {
		m, err := serveMetrics(o.metricsAddr, prometheus.Labels{"node": name})
		if err != nil {
			return fmt.Errorf("compute: metrics: %w", err)
		}
		defer m.close()
		logger.Info("metrics and pprof", "addr", m.addr)
	}
	ms, err := meta.Open(ctx, o.meta)
	if err != nil {
		return fmt.Errorf("compute: %s: %w", name, err)
	}
	defer ms.Close()
	b, err := objstore.OpenBucket(ctx, o.bucket)
	if err != nil {
		return fmt.Errorf("compute: %s: %w", name, err)
	}
	defer b.Close()
	mesh, err := exchange.NewPeerMesh(exchange.PeerConfig{Node: o.node, Listen: o.listen, Mem: memory.NewGoAllocator(), Resolve: registryResolver(ms)})
	if err != nil {
		return fmt.Errorf("compute: %s: %w", name, err)
	}
	defer mesh.Close()
	inc, err := ms.RegisterNode(ctx, name, o.role, mesh.Addr())
	if err != nil {
		return fmt.Errorf("compute: %s: %w", name, err)
	}
	var stream atomic.Pointer[control.Node]
	h, err := openHost(ctx, logger, engine.HostConfig{
		Node: o.node, Dir: o.dir, Options: engine.Options{Exchange: mesh, Logger: logger},
		Server: commitlog.NewNodeServer(commitlog.Config{Meta: ms, Bucket: b, BucketURL: o.bucket}),
		Report: func(ctx context.Context, gen uint64, r engine.ControlReport) error {
			n := stream.Load()
			if n == nil {
				return fmt.Errorf("%s: no control stream", name)
			}
			return n.Report(ctx, gen, r)
		},
	})
	if err != nil {
		return fmt.Errorf("compute: %w", err)
	}
	defer func() {
		if cerr := h.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("compute: %s: %w", name, cerr)
		}
	}()
	logger.Info("computing", "dir", o.dir, "exchange", mesh.Addr(), "incarnation", inc, "coordinator", o.coordinator)
	ready(mesh.Addr())
	hello := control.Hello{Stamp: control.Stamp{Incarnation: inc}, Node: name, Role: o.role, Addr: mesh.Addr()}
	for ctx.Err() == nil {
		n, err := control.Connect(ctx, o.coordinator, hello)
		if err != nil {
			if status.Code(err) == codes.FailedPrecondition || errors.As(err, new(*control.RefusedError)) {
				// The coordinator refused the hello: another cluster's, or a
				// newer run of this node registered since.
				return fmt.Errorf("compute: %w", err)
			}
			logger.Info("waiting for the coordinator", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		stream.Store(n)
		err = control.Serve(ctx, n, h)
		stream.Store(nil)
		hello.Term, hello.Generation = n.Known().Term, n.Known().Generation
		n.Close()
		if ctx.Err() == nil {
			logger.Warn("control stream lost; reconnecting", "err", err)
		}
	}
	return nil
}

// openHost opens the node's host, waiting (up to 30 s) while its directory is in
// use: a process restarted right after its predecessor was killed may find the
// store's lock still held while that one's threads exit.
func openHost(ctx context.Context, logger *slog.Logger, cfg engine.HostConfig) (*engine.Host, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err := engine.OpenHost(cfg)
		if err == nil || !errors.Is(err, storage.ErrInUse) || time.Now().After(deadline) {
			return h, err
		}
		logger.Info("the node's directory is in use; waiting", "dir", cfg.Dir)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// registryResolver resolves a node's exchange address from the meta store's
// registry, where every node of the engine registers as control.ComputeName.
func registryResolver(ms *meta.Store) func(ctx context.Context, node int) (string, error) {
	return func(ctx context.Context, node int) (string, error) {
		nodes, err := ms.Nodes(ctx)
		if err != nil {
			return "", err
		}
		name := control.ComputeName(node)
		for _, n := range nodes {
			if n.Name == name {
				if n.Addr == "" {
					return "", fmt.Errorf("%s registered no exchange address", name)
				}
				return n.Addr, nil
			}
		}
		return "", fmt.Errorf("%s is not registered in %s", name, ms)
	}
}

// computeRange is nodes 1 to n, the remote nodes of weir meta --compute n.
func computeRange(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}
