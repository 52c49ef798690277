package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
)

// clusterLog is the commit log of a command run with --meta and --bucket: its engine
// commits checkpoints to PostgreSQL and the bucket, and its directory is a copy.
type clusterLog struct {
	meta *meta.Store
	log  *commitlog.Log
	// close closes the log, the bucket and the meta store, in that order.
	close func() error
}

// openClusterLog opens the commit log in the meta store at dsn and the bucket at
// bucket as node (the lease holder "node-<node>"), with the lease's time to live
// (0: commitlog's default). cmd names the command in errors.
func openClusterLog(ctx context.Context, cmd, dsn, bucket string, node uint64, ttl time.Duration, logger *slog.Logger) (*clusterLog, error) {
	if dsn == "" || bucket == "" {
		return nil, fmt.Errorf("%s: --meta and --bucket go together", cmd)
	}
	m, err := meta.Open(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	b, err := objstore.OpenBucket(ctx, bucket)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	l, err := commitlog.Open(ctx, commitlog.Config{Meta: m, Bucket: b, BucketURL: bucket, Node: node, LeaseTTL: ttl, Logger: logger})
	if err != nil {
		b.Close()
		m.Close()
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	return &clusterLog{meta: m, log: l, close: func() error {
		err := errors.Join(l.Close(), b.Close())
		m.Close()
		return err
	}}, nil
}

// sequence is the log's committed sequence.
func (d *clusterLog) sequence(ctx context.Context) (uint64, error) {
	v, err := d.meta.Committed(ctx)
	return v.Seq, err
}
