package meta

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Notification announces a committed sequence and its epoch.
type Notification struct {
	Seq   uint64
	Epoch uint64
}

// Listener receives a notification for every sequence committed after Listen
// returned, in commit order, on a connection of its own. A notification is a hint:
// one that a dropped connection lost is not replayed, so a node reads Deltas after
// the last sequence it applied both when it starts listening and after an error.
// A Listener is for one goroutine at a time.
type Listener struct {
	conn  *pgx.Conn
	where string
}

// Listen opens a Listener. Commits that finish after it returns are announced.
func (s *Store) Listen(ctx context.Context) (*Listener, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("meta: listen: %w", ErrClosed)
	}
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return nil, fmt.Errorf("meta: listen: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("meta: listen on %s: %w", s.where, err)
	}
	return &Listener{conn: conn, where: s.where}, nil
}

// Next waits for the next notification. A cancelled ctx, like any error from the
// connection, leaves the Listener closed: later calls fail, and the caller opens a
// new one.
func (l *Listener) Next(ctx context.Context) (Notification, error) {
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		return Notification{}, fmt.Errorf("meta: wait for a commit on %s: %w", l.where, err)
	}
	seq, epoch, ok := strings.Cut(n.Payload, " ")
	var nt Notification
	if ok {
		nt.Seq, err = strconv.ParseUint(seq, 10, 64)
		if err == nil {
			nt.Epoch, err = strconv.ParseUint(epoch, 10, 64)
		}
	}
	if !ok || err != nil {
		return Notification{}, fmt.Errorf("meta: notification %q on %s is not a sequence and an epoch", n.Payload, notifyChannel)
	}
	return nt, nil
}

// Close closes the Listener's connection. It does not interrupt a Next running in
// another goroutine: cancel that Next's context instead.
func (l *Listener) Close() error {
	closeConn(l.conn)
	return nil
}
