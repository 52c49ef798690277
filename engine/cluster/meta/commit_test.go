package meta_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/seed04fbb902/weir/engine/cluster/meta"
)

// TestCommitFences: a second commit of the same epoch, a lower epoch, a lower
// generation and a sequence that moved are each refused with their own error, and
// the commit point stays where it was.
func TestCommitFences(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	l := acquire(t, s, "a")
	if seq, err := s.Commit(ctx, l, meta.Checkpoint{Epoch: 5, Generation: 2, Seq: 0}); err != nil || seq != 1 {
		t.Fatalf("commit epoch 5: sequence %d, %v; want 1", seq, err)
	}
	want := meta.Version{Seq: 1, Epoch: 5, Generation: 2}
	for _, tc := range []struct {
		name string
		c    meta.Checkpoint
		want error
	}{
		{"same epoch", meta.Checkpoint{Epoch: 5, Generation: 2, Seq: 1}, meta.ErrEpochCommitted},
		{"lower epoch", meta.Checkpoint{Epoch: 4, Generation: 2, Seq: 1}, meta.ErrEpochCommitted},
		{"lower generation", meta.Checkpoint{Epoch: 6, Generation: 1, Seq: 1}, meta.ErrStaleGeneration},
		{"moved sequence", meta.Checkpoint{Epoch: 6, Generation: 2, Seq: 0}, meta.ErrConflict},
		{"sequence ahead", meta.Checkpoint{Epoch: 6, Generation: 2, Seq: 7}, meta.ErrConflict},
	} {
		_, err := s.Commit(ctx, l, tc.c)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("epoch %d", tc.c.Epoch)) {
			t.Errorf("%s: %q does not name epoch %d", tc.name, err, tc.c.Epoch)
		}
		if v := committed(t, s); v != want {
			t.Fatalf("%s: committed %+v, want %+v", tc.name, v, want)
		}
	}
	if ds, err := s.Deltas(ctx, 0); err != nil || len(ds) != 1 {
		t.Fatalf("deltas after refused commits: %d, %v; want 1", len(ds), err)
	}
	if seq, err := s.Commit(ctx, l, meta.Checkpoint{Epoch: 6, Generation: 3, Seq: 1}); err != nil || seq != 2 {
		t.Fatalf("commit epoch 6 of a newer generation: sequence %d, %v; want 2", seq, err)
	}
}

// TestDeltasRoundTrip: what Commit is given, Deltas returns, in sequence order, with
// the committing term; Deltas after a sequence returns only the later ones.
func TestDeltasRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	l := acquire(t, s, "a")
	cps := []meta.Checkpoint{
		{Epoch: 3, Generation: 1, Seq: 0,
			Objects: []meta.Object{
				{Name: "e3-n1-i1-0.sst", Smallest: []byte{0, 0, 0, 1}, Largest: []byte{0, 0, 0, 1, 0xff}, Size: 4096},
				{Name: "e3-n2-i1-0.sst", Smallest: []byte{}, Largest: []byte{0x7f}, Size: 0},
			},
			RowDeltas: []meta.RowDelta{{Table: 1, Vnode: 0, Delta: 10}, {Table: 1, Vnode: 255, Delta: -3}, {Table: math.MaxUint32, Vnode: math.MaxUint16, Delta: math.MinInt64}},
			Catalog:   []byte(`{"tables":["t"]}`)},
		{Epoch: 4, Generation: 1, Seq: 1, Catalog: []byte{}},
		{Epoch: 9, Generation: 2, Seq: 2,
			Objects: []meta.Object{{Name: "e9-n1-i2-0.sst", Smallest: []byte("a"), Largest: []byte("z"), Size: 1 << 40}}},
	}
	for _, c := range cps {
		if _, err := s.Commit(ctx, l, c); err != nil {
			t.Fatalf("commit epoch %d: %v", c.Epoch, err)
		}
	}
	ds, err := s.Deltas(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != len(cps) {
		t.Fatalf("%d deltas, want %d", len(ds), len(cps))
	}
	for i, d := range ds {
		c := cps[i]
		if d.Seq != uint64(i+1) || d.Epoch != c.Epoch || d.Generation != c.Generation || d.Term != l.Term {
			t.Errorf("delta %d: sequence %d epoch %d generation %d term %d, want %d %d %d %d",
				i, d.Seq, d.Epoch, d.Generation, d.Term, i+1, c.Epoch, c.Generation, l.Term)
		}
		if !equalObjects(d.Objects, c.Objects) {
			t.Errorf("delta %d objects = %+v, want %+v", i, d.Objects, c.Objects)
		}
		if !reflect.DeepEqual(d.RowDeltas, c.RowDeltas) {
			t.Errorf("delta %d row deltas = %+v, want %+v", i, d.RowDeltas, c.RowDeltas)
		}
		if string(d.Catalog) != string(c.Catalog) {
			t.Errorf("delta %d catalog = %q, want %q", i, d.Catalog, c.Catalog)
		}
		if d.Committed.IsZero() {
			t.Errorf("delta %d has no commit time", i)
		}
	}
	later, err := s.Deltas(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(later) != 1 || later[0].Seq != 3 || !equalObjects(later[0].Objects, cps[2].Objects) {
		t.Fatalf("deltas after 2 = %+v, want sequence 3 alone", later)
	}
	if none, err := s.Deltas(ctx, 3); err != nil || len(none) != 0 {
		t.Fatalf("deltas after the last: %+v, %v; want none", none, err)
	}
}

// equalObjects compares objects, taking a nil key as the empty key.
func equalObjects(a, b []meta.Object) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Size != b[i].Size ||
			string(a[i].Smallest) != string(b[i].Smallest) || string(a[i].Largest) != string(b[i].Largest) {
			return false
		}
	}
	return true
}

