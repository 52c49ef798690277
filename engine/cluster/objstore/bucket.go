package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// buckets
	_ "gocloud.dev/blob/memblob"  // mem:// buckets
	_ "gocloud.dev/blob/s3blob"   // s3:// buckets (S3 and S3-protocol servers)
	"gocloud.dev/gcerrors"
)

// OpenBucket opens the bucket at url (file:///dir, mem://, or the scheme of any other
// gocloud.dev/blob driver linked into the binary). The caller closes it.
func OpenBucket(ctx context.Context, url string) (*blob.Bucket, error) {
	b, err := blob.OpenBucket(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("objstore: open bucket %s: %w", url, err)
	}
	return b, nil
}

// Collect deletes the objects of the bucket that referenced reports no version holds
// and that were last modified more than grace before now, and returns their names in
// order. Only objects named as Name formats are considered: anything else in the
// bucket is left alone. grace must be longer than the barrier timeout, so that an
// object uploaded for a round that may still commit is never deleted; now is the
// caller's clock (objects' times are the bucket's). An object already gone when it is
// deleted (another collector's) counts as deleted. On an error, the objects deleted
// so far are returned with it.
func Collect(ctx context.Context, b *blob.Bucket, referenced func(name string) bool, grace time.Duration, now time.Time) ([]string, error) {
	if grace < 0 {
		return nil, fmt.Errorf("objstore: collect: negative grace period %s", grace)
	}
	cutoff := now.Add(-grace)
	var doomed []string
	it := b.List(nil)
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("objstore: collect: list bucket: %w", err)
		}
		if o.IsDir {
			continue
		}
		if _, err := ParseName(o.Key); err != nil {
			continue
		}
		if o.ModTime.Before(cutoff) && !referenced(o.Key) {
			doomed = append(doomed, o.Key)
		}
	}
	slices.Sort(doomed)
	for i, name := range doomed {
		if err := b.Delete(ctx, name); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return doomed[:i], fmt.Errorf("objstore: collect: delete object %s: %w", name, err)
		}
	}
	return doomed, nil
}
