package commitlog_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/seed04fbb902/weir/internal/pgtest"
)

// server is the private PostgreSQL server TestMain started.
var server *pgtest.Server

// TestMain starts a private PostgreSQL server for the package's tests and stops it
// when they end; a re-executed test binary (childEnv set) is the writer of
// TestKilledWriter instead. Without PostgreSQL the tests fail: `make pg-install` installs it.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runWriter())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	s, err := pgtest.Start("weir-commitlog")
	if err != nil {
		fmt.Fprintf(os.Stderr, "commitlog tests: %v\n", err)
		return 1
	}
	defer func() {
		if err := s.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "commitlog tests: %v\n", err)
		}
	}()
	server = s
	return m.Run()
}
