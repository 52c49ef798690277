package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/engine"
)

// The default number of snapshot readers per arrangement backfill actor follows the
// cores: half of them, at least 1 and at most 2.
func TestDefaultBackfillWorkers(t *testing.T) {
	for _, c := range []struct{ procs, want int }{
		{1, 1}, {2, 1}, {3, 1}, {4, 2}, {5, 2}, {8, 2}, {64, 2},
	} {
		if got := engine.DefaultBackfillWorkers(c.procs); got != c.want {
			t.Errorf("DefaultBackfillWorkers(%d) = %d, want %d", c.procs, got, c.want)
		}
	}
}

// A negative BackfillWorkers is refused, naming the option.
func TestNegativeBackfillWorkers(t *testing.T) {
	_, err := engine.Open(context.Background(), t.TempDir(), engine.Options{BackfillWorkers: -1})
	if err == nil {
		t.Fatal("Open with BackfillWorkers -1: no error")
	}
	if want := "BackfillWorkers -1"; !strings.Contains(err.Error(), want) {
		t.Fatalf("Open with BackfillWorkers -1: %v, want an error naming %q", err, want)
	}
}
