package objstore

import (
	"context"
	"fmt"
	"io"

	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
	"gocloud.dev/blob"
)

// Object is an uploaded sstable as a node reports it: its name, the first and last
// keys it holds, and its size in bytes.
type Object struct {
	Name              string
	Smallest, Largest []byte
	Size              int64
}

// Upload writes the sealed, uncommitted data of store up to epoch (every node of the
// store: a compute process's own) to the bucket as sstables named by Name for node and
// incarnation, and returns them in key order, for the node's report (docs/design.md
// §8, "Checkpoint commit" step 2). o shapes the sstables (see
// storage.Store.ExportCheckpoint). Nothing is committed: the data
// stays sealed in store until Apply of the committed version ingests it.
//
// An object is never overwritten: an upload to a name the bucket holds fails. An
// object whose write fails is aborted; the objects completed before it stay in the
// bucket, unreferenced, for Collect.
func Upload(ctx context.Context, b *blob.Bucket, store *storage.Store, epoch, node, incarnation uint64, o storage.ExportOptions) ([]Object, error) {
	u, err := upload(ctx, b, store, epoch, node, incarnation, 0, o, false)
	return u.Objects, err
}

// Uploaded is what UploadKeep uploaded: the objects in key order, the paths of the
// copies kept in the store's ingest directory (in the objects' order), and the row
// count changes the objects make to the store's committed data (see
// storage.Store.ExportCheckpoint), which a commit carries (storage.Changes.RowDeltas)
// so that no store that applies it counts them again.
type Uploaded struct {
	Objects   []Object
	Paths     []string
	RowDeltas []storage.RowDelta
}

// UploadKeep is Upload that also writes each object into store's ingest directory
// while it uploads it, and returns the copies' paths: the node that exported a
// commit applies it with ApplyLocal, without downloading what it wrote. On an error
// the copies are removed.
func UploadKeep(ctx context.Context, b *blob.Bucket, store *storage.Store, epoch, node, incarnation uint64, o storage.ExportOptions) (Uploaded, error) {
	return upload(ctx, b, store, epoch, node, incarnation, 0, o, true)
}

// UploadKeepFrom is UploadKeep whose objects are numbered from first on (the K of
// their Name): a process that uploads the data of several stores for one commit (an
// engine with node stores) numbers each one's objects after those of the stores
// before it, so that no two share a name.
func UploadKeepFrom(ctx context.Context, b *blob.Bucket, store *storage.Store, epoch, node, incarnation, first uint64, o storage.ExportOptions) (Uploaded, error) {
	return upload(ctx, b, store, epoch, node, incarnation, first, o, true)
}

func upload(ctx context.Context, b *blob.Bucket, store *storage.Store, epoch, node, incarnation, first uint64, o storage.ExportOptions, keep bool) (Uploaded, error) {
	var paths []string
	tabs, deltas, err := store.ExportCheckpoint(epoch, o, func(k int) (string, io.WriteCloser, error) {
		name := Name{Epoch: epoch, Node: node, Incarnation: incarnation, K: first + uint64(k)}.String()
		wctx, cancel := context.WithCancel(ctx)
		w, err := b.NewWriter(wctx, name, &blob.WriterOptions{ContentType: "application/octet-stream", IfNotExist: true})
		if err != nil {
			cancel()
			return "", nil, fmt.Errorf("objstore: upload object %s: %w", name, err)
		}
		ow := &objectWriter{w: w, cancel: cancel, name: name, k: k}
		if keep {
			lw, p, err := store.NewIngestFile(name)
			if err != nil {
				ow.Abort()
				return "", nil, fmt.Errorf("objstore: upload object %s: keep a copy: %w", name, err)
			}
			paths = append(paths, p)
			ow.local = lw
		}
		return name, ow, nil
	})
	if err != nil {
		store.DiscardIngestFiles(paths)
		return Uploaded{}, fmt.Errorf("objstore: upload epoch %d of node %d incarnation %d: %w", epoch, node, incarnation, err)
	}
	out := make([]Object, len(tabs))
	for i, t := range tabs {
		out[i] = Object{Name: t.Name, Smallest: t.Smallest, Largest: t.Largest, Size: t.Size}
	}
	return Uploaded{Objects: out, Paths: paths, RowDeltas: deltas}, nil
}

// objectWriter is one object being uploaded: Close completes it, Abort drops it.
// local, when set, receives a copy of every byte.
type objectWriter struct {
	w      *blob.Writer
	cancel context.CancelFunc
	name   string
	k      int // the object's index in its upload
	local  io.WriteCloser
}

// TestingBeforeWrite, when set, is called before each write into an object being
// uploaded, with the object's name and its index in its upload (0 for the first). It
// is a failpoint for tests of processes: weir compute sets it from
// WEIR_KILL_MID_UPLOAD to kill itself in the middle of a checkpoint's upload. Set it
// before any upload starts.
var TestingBeforeWrite func(name string, k int)

// Write writes p to the bucket, then to the copy: a file system may scribble over what
// it was given once it has copied it (pebble's MemFS does under its invariants).
func (o *objectWriter) Write(p []byte) (int, error) {
	if TestingBeforeWrite != nil {
		TestingBeforeWrite(o.name, o.k)
	}
	n, err := o.w.Write(p)
	if err != nil || o.local == nil {
		return n, err
	}
	if _, err := o.local.Write(p); err != nil {
		return 0, fmt.Errorf("objstore: upload object %s: keep a copy: %w", o.name, err)
	}
	return n, nil
}

