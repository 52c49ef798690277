package s3test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
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

// orphanEnv, set, makes TestServerDiesWithItsTest the child that starts a server and
// exits without Stop.
const orphanEnv = "WEIR_S3TEST_ORPHAN"

// A server whose test binary ends without Stop (a panic, a kill) dies with it: the
// test runs itself as a child that starts a server, prints its pid and exits, and
// then the pid must be gone. It runs under make test-s3 on Linux.
func TestServerDiesWithItsTest(t *testing.T) {
	if os.Getenv(BinaryEnv) == "" {
		t.Skipf("%s is not set (make test-s3 sets it)", BinaryEnv)
	}
	if runtime.GOOS != "linux" {
		t.Skip("only Linux kills a child with its parent")
	}
	if os.Getenv(orphanEnv) != "" {
		s, err := FromEnv("s3test-orphan")
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		fmt.Printf("pid %d dir %s\n", s.cmd.Process.Pid, s.dir)
		os.Exit(0) // without Stop
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestServerDiesWithItsTest$")
	cmd.Env = append(os.Environ(), orphanEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the child: %v: %s", err, out)
	}
	var pid int
	var dir string
	if _, err := fmt.Sscanf(string(out), "pid %d dir %s", &pid, &dir); err != nil {
		t.Fatalf("the child printed %q: %v", out, err)
	}
	defer os.RemoveAll(dir)
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the server (pid %d) outlived its test by 10 s", pid)
		}
	}
}