// TestCommitBadInput: a checkpoint the store cannot keep, or one naming an object
// that another sequence references, is refused with an error naming what is wrong,
// and nothing moves.
func TestCommitBadInput(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	l := acquire(t, s, "a")
	obj := meta.Object{Name: "e1-n1-i1-0.sst", Smallest: []byte("a"), Largest: []byte("b"), Size: 1}
	if _, err := s.Commit(ctx, l, meta.Checkpoint{Epoch: 1, Objects: []meta.Object{obj}}); err != nil {
		t.Fatal(err)
	}
	want := committed(t, s)
	for _, tc := range []struct {
		name string
		c    meta.Checkpoint
		want string
	}{
		{"duplicate object", meta.Checkpoint{Epoch: 2, Seq: 1, Objects: []meta.Object{{Name: "x"}, {Name: "x"}}}, `object "x" appears twice`},
		{"empty object name", meta.Checkpoint{Epoch: 2, Seq: 1, Objects: []meta.Object{{}}}, "empty object name"},
		{"negative size", meta.Checkpoint{Epoch: 2, Seq: 1, Objects: []meta.Object{{Name: "x", Size: -1}}}, `object "x" has negative size`},
		{"inverted bounds", meta.Checkpoint{Epoch: 2, Seq: 1, Objects: []meta.Object{{Name: "x", Smallest: []byte("b"), Largest: []byte("a")}}}, `object "x" has its smallest key`},
		{"epoch too large", meta.Checkpoint{Epoch: math.MaxUint64, Seq: 1}, "epoch 18446744073709551615 is above"},
		{"generation too large", meta.Checkpoint{Epoch: 2, Generation: 1 << 63, Seq: 1}, "generation 9223372036854775808 is above"},
		{"object referenced", meta.Checkpoint{Epoch: 2, Seq: 1, Objects: []meta.Object{{Name: "y"}, obj}}, `object "e1-n1-i1-0.sst" is already referenced by sequence 1`},
	} {
		if _, err := s.Commit(ctx, l, tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
		if v := committed(t, s); v != want {
			t.Fatalf("%s: committed %+v, want %+v", tc.name, v, want)
		}
	}
	// The refused commit named object y: its rollback leaves no record of it.
	if orphans, err := s.Unreferenced(ctx, farFuture); err != nil || len(orphans) != 0 {
		t.Fatalf("unreferenced after refused commits: %+v, %v; want none", orphans, err)
	}
}

// TestConcurrentCommits: two goroutines with the same lease commit the same epoch at
// each sequence; exactly one wins each, the other is refused as committed or moved,
// and the log holds the winner's checkpoint.
func TestConcurrentCommits(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	l := acquire(t, s, "a")
	const rounds = 25
	winners := make([]string, rounds)
	for r := range rounds {
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			won  []string
			errs []error
		)
		start := make(chan struct{})
		for _, who := range []string{"g0", "g1"} {
			wg.Go(func() {
				<-start
				c := meta.Checkpoint{Epoch: uint64(r + 1), Seq: uint64(r), Catalog: []byte(who),
					Objects: []meta.Object{{Name: fmt.Sprintf("e%d-%s.sst", r+1, who)}}}
				_, err := s.Commit(ctx, l, c)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					won = append(won, who)
				} else {
					errs = append(errs, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: winners %v, errors %v; want exactly one winner", r, won, errs)
		}
		if len(errs) != 1 || !(errors.Is(errs[0], meta.ErrEpochCommitted) || errors.Is(errs[0], meta.ErrConflict)) {
			t.Fatalf("round %d: loser's errors %v, want ErrEpochCommitted or ErrConflict", r, errs)
		}
		winners[r] = won[0]
	}
	ds, err := s.Deltas(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != rounds {
		t.Fatalf("%d deltas, want %d", len(ds), rounds)
	}
	for r, d := range ds {
		name := fmt.Sprintf("e%d-%s.sst", r+1, winners[r])
		if d.Seq != uint64(r+1) || string(d.Catalog) != winners[r] || len(d.Objects) != 1 || d.Objects[0].Name != name {
			t.Fatalf("delta %d = sequence %d catalog %q objects %+v, want sequence %d by %s with %s",
				r, d.Seq, d.Catalog, d.Objects, r+1, winners[r], name)
		}
	}
}
