package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
)

// childEnv makes a re-executed test binary a server: its value is the engine's
// directory.
const childEnv = "WEIR_REMOTE_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(runServer(dir))
	}
	os.Exit(m.Run())
}

// runServer is the child: an engine in dir served on 127.0.0.1; it prints "serving
// ADDR" and runs until SIGTERM (then closes the engine) or SIGKILL.
func runServer(dir string) int {
	ctx := context.Background()
	e, err := engine.Open(ctx, dir, engine.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 1
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 1
	}
	fs := NewFlightServer(NewServer(e, memory.NewGoAllocator()))
	fs.InitListener(lis)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		<-term
		fs.Shutdown()
	}()
	fmt.Printf("serving %s\n", lis.Addr())
	if err := fs.Serve(); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
	}
	if err := e.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 1
	}
	return 0
}

// startServer starts the child serving dir and returns it and its address.
func startServer(t *testing.T, dir string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill() // this test's child, by pid
			_ = cmd.Wait()
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("server: %v", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "serving ")
	if !ok {
		t.Fatalf("server said %q", line)
	}
	return cmd, addr
}

// A client in this process drives an engine in another. Killed with SIGKILL, the
// server leaves the client with ErrUnavailable; restarted on its directory, it holds
// exactly what the last acknowledged checkpoint committed. SIGTERM closes it cleanly.
func TestKilledServer(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	cmd, addr := startServer(t, dir)
	c := dialT(t, addr, nil)
	if err := c.CreateTable(ctx, orders, engine.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	byCustomer := engine.Aggregate(engine.Scan("orders"), []string{"customer"}, engine.Agg("count_star", "", "n"))
	if err := c.CreateMV(ctx, "by_customer", byCustomer, engine.MVOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := write(ctx, c.Insert, []any{i, fmt.Sprint("c", i%3), i}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for _, name := range []string{"orders", "by_customer"} {
		rows, err := scanText(ctx, c, name)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = rows
	}
	// Written, not checkpointed: the kill may lose it, as a crash does.
	if err := write(ctx, c.Insert, []any{100, "late", 1}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if _, err := c.WaitCheckpoint(ctx); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("checkpoint on a killed server: %v, want ErrUnavailable naming %s", err, addr)
	}

	cmd, addr = startServer(t, dir)
	c = dialT(t, addr, nil)
	// The late write survived if a checkpoint ran before the kill: then in both.
	with := map[string][]string{
		"orders":      append(slices.Clone(want["orders"]), "100 late 1"),
		"by_customer": append(slices.Clone(want["by_customer"]), "late 1"),
	}
	survived := 0
	for name, rows := range want {
		got, err := scanText(ctx, c, name)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(with[name])
		switch {
		case slices.Equal(got, rows):
		case slices.Equal(got, with[name]):
			survived++
		default:
			t.Errorf("%s after the restart: %v, want %v (or with the late write, %v)", name, got, rows, with[name])
		}
	}
	if survived == 1 {
		t.Errorf("the late write survived in one of orders and by_customer only")
	}
	if err := write(ctx, c.Insert, []any{200, "c0", 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("server after SIGTERM: %v", err)
	}
}
