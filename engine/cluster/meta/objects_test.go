package meta_test

import (
	"slices"
	"testing"
	"time"

	"github.com/seed04fbb902/weir/engine/cluster/meta"
)

// farFuture is a cut-off after every object's addition.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

func names(objs []meta.Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Name)
	}
	return out
}

// TestUnreferenced: of the objects added, Unreferenced lists exactly those no
// committed sequence references and added before the cut-off; a refused commit
// leaves its objects unreferenced; DeleteObjects forgets orphans and keeps
// referenced objects.
func TestUnreferenced(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	l := acquire(t, s, "a")
	obj := testObject
	if err := s.AddObjects(ctx, []meta.Object{obj("e1-a"), obj("e1-b"), obj("e1-orphan"), obj("e2-a")}); err != nil {
		t.Fatal(err)
	}
	// Adding an object twice keeps one record.
	if err := s.AddObjects(ctx, []meta.Object{obj("e1-orphan")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, l, meta.Checkpoint{Epoch: 1, Objects: []meta.Object{obj("e1-a"), obj("e1-b")}}); err != nil {
		t.Fatal(err)
	}
	// A commit refused as a replay of epoch 1: e2-a stays an orphan.
	if _, err := s.Commit(ctx, l, meta.Checkpoint{Epoch: 1, Seq: 1, Objects: []meta.Object{obj("e2-a")}}); err == nil {
		t.Fatal("replay of epoch 1 committed")
	}
	// A commit may name an object never added.
	if _, err := s.Commit(ctx, l, meta.Checkpoint{Epoch: 3, Seq: 1, Objects: []meta.Object{obj("e3-direct")}}); err != nil {
		t.Fatal(err)
	}
	cut, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddObjects(ctx, []meta.Object{obj("e4-in-flight")}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Unreferenced(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"e1-orphan", "e2-a"}; !slices.Equal(names(got), want) {
		t.Fatalf("unreferenced before the cut = %v, want %v", names(got), want)
	}
	if string(got[0].Smallest) != "k0" || string(got[0].Largest) != "k9" || got[0].Size != 100 {
		t.Fatalf("orphan record = %+v, want its bounds and size", got[0])
	}
	if all, err := s.Unreferenced(ctx, farFuture); err != nil || !slices.Equal(names(all), []string{"e1-orphan", "e2-a", "e4-in-flight"}) {
		t.Fatalf("unreferenced before the far future = %v, %v", names(all), err)
	}
	if n, err := s.DeleteObjects(ctx, []string{"e1-orphan", "e2-a", "e1-a", "missing"}); err != nil || n != 2 {
		t.Fatalf("delete two orphans, a referenced object and a missing one: %d, %v; want 2", n, err)
	}
	if all, err := s.Unreferenced(ctx, farFuture); err != nil || !slices.Equal(names(all), []string{"e4-in-flight"}) {
		t.Fatalf("unreferenced after the delete = %v, %v; want e4-in-flight", names(all), err)
	}
	ds, err := s.Deltas(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || !slices.Equal(names(ds[0].Objects), []string{"e1-a", "e1-b"}) || !slices.Equal(names(ds[1].Objects), []string{"e3-direct"}) {
		t.Fatalf("deltas after the delete = %+v, want the referenced objects intact", ds)
	}
	// Recorded: referenced (committed, or committed without being added first) and
	// added objects are recorded; deleted orphans and names never seen are not.
	rec, err := s.Recorded(ctx, []string{"e1-a", "e3-direct", "e4-in-flight", "e1-orphan", "never"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"e1-a": true, "e3-direct": true, "e4-in-flight": true}
	if len(rec) != len(want) || !rec["e1-a"] || !rec["e3-direct"] || !rec["e4-in-flight"] {
		t.Fatalf("recorded = %v, want %v", rec, want)
	}
	if rec, err := s.Recorded(ctx, nil); err != nil || len(rec) != 0 {
		t.Fatalf("recorded of no names = %v, %v", rec, err)
	}
}
