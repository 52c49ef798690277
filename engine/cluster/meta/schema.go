package meta

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SchemaVersion is the version of the tables this code reads and writes. Open
// records it in a new database and refuses a database that records a newer one.
const SchemaVersion = 3

// migrateLock is the transaction-level advisory lock that serialises Opens of one
// database, so that two processes creating the tables at once do not collide.
const migrateLock = 0x7765697200000001 // "weir" and 1

// schemaTable holds the schema version in its one row.
const schemaTable = `CREATE TABLE IF NOT EXISTS weir_meta_schema (
	id      int PRIMARY KEY CHECK (id = 1),
	version int NOT NULL
)`

// schemaV1 creates the tables of version 1 and their initial rows.
//
//   - weir_leader: the lease, one row. term counts acquisitions; a lease is live
//     while expires is after the database's now().
//   - weir_nodes: one row per node; incarnation counts its registrations.
//   - weir_version: the commit point, one row: the committed sequence, epoch and
//     generation.
//   - weir_deltas: one row per committed sequence: its epoch, generation, the
//     leader's term, the row-count deltas as three parallel arrays and the catalog.
//   - weir_objects: every object added or committed. seq is the delta that references
//     it (pos its place in that delta), NULL while none does.
const schemaV1 = `
CREATE TABLE weir_leader (
	id      int PRIMARY KEY CHECK (id = 1),
	term    bigint NOT NULL,
	holder  text NOT NULL,
	expires timestamptz NOT NULL
);
INSERT INTO weir_leader VALUES (1, 0, '', 'epoch');
CREATE TABLE weir_nodes (
	node        text PRIMARY KEY,
	role        text NOT NULL,
	addr        text NOT NULL,
	incarnation bigint NOT NULL,
	registered  timestamptz NOT NULL
);
CREATE TABLE weir_version (
	id         int PRIMARY KEY CHECK (id = 1),
	seq        bigint NOT NULL,
	epoch      bigint NOT NULL,
	generation bigint NOT NULL
);
INSERT INTO weir_version VALUES (1, 0, 0, 0);
CREATE TABLE weir_deltas (
	seq        bigint PRIMARY KEY,
	epoch      bigint NOT NULL,
	generation bigint NOT NULL,
	term       bigint NOT NULL,
	row_tables bigint[] NOT NULL,
	row_vnodes integer[] NOT NULL,
	row_counts bigint[] NOT NULL,
	catalog    bytea NOT NULL,
	committed  timestamptz NOT NULL
);
CREATE TABLE weir_objects (
	name     text PRIMARY KEY,
	smallest bytea NOT NULL,
	largest  bytea NOT NULL,
	size     bigint NOT NULL,
	added    timestamptz NOT NULL,
	seq      bigint REFERENCES weir_deltas (seq),
	pos      integer
);
CREATE INDEX weir_objects_by_seq ON weir_objects (seq, pos);
CREATE INDEX weir_objects_orphans ON weir_objects (added) WHERE seq IS NULL;
`

// schemaV2 adds the bases to a database of version 1.
//
//   - weir_bases: the log's compacted history: at most one row, the whole committed
//     state at sequence seq (its epoch, generation, the committing leader's term and
//     the full catalog), whose rows are the objects that reference it.
//   - weir_objects.base: the base that references the object, NULL while none does.
//     An object is referenced by a delta (seq) or by a base (base), never both.
const schemaV2 = `
CREATE TABLE weir_bases (
	seq        bigint PRIMARY KEY,
	epoch      bigint NOT NULL,
	generation bigint NOT NULL,
	term       bigint NOT NULL,
	catalog    bytea NOT NULL,
	created    timestamptz NOT NULL
);
ALTER TABLE weir_objects ADD COLUMN base bigint REFERENCES weir_bases (seq);
CREATE INDEX weir_objects_by_base ON weir_objects (base, pos);
DROP INDEX weir_objects_orphans;
CREATE INDEX weir_objects_orphans ON weir_objects (added) WHERE seq IS NULL AND base IS NULL;
`

// schemaV3 marks the deltas whose row-count changes are known (counted): every
// delta committed from version 3 on. A delta of an earlier version has none, and a
// store that applies it counts them against its own committed data.
const schemaV3 = `
ALTER TABLE weir_deltas ADD COLUMN counted boolean NOT NULL DEFAULT false;
`

// migrate creates the tables of a new database, or checks the schema version of an
// existing one and migrates one of an earlier version to this one, in one
// transaction.
func (s *Store) migrate(ctx context.Context) error {
	err := s.inTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, schemaTable); err != nil {
			return err
		}
		var version int
		err := tx.QueryRow(ctx, `SELECT version FROM weir_meta_schema WHERE id = 1`).Scan(&version)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if _, err := tx.Exec(ctx, schemaV1); err != nil {
				return err
			}
			for _, m := range []string{schemaV2, schemaV3} {
				if _, err := tx.Exec(ctx, m); err != nil {
					return err
				}
			}
			_, err = tx.Exec(ctx, `INSERT INTO weir_meta_schema VALUES (1, $1)`, SchemaVersion)
			return err
		case err != nil:
			return err
		case version > SchemaVersion:
			return fmt.Errorf("schema version %d is newer than this build's %d", version, SchemaVersion)
		case version < 1:
			return fmt.Errorf("schema version %d is not one this build knows (1 to %d)", version, SchemaVersion)
		}
		migrations := []string{2: schemaV2, 3: schemaV3}
		for v := version + 1; v <= SchemaVersion; v++ {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migrate schema version %d to %d: %w", v-1, v, err)
			}
		}
		if version < SchemaVersion {
			_, err = tx.Exec(ctx, `UPDATE weir_meta_schema SET version = $1 WHERE id = 1`, SchemaVersion)
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("meta: open %s: %w", s.where, err)
	}
	return nil
}
