package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
)

// Host is what a compute process serves its control stream with: *engine.Host is
// one. Each method takes the leader's term and the generation of the graph its
// message belongs to (a new term's generations start anew).
type Host interface {
	Build(ctx context.Context, at engine.GraphAt, spec []byte) error
	Inject(ctx context.Context, at engine.GraphAt, b *executors.Barrier) error
	Call(ctx context.Context, at engine.GraphAt, req []byte) ([]byte, error)
	Teardown(at engine.GraphAt)
}

var _ Host = (*engine.Host)(nil)

// Serve serves h over n, a compute process's stream, until the stream ends, and
// returns why (an error naming the node and its incarnation). Each BuildActors is
// built and answered with a Built frame; each Inject is injected, in order; each
// Call is served on its own goroutine and answered with an Answer frame, so that
// what follows it is not held behind it; a Teardown tears its generation down. A
// frame refused for its stamp is dropped. An injection that fails reports the
// node's failure and ends the stream. Every answer is stamped with the generation
// of the message it answers.
//
// The process's actors report through n.Report, with their graph's generation.
func Serve(ctx context.Context, n *Node, h Host) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	// The calls end with the stream: their answers could not leave.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	name := fmt.Sprintf("node %q incarnation %d", n.hello.Node, n.hello.Incarnation)
	for {
		m, err := n.Recv()
		var refused *RefusedError
		if errors.As(err, &refused) {
			continue
		}
		if err != nil {
			return err
		}
		gen := StampOf(m).Generation
		at := engine.GraphAt{Term: StampOf(m).Term, Generation: gen}
		switch m := m.(type) {
		case BuildActors:
			var berr error
			if m.SpecVersion != engine.BuildSpecVersion {
				berr = fmt.Errorf("control: %s: build %d: spec version %d, this node builds version %d", name, m.ID, m.SpecVersion, engine.BuildSpecVersion)
			} else {
				berr = h.Build(ctx, at, m.Spec)
			}
			if err := n.SendAt(ctx, gen, Built{ID: m.ID, Err: errText(berr)}); err != nil {
				return err
			}
		case Inject:
			if err := h.Inject(ctx, at, m.Barrier); err != nil {
				err = fmt.Errorf("control: %s: %w", name, err)
				_ = n.SendAt(ctx, gen, Failed{Err: errText(err)})
				n.Close()
				return err
			}
		case Call:
			wg.Add(1)
			go func() {
				defer wg.Done()
				payload, err := h.Call(cctx, at, m.Payload)
				a := Answer{ID: m.ID, Payload: payload}
				if err != nil {
					a = Answer{ID: m.ID, Err: errText(err)}
				}
				if err := n.SendAt(cctx, gen, a); err != nil {
					// An answer too long for a frame; or a lost stream, which fails this too.
					_ = n.SendAt(cctx, gen, Answer{ID: m.ID, Err: errText(fmt.Errorf("control: %s: call %d: %w", name, m.ID, err))})
				}
			}()
		case Teardown:
			h.Teardown(engine.GraphAt{Term: at.Term, Generation: m.Generation})
		default:
			return fmt.Errorf("control: %s: a %s from the coordinator (%s)", name, m.Kind(), StampOf(m))
		}
	}
}

// errText is err's text as a frame carries it (valid UTF-8, no NUL byte); "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(strings.ToValidUTF8(err.Error(), "\uFFFD"), "\x00", "\uFFFD")
}
