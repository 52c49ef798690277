package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// notifyChannel is the PostgreSQL channel on which Commit announces a new sequence.
const notifyChannel = "weir_meta_version"

// Version is the commit point: the committed sequence of the version log and the
// epoch and generation of the checkpoint that sequence committed (all 0 in a new
// store).
type Version struct {
	Seq        uint64
	Epoch      uint64
	Generation uint64
}

// Object is a file written to the bucket: its name, the smallest and largest keys
// it holds, and its size in bytes.
type Object struct {
	Name     string
	Smallest []byte
	Largest  []byte
	Size     int64
}

// RowDelta is the change in one vnode's row count of one table.
type RowDelta struct {
	Table uint32
	Vnode uint16
	Delta int64
}

// Checkpoint is what the leader commits for one epoch. Seq is the committed
// sequence the leader read (Version.Seq); the commit installs Seq+1. RowDeltas are
// the row count changes of its objects when Counted; otherwise they are not known,
// and each store that applies the objects counts them.
type Checkpoint struct {
	Epoch      uint64
	Generation uint64
	Seq        uint64
	Objects    []Object
	Counted    bool
	RowDeltas  []RowDelta
	// Catalog is stored and returned as given.
	Catalog []byte
}

// Delta is one committed sequence of the version log: the checkpoint as committed,
// the term of the leader that committed it, and when, by the database's clock.
type Delta struct {
	Seq        uint64
	Epoch      uint64
	Generation uint64
	Term       uint64
	Objects    []Object
	Counted    bool // RowDeltas are the checkpoint's (false before schema version 3)
	RowDeltas  []RowDelta
	Catalog    []byte
	Committed  time.Time
}

