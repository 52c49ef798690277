package engine

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/seed04fbb902/weir/executors"
)

// What an actor is doing, for the coordinator's warning about a barrier it has not
// collected: the actor's loop records each step it enters, and when.
const (
	stepExecutor int32 = iota // in its executor's Next: waiting for input, or computing
	stepDispatch              // passing a message to its dispatchers (blocked: downstream is full)
	stepReport                // reporting a barrier (or its failure) to the coordinator
	stepClosing               // closing its executor and dispatchers
)

var stepNames = [...]string{"in its executor", "dispatching downstream", "reporting to the coordinator", "closing"}

// actorStatus is an actor's step and since when (one word: the unix milliseconds
// shifted left by stepBits, or'ed with the step, so that a reader never pairs a step
// with another step's time), and the last barrier it passed on.
type actorStatus struct {
	step   atomic.Int64
	passed atomic.Uint64
}

const stepBits = 3

// enter records that the actor entered step s, and when, if it was in another step: a
// clock read per change of step (two per chunk an actor passes on).
func (st *actorStatus) enter(s int32) {
	if v := st.step.Load(); v == 0 || st.current() != s {
		st.step.Store(time.Now().UnixMilli()<<stepBits | int64(s))
	}
}

// current is the step the actor is in (stepExecutor before it starts).
func (st *actorStatus) current() int32 { return int32(st.step.Load() & (1<<stepBits - 1)) }

// describe is the status for a log line, such as "in its executor for 10s, last
// barrier passed 42".
func (st *actorStatus) describe(now time.Time) string {
	v := st.step.Load()
	if v == 0 {
		return "not started"
	}
	name := "unknown"
	if s := int(v & (1<<stepBits - 1)); s < len(stepNames) {
		name = stepNames[s]
	}
	d := now.Sub(time.UnixMilli(v >> stepBits)).Round(time.Millisecond)
	if p := st.passed.Load(); p != 0 {
		return fmt.Sprintf("%s for %s, last barrier passed %d", name, d, p)
	}
	return fmt.Sprintf("%s for %s, no barrier passed yet", name, d)
}

// actorLabel is the pprof label that carries an actor's id: on its goroutine and on
// those it starts (a backfill's snapshot workers), in CPU profiles and in goroutine
// dumps.
const actorLabel = "weir_actor"

// withActorLabels runs f with the pprof labels of actor a (its id and its object's
// name), so that a CPU profile can be broken down by actor and a goroutine dump names
// each actor's goroutines.
func withActorLabels(ctx context.Context, a *nodeActor, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(actorLabel, strconv.Itoa(int(a.id)), "weir_object", a.obj), f)
}

// maxStacks caps the stacks logged for a barrier not collected (a large graph held
// up by one actor has every actor upstream of it waiting too).
const maxStacks = 32 << 10

// actorStacks returns the stacks of the goroutines labelled with one of the actors
// ids (pprof's goroutine profile, grouped by identical stacks and labels), at most
// maxStacks bytes of them, or "" when there are none.
func actorStacks(ids []executors.ActorID) string {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return ""
	}
	out := filterStacks(buf.String(), ids)
	if len(out) > maxStacks {
		out = out[:maxStacks] + "\n... (cut at " + strconv.Itoa(maxStacks) + " bytes)"
	}
	return out
}

// filterStacks keeps the groups of a debug=1 goroutine profile whose labels name one
// of the actors.
func filterStacks(profile string, ids []executors.ActorID) string {
	want := make([]string, len(ids))
	for i, id := range ids {
		want[i] = fmt.Sprintf("%q:%q", actorLabel, strconv.Itoa(int(id)))
	}
	var out strings.Builder
	for _, group := range strings.Split(profile, "\n\n") {
		for _, line := range strings.Split(group, "\n") {
			if !strings.HasPrefix(line, "# labels: ") {
				continue
			}
			for _, w := range want {
				if strings.Contains(line, w) {
					out.WriteString(strings.TrimSpace(group))
					out.WriteString("\n\n")
					break
				}
			}
			break
		}
	}
	return strings.TrimSpace(out.String())
}
