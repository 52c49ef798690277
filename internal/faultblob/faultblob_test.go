package faultblob_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"

	"github.com/seed04fbb902/weir/internal/faultblob"
)

// An armed bucket writes the objects it was told to, refuses the rest without
// leaving them behind, and keeps reading, listing and deleting; disarmed, it writes.
func TestRefusesWrites(t *testing.T) {
	ctx := context.Background()
	inner, b, f := newBuckets(t)
	put := func(key string) error { return putObject(ctx, b, key) }
	if err := put("a"); err != nil {
		t.Fatal(err)
	}
	f.Arm(1)
	if err := put("b"); err != nil {
		t.Fatalf("the write before the refusal: %v", err)
	}
	for _, k := range []string{"c", "d"} {
		if err := put(k); !errors.Is(err, faultblob.ErrRefused) {
			t.Fatalf("write %s while armed: %v, want ErrRefused", k, err)
		}
	}
	if err := b.Copy(ctx, "e", "a", nil); !errors.Is(err, faultblob.ErrRefused) {
		t.Fatalf("copy while armed: %v, want ErrRefused", err)
	}
	got, err := b.ReadAll(ctx, "a")
	if err != nil || string(got) != "data of a" {
		t.Fatalf("read while armed: %q, %v", got, err)
	}
	if hits := f.Disarm(); hits != 3 {
		t.Fatalf("Disarm: %d refusals, want 3", hits)
	}
	if err := put("f"); err != nil {
		t.Fatalf("write after Disarm: %v", err)
	}
	if err := b.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	var keys []string
	it := b.List(nil)
	for {
		o, err := it.Next(ctx)
		if err != nil {
			break
		}
		keys = append(keys, o.Key)
	}
	if want := []string{"a", "f"}; !slices.Equal(keys, want) {
		t.Fatalf("bucket holds %v, want %v (refused objects left behind?)", keys, want)
	}
	// The same refusals through the inner bucket: nothing of c, d or e is there.
	for _, k := range []string{"c", "d", "e"} {
		if ok, err := inner.Exists(ctx, k); err != nil || ok {
			t.Fatalf("refused object %s exists: %v, %v", k, ok, err)
		}
	}
}

// A held prefix holds the completion of its objects, and only of them, until the
// release: nothing of a held object is in the bucket before it.
func TestHoldsWrites(t *testing.T) {
	ctx := context.Background()
	inner, b, f := newBuckets(t)
	put := func(key string) error { return putObject(ctx, b, key) }
	release := f.Hold("b")
	done := make(chan error, 1)
	go func() { done <- put("b1") }()
	for f.Held() == 0 {
		select {
		case err := <-done:
			t.Fatalf("the held write returned %v before the release", err)
		case <-time.After(time.Millisecond):
		}
	}
	if err := put("e1"); err != nil {
		t.Fatalf("a write of another prefix: %v", err)
	}
	if ok, err := inner.Exists(ctx, "b1"); err != nil || ok {
		t.Fatalf("the held object is in the bucket (%v, %v) before the release", ok, err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the released write: %v", err)
	}
	if ok, err := inner.Exists(ctx, "b1"); err != nil || !ok {
		t.Fatalf("the released object is not in the bucket (%v, %v)", ok, err)
	}
	release() // a second release does nothing
}

// newBuckets returns a file:// bucket, the faulty bucket over it and its faults, all
// closed when the test ends.
func newBuckets(t *testing.T) (inner, b *blob.Bucket, f *faultblob.Faults) {
	t.Helper()
	inner, err := fileblob.OpenBucket(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	f = &faultblob.Faults{}
	b = faultblob.Wrap(inner, f)
	t.Cleanup(func() { b.Close() })
	return inner, b, f
}

// putObject writes object key into b.
func putObject(ctx context.Context, b *blob.Bucket, key string) error {
	w, err := b.NewWriter(ctx, key, &blob.WriterOptions{ContentType: "application/octet-stream", IfNotExist: true})
	if err != nil {
		return err
	}
	if _, err := w.Write([]byte("data of " + key)); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
