package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/seed04fbb902/weir/executors"
)

// Control carries the coordinator's requests to the nodes (the actors to build, the
// barriers to inject at the sources) and the actors' reports (a barrier passed on, a
// failure) from their nodes back to the coordinator: in cluster mode each node's
// control stream (engine/cluster/control implements it over gRPC; the engine never
// imports that). With Options.Control nil, each is a call or a channel send.
//
// The engine opens the control of every graph it builds (Open) and closes it when it
// tears the graph down; it calls Open from its recovery, one goroutine at a time.
type Control interface {
	// Open starts the control of the graph of generation gen over nodes nodes, whose
	// side of every stream is node.
	Open(ctx context.Context, gen uint64, nodes int, node ControlNode) (ControlGraph, error)
}

// ControlNode is the nodes' side of a graph's control: what each node's stream calls
// with what the coordinator sent it, in the order sent. None of them is called after
// ControlGraph.Close returned.
type ControlNode struct {
	// Deliver takes what a node reported, in the order the node sent it; when a
	// node's stream is lost, it gets a report with Err naming the node, which fails
	// the round.
	Deliver func(ControlReport)
	// Build builds on node the actors of spec (a build spec of version
	// BuildSpecVersion, from ControlGraph.Build): all of them, or none and an error.
	Build func(ctx context.Context, node int, spec []byte) error
	// Inject puts barrier b at node's sources and returns once they all took it, or
	// fails once the graph is torn down.
	Inject func(ctx context.Context, node int, b *executors.Barrier) error
	// Call answers a request of the commit log for node's part of a checkpoint (an
	// opaque payload from ControlGraph.Call, served by the node's NodeServer over
	// its own store).
	Call func(ctx context.Context, node int, req []byte) ([]byte, error)
}

// ControlGraph is the control of one graph.
type ControlGraph interface {
	// Build sends spec to node, whose Build (ControlNode) builds its actors, and
	// returns once the node answered: nil when it built them all, its error
	// otherwise, or an error naming the node when its stream is lost first.
	Build(ctx context.Context, node int, spec []byte) error
	// Inject sends b from the coordinator to node, whose Inject (ControlNode) puts
	// it at the node's sources. It returns once the barrier left, not once the node
	// injected it (the actors' reports say that); an error means the node's stream
	// is lost.
	Inject(ctx context.Context, node int, b *executors.Barrier) error
	// Report sends r from node to the coordinator.
	Report(ctx context.Context, node int, r ControlReport) error
	// Call sends req to node, whose Call (ControlNode) answers it, and returns the
	// answer, or the node's error. An error that wraps ErrNodeLost means the node's
	// stream was lost before the answer came.
	Call(ctx context.Context, node int, req []byte) ([]byte, error)
	// Close ends the graph's control.
	Close()
}

// ControlDown is implemented by a ControlGraph whose remote nodes may be down when
// it opens: Down lists the nodes it has no stream of (a compute process that died
// and did not come back in time). The engine places nothing on them in that graph:
// their actors run on the live nodes, whose stores hold the committed state of
// every vnode; a down node's stream that comes back fails the round (a report with
// Err), and the recovery that follows places actors on it again.
type ControlDown interface {
	Down() []int
}

// ErrNodeLost marks an error of a node whose control stream was lost.
var ErrNodeLost = errors.New("node lost")

// ControlReport is one actor's report: it passed on the barrier that starts Epoch,
// or it failed with Err (Actor 0: a node's failure, such as a lost stream). A backfill
// actor's report of a barrier carries its progress as it passed it (Backfill): the
// coordinator knows a backfill's progress, and that it is done, from these reports.
//
// A report with Finishing set is of no barrier: the actor's backfill has read its
// whole snapshot and is done at the next barrier, which the coordinator then injects
// at once, as a checkpoint.
//
// Pending is the node's uncommitted bytes as it reported the barrier (storage.Node's
// PendingBytes): the coordinator spaces checkpoints while a backfill runs by what
// the nodes report, never by reading their stores.
type ControlReport struct {
	Actor     executors.ActorID
	Epoch     executors.Epoch
	Err       error
	Backfill  *executors.BackfillStats
	Finishing bool
	Pending   int64
}

