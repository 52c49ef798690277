package control

import (
	"context"
	"fmt"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
)

// localSide is node i's side of a Local's graph in the engine's own process: the
// Host that Serve serves the node's stream with, as a compute process serves its
// own, over the engine's ControlNode. It counts what it built, injected and served.
type localSide struct {
	g *localGraph
	i int
}

var _ Host = localSide{}

// serveLocal serves node i's stream n until it ends (Close waits for it).
func (g *localGraph) serveLocal(ctx context.Context, i int, n *Node) {
	defer g.wg.Done()
	_ = Serve(ctx, n, localSide{g: g, i: i}) // a stream that ends is the coordinator's loss to see
}

// Build implements Host.
func (s localSide) Build(ctx context.Context, _ engine.GraphAt, spec []byte) error {
	if err := s.g.side.Build(ctx, s.i, spec); err != nil {
		return err
	}
	s.g.l.built.Add(1)
	return nil
}

// Inject implements Host.
func (s localSide) Inject(ctx context.Context, _ engine.GraphAt, b *executors.Barrier) error {
	if err := s.g.side.Inject(ctx, s.i, b); err != nil {
		return err
	}
	s.g.l.injected.Add(1)
	return nil
}

// Call implements Host.
func (s localSide) Call(ctx context.Context, _ engine.GraphAt, req []byte) ([]byte, error) {
	if s.g.side.Call == nil {
		return nil, fmt.Errorf("control: %s: the node serves no calls", s.g.l.nameOf(s.i))
	}
	payload, err := s.g.side.Call(ctx, s.i, req)
	s.g.l.calls.Add(1) // served: its answer, or its error, goes back
	return payload, err
}

// Teardown implements Host: the engine tears its own nodes' sides down itself, and
// a Local never sends one a Teardown.
func (s localSide) Teardown(engine.GraphAt) {}
