package exchange

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// childEnv selects the role of a re-executed test binary: "receiver" runs
// runReceiver instead of the tests.
const childEnv = "WEIR_EXCHANGE_CHILD"

// processEdge is the edge between the test and its child.
var processEdge = Edge{Up: 11, Down: 12, Generation: 3}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "receiver" {
		os.Exit(runReceiver())
	}
	os.Exit(m.Run())
}

// runReceiver is the child: an exchange server on 127.0.0.1:0 expecting processEdge.
// It prints "addr ADDR", then after every barrier "barrier CURR COUNT DIGEST" (the
// messages so far and their digest), and when the stream ends "end COUNT DIGEST ERR".
func runReceiver() int {
	srv := NewServer(memory.NewGoAllocator())
	in, err := srv.Expect(processEdge, nil, 16)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fs := NewFlightServer(srv, testWindow)
	fs.InitListener(lis)
	go func() { _ = fs.Serve() }()
	fmt.Printf("addr %s\n", lis.Addr())
	d := newDigest()
	for m := range in.Messages() {
		if err := d.add(m); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if m.Barrier != nil {
			fmt.Printf("barrier %d %d %s\n", m.Barrier.Curr, d.n, d.sum())
		}
		m.Release()
	}
	fmt.Printf("end %d %s %v\n", d.n, d.sum(), in.Err())
	fs.Shutdown()
	return 0
}

// TestKilledReceiver runs the receiver in a child process, checks that every message
// arrives in order and equal (by the child's digests), then SIGKILLs the child
// mid-stream and checks that the sender's next barrier fails naming the edge.
func TestKilledReceiver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=receiver")
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
	addr, ok := strings.CutPrefix(line(), "addr ")
	if !ok {
		t.Fatal("the child did not print its address first")
	}

	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng, _ := vectest.Rand(t)
	tab := vectest.RandomTable(rng, "t")
	s := newSender(t, t.Context(), dial(t, addr), processEdge, tab.ArrowSchema(), mem)
	d := newDigest()
	send := func(m executors.Message) error {
		if err := d.add(m); err != nil {
			t.Fatal(err)
		}
		return s.Send(t.Context(), m)
	}
	epoch := executors.Epoch(1 << 16)
	for round := range 5 {
		for range 20 {
			c := vectest.RandomChunk(rng, mem, tab, rng.IntN(500), 0.2)
			err := send(executors.ChunkMessage(c))
			c.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := send(executors.Message{Watermark: &executors.Watermark{Column: 0, Value: int64(round)}}); err != nil {
			t.Fatal(err)
		}
		b := &executors.Barrier{Prev: epoch, Curr: epoch + 1, Kind: executors.Checkpoint}
		epoch++
		if err := send(executors.BarrierMessage(b)); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("barrier %d %d %s", b.Curr, d.n, d.sum())
		if got := line(); got != want {
			t.Fatalf("round %d: the child says %q, the sender %q", round, got, want)
		}
	}

	// Mid-stream: chunks in flight, then the child dies.
	for range 5 {
		c := vectest.RandomChunk(rng, mem, tab, 100, 0)
		err := send(executors.ChunkMessage(c))
		c.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waited = true
	err = s.Send(t.Context(), executors.BarrierMessage(&executors.Barrier{Prev: epoch, Curr: epoch + 1}))
	if err == nil || !strings.Contains(err.Error(), processEdge.String()) {
		t.Fatalf("Send after the receiver was killed: %v, want an error naming %s", err, processEdge)
	}
	t.Logf("after SIGKILL: %v", err)
	if err := s.Close(); err == nil {
		t.Fatal("Close of a broken edge returned nil")
	}
}
