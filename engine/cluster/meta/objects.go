package meta

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AddObjects records objects about to be written to the bucket, before their upload
// starts, so that an upload whose checkpoint never commits (a failed round, a dead
// node, a deposed leader) leaves a record for Unreferenced. An object already
// recorded keeps its record. Commit records the objects it references whether or not
// they were added first.
func (s *Store) AddObjects(ctx context.Context, objs []Object) error {
	names := make([]string, 0, len(objs))
	smallest := make([][]byte, 0, len(objs))
	largest := make([][]byte, 0, len(objs))
	sizes := make([]int64, 0, len(objs))
	for _, o := range objs {
		if err := checkObject(o); err != nil {
			return fmt.Errorf("meta: add %d objects: %w", len(objs), err)
		}
		names = append(names, o.Name)
		smallest = append(smallest, nonNil(o.Smallest))
		largest = append(largest, nonNil(o.Largest))
		sizes = append(sizes, o.Size)
	}
	err := s.with(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `INSERT INTO weir_objects (name, smallest, largest, size, added)
			SELECT n.name, n.smallest, n.largest, n.size, now()
			FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::bigint[]) AS n(name, smallest, largest, size)
			ON CONFLICT (name) DO NOTHING`, names, smallest, largest, sizes)
		return err
	})
	if err != nil {
		return fmt.Errorf("meta: add %d objects: %w", len(objs), err)
	}
	return nil
}

// Unreferenced returns the objects that no committed sequence or base references and
// that were added (or, for those of a compacted history, left unreferenced by
// CommitBase) before before (by the database's clock: take it from Now minus a grace
// period longer than the barrier timeout, so that no round still running can commit
// them), ordered by name. The caller deletes them from the bucket, then calls
// DeleteObjects.
func (s *Store) Unreferenced(ctx context.Context, before time.Time) ([]Object, error) {
	var out []Object
	err := s.with(ctx, func(c *pgx.Conn) error {
		var err error
		out, err = queryObjects(ctx, c, `SELECT name, smallest, largest, size FROM weir_objects
			WHERE seq IS NULL AND base IS NULL AND added < $1 ORDER BY name`, before)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list objects unreferenced before %s: %w", before.UTC().Format(time.RFC3339Nano), err)
	}
	return out, nil
}

// DeleteObjects forgets the named objects once the bucket no longer holds them, and
// returns how many it forgot. It keeps any that a committed sequence or a base
// references.
func (s *Store) DeleteObjects(ctx context.Context, names []string) (int, error) {
	if names == nil {
		names = []string{}
	}
	var n int64
	err := s.with(ctx, func(c *pgx.Conn) error {
		tag, err := c.Exec(ctx, `DELETE FROM weir_objects WHERE name = ANY($1) AND seq IS NULL AND base IS NULL`, names)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("meta: delete %d objects: %w", len(names), err)
	}
	return int(n), nil
}

// Recorded returns which of names the store records (referenced by a committed
// sequence or a base, or added and not yet deleted). An object in the bucket that it
// does not record was uploaded by a node that died, or whose export failed, before the
// commit that would have recorded it: Log.Collect deletes such objects once they are
// older than the grace period.
func (s *Store) Recorded(ctx context.Context, names []string) (map[string]bool, error) {
	if names == nil {
		names = []string{}
	}
	out := make(map[string]bool, len(names))
	err := s.with(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT name FROM weir_objects WHERE name = ANY($1)`, names)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			out[n] = true
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("meta: look up %d objects: %w", len(names), err)
	}
	return out, nil
}
