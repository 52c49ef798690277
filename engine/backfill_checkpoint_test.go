package engine_test

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// While a backfill runs, barriers are checkpoints only as
// Options.BackfillCheckpointInterval and BackfillCheckpointBytes say; the barrier at
// which it becomes done is one all the same, so CreateMV returns with the view
// committed; once no backfill runs, every barrier is a checkpoint again.
func TestBackfillCheckpointSpacing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
		bytes    int64
		// want: few checkpoints ("few": those every build has, and those of the
		// interval, which is at most half the time the backfill has run: a number
		// of them logarithmic in the barriers), a third of the barriers or more
		// ("many": rows written every few barriers pass a budget of one byte, and
		// the barrier after the reports that say so is a checkpoint, about every
		// other one), or every one ("all").
		want string
	}{
		{"interval", time.Hour, 1 << 40, "few"},
		{"bytes", time.Hour, 1, "many"},
		{"off", -1, 0, "all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := vectest.Seed(t)
			rng := vectest.NewRand(seed)
			mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
			defer mem.AssertSize(t, 0)
			ctx := context.Background()
			kinds := &barrierKinds{}
			fs := vfs.NewMem()
			opts := engine.Options{
				FS: fs, Mem: mem, BarrierInterval: 5 * time.Millisecond, ChunkSize: 16, Logger: quietLogger(),
				BackfillCheckpointInterval: tc.interval, BackfillCheckpointBytes: tc.bytes,
				OnBarrier: kinds.record,
			}
			e, err := engine.Open(ctx, "db", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			during, ckpts := rateLimitedBuild(t, e, mem, rng, kinds)
			if !during[len(during)-1] {
				t.Fatalf("the barrier that made the backfill done was no checkpoint (barriers %v)", during)
			}
			// The Add barrier, the done one, one per actor that finished, and those
			// ticked after CreateMV returned are checkpoints in every case; the
			// interval's double the time between checkpoints. So "few" is 5 and a
			// log of the barriers, however many the build had (fewer under load).
			if bad := tc.want == "few" && ckpts > 5+bits.Len(uint(len(during))) ||
				tc.want == "many" && 3*ckpts < len(during) ||
				tc.want == "all" && ckpts != len(during); bad {
				t.Fatalf("%d of %d barriers were checkpoints, want %s", ckpts, len(during), tc.want)
			}
			// Done and committed: a crash now keeps the view as built.
			if err := e.Crash(); err != nil {
				t.Fatal(err)
			}
			// Reopened paused, the backfill reads nothing: it is done only if its
			// done progress was committed.
			paused := opts
			paused.PauseOnBootstrap = true
			e, err = engine.Open(ctx, "db", paused)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				p := progressOf(t, e, "mv1")
				if p.Done {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after a crash right after CreateMV, reopened paused: progress %+v", p)
				}
			}
			if err := e.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			// No backfill runs: every barrier is a checkpoint again.
			kinds.reset()
			if _, err := e.WaitCheckpoint(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			after := kinds.take()
			for i, c := range after {
				if !c {
					t.Fatalf("barrier %d after the build was no checkpoint (%v)", i, after)
				}
			}
			if n := checkViews(t, e, "after the build"); n != 2000 {
				t.Fatalf("t has %d rows, want 2000", n)
			}
		})
	}
}

// reportingControl is a Control of plain calls that says every node holds pending
// uncommitted bytes, whatever its store holds.
type reportingControl struct{ pending int64 }

func (c *reportingControl) Open(_ context.Context, _ uint64, _ int, node engine.ControlNode) (engine.ControlGraph, error) {
	return &reportingGraph{node: node, pending: c.pending}, nil
}

type reportingGraph struct {
	node    engine.ControlNode
	pending int64
}

func (g *reportingGraph) Build(ctx context.Context, node int, spec []byte) error {
	return g.node.Build(ctx, node, spec)
}

func (g *reportingGraph) Inject(ctx context.Context, node int, b *executors.Barrier) error {
	return g.node.Inject(ctx, node, b)
}

func (g *reportingGraph) Report(_ context.Context, _ int, r engine.ControlReport) error {
	r.Pending = g.pending
	g.node.Deliver(r)
	return nil
}

func (g *reportingGraph) Call(ctx context.Context, node int, req []byte) ([]byte, error) {
	return g.node.Call(ctx, node, req)
}

func (g *reportingGraph) Close() {}

// While a backfill runs, the coordinator spaces checkpoints by the uncommitted bytes
// the nodes report with each barrier, not by what it could read of their stores (a
// compute process's store is out of its reach): nodes that report a node's budget
// make about every other barrier a checkpoint (the one after the reports), nodes
// that report nothing few.
func TestCheckpointSpacingByReportedBytes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pending int64
		many    bool
	}{
		{"none reported", 0, false},
		{"budget reported", 1 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := vectest.Seed(t)
			rng := vectest.NewRand(seed)
			mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
			defer mem.AssertSize(t, 0)
			kinds := &barrierKinds{}
			e, err := engine.Open(context.Background(), "db", engine.Options{
				FS: vfs.NewMem(), Mem: mem, BarrierInterval: 5 * time.Millisecond, ChunkSize: 16, Logger: quietLogger(),
				BackfillCheckpointInterval: time.Hour, BackfillCheckpointBytes: 1 << 20,
				Control:   &reportingControl{pending: tc.pending},
				OnBarrier: kinds.record,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			during, ckpts := rateLimitedBuild(t, e, mem, rng, kinds)
			if tc.many && 3*ckpts < len(during) || !tc.many && ckpts > 5+bits.Len(uint(len(during))) {
				t.Fatalf("%d of %d barriers were checkpoints with %d bytes reported by every node", ckpts, len(during), tc.pending)
			}
		})
	}
}

// barrierKinds records, per barrier, whether it was a checkpoint (Options.OnBarrier).
type barrierKinds struct {
	mu    sync.Mutex
	kinds []bool
}

func (k *barrierKinds) record(s engine.BarrierStats) {
	k.mu.Lock()
	k.kinds = append(k.kinds, s.Checkpoint)
	k.mu.Unlock()
}

func (k *barrierKinds) reset() {
	k.mu.Lock()
	k.kinds = k.kinds[:0]
	k.mu.Unlock()
}

// take returns the kinds recorded since the last reset.
func (k *barrierKinds) take() []bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]bool(nil), k.kinds...)
}

// rateLimitedBuild creates kv with 2,000 rows and builds mv1 over it at 4,000 rows/s
// per actor over two actors (about 250 ms, some 50 barriers), and returns the kinds of
// the barriers during the build and how many were checkpoints; it fails the test when
// the build had fewer than 10 barriers or returned before its backfill was done.
func rateLimitedBuild(t *testing.T, e *engine.Engine, mem memory.Allocator, rng *rand.Rand, kinds *barrierKinds) ([]bool, int) {
	t.Helper()
	ctx := context.Background()
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	preload(t, e, mem, rng, 2000)
	kinds.reset()
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Backfill: engine.ArrangementBackfill, Parallelism: 2, RateLimit: engine.RowsPerSecond(4000)}); err != nil {
		t.Fatal(err)
	}
	if p := progressOf(t, e, "mv1"); !p.Done {
		t.Fatalf("CreateMV returned with progress %+v", p)
	}
	during := kinds.take()
	ckpts := 0
	for _, c := range during {
		if c {
			ckpts++
		}
	}
	t.Logf("%d barriers during the build, %d checkpoints", len(during), ckpts)
	if len(during) < 10 {
		t.Fatalf("%d barriers during a rate-limited build, want at least 10", len(during))
	}
	return during, ckpts
}
