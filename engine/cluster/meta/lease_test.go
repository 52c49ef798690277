package meta_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seed04fbb902/weir/engine/cluster/meta"
)

// TestLeaseTakeoverAfterExpiry: while a's lease is live b cannot take it; once it
// has expired b takes it at the next term, and a's Renew and Commit are refused as
// deposed while b's commit goes through.
func TestLeaseTakeoverAfterExpiry(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	a := acquire(t, s, "a")
	if a.Term != 1 {
		t.Fatalf("first term = %d, want 1", a.Term)
	}
	_, err := s.AcquireLeader(ctx, "b", time.Hour)
	if !errors.Is(err, meta.ErrLeaseHeld) || !strings.Contains(err.Error(), `"a" at term 1`) {
		t.Fatalf("b acquires while a holds the lease: %v, want ErrLeaseHeld naming a and term 1", err)
	}
	renewed, err := s.Renew(ctx, a)
	if err != nil {
		t.Fatalf("a renews its live lease: %v", err)
	}
	if renewed.Term != a.Term || renewed.Expires.Before(a.Expires) {
		t.Fatalf("renewed lease %+v, want term %d expiring no earlier than %v", renewed, a.Term, a.Expires)
	}
	if _, err := s.Commit(ctx, a, meta.Checkpoint{Epoch: 1, Seq: 0}); err != nil {
		t.Fatalf("a commits epoch 1: %v", err)
	}

	if err := s.Expire(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := s.AcquireLeader(ctx, "b", time.Hour)
	if err != nil {
		t.Fatalf("b acquires after a's lease expired: %v", err)
	}
	if b.Term != a.Term+1 {
		t.Fatalf("b's term = %d, want %d", b.Term, a.Term+1)
	}
	if _, err := s.Renew(ctx, a); !errors.Is(err, meta.ErrDeposed) || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("deposed a renews: %v, want ErrDeposed naming b", err)
	}
	if _, err := s.Commit(ctx, a, meta.Checkpoint{Epoch: 2, Seq: 1}); !errors.Is(err, meta.ErrDeposed) {
		t.Fatalf("deposed a commits epoch 2: %v, want ErrDeposed", err)
	}
	if v := committed(t, s); v.Seq != 1 || v.Epoch != 1 {
		t.Fatalf("after a's refused commit: %+v, want sequence 1 at epoch 1", v)
	}
	if seq, err := s.Commit(ctx, b, meta.Checkpoint{Epoch: 2, Seq: 1}); err != nil || seq != 2 {
		t.Fatalf("b commits epoch 2: sequence %d, %v; want 2", seq, err)
	}
	if _, err := s.AcquireLeader(ctx, "a", time.Hour); !errors.Is(err, meta.ErrLeaseHeld) {
		t.Fatalf("a acquires while b holds the lease: %v, want ErrLeaseHeld", err)
	}
}

// TestStaleTermRefused: a lease whose term is not the current one (an earlier
// acquisition by the same holder, or a term never handed out) is refused by Renew,
// Release and Commit, and a lease never acquired is refused before any statement.
func TestStaleTermRefused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	old := acquire(t, s, "a")
	cur := acquire(t, s, "a") // the holder's own lease: taken again at the next term
	if cur.Term != old.Term+1 {
		t.Fatalf("re-acquired term = %d, want %d", cur.Term, old.Term+1)
	}
	future := cur
	future.Term += 5
	for _, l := range []meta.Lease{old, future} {
		if _, err := s.Renew(ctx, l); !errors.Is(err, meta.ErrDeposed) {
			t.Errorf("renew at term %d: %v, want ErrDeposed", l.Term, err)
		}
		if err := s.Release(ctx, l); !errors.Is(err, meta.ErrDeposed) {
			t.Errorf("release at term %d: %v, want ErrDeposed", l.Term, err)
		}
		if _, err := s.Commit(ctx, l, meta.Checkpoint{Epoch: 1}); !errors.Is(err, meta.ErrDeposed) {
			t.Errorf("commit at term %d: %v, want ErrDeposed", l.Term, err)
		}
	}
	// The row's initial term is 0: a zero Lease must not pass the fence.
	if _, err := s.Commit(ctx, meta.Lease{}, meta.Checkpoint{Epoch: 1}); err == nil || !strings.Contains(err.Error(), "term 0") {
		t.Errorf("commit with a zero lease: %v, want an error naming term 0", err)
	}
	if _, err := s.Renew(ctx, meta.Lease{Holder: "a"}); err == nil {
		t.Error("renew of a zero lease succeeded")
	}
	if v := committed(t, s); v != (meta.Version{}) {
		t.Fatalf("after refused commits: %+v, want the zero version", v)
	}
	if _, err := s.Commit(ctx, cur, meta.Checkpoint{Epoch: 1}); err != nil {
		t.Fatalf("commit at the current term: %v", err)
	}
}

// TestZeroTTLAndRelease: a lease of ttl 0 and a released lease may be taken at once
// by another holder, at the next term.
func TestZeroTTLAndRelease(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	a, err := s.AcquireLeader(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.AcquireLeader(ctx, "b", time.Hour)
	if err != nil {
		t.Fatalf("b acquires after a's ttl-0 lease: %v", err)
	}
	if b.Term != a.Term+1 {
		t.Fatalf("b's term = %d, want %d", b.Term, a.Term+1)
	}
	if err := s.Release(ctx, b); err != nil {
		t.Fatalf("b releases: %v", err)
	}
	c, err := s.AcquireLeader(ctx, "c", time.Hour)
	if err != nil {
		t.Fatalf("c acquires after b released: %v", err)
	}
	if c.Term != b.Term+1 {
		t.Fatalf("c's term = %d, want %d", c.Term, b.Term+1)
	}
	if err := s.Release(ctx, b); !errors.Is(err, meta.ErrDeposed) {
		t.Fatalf("b releases again after c took over: %v, want ErrDeposed", err)
	}
}

// TestAcquireBadInput: holders and ttls the store cannot keep are refused with an
// error naming them, and the term does not move.
func TestAcquireBadInput(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	for _, tc := range []struct {
		holder string
		ttl    time.Duration
		want   string
	}{
		{"", time.Second, "empty lease holder"},
		{"a\x00b", time.Second, "NUL"},
		{"\xff", time.Second, "UTF-8"},
		{"a", -time.Second, "negative ttl"},
	} {
		if _, err := s.AcquireLeader(ctx, tc.holder, tc.ttl); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("acquire for %q with ttl %v: %v, want an error naming %q", tc.holder, tc.ttl, err, tc.want)
		}
	}
	if l := acquire(t, s, "a"); l.Term != 1 {
		t.Fatalf("term after refused acquisitions = %d, want 1", l.Term)
	}
}
