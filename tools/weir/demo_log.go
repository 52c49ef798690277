package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
)

// demoLog is the commit log of a demo run with --meta and --bucket: the demo's engine
// commits its checkpoints to PostgreSQL and the bucket, and its directory is a copy.
type demoLog struct {
	meta *meta.Store
	log  *commitlog.Log
	// close closes the log, the bucket and the meta store, in that order.
	close func() error
}

// openDemoLog opens the demo's commit log, or returns nil when neither --meta nor
// --bucket is set. The meta store must hold no log yet: the demo creates its tables
// in a fresh engine.
func openDemoLog(ctx context.Context, o demoOptions, logger *slog.Logger) (*demoLog, error) {
	if o.meta == "" && o.bucket == "" {
		return nil, nil
	}
	if o.meta == "" || o.bucket == "" {
		return nil, errors.New("demo: --meta and --bucket go together")
	}
	m, err := meta.Open(ctx, o.meta)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	v, err := m.Committed(ctx)
	if err == nil && v.Seq > 0 {
		err = fmt.Errorf("the meta store %s already holds a commit log at sequence %d (epoch %d); the demo needs a database of its own", m, v.Seq, v.Epoch)
	}
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("demo: %w", err)
	}
	b, err := objstore.OpenBucket(ctx, o.bucket)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("demo: %w", err)
	}
	l, err := commitlog.Open(ctx, commitlog.Config{Meta: m, Bucket: b, BucketURL: o.bucket, Node: 1, Logger: logger})
	if err != nil {
		b.Close()
		m.Close()
		return nil, fmt.Errorf("demo: %w", err)
	}
	return &demoLog{meta: m, log: l, close: func() error {
		err := errors.Join(l.Close(), b.Close())
		m.Close()
		return err
	}}, nil
}

// emptyDir removes everything in dir, keeping dir: a crashed engine's copy of what
// its commit log holds, rebuilt when the engine reopens.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// sequence is the log's committed sequence, for the summary.
func (d *demoLog) sequence(ctx context.Context) (uint64, error) {
	v, err := d.meta.Committed(ctx)
	return v.Seq, err
}
