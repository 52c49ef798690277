package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/seed04fbb902/weir/engine/cluster/meta"
)

// openDemoLog opens the demo's commit log, or returns nil when neither --meta nor
// --bucket is set. The meta store must hold no log yet: the demo creates its tables
// in a fresh engine.
func openDemoLog(ctx context.Context, o demoOptions, logger *slog.Logger) (*clusterLog, error) {
	if o.meta == "" && o.bucket == "" {
		return nil, nil
	}
	if o.meta != "" && o.bucket != "" {
		m, err := meta.Open(ctx, o.meta)
		if err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		v, err := m.Committed(ctx)
		m.Close()
		if err == nil && v.Seq > 0 {
			err = fmt.Errorf("the meta store %s already holds a commit log at sequence %d (epoch %d); the demo needs a database of its own", m, v.Seq, v.Epoch)
		}
		if err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
	}
	return openClusterLog(ctx, "demo", o.meta, o.bucket, 1, 0, false, logger)
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
