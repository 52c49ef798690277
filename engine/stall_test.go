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
	a := &actor{id: 41, frag: &fragment{obj: &object{Name: "stalled_view"}}, exec: ex}
	g := &graph{ctx: ctx, reports: make(chan report, 1)}
	done := make(chan error, 1)
	go func() {
		var err error
		withActorLabels(ctx, a, func(context.Context) { err = a.loop(g) })
		done <- err
	}()
	<-ex.entered
	if r := <-g.reports; r.actor != 41 || r.epoch != 5 {
		t.Fatalf("report %+v, want actor 41 passing barrier 5", r)
	}
	got := a.status.describe(time.Now().Add(time.Second))
	if !strings.HasPrefix(got, "in its executor for ") || !strings.HasSuffix(got, "last barrier passed 5") {
		t.Errorf("status %q, want in its executor, last barrier passed 5", got)
	}
	stacks := actorStacks([]executors.ActorID{41})
	for _, want := range []string{`"weir_actor":"41"`, `"weir_object":"stalled_view"`, "blockingExec).Next"} {
		if !strings.Contains(stacks, want) {
			t.Errorf("stacks of actor 41 lack %q:\n%s", want, stacks)
		}
	}
	if other := actorStacks([]executors.ActorID{4}); other != "" {
		t.Errorf("stacks of actor 4 (no such actor):\n%s", other)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("loop: %v, want the context's end", err)
	}
}

// describe names each step, and a fresh status has passed no barrier.
func TestActorStatusDescribe(t *testing.T) {
	var st actorStatus
	st.enter(stepDispatch)
	now := time.Unix(0, st.since.Load()).Add(1500 * time.Millisecond)
	if got, want := st.describe(now), "dispatching downstream for 1.5s, no barrier passed yet"; got != want {
		t.Errorf("describe %q, want %q", got, want)
	}
	st.passed.Store(9)
	st.enter(stepReport)
	if got := st.describe(time.Unix(0, st.since.Load())); got != "reporting a barrier for 0s, last barrier passed 9" {
		t.Errorf("describe %q", got)
	}
}
