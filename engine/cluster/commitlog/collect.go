package commitlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"gocloud.dev/blob"
)

// Collect deletes the objects that no committed sequence or base references and that
// were recorded (or left unreferenced by a base's compaction) more than grace ago (by
// the database's clock), and forgets them; then it sweeps the bucket for objects the
// meta store does not record at all, last modified more than grace ago: those of an
// upload whose commit never recorded them (a node that died mid-upload, an export
// that failed), deleted too. It returns how many objects it deleted. A grace shorter
// than a running commit or base has taken deletes its objects: WaitBase first (the
// sweep is skipped while the log writes a base).
func (l *Log) Collect(ctx context.Context, grace time.Duration) (int, error) {
	l.mu.Lock()
	basing := l.baseDone != nil
	l.mu.Unlock()
	return collect(ctx, l.cfg.Meta, l.cfg.Bucket, l.cfg.BucketURL, grace, !basing)
}

// Collect is Log.Collect for a cluster whose leader does not run (weir gc): the
// caller makes sure that no commit or base started more than grace ago still runs.
func Collect(ctx context.Context, ms *meta.Store, bucket *blob.Bucket, bucketURL string, grace time.Duration) (int, error) {
	return collect(ctx, ms, bucket, bucketURL, grace, true)
}

func collect(ctx context.Context, ms *meta.Store, bucket *blob.Bucket, bucketURL string, grace time.Duration, sweep bool) (int, error) {
	if grace < 0 {
		return 0, fmt.Errorf("commitlog: collect: negative grace period %s", grace)
	}
	now, err := ms.Now(ctx)
	if err != nil {
		return 0, fmt.Errorf("commitlog: collect: %w", err)
	}
	objs, err := ms.Unreferenced(ctx, now.Add(-grace))
	if err != nil {
		return 0, fmt.Errorf("commitlog: collect: %w", err)
	}
	names := objectNames(objs)
	n, derr := objstore.Delete(ctx, bucket, names)
	if derr != nil {
		derr = fmt.Errorf("commitlog: collect: bucket %s: %w", bucketURL, derr)
	}
	if n > 0 {
		if _, err := ms.DeleteObjects(ctx, names[:n]); err != nil {
			return n, errors.Join(derr, fmt.Errorf("commitlog: collect: %w", err))
		}
	}
	if derr != nil || !sweep {
		return n, derr
	}
	stale, err := objstore.Stale(ctx, bucket, now.Add(-grace))
	if err != nil {
		return n, fmt.Errorf("commitlog: collect: bucket %s: %w", bucketURL, err)
	}
	rec, err := ms.Recorded(ctx, stale)
	if err != nil {
		return n, fmt.Errorf("commitlog: collect: %w", err)
	}
	stray := slices.DeleteFunc(stale, func(name string) bool { return rec[name] })
	m, err := objstore.Delete(ctx, bucket, stray)
	if err != nil {
		err = fmt.Errorf("commitlog: collect objects recorded nowhere: bucket %s: %w", bucketURL, err)
	}
	return n + m, err
}

// Referenced returns the names of the objects the log references: those of its
// deltas and of its latest base. After a Collect with no commit or base running, the
// bucket holds exactly these.
func Referenced(ctx context.Context, ms *meta.Store) (map[string]bool, error) {
	deltas, err := ms.Deltas(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("commitlog: referenced objects: %w", err)
	}
	out := map[string]bool{}
	for _, d := range deltas {
		for _, o := range d.Objects {
			out[o.Name] = true
		}
	}
	b, ok, err := ms.LatestBase(ctx)
	if err != nil {
		return nil, fmt.Errorf("commitlog: referenced objects: %w", err)
	}
	if ok {
		for _, o := range b.Objects {
			out[o.Name] = true
		}
	}
	return out, nil
}
