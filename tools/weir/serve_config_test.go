package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/seed04fbb902/weir/storage"
)

// weir serve refuses bad configuration before it serves, with an error that names
// what is wrong: an unreachable meta store, a missing bucket, a commit log given by
// half, and a directory that follows another cluster's log. The refused directory
// is left as it was: its own cluster serves it afterwards.
func TestServeBadConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg := startPostgres(t)
	dsnA, dsnB := pg.NewDatabase(t, "config_a"), pg.NewDatabase(t, "config_b")
	bucketA, bucketB := "file://"+filepath.ToSlash(t.TempDir()), "file://"+filepath.ToSlash(t.TempDir())
	missing := filepath.Join(t.TempDir(), "nosuch")

	// run serves o until stop is called, or returns serve's error at once.
	run := func(o serveOptions) (addr string, stop func() error, err error) {
		o.addr, o.exchange, o.control = "127.0.0.1:0", "channel", "channel"
		if o.node == 0 {
			o.node = 1
		}
		sctx, cancel := context.WithCancel(ctx)
		addrs, done := make(chan string, 1), make(chan error, 1)
		go func() { done <- serve(sctx, o, func(a string) { addrs <- a }, io.Discard) }()
		select {
		case addr = <-addrs:
			return addr, func() error { cancel(); return <-done }, nil
		case err = <-done:
			cancel()
			return "", nil, err
		}
	}

	// A directory that follows cluster A's log, with a table in it.
	dir := filepath.Join(t.TempDir(), "a")
	addr, stop, err := run(serveOptions{dir: dir, meta: dsnA, bucket: bucketA})
	if err != nil {
		t.Fatal(err)
	}
	c, err := remote.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTable(ctx, kvTable, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := insertKV(ctx, c, 0, 100, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		o    serveOptions
		want []string
	}{
		{"unreachable meta store", serveOptions{dir: t.TempDir(), meta: "postgres://weir@127.0.0.1:1/weir?connect_timeout=2", bucket: bucketB}, []string{"127.0.0.1:1"}},
		{"missing bucket", serveOptions{dir: t.TempDir(), meta: dsnB, bucket: "file://" + filepath.ToSlash(missing)}, []string{missing}},
		{"meta without bucket", serveOptions{dir: t.TempDir(), meta: dsnB}, []string{"--meta and --bucket go together"}},
		{"replica without a log", serveOptions{dir: t.TempDir(), replica: true}, []string{"--replica"}},
		{"node stores without a log", serveOptions{dir: t.TempDir(), nodeStores: true}, []string{"--node-stores", "--meta and --bucket"}},
		{"another cluster's directory", serveOptions{dir: dir, meta: dsnB, bucket: bucketB}, []string{"another cluster", "applied sequence", dir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stop, err := run(tc.o)
			if err == nil {
				stop()
				t.Fatalf("served; want a refusal naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
			t.Logf("%v", err)
		})
	}

	// Cluster A still serves the directory, with its table, now with a store per
	// node: they start empty and catch up from the log, and commit the next rows.
	addr, stop, err = run(serveOptions{dir: dir, meta: dsnA, bucket: bucketA, node: 2, nodeStores: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c, err = remote.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := len(scanTwo(t, ctx, c, "kv")); n != 100 {
		t.Fatalf("after the refusals the directory's table holds %d rows, want 100", n)
	}
	if err := insertKV(ctx, c, 100, 150, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(scanTwo(t, ctx, c, "kv")); n != 150 {
		t.Fatalf("with node stores the table holds %d rows, want 150", n)
	}
	if _, err := os.Stat(filepath.Join(dir, storage.NodeStoresDirName, "node-0", "LOCK")); err != nil {
		t.Fatalf("--node-stores: no store of node 0: %v", err)
	}
}
