package objstore_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/seed04fbb902/weir/internal/s3test"
)

// s3 is the S3-protocol server TestMain started when WEIR_VERSITYGW names one (make
// test-s3); nil otherwise, and the tests use file:// buckets.
var s3 *s3test.Server

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	s, err := s3test.FromEnv("weir-objstore")
	if err != nil {
		fmt.Fprintf(os.Stderr, "objstore tests: %v\n", err)
		return 1
	}
	if s != nil {
		defer func() {
			if err := s.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "objstore tests: %v\n", err)
			}
		}()
		s3 = s
	}
	return m.Run()
}