// Commit is the commit point of checkpoint c. In one transaction, the version moves
// from c.Seq to c.Seq+1 only if the lease's term is still the leader's, c.Epoch is
// above the committed epoch and c.Generation is not below the committed generation;
// the delta is appended to the log, c's objects are marked referenced by it, and
// listeners are notified when the transaction commits. It returns the new sequence.
//
// When nothing moved, the error says why, checked in this order: ErrDeposed (the
// leader steps down and does not retry), ErrEpochCommitted, ErrStaleGeneration,
// ErrConflict (the sequence moved: read Committed again). An object that another
// sequence already references fails the commit too. ErrOutcomeUnknown means the
// transaction's end was lost on the way: Committed tells whether c.Seq+1 holds c.
func (s *Store) Commit(ctx context.Context, l Lease, c Checkpoint) (uint64, error) {
	args, err := commitArgs(l, c)
	if err != nil {
		return 0, fmt.Errorf("meta: commit epoch %d at sequence %d: %w", c.Epoch, c.Seq, err)
	}
	var seq int64
	err = s.fencedTx(ctx, func(tx pgx.Tx) error {
		var err error
		seq, err = commitIn(ctx, tx, l, c, args)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("meta: commit epoch %d at sequence %d: %w", c.Epoch, c.Seq, err)
	}
	return uint64(seq), nil
}

// commitValues are a checkpoint's values as the commit's statements take them.
type commitValues struct {
	term, seq, epoch, generation int64
	names                        []string
	smallest, largest            [][]byte
	sizes                        []int64
	tables                       []int64
	vnodes                       []int32
	counts                       []int64
	catalog                      []byte
}

// commitArgs checks l and c and converts them for the statements.
func commitArgs(l Lease, c Checkpoint) (commitValues, error) {
	var a commitValues
	var err error
	if a.term, err = leaseTerm(l); err != nil {
		return a, err
	}
	if a.seq, err = toInt64("sequence", c.Seq); err != nil {
		return a, err
	}
	if c.Seq == math.MaxInt64 {
		return a, fmt.Errorf("sequence %d has no successor", c.Seq)
	}
	if a.epoch, err = toInt64("epoch", c.Epoch); err != nil {
		return a, err
	}
	if a.generation, err = toInt64("generation", c.Generation); err != nil {
		return a, err
	}
	if len(c.Objects) > math.MaxInt32 {
		return a, fmt.Errorf("%d objects in one checkpoint", len(c.Objects))
	}
	seen := make(map[string]struct{}, len(c.Objects))
	a.names = make([]string, 0, len(c.Objects))
	a.smallest = make([][]byte, 0, len(c.Objects))
	a.largest = make([][]byte, 0, len(c.Objects))
	a.sizes = make([]int64, 0, len(c.Objects))
	for _, o := range c.Objects {
		if err := checkObject(o); err != nil {
			return a, err
		}
		if _, dup := seen[o.Name]; dup {
			return a, fmt.Errorf("object %q appears twice", o.Name)
		}
		seen[o.Name] = struct{}{}
		a.names = append(a.names, o.Name)
		a.smallest = append(a.smallest, nonNil(o.Smallest))
		a.largest = append(a.largest, nonNil(o.Largest))
		a.sizes = append(a.sizes, o.Size)
	}
	a.tables = make([]int64, 0, len(c.RowDeltas))
	a.vnodes = make([]int32, 0, len(c.RowDeltas))
	a.counts = make([]int64, 0, len(c.RowDeltas))
	for _, d := range c.RowDeltas {
		a.tables = append(a.tables, int64(d.Table))
		a.vnodes = append(a.vnodes, int32(d.Vnode))
		a.counts = append(a.counts, d.Delta)
	}
	a.catalog = nonNil(c.Catalog)
	return a, nil
}

// checkObject checks what the store keeps of an object.
func checkObject(o Object) error {
	if err := checkText("object name", o.Name, false); err != nil {
		return err
	}
	if o.Size < 0 {
		return fmt.Errorf("object %q has negative size %d", o.Name, o.Size)
	}
	if bytes.Compare(o.Smallest, o.Largest) > 0 {
		return fmt.Errorf("object %q has its smallest key %x above its largest %x", o.Name, o.Smallest, o.Largest)
	}
	return nil
}

// commitIn runs the commit's statements in tx and returns the new sequence.
func commitIn(ctx context.Context, tx pgx.Tx, l Lease, c Checkpoint, a commitValues) (int64, error) {
	var seq int64
	err := tx.QueryRow(ctx, `UPDATE weir_version v
		SET seq = v.seq + 1, epoch = $3, generation = $4
		FROM weir_leader l
		WHERE v.id = 1 AND l.id = 1 AND l.term = $1 AND v.seq = $2 AND v.epoch < $3 AND v.generation <= $4
		RETURNING v.seq`, a.term, a.seq, a.epoch, a.generation).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, refused(ctx, tx, l, c)
	}
	if err != nil {
		return 0, err
	}
	var b pgx.Batch
	b.Queue(`INSERT INTO weir_deltas (seq, epoch, generation, term, row_tables, row_vnodes, row_counts, catalog, committed, counted)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), $9)`,
		seq, a.epoch, a.generation, a.term, a.tables, a.vnodes, a.counts, a.catalog, c.Counted)
	b.Queue(`INSERT INTO weir_objects AS o (name, smallest, largest, size, added, seq, pos)
		SELECT n.name, n.smallest, n.largest, n.size, now(), $1, n.pos
		FROM unnest($2::text[], $3::bytea[], $4::bytea[], $5::bigint[]) WITH ORDINALITY AS n(name, smallest, largest, size, pos)
		ON CONFLICT (name) DO UPDATE
		SET smallest = EXCLUDED.smallest, largest = EXCLUDED.largest, size = EXCLUDED.size, seq = EXCLUDED.seq, pos = EXCLUDED.pos
		WHERE o.seq IS NULL AND o.base IS NULL`, seq, a.names, a.smallest, a.largest, a.sizes)
	b.Queue(`SELECT pg_notify($1, $2)`, notifyChannel, fmt.Sprintf("%d %d", seq, a.epoch))
	res := tx.SendBatch(ctx, &b)
	var added int64
	if _, err = res.Exec(); err == nil {
		var tag pgconn.CommandTag
		if tag, err = res.Exec(); err == nil {
			added = tag.RowsAffected()
			_, err = res.Exec()
		}
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	if added != int64(len(a.names)) {
		return 0, referenced(ctx, tx, a.names, seq)
	}
	return seq, nil
}

// refused reads the lease and the version inside tx after the commit's update moved
// nothing, and returns the error that says why.
func refused(ctx context.Context, tx pgx.Tx, l Lease, c Checkpoint) error {
	var (
		term, seq, epoch, gen int64
		holder                string
	)
	err := tx.QueryRow(ctx, `SELECT l.term, l.holder, v.seq, v.epoch, v.generation
		FROM weir_leader l, weir_version v WHERE l.id = 1 AND v.id = 1`).Scan(&term, &holder, &seq, &epoch, &gen)
	if err != nil {
		return err
	}
	switch {
	case uint64(term) != l.Term:
		return fmt.Errorf("lease of %q at term %d: %w: term %d is held by %q", l.Holder, l.Term, ErrDeposed, term, holder)
	case c.Epoch <= uint64(epoch):
		return fmt.Errorf("%w: committed epoch is %d", ErrEpochCommitted, epoch)
	case c.Generation < uint64(gen):
		return fmt.Errorf("generation %d: %w: committed generation is %d", c.Generation, ErrStaleGeneration, gen)
	case c.Seq != uint64(seq):
		return fmt.Errorf("%w: committed sequence is %d", ErrConflict, seq)
	}
	// Unreachable while the update's condition and these cases agree.
	return fmt.Errorf("nothing committed at term %d, sequence %d, epoch %d, generation %d", term, seq, epoch, gen)
}

// referenced returns the error of a commit some of whose objects another sequence
// already references.
func referenced(ctx context.Context, tx pgx.Tx, names []string, seq int64) error {
	var (
		name        string
		other, base *int64
	)
	err := tx.QueryRow(ctx, `SELECT name, seq, base FROM weir_objects
		WHERE name = ANY($1) AND (seq IS DISTINCT FROM $2 OR base IS NOT NULL) ORDER BY name LIMIT 1`, names, seq).Scan(&name, &other, &base)
	if err != nil {
		return fmt.Errorf("objects already referenced (reading which: %w)", err)
	}
	if base != nil {
		return fmt.Errorf("object %q is already referenced by the base at sequence %d", name, *base)
	}
	if other == nil {
		return fmt.Errorf("object %q is already referenced", name)
	}
	return fmt.Errorf("object %q is already referenced by sequence %d", name, *other)
}

// Committed returns the commit point.
func (s *Store) Committed(ctx context.Context) (Version, error) {
	var seq, epoch, gen int64
	err := s.with(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SELECT seq, epoch, generation FROM weir_version WHERE id = 1`).Scan(&seq, &epoch, &gen)
	})
	if err != nil {
		return Version{}, fmt.Errorf("meta: read the committed version: %w", err)
	}
	return Version{Seq: uint64(seq), Epoch: uint64(epoch), Generation: uint64(gen)}, nil
}

// Deltas returns the log's deltas after sequence after, in sequence order, read
// from one snapshot.
func (s *Store) Deltas(ctx context.Context, after uint64) ([]Delta, error) {
	from, err := toInt64("sequence", after)
	if err != nil {
		return nil, fmt.Errorf("meta: read the deltas: %w", err)
	}
	var out []Delta
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err = s.inTx(ctx, opts, func(tx pgx.Tx) error {
		d, err := readDeltas(ctx, tx, from)
		out = d
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("meta: read the deltas after sequence %d: %w", after, err)
	}
	return out, nil
}

// readDeltas reads the deltas after sequence from, then their objects.
func readDeltas(ctx context.Context, tx pgx.Tx, from int64) ([]Delta, error) {
	rows, err := tx.Query(ctx, `SELECT seq, epoch, generation, term, row_tables, row_vnodes, row_counts, catalog, committed, counted
		FROM weir_deltas WHERE seq > $1 ORDER BY seq`, from)
	if err != nil {
		return nil, err
	}
	var out []Delta
	index := make(map[int64]int)
	for rows.Next() {
		var (
			seq, epoch, gen, term int64
			tables, counts        []int64
			vnodes                []int32
			d                     Delta
		)
		if err := rows.Scan(&seq, &epoch, &gen, &term, &tables, &vnodes, &counts, &d.Catalog, &d.Committed, &d.Counted); err != nil {
			rows.Close()
			return nil, err
		}
		if len(vnodes) != len(tables) || len(counts) != len(tables) {
			rows.Close()
			return nil, fmt.Errorf("sequence %d: row deltas of %d tables, %d vnodes and %d counts", seq, len(tables), len(vnodes), len(counts))
		}
		d.Seq, d.Epoch, d.Generation, d.Term = uint64(seq), uint64(epoch), uint64(gen), uint64(term)
		if len(tables) > 0 {
			d.RowDeltas = make([]RowDelta, len(tables))
			for i := range tables {
				d.RowDeltas[i] = RowDelta{Table: uint32(tables[i]), Vnode: uint16(vnodes[i]), Delta: counts[i]}
			}
		}
		index[seq] = len(out)
		out = append(out, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, nil
	}
	rows, err = tx.Query(ctx, `SELECT seq, name, smallest, largest, size FROM weir_objects
		WHERE seq > $1 ORDER BY seq, pos`, from)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			seq int64
			o   Object
		)
		if err := rows.Scan(&seq, &o.Name, &o.Smallest, &o.Largest, &o.Size); err != nil {
			return nil, err
		}
		i, ok := index[seq]
		if !ok {
			return nil, fmt.Errorf("object %q references sequence %d, which the log lacks", o.Name, seq)
		}
		out[i].Objects = append(out[i].Objects, o)
	}
	return out, rows.Err()
}
