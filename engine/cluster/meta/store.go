package meta

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// maxConns bounds the store's connections to the server; a listener has its own.
const maxConns = 4

// Store is a cluster's meta state in one PostgreSQL database: the leader lease, the
// node registry, the version log and the objects it references. It is safe for
// concurrent use. Every value it returns is the caller's.
type Store struct {
	cfg    *pgx.ConnConfig // a listener's connection
	where  string          // the server and database, without the password, for errors
	pool   *pgxpool.Pool
	closed atomic.Bool
}

// Open connects to the database the DSN names (a URL or key=value string, as pgx
// reads it) and creates the store's tables when they do not exist. It refuses a
// database whose schema version is newer than this code's. Errors name the server as
// user@host:port/database, never the password; a DSN that cannot be parsed is not
// repeated at all.
func Open(ctx context.Context, dsn string) (*Store, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("meta: cannot parse the DSN (not shown: it may hold a password)")
	}
	pcfg.MaxConns = maxConns
	cfg := pcfg.ConnConfig
	where := fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("meta: open %s: %w", where, err)
	}
	s := &Store{cfg: cfg.Copy(), where: where, pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Close waits for the calls in flight and closes the store's connections. Later calls
// fail with ErrClosed. Listeners are closed by their own Close.
func (s *Store) Close() {
	if !s.closed.Swap(true) {
		s.pool.Close()
	}
}

// String names the store's server and database, without the password.
func (s *Store) String() string {
	return "postgres://" + s.where
}

// Now returns the database's clock, the one that lease expiry and object ages use.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := s.with(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SELECT now()`).Scan(&now)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("meta: read the clock of %s: %w", s.where, err)
	}
	return now, nil
}

// with runs f on a connection of the pool. A failure to get one is pgx's, which
// names the host and port, prefixed with "connect".
func (s *Store) with(ctx context.Context, f func(*pgx.Conn) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		if s.closed.Load() {
			return ErrClosed
		}
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Release()
	return f(conn.Conn())
}

// closeConn closes a connection of its own (a listener's), giving the server a few
// seconds to take the termination message; a broken connection closes at once.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// inTx runs f in a transaction on a connection of the pool: committed when f returns
// nil, rolled back otherwise.
func (s *Store) inTx(ctx context.Context, opts pgx.TxOptions, f func(pgx.Tx) error) error {
	return s.with(ctx, func(c *pgx.Conn) error {
		return pgx.BeginTxFunc(ctx, c, opts, f)
	})
}

// fencedTx runs f in a transaction and commits it, for the fenced updates (Commit,
// CommitBase): a COMMIT the server refused is its error (nothing committed); one whose
// answer was lost is ErrOutcomeUnknown. The rollback after a failure is bounded, so
// that a hung server cannot hold the connection.
func (s *Store) fencedTx(ctx context.Context, f func(pgx.Tx) error) error {
	return s.with(ctx, func(conn *pgx.Conn) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() {
			// A no-op after Commit.
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = tx.Rollback(rctx)
		}()
		if err := f(tx); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) || errors.Is(err, pgx.ErrTxCommitRollback) {
				return err // the server refused the commit: nothing committed
			}
			return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		return nil
	})
}

// queryObjects reads the objects a query of name, smallest, largest and size lists.
func queryObjects(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) ([]Object, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Object
	for rows.Next() {
		var o Object
		if err := rows.Scan(&o.Name, &o.Smallest, &o.Largest, &o.Size); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// toInt64 checks that v fits PostgreSQL's bigint; what names the value in the error.
func toInt64(what string, v uint64) (int64, error) {
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("%s %d is above the largest storable (%d)", what, v, int64(math.MaxInt64))
	}
	return int64(v), nil
}

// checkText checks a name the store keeps as text: what names it in the error.
// PostgreSQL's text holds valid UTF-8 without NUL bytes.
func checkText(what, v string, mayBeEmpty bool) error {
	switch {
	case v == "" && !mayBeEmpty:
		return fmt.Errorf("empty %s", what)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s %q is not valid UTF-8", what, v)
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%s %q holds a NUL byte", what, v)
	}
	return nil
}

// nonNil returns b, or an empty slice for nil: pgx sends a nil slice as NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
