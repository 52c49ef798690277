package meta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Lease is a leader's hold on the cluster. Term fences it: every acquisition bumps
// the term, and Renew, Release and Commit succeed only while the lease's term is the
// current one. Expires is by the database's clock.
type Lease struct {
	Holder  string
	Term    uint64
	TTL     time.Duration
	Expires time.Time
}

// AcquireLeader takes the lease for holder for ttl, bumping the term. It succeeds
// when the current lease has expired (by the database's clock) or is holder's own;
// otherwise it fails with ErrLeaseHeld, naming the holder, its term and its expiry.
// A ttl of 0 gives a lease that has already expired: the next AcquireLeader by anyone
// succeeds, while the term still fences the lease as usual.
func (s *Store) AcquireLeader(ctx context.Context, holder string, ttl time.Duration) (Lease, error) {
	if err := checkText("lease holder", holder, false); err != nil {
		return Lease{}, fmt.Errorf("meta: acquire leader: %w", err)
	}
	if ttl < 0 {
		return Lease{}, fmt.Errorf("meta: acquire leader for %q: negative ttl %v", holder, ttl)
	}
	l := Lease{Holder: holder, TTL: ttl}
	err := s.inTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var (
			term    int64
			cur     string
			live    bool
			expires time.Time
		)
		err := tx.QueryRow(ctx, `SELECT term, holder, expires > now(), expires
			FROM weir_leader WHERE id = 1 FOR UPDATE`).Scan(&term, &cur, &live, &expires)
		if err != nil {
			return err
		}
		if live && cur != holder {
			return fmt.Errorf("%w by %q at term %d until %s", ErrLeaseHeld, cur, term, expires.UTC().Format(time.RFC3339Nano))
		}
		var newTerm int64
		err = tx.QueryRow(ctx, `UPDATE weir_leader
			SET term = term + 1, holder = $1, expires = now() + $2 * interval '1 microsecond'
			WHERE id = 1 RETURNING term, expires`, holder, ttl.Microseconds()).Scan(&newTerm, &l.Expires)
		l.Term = uint64(newTerm)
		return err
	})
	if err != nil {
		return Lease{}, fmt.Errorf("meta: acquire leader for %q: %w", holder, err)
	}
	return l, nil
}

// Renew extends the lease by its TTL from the database's now and returns it with
// the new expiry. It succeeds while the lease's term is current, even past its
// expiry (no one has taken over, so no one else may have committed); otherwise it
// fails with ErrDeposed, naming the current term and holder.
func (s *Store) Renew(ctx context.Context, l Lease) (Lease, error) {
	term, err := leaseTerm(l)
	if err != nil {
		return Lease{}, fmt.Errorf("meta: renew: %w", err)
	}
	err = s.inTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE weir_leader SET expires = now() + $3 * interval '1 microsecond'
			WHERE id = 1 AND term = $1 AND holder = $2 RETURNING expires`,
			term, l.Holder, l.TTL.Microseconds()).Scan(&l.Expires)
		if errors.Is(err, pgx.ErrNoRows) {
			return deposed(ctx, tx, l)
		}
		return err
	})
	if err != nil {
		return Lease{}, fmt.Errorf("meta: renew lease of %q at term %d: %w", l.Holder, l.Term, err)
	}
	return l, nil
}

// Release ends the lease now, keeping its term, so that a successor need not wait
// for it to expire: a leader stepping down calls it. It fails with ErrDeposed when
// the term is no longer current.
func (s *Store) Release(ctx context.Context, l Lease) error {
	term, err := leaseTerm(l)
	if err != nil {
		return fmt.Errorf("meta: release: %w", err)
	}
	err = s.inTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE weir_leader SET expires = least(expires, now())
			WHERE id = 1 AND term = $1 AND holder = $2`, term, l.Holder)
		if err == nil && tag.RowsAffected() == 0 {
			return deposed(ctx, tx, l)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("meta: release lease of %q at term %d: %w", l.Holder, l.Term, err)
	}
	return nil
}

// Expire ends the current lease now, whoever holds it, keeping its term: the next
// AcquireLeader succeeds at once. It stands for a leader that stopped renewing (a
// paused or killed process) without waiting for its TTL, for operators and tests.
func (s *Store) Expire(ctx context.Context) error {
	err := s.with(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `UPDATE weir_leader SET expires = least(expires, now()) WHERE id = 1`)
		return err
	})
	if err != nil {
		return fmt.Errorf("meta: expire the leader lease: %w", err)
	}
	return nil
}

// leaseTerm checks that l came from AcquireLeader and returns its term as stored.
func leaseTerm(l Lease) (int64, error) {
	if l.Term == 0 {
		return 0, fmt.Errorf("lease of %q has term 0: not acquired", l.Holder)
	}
	if l.TTL < 0 {
		return 0, fmt.Errorf("lease of %q at term %d has negative ttl %v", l.Holder, l.Term, l.TTL)
	}
	return toInt64("lease term", l.Term)
}

// deposed reads the current lease inside tx and returns the ErrDeposed error of l.
func deposed(ctx context.Context, tx pgx.Tx, l Lease) error {
	var (
		term   int64
		holder string
	)
	if err := tx.QueryRow(ctx, `SELECT term, holder FROM weir_leader WHERE id = 1`).Scan(&term, &holder); err != nil {
		return err
	}
	return fmt.Errorf("%w: term %d is held by %q", ErrDeposed, term, holder)
}
