package meta_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/internal/pgtest"
)

// server is the private PostgreSQL server TestMain started.
var server *pgtest.Server

// TestMain starts a private PostgreSQL server for the package's tests and stops it
// when they end. Without PostgreSQL the tests fail: `make pg-install` installs it.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	s, err := pgtest.Start("weir-meta")
	if err != nil {
		fmt.Fprintf(os.Stderr, "meta tests: %v\n", err)
		return 1
	}
	defer func() {
		if err := s.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "meta tests: %v\n", err)
		}
	}()
	server = s
	return m.Run()
}

// newDatabase creates an empty database on the test server and returns its DSN.
func newDatabase(t testing.TB) string {
	t.Helper()
	return server.NewDatabase(t, "meta_test")
}

// openStore opens a store on dsn, closed when the test ends.
func openStore(t testing.TB, dsn string) *meta.Store {
	t.Helper()
	s, err := meta.Open(testContext(t), dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// newStore opens a store on a new database.
func newStore(t testing.TB) (*meta.Store, string) {
	t.Helper()
	dsn := newDatabase(t)
	return openStore(t, dsn), dsn
}

// testContext bounds a test's calls, so that a hung server fails the test instead
// of hanging it.
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// acquire takes the lease for holder for an hour, failing the test otherwise.
func acquire(t testing.TB, s *meta.Store, holder string) meta.Lease {
	t.Helper()
	l, err := s.AcquireLeader(testContext(t), holder, time.Hour)
	if err != nil {
		t.Fatalf("acquire leader for %q: %v", holder, err)
	}
	return l
}

// committed reads the commit point, failing the test on error.
func committed(t testing.TB, s *meta.Store) meta.Version {
	t.Helper()
	v, err := s.Committed(testContext(t))
	if err != nil {
		t.Fatalf("committed: %v", err)
	}
	return v
}

// testObject is an object of the tests: keys k0 to k9, 100 bytes.
func testObject(name string) meta.Object {
	return meta.Object{Name: name, Smallest: []byte("k0"), Largest: []byte("k9"), Size: 100}
}
