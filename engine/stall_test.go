package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/seed04fbb902/weir/executors"
)

// blockingExec returns a barrier of epoch 5 first, then blocks in Next until its
// context ends (an actor waiting for input that does not come).
type blockingExec struct {
	gave    bool
	entered chan struct{}
}

func (b *blockingExec) Next(ctx context.Context) (executors.Message, error) {
	if !b.gave {
		b.gave = true
		return executors.BarrierMessage(&executors.Barrier{Prev: 4, Curr: 5}), nil
	}
	close(b.entered)
	<-ctx.Done()
	return executors.Message{}, ctx.Err()
}
func (b *blockingExec) Schema() *arrow.Schema { return arrow.NewSchema(nil, nil) }
func (b *blockingExec) Close() error          { return nil }

// An actor held in its executor says so, with the last barrier it passed on, and
// the goroutine dump filtered to its label shows where it is held; another actor's
// label selects nothing.
func TestActorStallReport(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ex := &blockingExec{entered: make(chan struct{})}
	const id = 904_041 // no other test's actor has it
	a := &nodeActor{id: id, obj: "stalled_view", exec: ex}
	g := &graph{ctx: ctx, reports: make(chan report, 1)}
	n := &nodeSide{env: nodeEnv{ctx: ctx, report: g.report}}
	done := make(chan error, 1)
	go func() {
		var err error
		withActorLabels(ctx, a, func(context.Context) { err = a.loop(n) })
		done <- err
	}()
	<-ex.entered
	if r := <-g.reports; r.actor != id || r.epoch != 5 {
		t.Fatalf("report %+v, want actor %d passing barrier 5", r, id)
	}
	got := a.status.describe(time.Now().Add(time.Second))
	if !strings.HasPrefix(got, "in its executor for ") || !strings.HasSuffix(got, "last barrier passed 5") {
		t.Errorf("status %q, want in its executor, last barrier passed 5", got)
	}
	stacks := actorStacks([]executors.ActorID{id})
	for _, want := range []string{`"weir_actor":"904041"`, `"weir_object":"stalled_view"`, "blockingExec).Next"} {
		if !strings.Contains(stacks, want) {
			t.Errorf("stacks of actor %d lack %q:\n%s", id, want, stacks)
		}
	}
	if other := actorStacks([]executors.ActorID{90404}); other != "" {
		t.Errorf("stacks of actor 90404 (no such actor):\n%s", other)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("loop: %v, want the context's end", err)
	}
}

// describe names each step, and a fresh status has passed no barrier.
func TestActorStatusDescribe(t *testing.T) {
	var st actorStatus
	if got := st.describe(time.Now()); got != "not started" {
		t.Errorf("describe %q, want not started", got)
	}
	t0 := time.Now()
	st.enter(stepDispatch)
	// The time is kept in milliseconds: an hour later reads 1h0m0s to 1h0m0.001s.
	if got := st.describe(t0.Add(time.Hour)); !strings.HasPrefix(got, "dispatching downstream for 1h0m0") || !strings.HasSuffix(got, "s, no barrier passed yet") {
		t.Errorf("describe %q, want dispatching downstream for 1h, no barrier passed yet", got)
	}
	st.passed.Store(9)
	st.enter(stepReport)
	if got := st.describe(time.Now()); !strings.HasPrefix(got, "reporting to the coordinator for ") || !strings.HasSuffix(got, ", last barrier passed 9") {
		t.Errorf("describe %q", got)
	}
}

// filterStacks keeps the groups whose labels name one of the actors, by the whole id:
// actor 4 does not select actor 41's group.
func TestFilterStacks(t *testing.T) {
	profile := "goroutine profile: total 3\n" +
		"1 @ 0x1 0x2\n# labels: {\"weir_actor\":\"41\", \"weir_object\":\"v\"}\n#\t0x1\tmain.a+0x1\tf.go:1\n\n" +
		"1 @ 0x3\n# labels: {\"weir_actor\":\"4\", \"weir_object\":\"w\"}\n#\t0x3\tmain.b+0x1\tf.go:2\n\n" +
		"1 @ 0x5\n#\t0x5\tmain.c+0x1\tf.go:3\n"
	for _, tc := range []struct {
		ids       []executors.ActorID
		want, not []string
	}{
		{[]executors.ActorID{4}, []string{"main.b"}, []string{"main.a", "main.c"}},
		{[]executors.ActorID{41}, []string{"main.a"}, []string{"main.b", "main.c"}},
		{[]executors.ActorID{4, 41}, []string{"main.a", "main.b"}, []string{"main.c"}},
		{[]executors.ActorID{1}, nil, []string{"main.a", "main.b", "main.c"}},
	} {
		got := filterStacks(profile, tc.ids)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("actors %v: %q lacks %s", tc.ids, got, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(got, n) {
				t.Errorf("actors %v: %q has %s", tc.ids, got, n)
			}
		}
	}
}
