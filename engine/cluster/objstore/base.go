package objstore

import (
	"context"
	"fmt"
	"io"

	"github.com/seed04fbb902/weir/storage"
	"gocloud.dev/blob"
)

// UploadBase writes store's whole committed state (storage.Store.ExportCommitted) to
// the bucket as sstables named by Name with Base set, for node and incarnation, and
// returns what the base holds besides its rows and the objects in key order. As with
// Upload, an object is never overwritten, and an object whose write fails is
// aborted; the objects completed before it stay in the bucket, unreferenced, for
// collection. The store's checkpoints wait while it runs.
func UploadBase(ctx context.Context, b *blob.Bucket, store *storage.Store, node, incarnation uint64, o storage.ExportOptions) (storage.BaseInfo, []Object, error) {
	return uploadBase(ctx, b, store.CommittedEpoch(), node, incarnation, func(create func(int) (string, io.WriteCloser, error)) (storage.BaseInfo, []storage.SSTable, error) {
		return store.ExportCommitted(o, create)
	})
}

// UploadBaseView is UploadBase of the committed state that v, a View of store's
// committed state (storage.Store.View), holds (storage.Store.ExportView): the
// store's checkpoints go on while it runs. v stays the caller's.
func UploadBaseView(ctx context.Context, b *blob.Bucket, store *storage.Store, v *storage.View, node, incarnation uint64, o storage.ExportOptions) (storage.BaseInfo, []Object, error) {
	return uploadBase(ctx, b, v.Epoch, node, incarnation, func(create func(int) (string, io.WriteCloser, error)) (storage.BaseInfo, []storage.SSTable, error) {
		return store.ExportView(v, o, create)
	})
}

// uploadBase uploads, as the base at epoch of node's incarnation, what export
// writes.
func uploadBase(ctx context.Context, b *blob.Bucket, epoch, node, incarnation uint64, export func(create func(int) (string, io.WriteCloser, error)) (storage.BaseInfo, []storage.SSTable, error)) (storage.BaseInfo, []Object, error) {
	info, tabs, err := export(func(k int) (string, io.WriteCloser, error) {
		name := Name{Epoch: epoch, Node: node, Incarnation: incarnation, K: uint64(k), Base: true}.String()
		wctx, cancel := context.WithCancel(ctx)
		w, err := b.NewWriter(wctx, name, &blob.WriterOptions{ContentType: "application/octet-stream", IfNotExist: true})
		if err != nil {
			cancel()
			return "", nil, fmt.Errorf("objstore: upload object %s: %w", name, err)
		}
		return name, &objectWriter{w: w, cancel: cancel, name: name}, nil
	})
	if err == nil && info.Epoch != epoch {
		// A commit between reading the epoch and the export (the caller commits
		// in between): the names would not be the base's.
		err = fmt.Errorf("the committed epoch moved to %d", info.Epoch)
	}
	if err != nil {
		return info, nil, fmt.Errorf("objstore: upload the base of node %d incarnation %d at epoch %d: %w", node, incarnation, epoch, err)
	}
	out := make([]Object, len(tabs))
	for i, t := range tabs {
		out[i] = Object{Name: t.Name, Smallest: t.Smallest, Largest: t.Largest, Size: t.Size}
	}
	return info, out, nil
}

// ApplyBase commits a base into store, which must be empty (no committed epoch, no
// applied sequence): the named objects, downloaded, with epoch, the base's full
// catalog and its sequence in ch, as Apply does. Every object must be a base's of
// epoch.
func ApplyBase(ctx context.Context, b *blob.Bucket, store *storage.Store, epoch uint64, objects []string, ch storage.Changes) error {
	applied, err := store.AppliedSequence()
	if err != nil {
		return fmt.Errorf("objstore: apply the base at epoch %d: %w", epoch, err)
	}
	if c := store.CommittedEpoch(); c != 0 || applied != 0 {
		return fmt.Errorf("objstore: apply the base at epoch %d: the store is not empty (committed epoch %d, applied sequence %d)", epoch, c, applied)
	}
	for _, name := range objects {
		n, err := ParseName(name)
		if err != nil {
			return fmt.Errorf("objstore: apply the base at epoch %d: %w", epoch, err)
		}
		if !n.Base {
			return fmt.Errorf("objstore: apply the base at epoch %d: object %s is not a base's", epoch, name)
		}
	}
	return Apply(ctx, b, store, epoch, objects, ch)
}
