package meta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A base compacts the version log: the whole committed state at one sequence, as
// objects that hold every table's rows and the full catalog. A store that starts
// empty applies the last base and then the deltas after it. Committing a base
// compacts the history before the previous one (see CommitBase), so that the log
// keeps one base and the deltas since the base before it: a store that applied any
// sequence from there on still catches up delta by delta, and the bucket holds
// objects for one base and those deltas.

// Base is the committed state at sequence Seq, which committed epoch Epoch of graph
// generation Generation; Term is that of the leader that recorded it.
type Base struct {
	Seq        uint64
	Epoch      uint64
	Generation uint64
	Term       uint64
	// Objects hold every table's rows, in key order.
	Objects []Object
	// Catalog is stored and returned as given (the full catalog).
	Catalog []byte
	Created time.Time
}

// ErrBaseRefused is returned by CommitBase for a base the log cannot take: of a
// sequence the log does not hold, or not above its base.
var ErrBaseRefused = errors.New("base refused")

// CommitBase records b (b.Term and b.Created are ignored) as the log's base in one
// transaction fenced on l's term, like Commit: ErrDeposed when the term is no longer
// the leader's; ErrBaseRefused when b.Seq is above the committed sequence, not above
// the log's base, or not a delta of the log at b.Epoch and b.Generation. An object
// that a sequence or another base references fails it too. It then compacts the
// history before the previous base P, if any: the deltas below P are deleted, the
// objects of P and of the deltas up to P are left unreferenced (Unreferenced lists
// them once a grace period has passed since), and P's record goes. Delta P stays,
// with no objects, so that a store at sequence P finds it.
func (s *Store) CommitBase(ctx context.Context, l Lease, b Base) error {
	fail := func(err error) error {
		return fmt.Errorf("meta: commit the base at sequence %d (epoch %d): %w", b.Seq, b.Epoch, err)
	}
	term, err := leaseTerm(l)
	if err != nil {
		return fail(err)
	}
	c := Checkpoint{Seq: b.Seq, Epoch: b.Epoch, Generation: b.Generation, Objects: b.Objects, Catalog: b.Catalog}
	a, err := commitArgs(l, c)
	if err != nil {
		return fail(err)
	}
	err = s.fencedTx(ctx, func(tx pgx.Tx) error { return commitBaseIn(ctx, tx, l, term, a) })
	if err != nil {
		return fail(err)
	}
	return nil
}

