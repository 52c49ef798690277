package views_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seed04fbb902/weir/bench/nexmark/views"
)

// PaceEvents hands out contiguous ranges from its first event on, none beyond what
// the rate allows by the time it is called; it returns nil once stopped and a write's
// error as soon as one fails.
func TestPaceEvents(t *testing.T) {
	const from, rate = 100, 20_000.0
	stop := make(chan struct{})
	next, calls := uint64(from), 0
	start := time.Now()
	time.AfterFunc(60*time.Millisecond, func() { close(stop) })
	err := views.PaceEvents(stop, from, rate, time.Millisecond, func(lo, hi uint64) error {
		if lo != next || hi <= lo {
			t.Errorf("write [%d, %d) after [.., %d)", lo, hi, next)
		}
		if max := from + uint64(time.Since(start).Seconds()*rate); hi > max {
			t.Errorf("write [%d, %d) ahead of the rate (%d due)", lo, hi, max)
		}
		next, calls = hi, calls+1
		return nil
	})
	if err != nil {
		t.Fatalf("stopped: %v, want nil", err)
	}
	if calls < 2 || next == from {
		t.Fatalf("%d writes up to event %d in 60ms at %v events/s", calls, next, rate)
	}

	boom := errors.New("boom")
	calls = 0
	err = views.PaceEvents(make(chan struct{}), 0, rate, time.Millisecond, func(lo, hi uint64) error {
		calls++
		return boom
	})
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("failing write: %v after %d calls, want boom after 1", err, calls)
	}
}
