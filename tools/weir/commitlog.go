package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
)

// clusterLog is the commit log of a command run with --meta and --bucket: its engine
// commits checkpoints to PostgreSQL and the bucket, and its directory is a copy.
type clusterLog struct {
	meta *meta.Store
	log  engine.CommitLog // a *commitlog.Log, or a *commitlog.Follower (a replica)
	// close closes the log, the bucket and the meta store, in that order.
	close func() error
}

// openClusterLog opens the commit log in the meta store at dsn and the bucket at
// bucket as node (the lease holder "node-<node>"), with the lease's time to live
// (0: commitlog's default); with follow, a follower of it instead (no lease). cmd
// names the command in errors.
func openClusterLog(ctx context.Context, cmd, dsn, bucket string, node uint64, ttl time.Duration, follow bool, logger *slog.Logger) (*clusterLog, error) {
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
	cfg := commitlog.Config{Meta: m, Bucket: b, BucketURL: bucket, Node: node, LeaseTTL: ttl, Logger: logger}
	var cl engine.CommitLog
	closeLog := func() error { return nil }
	if follow {
		cl, err = commitlog.OpenFollower(ctx, cfg)
	} else {
		var l *commitlog.Log
		if l, err = commitlog.Open(ctx, cfg); err == nil {
			cl, closeLog = l, l.Close
		}
	}
	if err != nil {
		b.Close()
		m.Close()
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	return &clusterLog{meta: m, log: cl, close: func() error {
		err := errors.Join(closeLog(), b.Close())
		m.Close()
		return err
	}}, nil
}

// sequence is the log's committed sequence.
func (d *clusterLog) sequence(ctx context.Context) (uint64, error) {
	v, err := d.meta.Committed(ctx)
	return v.Seq, err
}
