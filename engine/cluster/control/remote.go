package control

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seed04fbb902/weir/engine"
)

// A Local's remote nodes: compute processes that open their streams themselves
// (NewCluster), named ComputeName, which each graph waits for, checks and may
// leave down.

// ComputeName is the name of remote node i, a compute process, in the meta store's
// registry and on its control stream: "compute-<i>" (the committing process
// registers as "node-<n>").
func ComputeName(i int) string { return "compute-" + strconv.Itoa(i) }

// nodeIndex is the node a stream's name names.
func nodeIndex(name string) (int, bool) {
	for _, prefix := range []string{"node-", "compute-"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			i, err := strconv.Atoi(rest)
			return i, err == nil && i >= 0 && prefix+strconv.Itoa(i) == name
		}
	}
	return 0, false
}

// ExchangeAddr is the exchange address remote node i gave in the hello of its
// current stream; false when it has none.
func (l *Local) ExchangeAddr(i int) (string, bool) {
	for _, n := range l.coord.Nodes() {
		if n.Node == l.nameOf(i) && n.Addr != "" {
			return n.Addr, true
		}
	}
	return "", false
}

// streamOf is the incarnation of node i's current stream, 0 when it has none.
func (l *Local) streamOf(i int) uint64 {
	for _, n := range l.coord.Nodes() {
		if n.Node == l.nameOf(i) {
			return n.Incarnation
		}
	}
	return 0
}

// remoteStream is the incarnation of remote node i's current stream (0: none), or
// an error naming both roles when its hello gave another role than the engine's.
func (l *Local) remoteStream(i int) (uint64, error) {
	want := ""
	if i < len(l.roles) {
		want = l.roles[i]
	}
	for _, n := range l.coord.Nodes() {
		if n.Node != l.nameOf(i) {
			continue
		}
		if n.Role != want {
			return 0, fmt.Errorf("control: %s (incarnation %d) registered with role %q, and the engine gives node %d role %q (weir meta --node-roles, weir compute --role)", n.Node, n.Incarnation, n.Role, i, want)
		}
		return n.Incarnation, nil
	}
	return 0, nil
}

// awaitRemote waits until deadline (wait after the graph began to open) for remote
// node i's stream and returns its incarnation. A stream whose role is not the
// engine's for the node fails it at once.
func (l *Local) awaitRemote(ctx context.Context, i int, deadline time.Time, wait time.Duration) (uint64, error) {
	for {
		inc, err := l.remoteStream(i)
		if err != nil {
			return 0, err
		}
		if inc != 0 {
			return inc, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("control: %s has no control stream after %s: its compute process is not connected to %s: %w", l.nameOf(i), wait, l.addr, engine.ErrNodeLost)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("control: waiting for %s's stream: %w", l.nameOf(i), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// rejoin fails the round once for down node i's stream of incarnation inc, which is
// back: the recovery that follows places actors on the node again.
func (g *localGraph) rejoin(i int, inc uint64) {
	g.pmu.Lock()
	first := !g.rejoined[i]
	if g.rejoined == nil {
		g.rejoined = map[int]bool{}
	}
	g.rejoined[i] = true
	g.pmu.Unlock()
	if first {
		g.send(engine.ControlReport{Err: fmt.Errorf("control: %s is back (incarnation %d), down in generation %d: recover to place actors on it", g.l.nameOf(i), inc, g.gen)})
	}
}

// Down implements engine.ControlDown: the remote nodes the graph has no stream of.
func (g *localGraph) Down() []int { return slices.Clone(g.down) }
