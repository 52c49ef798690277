package commitlog_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/seed04fbb902/weir/internal/pgtest"
	"github.com/seed04fbb902/weir/internal/s3test"
)

// server is the private PostgreSQL server TestMain started.
var server *pgtest.Server

// s3 is the S3-protocol server TestMain started when WEIR_VERSITYGW names one (make
// test-s3): the tests' buckets are then on it; nil: file:// buckets.
var s3 *s3test.Server

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
	s3s, err := s3test.FromEnv("weir-commitlog")
	if err != nil {
		fmt.Fprintf(os.Stderr, "commitlog tests: %v\n", err)
		return 1
	}
	if s3s != nil {
		defer func() {
			if err := s3s.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "commitlog tests: %v\n", err)
			}
		}()
		s3 = s3s
	}
	return m.Run()
}
