package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// weir serve: a client creates a table and a view through it, writes and
// checkpoints; weir status --addr and weir export --addr read the running server;
// cancelling the serve closes the engine, whose directory then holds the table.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	sctx, stop := context.WithCancel(ctx)
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(sctx, serveOptions{dir: dir, addr: "127.0.0.1:0", node: 1, exchange: "channel", control: "grpc"}, func(a string) { addrs <- a }, io.Discard)
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatal(err)
	}
	c, err := remote.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tab := &schema.Table{Name: "t", Columns: []schema.Column{{Name: "k", Type: schema.Type{Kind: schema.Int64}}}, PK: []schema.KeyColumn{{Column: 0}}}
	if err := c.CreateTable(ctx, tab, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	b := vec.NewChunkBuilder(memory.DefaultAllocator, tab)
	for k := range 300 {
		if err := b.AppendRow(vec.Insert, k); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := b.Build()
	b.Release()
	if err != nil {
		t.Fatal(err)
	}
	err = c.Insert(ctx, "t", ch.Record())
	ch.Release()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateMV(ctx, "v", engine.Scan("t"), engine.MVOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	// weir status and weir export against the running server.
	run := func(args ...string) string {
		t.Helper()
		root := newRoot()
		var out, errw bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errw)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("weir %v: %v\n%s", args, err, errw.String())
		}
		return out.String()
	}
	var st statusReport
	if err := json.Unmarshal([]byte(run("status", "--addr", addr, "--json", "--per-vnode")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Jobs) != 1 || st.Jobs[0].Name != "v" || !st.Jobs[0].Done || st.Jobs[0].RowsConsumed != 300 || len(st.Vnodes["v"]) != 256 {
		t.Fatalf("status over --addr: %+v (%d vnodes)", st.Jobs, len(st.Vnodes["v"]))
	}
	if csv := run("export", "--addr", addr, "--table", "v"); strings.Count(csv, "\n") != 301 || !strings.HasPrefix(csv, "k\n") {
		t.Fatalf("export over --addr: %d lines, starting %.20q", strings.Count(csv, "\n"), csv)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(ctx, dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Table("t"); err != nil {
		t.Fatalf("the served engine's directory: %v", err)
	}
}
