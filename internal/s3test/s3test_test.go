package s3test

import (
	"context"
	"os"
	"testing"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"
)

// The server takes objects into a new bucket through gocloud.dev/blob's s3blob and
// gives them back, lists and deletes them; killed it refuses writes, restarted it
// holds what it held; Stop removes everything. It runs under
// make test-s3 (WEIR_VERSITYGW set).
func TestServer(t *testing.T) {
	if os.Getenv(BinaryEnv) == "" {
		t.Skipf("%s is not set (make test-s3 sets it)", BinaryEnv)
	}
	s, err := FromEnv("s3test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, err := s.NewBucket("b")
	if err != nil {
		t.Fatal(err)
	}
	b, err := blob.OpenBucket(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WriteAll(ctx, "e1-n1-i1-0.sst", []byte("hello"), nil); err != nil {
		t.Fatalf("write to %s: %v", u, err)
	}
	got, err := b.ReadAll(ctx, "e1-n1-i1-0.sst")
	if err != nil || string(got) != "hello" {
		t.Fatalf("read back %q, %v", got, err)
	}
	it := b.List(nil)
	o, err := it.Next(ctx)
	if err != nil || o.Key != "e1-n1-i1-0.sst" || o.Size != 5 {
		t.Fatalf("list: %+v, %v", o, err)
	}
	// Killed, the server refuses; restarted, it holds what it held.
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteAll(ctx, "e2-n1-i1-0.sst", []byte("x"), nil); err == nil {
		t.Fatal("a write to a killed server succeeded")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ReadAll(ctx, "e1-n1-i1-0.sst"); err != nil || string(got) != "hello" {
		t.Fatalf("after the restart: %q, %v", got, err)
	}
	if err := b.Delete(ctx, "e1-n1-i1-0.sst"); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Exists(ctx, "e1-n1-i1-0.sst"); ok || err != nil {
		t.Fatalf("exists after delete: %v, %v", ok, err)
	}
	b.Close()
	dir := s.dir
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s left after Stop: %v", dir, err)
	}
}
