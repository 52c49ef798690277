package control

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/seed04fbb902/weir/executors"
)

// The environment of a re-executed test binary: childEnv set to "node" runs runNode
// instead of the tests, a compute node connecting to the coordinator at addrEnv.
const (
	childEnv = "WEIR_CONTROL_CHILD"
	addrEnv  = "WEIR_CONTROL_ADDR"
)

// childNode and childIncarnation name the child's node.
const (
	childNode        = "child"
	childIncarnation = 3
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "node" {
		os.Exit(runNode())
	}
	os.Exit(m.Run())
}

// runNode is the child: it connects, prints "joined", then answers each Inject with a
// Collected of its barrier's Curr by actors 1 and 2 and prints "collected CURR". It
// prints nothing else on stdout; it returns when its stream ends.
func runNode() int {
	ctx := context.Background()
	n, err := Connect(ctx, os.Getenv(addrEnv), Hello{Stamp: Stamp{Incarnation: childIncarnation}, Node: childNode, Addr: "127.0.0.1:0"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer n.Close()
	fmt.Println("joined")
	for {
		m, err := n.Recv()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		in, ok := m.(Inject)
		if !ok {
			continue
		}
		if err := n.Send(ctx, Collected{Epoch: in.Barrier.Curr, Actors: []executors.ActorID{1, 2}}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("collected %d\n", in.Barrier.Curr)
	}
}

// TestKilledNode runs a compute node in a child process, exchanges barriers with it
// (Inject, then Collected), SIGKILLs exactly that child and checks that the
// coordinator reports the child's node lost.
func TestKilledNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	c, addr := serveCoordinator(t, testCfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=node", addrEnv+"="+addr)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := bufio.NewScanner(out)
	line := func() string {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the child's output ended: %v", lines.Err())
		}
		return lines.Text()
	}
	if ev := expect[NodeJoined](t, c); ev.Node != childNode || ev.Incarnation != childIncarnation {
		t.Fatalf("joined %+v", ev)
	}
	if got := line(); got != "joined" {
		t.Fatalf("the child says %q, want joined", got)
	}
	epoch := executors.Epoch(1 << 16)
	for range 3 {
		b := &executors.Barrier{Prev: epoch, Curr: epoch + 1, Kind: executors.Checkpoint}
		epoch++
		if err := c.Send(t.Context(), childNode, Inject{Barrier: b}); err != nil {
			t.Fatal(err)
		}
		m := fromNode[Collected](t, c, childNode)
		if m.Epoch != b.Curr || len(m.Actors) != 2 || m.Stamp != (Stamp{5, 2, childIncarnation}) {
			t.Fatalf("collected %#v for barrier %v", m, b)
		}
		if got, want := line(), fmt.Sprintf("collected %d", b.Curr); got != want {
			t.Fatalf("the child says %q, want %q", got, want)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	werr := cmd.Wait()
	waited = true
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v, not by SIGKILL", werr)
	}
	lost := expect[NodeLost](t, c)
	if lost.Node != childNode || lost.Incarnation != childIncarnation || !strings.Contains(lost.Err.Error(), `node "child" incarnation 3`) {
		t.Fatalf("lost %+v, want node %q incarnation %d", lost, childNode, childIncarnation)
	}
	t.Logf("after SIGKILL: %v", lost.Err)
	if err := c.Send(t.Context(), childNode, Teardown{Generation: 2}); err == nil {
		t.Fatal("Send to the killed node succeeded")
	}
}
