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
	stale, err := Stale(ctx, b, now.Add(-grace))
	if err != nil {
		return nil, fmt.Errorf("objstore: collect: %w", err)
	}
	doomed := slices.DeleteFunc(stale, referenced)
	if n, err := Delete(ctx, b, doomed); err != nil {
		return doomed[:n], fmt.Errorf("objstore: collect: %w", err)
	}
	return doomed, nil
}

// Stale returns the names of the bucket's objects named as Name formats (anything
// else is left out) that were last modified before cutoff (by the bucket's clock), in
// order.
func Stale(ctx context.Context, b *blob.Bucket, cutoff time.Time) ([]string, error) {
	var out []string
	it := b.List(nil)
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list bucket: %w", err)
		}
		if o.IsDir {
			continue
		}
		if _, err := ParseName(o.Key); err != nil {
			continue
		}
		if o.ModTime.Before(cutoff) {
			out = append(out, o.Key)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Delete deletes the named objects in order and returns how many it deleted; an
// object already gone counts as deleted. It stops at the first error, which names
// the object.
func Delete(ctx context.Context, b *blob.Bucket, names []string) (int, error) {
	for i, name := range names {
		if err := b.Delete(ctx, name); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return i, fmt.Errorf("delete object %s: %w", name, err)
		}
	}
	return len(names), nil
}
