package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/seed04fbb902/weir/schema"
)

// weir serve: a client creates a table through it and checkpoints; cancelling the
// serve closes the engine, whose directory then holds the table.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	sctx, stop := context.WithCancel(ctx)
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(sctx, serveOptions{dir: dir, addr: "127.0.0.1:0", node: 1, exchange: "channel"}, func(a string) { addrs <- a }, io.Discard) }()
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
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
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
