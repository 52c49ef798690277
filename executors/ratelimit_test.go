package executors

import (
	"context"
	"testing"
	"time"
)

// Tokens granted for rows a read did not take (a vnode ended, or a barrier cut the
// batch) come back to the bucket, up to its burst of one second's rows; a grant never
// exceeds what the bucket holds.
func TestRateLimiterGiveBack(t *testing.T) {
	l := &rateLimiter{rate: 100, tokens: 50, last: time.Now()} // refills 0.1 token a ms
	n, err := l.wait(context.Background(), 0, 80)
	if err != nil || n != 50 {
		t.Fatalf("first grant: %d, %v; want all 50 tokens", n, err)
	}
	for _, c := range []struct {
		back int
		want float64
	}{
		{30, 30},  // 50 granted, 20 read
		{50, 80},  // more back
		{60, 100}, // capped at the burst
	} {
		l.giveBack(c.back)
		if l.tokens < c.want || l.tokens > c.want+1 {
			t.Fatalf("after giving back %d: %v tokens, want %v", c.back, l.tokens, c.want)
		}
	}
	if n, err := l.wait(context.Background(), 0, 4096); err != nil || n != 100 {
		t.Fatalf("grant after the give-backs: %d, %v; want 100", n, err)
	}
}
