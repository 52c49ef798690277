package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/spf13/cobra"
)

func newServe() *cobra.Command {
	var dir, addr string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve an engine directory to remote clients over Arrow Flight (engine/cluster/remote)",
		Long: `serve opens the engine in --dir (created when missing) and serves it on --addr
over Arrow Flight: a Go program reaches it with remote.Dial, whose Client is an
engine.DB like the embedded engine. It prints "serving ADDR" once it listens, and on
SIGINT or SIGTERM stops serving and closes the engine (a last checkpoint).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("serve: --dir is required")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serve(ctx, dir, addr, func(a string) { fmt.Fprintf(cmd.OutOrStdout(), "serving %s\n", a) }, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "engine directory")
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:7070", "address to listen on (port 0: any free port)")
	return cmd
}

// serve serves the engine in dir on addr until ctx is done, then closes the engine.
func serve(ctx context.Context, dir, addr string, listening func(addr string), logw io.Writer) (err error) {
	e, err := engine.Open(ctx, dir, engine.Options{Logger: slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer func() {
		if cerr := e.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("serve: close the engine in %s: %w", dir, cerr)
		}
	}()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	fs := remote.NewFlightServer(remote.NewServer(e, memory.NewGoAllocator()))
	fs.InitListener(lis)
	go func() {
		<-ctx.Done()
		fs.Shutdown()
	}()
	listening(lis.Addr().String())
	if err := fs.Serve(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
