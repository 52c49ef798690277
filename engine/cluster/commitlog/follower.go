package commitlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/storage"
)

// Follower reads a commit log without taking part in it: no lease, no registration,
// no collection. It is the engine.CommitLog of an engine.Replica, whose directory
// follows the log; its CatchUp is a Log's, and its Commit always fails.
type Follower struct {
	cfg Config
}

var _ engine.CommitLog = (*Follower)(nil)

// OpenFollower checks that the bucket answers and returns a follower of the log in
// cfg.Meta and cfg.Bucket (cfg.Node, LeaseTTL and Grace are not used).
func OpenFollower(ctx context.Context, cfg Config) (*Follower, error) {
	if cfg.Meta == nil || cfg.Bucket == nil {
		return nil, errors.New("commitlog: a meta store and a bucket are required")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("commitlog: negative timeout %v", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if ok, err := cfg.Bucket.IsAccessible(ctx); err != nil || !ok {
		if err == nil {
			err = errors.New("it does not exist")
		}
		return nil, fmt.Errorf("commitlog: bucket %s is not accessible: %w", cfg.BucketURL, err)
	}
	return &Follower{cfg: cfg}, nil
}

// CatchUp implements engine.CommitLog (see Log.CatchUp).
func (f *Follower) CatchUp(ctx context.Context, store *storage.Store) (uint64, error) {
	return catchUp(ctx, f.cfg, store)
}

// Commit implements engine.CommitLog: a follower commits nothing.
func (f *Follower) Commit(_ context.Context, c engine.CommitRequest) (storage.CheckpointStats, error) {
	epoch := c.Epoch
	return storage.CheckpointStats{Epoch: epoch}, fmt.Errorf("commitlog: commit epoch %d: a follower commits nothing", epoch)
}
