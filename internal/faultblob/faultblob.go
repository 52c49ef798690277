// Package faultblob wraps a gocloud.dev/blob bucket so that a test can make it refuse
// writes: a bucket that fails mid-checkpoint, as a full or unreachable object store
// does, while reads, listings and deletes keep working; or hold them, as a slow one
// does.
package faultblob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// ErrRefused is the error of a write the bucket refused.
var ErrRefused = errors.New("faultblob: the bucket refused the write (injected)")

// Faults arms and reports the faults of a wrapped bucket. Its methods may be called
// from any goroutine.
type Faults struct {
	mu    sync.Mutex
	armed bool
	after int // objects still written before the refusal
	hits  int
	// hold, when set, holds the completion of objects whose keys start with
	// holdPrefix until it is closed; held counts the writes it has held.
	hold       chan struct{}
	holdPrefix string
	held       int
}

// Hold makes the completion of every object whose key starts with prefix wait (a
// slow upload) until the returned release is called, which lets every held write go
// on, or until the write's context ends (the write then fails). Held reports how
// many writes it has held so far. A second Hold replaces the first for the writes
// after it: those the first holds wait for its release.
func (f *Faults) Hold(prefix string) (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{})
	f.hold, f.holdPrefix, f.held = ch, prefix, 0
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			if f.hold == ch {
				f.hold = nil
			}
			f.mu.Unlock()
			close(ch)
		})
	}
}

// Held is how many writes the last Hold has held.
func (f *Faults) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

// wait holds the completion of key while a Hold of its prefix lasts, or until ctx
// ends.
func (f *Faults) wait(ctx context.Context, key string) error {
	f.mu.Lock()
	ch := f.hold
	if ch == nil || !strings.HasPrefix(key, f.holdPrefix) {
		f.mu.Unlock()
		return nil
	}
	f.held++
	f.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("write %s, held: %w", key, ctx.Err())
	}
}

// Arm makes the bucket write after more objects, then refuse every later write
// until Disarm.
func (f *Faults) Arm(after int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed, f.after, f.hits = true, after, 0
}

// Disarm ends the fault and returns how many writes it refused.
func (f *Faults) Disarm() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	hits := f.hits
	f.armed, f.after, f.hits = false, 0, 0
	return hits
}

// refuse reports whether the object being completed is refused.
func (f *Faults) refuse() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.armed {
		return false
	}
	if f.after > 0 {
		f.after--
		return false
	}
	f.hits++
	return true
}

// Wrap returns a bucket whose writes go to b unless f refuses them. Closing the
// returned bucket does not close b.
func Wrap(b *blob.Bucket, f *Faults) *blob.Bucket {
	return blob.NewBucket(&bucket{b: b, f: f})
}

type bucket struct {
	b *blob.Bucket
	f *Faults
}

var _ driver.Bucket = (*bucket)(nil)

func (d *bucket) ErrorCode(err error) gcerrors.ErrorCode {
	if errors.Is(err, ErrRefused) {
		return gcerrors.Internal
	}
	return gcerrors.Code(err)
}

func (d *bucket) As(i any) bool { return d.b.As(i) }

func (d *bucket) ErrorAs(err error, i any) bool { return d.b.ErrorAs(err, i) }

func (d *bucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	a, err := d.b.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{
		CacheControl: a.CacheControl, ContentDisposition: a.ContentDisposition, ContentEncoding: a.ContentEncoding,
		ContentLanguage: a.ContentLanguage, ContentType: a.ContentType, Metadata: a.Metadata,
		CreateTime: a.CreateTime, ModTime: a.ModTime, Size: a.Size, MD5: a.MD5, ETag: a.ETag,
	}, nil
}

func (d *bucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	// The driver's first page is a nil token, the portable API's FirstPageToken.
	token := opts.PageToken
	if len(token) == 0 {
		token = blob.FirstPageToken
	}
	objs, next, err := d.b.ListPage(ctx, token, max(opts.PageSize, 1), &blob.ListOptions{Prefix: opts.Prefix, Delimiter: opts.Delimiter})
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	page := &driver.ListPage{NextPageToken: next}
	for _, o := range objs {
		page.Objects = append(page.Objects, &driver.ListObject{Key: o.Key, ModTime: o.ModTime, Size: o.Size, MD5: o.MD5, IsDir: o.IsDir})
	}
	return page, nil
}

func (d *bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, _ *driver.ReaderOptions) (driver.Reader, error) {
	r, err := d.b.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, err
	}
	return &reader{r: r}, nil
}

func (d *bucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	wctx, cancel := context.WithCancel(ctx)
	w, err := d.b.NewWriter(wctx, key, &blob.WriterOptions{
		ContentType: contentType, BufferSize: opts.BufferSize, MaxConcurrency: opts.MaxConcurrency,
		CacheControl: opts.CacheControl, ContentDisposition: opts.ContentDisposition, ContentEncoding: opts.ContentEncoding,
		ContentLanguage: opts.ContentLanguage, ContentMD5: opts.ContentMD5, Metadata: opts.Metadata,
		DisableContentTypeDetection: opts.DisableContentTypeDetection, IfNotExist: opts.IfNotExist,
	})
	if err != nil {
		cancel()
		return nil, err
	}
	return &writer{w: w, ctx: ctx, cancel: cancel, f: d.f, key: key}, nil
}

func (d *bucket) Copy(ctx context.Context, dst, src string, _ *driver.CopyOptions) error {
	if d.f.refuse() {
		return fmt.Errorf("copy %s to %s: %w", src, dst, ErrRefused)
	}
	return d.b.Copy(ctx, dst, src, nil)
}

func (d *bucket) Delete(ctx context.Context, key string, _ *driver.DeleteOptions) error {
	return d.b.Delete(ctx, key)
}

func (d *bucket) SignedURL(ctx context.Context, key string, opts *driver.SignedURLOptions) (string, error) {
	return "", fmt.Errorf("faultblob: signed URLs are not supported")
}

func (d *bucket) Close() error { return nil }

type reader struct{ r *blob.Reader }

func (r *reader) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r *reader) Close() error               { return r.r.Close() }
func (r *reader) As(i any) bool              { return r.r.As(i) }
func (r *reader) Attributes() *driver.ReaderAttributes {
	return &driver.ReaderAttributes{ContentType: r.r.ContentType(), ModTime: r.r.ModTime(), Size: r.r.Size()}
}

// writer completes its object on Close unless the faults refuse it, in which case
// the object is dropped (the inner write's context is cancelled before its close).
type writer struct {
	w      *blob.Writer
	ctx    context.Context // the writer's own, before its cancel
	cancel context.CancelFunc
	f      *Faults
	key    string
}

func (w *writer) Write(p []byte) (int, error) { return w.w.Write(p) }

func (w *writer) Close() error {
	defer w.cancel()
	if err := w.f.wait(w.ctx, w.key); err != nil {
		w.cancel()
		w.w.Close()
		return err
	}
	if w.f.refuse() {
		w.cancel()
		w.w.Close()
		return fmt.Errorf("write %s: %w", w.key, ErrRefused)
	}
	return w.w.Close()
}