// openControl opens g's control when the engine has one.
func (g *graph) openControl() error {
	c := g.e.opts.Control
	if c == nil {
		return nil
	}
	ctl, err := c.Open(g.ctx, g.generation, len(g.e.nodes), ControlNode{
		Deliver: func(r ControlReport) {
			if r.Finishing {
				g.e.backfillFinishing() // no barrier's report: the rounds never see it
				return
			}
			select {
			case g.reports <- report{actor: r.Actor, epoch: r.Epoch, err: r.Err, backfill: r.Backfill, pending: r.Pending}:
			case <-g.dead:
			}
		},
		Build:  g.buildAt,
		Inject: g.injectAt,
		Call:   g.callAt,
	})
	if err != nil {
		return fmt.Errorf("control: open generation %d: %w", g.generation, err)
	}
	g.ctl = ctl
	if d, ok := ctl.(ControlDown); ok {
		for _, n := range d.Down() {
			g.downNodes[n] = true
		}
	}
	if len(g.downNodes) > 0 && len(g.e.nodesOf("")) == 0 {
		return fmt.Errorf("control: generation %d: every regular node is down (%v)", g.generation, sortedNodes(g.downNodes))
	}
	return nil
}

// sortedNodes lists the nodes of set, in order.
func sortedNodes(set map[int]bool) []int {
	var out []int
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// report delivers r of actor a to the coordinator: through the graph's control when
// it has one, on the reports channel otherwise. It fails when the graph is torn down.
func (g *graph) report(a *nodeActor, r report) error {
	if g.ctl != nil {
		err := g.ctl.Report(g.ctx, a.node, ControlReport{Actor: r.actor, Epoch: r.epoch, Err: r.err, Backfill: r.backfill, Pending: r.pending})
		if err != nil && g.ctx.Err() == nil {
			// The report did not leave: a lost stream, which the control delivers
			// as the node's failure.
			return fmt.Errorf("actor %d: report to the coordinator: %w", a.id, err)
		}
		return g.ctx.Err()
	}
	select {
	case g.reports <- r:
		return nil
	case <-g.ctx.Done():
		return g.ctx.Err()
	}
}

// finishing tells the coordinator that actor a's backfill read its whole snapshot
// (BackfillConfig.OnFinishing): through the graph's control when it has one, by a
// call otherwise.
func (g *graph) finishing(a *nodeActor) {
	if g.ctl != nil {
		// A report that does not leave is a lost stream, which fails the round.
		_ = g.ctl.Report(g.ctx, a.node, ControlReport{Actor: a.id, Finishing: true})
		return
	}
	g.e.backfillFinishing()
}

// sourceNodes is the nodes that hold a DML input, in order: where a barrier is
// injected.
func (g *graph) sourceNodes() []int {
	var nodes []int
	for _, in := range g.inputs() {
		if !slices.Contains(nodes, in.node) {
			nodes = append(nodes, in.node)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// injectAt puts b at the sources of node, every DML input whose actor runs there: a
// node's side of ControlGraph.Inject. It fails once the graph is torn down.
func (g *graph) injectAt(ctx context.Context, node int, b *executors.Barrier) error {
	dead := func() error {
		return fmt.Errorf("barrier %d at node %d: the graph of generation %d is torn down", b.Curr, node, g.generation)
	}
	for _, in := range g.inputs() {
		if in.node != node {
			continue
		}
		select {
		case <-g.dead: // before the send, which select could pick while both are ready
			return dead()
		default:
		}
		if err := in.lock(ctx, g.dead, nil, nil); errors.Is(err, errTornDown) {
			return dead()
		} else if err != nil {
			return fmt.Errorf("barrier %d at node %d: %w", b.Curr, node, err)
		}
		select {
		case in.c <- executors.BarrierMessage(b):
			in.markBarrier(b)
			in.unlock()
		case <-g.dead:
			in.unlock()
			return dead()
		case <-ctx.Done():
			in.unlock()
			return fmt.Errorf("barrier %d at node %d: %w", b.Curr, node, ctx.Err())
		}
	}
	return nil
}

// callAt is a node's side of ControlGraph.Call: the commit log's request for the
// node's part of a checkpoint, served with the node's own store.
func (g *graph) callAt(ctx context.Context, node int, req []byte) ([]byte, error) {
	return g.e.serveNode(ctx, node, req)
}
