package meta_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
)

// TestListenSeesEachCommit: a listener receives every committed sequence with its
// epoch, in order, and no refused commit.
func TestListenSeesEachCommit(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, dsn := newStore(t)
	l := acquire(t, s, "a")
	ln, err := s.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	epochs := []uint64{2, 3, 7}
	for i, e := range epochs {
		if _, err := s.Commit(ctx, l, meta.Checkpoint{Epoch: e, Seq: uint64(i)}); err != nil {
			t.Fatal(err)
		}
		// A refused replay between commits announces nothing.
		if _, err := s.Commit(ctx, l, meta.Checkpoint{Epoch: e, Seq: uint64(i + 1)}); err == nil {
			t.Fatalf("replay of epoch %d committed", e)
		}
	}
	for i, e := range epochs {
		n, err := ln.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := (meta.Notification{Seq: uint64(i + 1), Epoch: e}); n != want {
			t.Fatalf("notification %d = %+v, want %+v", i, n, want)
		}
	}
	// A payload that is not the store's gives an error naming it, not a panic.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_notify('weir_meta_version', 'junk')`); err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Next(ctx); err == nil || !strings.Contains(err.Error(), `"junk"`) {
		t.Fatalf("foreign payload: %v, want an error naming it", err)
	}
}