func commitBaseIn(ctx context.Context, tx pgx.Tx, l Lease, term int64, a commitValues) error {
	// The version row is locked, so that no commit runs meanwhile.
	var cur, head int64
	err := tx.QueryRow(ctx, `SELECT l.term, v.seq FROM weir_leader l, weir_version v
		WHERE l.id = 1 AND v.id = 1 FOR UPDATE OF v`).Scan(&cur, &head)
	if err != nil {
		return err
	}
	if cur != term {
		return deposed(ctx, tx, l)
	}
	if a.seq < 1 {
		return fmt.Errorf("%w: sequences count from 1", ErrBaseRefused)
	}
	if a.seq > head {
		return fmt.Errorf("%w: the committed sequence is %d", ErrBaseRefused, head)
	}
	var epoch, gen int64
	err = tx.QueryRow(ctx, `SELECT epoch, generation FROM weir_deltas WHERE seq = $1`, a.seq).Scan(&epoch, &gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: the log holds no delta at sequence %d", ErrBaseRefused, a.seq)
	}
	if err != nil {
		return err
	}
	if epoch != a.epoch || gen != a.generation {
		return fmt.Errorf("%w: sequence %d committed epoch %d of generation %d, not epoch %d of generation %d", ErrBaseRefused, a.seq, epoch, gen, a.epoch, a.generation)
	}
	var prev *int64
	if err := tx.QueryRow(ctx, `SELECT max(seq) FROM weir_bases`).Scan(&prev); err != nil {
		return err
	}
	if prev != nil && *prev >= a.seq {
		return fmt.Errorf("%w: the log's base is at sequence %d", ErrBaseRefused, *prev)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO weir_bases VALUES ($1, $2, $3, $4, $5, now())`, a.seq, a.epoch, a.generation, term, a.catalog); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO weir_objects AS o (name, smallest, largest, size, added, base, pos)
		SELECT n.name, n.smallest, n.largest, n.size, now(), $1, n.pos
		FROM unnest($2::text[], $3::bytea[], $4::bytea[], $5::bigint[]) WITH ORDINALITY AS n(name, smallest, largest, size, pos)
		ON CONFLICT (name) DO UPDATE
		SET smallest = EXCLUDED.smallest, largest = EXCLUDED.largest, size = EXCLUDED.size, base = EXCLUDED.base, pos = EXCLUDED.pos
		WHERE o.seq IS NULL AND o.base IS NULL`, a.seq, a.names, a.smallest, a.largest, a.sizes)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != int64(len(a.names)) {
		return baseReferenced(ctx, tx, a.names, a.seq)
	}
	if prev == nil {
		return nil
	}
	p := *prev
	var batch pgx.Batch
	batch.Queue(`UPDATE weir_objects SET seq = NULL, pos = NULL, added = now() WHERE seq <= $1`, p)
	batch.Queue(`UPDATE weir_objects SET base = NULL, pos = NULL, added = now() WHERE base = $1`, p)
	batch.Queue(`DELETE FROM weir_deltas WHERE seq < $1`, p)
	batch.Queue(`DELETE FROM weir_bases WHERE seq = $1`, p)
	return tx.SendBatch(ctx, &batch).Close()
}

// baseReferenced returns the error of a base some of whose objects a sequence or
// another base references.
func baseReferenced(ctx context.Context, tx pgx.Tx, names []string, seq int64) error {
	var (
		name      string
		other, bs *int64
	)
	err := tx.QueryRow(ctx, `SELECT name, seq, base FROM weir_objects
		WHERE name = ANY($1) AND (base IS DISTINCT FROM $2 OR seq IS NOT NULL) ORDER BY name LIMIT 1`, names, seq).Scan(&name, &other, &bs)
	switch {
	case err != nil:
		return fmt.Errorf("objects already referenced (reading which: %w)", err)
	case other != nil:
		return fmt.Errorf("object %q is already referenced by sequence %d", name, *other)
	case bs != nil:
		return fmt.Errorf("object %q is already referenced by the base at sequence %d", name, *bs)
	}
	return fmt.Errorf("object %q is already referenced", name)
}

// LatestBase returns the log's base, or false when it has none.
func (s *Store) LatestBase(ctx context.Context) (Base, bool, error) {
	var b Base
	found := false
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := s.inTx(ctx, opts, func(tx pgx.Tx) error {
		var seq, epoch, gen, term int64
		err := tx.QueryRow(ctx, `SELECT seq, epoch, generation, term, catalog, created FROM weir_bases
			ORDER BY seq DESC LIMIT 1`).Scan(&seq, &epoch, &gen, &term, &b.Catalog, &b.Created)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		b.Seq, b.Epoch, b.Generation, b.Term = uint64(seq), uint64(epoch), uint64(gen), uint64(term)
		b.Objects, err = queryObjects(ctx, tx, `SELECT name, smallest, largest, size FROM weir_objects
			WHERE base = $1 ORDER BY pos`, seq)
		return err
	})
	if err != nil {
		return Base{}, false, fmt.Errorf("meta: read the base: %w", err)
	}
	return b, found, nil
}

// FirstDelta returns the lowest sequence the log holds a delta of (0: none).
func (s *Store) FirstDelta(ctx context.Context) (uint64, error) {
	var seq *int64
	err := s.with(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SELECT min(seq) FROM weir_deltas`).Scan(&seq)
	})
	if err != nil {
		return 0, fmt.Errorf("meta: read the first delta: %w", err)
	}
	if seq == nil {
		return 0, nil
	}
	return uint64(*seq), nil
}
