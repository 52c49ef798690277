package meta_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/internal/pgtest"
)

// TestReopenKeepsEverything: a store opened again on the same database finds the
// lease, the nodes, the commit point, the log and the orphans as they were.
func TestReopenKeepsEverything(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dsn := newDatabase(t)
	s := openStore(t, dsn)
	l := acquire(t, s, "a")
	inc, err := s.RegisterNode(ctx, "n1", "", "127.0.0.1:7001")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddObjects(ctx, []meta.Object{{Name: "orphan"}}); err != nil {
		t.Fatal(err)
	}
	c := meta.Checkpoint{Epoch: 4, Generation: 1, Objects: []meta.Object{{Name: "e4.sst", Largest: []byte{1}, Size: 9}},
		RowDeltas: []meta.RowDelta{{Table: 2, Vnode: 3, Delta: 4}}, Catalog: []byte("catalog")}
	if _, err := s.Commit(ctx, l, c); err != nil {
		t.Fatal(err)
	}
	before, err := s.Deltas(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.Committed(ctx); !errors.Is(err, meta.ErrClosed) {
		t.Fatalf("committed after close: %v, want ErrClosed", err)
	}
	if _, err := s.Listen(ctx); !errors.Is(err, meta.ErrClosed) {
		t.Fatalf("listen after close: %v, want ErrClosed", err)
	}

	r := openStore(t, dsn)
	if v := committed(t, r); v != (meta.Version{Seq: 1, Epoch: 4, Generation: 1}) {
		t.Fatalf("committed after reopen = %+v", v)
	}
	after, err := r.Deltas(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("deltas after reopen = %+v, want %+v", after, before)
	}
	if err := r.CheckIncarnation(ctx, "n1", inc); err != nil {
		t.Fatalf("incarnation after reopen: %v", err)
	}
	if _, err := r.AcquireLeader(ctx, "b", time.Hour); !errors.Is(err, meta.ErrLeaseHeld) {
		t.Fatalf("b acquires after reopen: %v, want ErrLeaseHeld (a's lease is live)", err)
	}
	if _, err := r.Commit(ctx, l, meta.Checkpoint{Epoch: 5, Generation: 1, Seq: 1}); err != nil {
		t.Fatalf("a's lease commits through the reopened store: %v", err)
	}
	if orphans, err := r.Unreferenced(ctx, farFuture); err != nil || len(orphans) != 1 || orphans[0].Name != "orphan" {
		t.Fatalf("orphans after reopen = %+v, %v", orphans, err)
	}
}

// TestOpenConcurrently: processes opening a new database at once all succeed and
// create its tables once.
func TestOpenConcurrently(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dsn := newDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := meta.Open(ctx, dsn)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dsn)
	if v := committed(t, s); v != (meta.Version{}) {
		t.Fatalf("committed = %+v, want the zero version", v)
	}
}

// TestNewerSchemaRefused: a database whose schema version is newer than the code's
// is refused with an error naming both versions.
func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dsn := newDatabase(t)
	openStore(t, dsn).Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	newer := meta.SchemaVersion + 1
	if _, err := conn.Exec(ctx, `UPDATE weir_meta_schema SET version = $1`, newer); err != nil {
		t.Fatal(err)
	}
	_, err = meta.Open(ctx, dsn)
	want := fmt.Sprintf("schema version %d is newer than this build's %d", newer, meta.SchemaVersion)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("open a newer schema: %v, want an error with %q", err, want)
	}
}

// TestUnreachableDSN: a server that does not answer gives an error naming its host
// and port and not the password; a DSN that does not parse is not echoed.
func TestUnreachableDSN(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	const password = "s3cr3t-pw"
	_, err = meta.Open(ctx, fmt.Sprintf("postgres://weir:%s@127.0.0.1:%s/meta?sslmode=disable&connect_timeout=10", password, port))
	if err == nil {
		t.Fatal("open of an unreachable server succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "127.0.0.1:"+port) || strings.Contains(msg, password) {
		t.Fatalf("unreachable server: %q, want the host and port 127.0.0.1:%s and no password", msg, port)
	}
	_, err = meta.Open(ctx, "postgres://weir:"+password+"@[::1")
	if err == nil || strings.Contains(err.Error(), password) {
		t.Fatalf("unparsable DSN: %v, want an error without the password", err)
	}
}

// TestPoolUnderLoad: more concurrent calls than the store has connections all
// finish, and a call with a cancelled context fails without spoiling the store.
func TestPoolUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	const callers = 16
	var wg sync.WaitGroup
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() {
			for range 3 {
				if _, err := s.RegisterNode(ctx, fmt.Sprintf("n%02d", i), "", ""); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	nodes, err := s.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != callers {
		t.Fatalf("%d nodes, want %d", len(nodes), callers)
	}
	for _, n := range nodes {
		if n.Incarnation != 3 {
			t.Fatalf("node %s at incarnation %d, want 3", n.Name, n.Incarnation)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	l := acquire(t, s, "a")
	if _, err := s.Commit(cancelled, l, meta.Checkpoint{Epoch: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("commit with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := s.Commit(ctx, l, meta.Checkpoint{Epoch: 1}); err != nil {
		t.Fatalf("commit after a cancelled one: %v", err)
	}
}
