package meta_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
)

// serverDSN is the DSN of the private PostgreSQL server TestMain started.
var serverDSN string

// pgScript is the project's script that runs a private PostgreSQL cluster.
var pgScript = filepath.Join("..", "..", "..", "scripts", "pg.sh")

// TestMain starts a private PostgreSQL cluster in a fresh temporary directory on a
// free port for the package's tests and stops that cluster (by its data directory)
// when they end. Without PostgreSQL the tests fail: `make pg-install` installs it.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "weir-meta-pg-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "meta tests: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	port, dsn, err := startServer(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "meta tests need a PostgreSQL server (run `make pg-install` when its binaries are missing): %v\n", err)
		return 1
	}
	defer func() {
		out, err := exec.Command(pgScript, "stop", dir, port).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "meta tests: %s stop %s %s: %v\n%s", pgScript, dir, port, err, out)
		}
	}()
	serverDSN = dsn
	return m.Run()
}

// startServer runs `pg.sh start` in dir on a free port and returns the port and the
// DSN the script printed. A port taken between choosing it and the server's bind is
// retried with another.
func startServer(dir string) (port, dsn string, err error) {
	for range 3 {
		port, err = freePort()
		if err != nil {
			return "", "", err
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(pgScript, "start", dir, port)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err = cmd.Run(); err == nil {
			lines := strings.Fields(stdout.String())
			if len(lines) == 0 {
				return "", "", fmt.Errorf("%s start %s %s printed no DSN", pgScript, dir, port)
			}
			return port, lines[len(lines)-1], nil
		}
		err = fmt.Errorf("%s start %s %s: %v\n%s", pgScript, dir, port, err, stderr.String())
		if !strings.Contains(stderr.String(), "did not start") {
			return "", "", err
		}
	}
	return "", "", err
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

var databases atomic.Int64

// newDatabase creates an empty database on the test server and returns its DSN.
func newDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("meta_test_%d", databases.Add(1))
	conn, err := pgx.Connect(ctx, serverDSN)
	if err != nil {
		t.Fatalf("connect to the test server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	u, err := url.Parse(serverDSN)
	if err != nil {
		t.Fatalf("parse the test server's DSN: %v", err)
	}
	u.Path = "/" + name
	return u.String()
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
