package meta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Node is a compute node's registration.
type Node struct {
	Name string
	// Role is the node's optional role (such as "backfill"); empty for a regular node.
	Role string
	// Addr is where the node serves its exchange and control streams.
	Addr string
	// Incarnation counts the node's registrations, from 1.
	Incarnation uint64
	// Registered is when the current incarnation registered, by the database's clock.
	Registered time.Time
}

// RegisterNode records node with its role and address and returns its new
// incarnation: 1 on its first registration, one more on each later one. A node
// registers each time it starts, so that whatever an earlier run of it still sends
// carries an older incarnation, which CheckIncarnation refuses.
func (s *Store) RegisterNode(ctx context.Context, node, role, addr string) (uint64, error) {
	for _, f := range []struct {
		what, v    string
		mayBeEmpty bool
	}{{"node name", node, false}, {"role", role, true}, {"address", addr, true}} {
		if err := checkText(f.what, f.v, f.mayBeEmpty); err != nil {
			return 0, fmt.Errorf("meta: register node %q: %w", node, err)
		}
	}
	var inc int64
	err := s.with(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `INSERT INTO weir_nodes AS n VALUES ($1, $2, $3, 1, now())
			ON CONFLICT (node) DO UPDATE
			SET role = EXCLUDED.role, addr = EXCLUDED.addr, incarnation = n.incarnation + 1, registered = now()
			RETURNING incarnation`, node, role, addr).Scan(&inc)
	})
	if err != nil {
		return 0, fmt.Errorf("meta: register node %q: %w", node, err)
	}
	return uint64(inc), nil
}

// CheckIncarnation returns nil when inc is node's current incarnation. It fails with
// ErrStaleIncarnation for any other (an earlier run of the node, or one never
// handed out), and with ErrUnknownNode for a node never registered.
func (s *Store) CheckIncarnation(ctx context.Context, node string, inc uint64) error {
	var cur int64
	err := s.with(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SELECT incarnation FROM weir_nodes WHERE node = $1`, node).Scan(&cur)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("meta: node %q incarnation %d: %w", node, inc, ErrUnknownNode)
	case err != nil:
		return fmt.Errorf("meta: check node %q incarnation %d: %w", node, inc, err)
	case uint64(cur) != inc:
		return fmt.Errorf("meta: node %q incarnation %d: %w (current %d)", node, inc, ErrStaleIncarnation, cur)
	}
	return nil
}

// Nodes returns every registered node, ordered by name.
func (s *Store) Nodes(ctx context.Context) ([]Node, error) {
	var nodes []Node
	err := s.with(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT node, role, addr, incarnation, registered FROM weir_nodes ORDER BY node`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				n   Node
				inc int64
			)
			if err := rows.Scan(&n.Name, &n.Role, &n.Addr, &inc, &n.Registered); err != nil {
				return err
			}
			n.Incarnation = uint64(inc)
			nodes = append(nodes, n)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list nodes: %w", err)
	}
	return nodes, nil
}