func (o *objectWriter) Close() error {
	defer o.cancel()
	if o.local != nil {
		if err := o.local.Close(); err != nil {
			o.w.Close()
			return fmt.Errorf("objstore: upload object %s: keep a copy: %w", o.name, err)
		}
	}
	if err := o.w.Close(); err != nil {
		return fmt.Errorf("objstore: upload object %s: %w", o.name, err)
	}
	return nil
}

// Abort cancels the write's context before closing it, which drops the object.
func (o *objectWriter) Abort() {
	o.cancel()
	o.w.Close()
	if o.local != nil {
		o.local.Close()
	}
}

// Apply commits a committed version into store (docs/design.md §8, "Checkpoint
// commit" step 4): it downloads the named objects, which must all be of epoch, into
// the store's ingest directory and ingests them with the committed epoch and the
// version's changes ch (see storage.Store.IngestFiles), in one atomic step. objects are the version's objects
// for the key ranges the store owns, possibly none (the epoch alone is committed).
// An epoch at or below the store's committed epoch is already applied: Apply does
// nothing, so that a node catching up may start from any version at or before its
// own. Versions must be applied in order, one at a time.
//
// A malformed name, an object of another epoch, a failed or short download, and an
// object that IngestFiles refuses (a metadata key, overlapping another) are errors
// naming the object; then nothing is committed and the downloads are removed.
func Apply(ctx context.Context, b *blob.Bucket, store *storage.Store, epoch uint64, objects []string, ch storage.Changes) error {
	return ApplyWith(ctx, b, store, epoch, nil, objects, ch)
}

// ApplyWith is Apply of a version some of whose objects are already in store's
// ingest directory at local (UploadKeep's copies, consumed) and the others, named
// by objects, downloaded: a node store that exported part of a commit applies the
// whole of it so.
func ApplyWith(ctx context.Context, b *blob.Bucket, store *storage.Store, epoch uint64, local, objects []string, ch storage.Changes) error {
	if epoch <= store.CommittedEpoch() {
		store.DiscardIngestFiles(local)
		return nil
	}
	for _, name := range objects {
		n, err := ParseName(name)
		if err == nil && n.Epoch != epoch {
			err = fmt.Errorf("object %s is of epoch %d", name, n.Epoch)
		}
		if err != nil {
			store.DiscardIngestFiles(local)
			return fmt.Errorf("objstore: apply epoch %d: %w", epoch, err)
		}
	}
	paths, err := downloadAll(ctx, b, store, append(make([]string, 0, len(local)+len(objects)), local...), objects)
	if err != nil {
		return fmt.Errorf("objstore: apply epoch %d: %w", epoch, err)
	}
	return ApplyLocal(store, epoch, paths, ch)
}

// ApplyLocal is Apply of objects already in store's ingest directory at paths
// (UploadKeep's copies); the files are consumed.
func ApplyLocal(store *storage.Store, epoch uint64, paths []string, ch storage.Changes) error {
	if err := store.IngestFiles(paths, epoch, ch); err != nil {
		return fmt.Errorf("objstore: apply epoch %d: %w", epoch, err)
	}
	return nil
}

// Gain has a partial store hold ranges (vnodes per table) too, at its applied
// sequence seq (storage.Store.Gain): objects are the objects of the log's commits up
// to seq that may hold keys of ranges (the base's, then each delta's, oldest first),
// downloaded and merged. On an error nothing changes and the downloads are removed.
func Gain(ctx context.Context, b *blob.Bucket, store *storage.Store, seq uint64, ranges map[uint32]*vnode.Bitmap, objects []string) error {
	paths, err := downloadAll(ctx, b, store, nil, objects)
	if err != nil {
		return fmt.Errorf("objstore: gain vnodes at sequence %d: %w", seq, err)
	}
	if err := store.Gain(seq, ranges, paths); err != nil {
		return fmt.Errorf("objstore: %w", err)
	}
	return nil
}

// downloadAll downloads the named objects into new ingest files of store and returns
// paths with theirs appended; on an error every file of paths and of the downloads is
// removed.
func downloadAll(ctx context.Context, b *blob.Bucket, store *storage.Store, paths, names []string) ([]string, error) {
	for _, name := range names {
		p, err := download(ctx, b, store, name)
		if err != nil {
			store.DiscardIngestFiles(paths)
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// download copies object name into a new ingest file of store and returns its path.
func download(ctx context.Context, b *blob.Bucket, store *storage.Store, name string) (string, error) {
	r, err := b.NewReader(ctx, name, nil)
	if err != nil {
		return "", fmt.Errorf("download object %s: %w", name, err)
	}
	defer r.Close()
	w, p, err := store.NewIngestFile(name)
	if err != nil {
		return "", fmt.Errorf("download object %s: %w", name, err)
	}
	n, err := io.Copy(w, r)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != r.Size() {
		err = fmt.Errorf("read %d of its %d bytes", n, r.Size())
	}
	if err != nil {
		store.DiscardIngestFiles([]string{p})
		return "", fmt.Errorf("download object %s: %w", name, err)
	}
	return p, nil
}
