package meta_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
)

// TestCommitBase: a base is refused off the log (above the committed sequence, not
// a delta's epoch or generation, not above the base, by a deposed leader, with an
// object a delta references) with nothing changed; the first base compacts nothing;
// the second compacts the history before the first, leaving exactly the objects of
// the first base and of the deltas up to it unreferenced, from the compaction on.
func TestCommitBase(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	l := acquire(t, s, "a")
	obj := testObject
	for seq := uint64(1); seq <= 6; seq++ {
		c := meta.Checkpoint{Epoch: seq * 10, Generation: 1, Seq: seq - 1, Objects: []meta.Object{obj(fmt.Sprintf("e%d-a", seq)), obj(fmt.Sprintf("e%d-b", seq))}}
		if _, err := s.Commit(ctx, l, c); err != nil {
			t.Fatal(err)
		}
	}
	base := func(seq uint64, objs ...string) meta.Base {
		b := meta.Base{Seq: seq, Epoch: seq * 10, Generation: 1, Catalog: []byte(fmt.Sprint("catalog ", seq))}
		for _, n := range objs {
			b.Objects = append(b.Objects, obj(n))
		}
		return b
	}
	for _, tc := range []struct {
		name string
		b    meta.Base
		want string
	}{
		{"above the head", base(7, "b7-0"), "committed sequence is 6"},
		{"sequence 0", base(0, "b0-0"), "sequences count from 1"},
		{"other epoch", meta.Base{Seq: 3, Epoch: 31, Generation: 1}, "committed epoch 30 of generation 1, not epoch 31"},
		{"other generation", meta.Base{Seq: 3, Epoch: 30, Generation: 2}, "not epoch 30 of generation 2"},
		{"delta's object", base(3, "b3-0", "e2-a"), `object "e2-a" is already referenced by sequence 2`},
	} {
		if err := s.CommitBase(ctx, l, tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if _, ok, err := s.LatestBase(ctx); err != nil || ok {
		t.Fatalf("a base after refused ones: %v, %v", ok, err)
	}
	if err := s.CommitBase(ctx, l, base(3, "b3-0", "b3-1")); err != nil {
		t.Fatal(err)
	}
	b, ok, err := s.LatestBase(ctx)
	if err != nil || !ok || b.Seq != 3 || b.Epoch != 30 || b.Term != l.Term || string(b.Catalog) != "catalog 3" || !slices.Equal(names(b.Objects), []string{"b3-0", "b3-1"}) {
		t.Fatalf("base %+v (%v, %v), want the one at 3", b, ok, err)
	}
	if err := s.CommitBase(ctx, l, base(3, "b3-x")); !errors.Is(err, meta.ErrBaseRefused) {
		t.Fatalf("a second base at 3: %v, want ErrBaseRefused", err)
	}
	if err := s.CommitBase(ctx, l, base(2, "b2-x")); !errors.Is(err, meta.ErrBaseRefused) {
		t.Fatalf("a base below the base: %v, want ErrBaseRefused", err)
	}
	if orphans, err := s.Unreferenced(ctx, farFuture); err != nil || len(orphans) != 0 {
		t.Fatalf("unreferenced after the first base: %v, %v; want none", names(orphans), err)
	}
	if first, err := s.FirstDelta(ctx); err != nil || first != 1 {
		t.Fatalf("first delta %d, %v after the first base, want 1", first, err)
	}
	// A deposed leader's base changes nothing.
	if _, err := s.AcquireLeader(ctx, "b", time.Hour); err == nil {
		t.Fatal("a second lease while the first is live")
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	l2 := acquire(t, s, "b")
	if err := s.CommitBase(ctx, l, base(5, "b5-0")); !errors.Is(err, meta.ErrDeposed) {
		t.Fatalf("a deposed leader's base: %v, want ErrDeposed", err)
	}
	before, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CommitBase(ctx, l2, base(5, "b5-0")); err != nil {
		t.Fatal(err)
	}
	if b, _, _ := s.LatestBase(ctx); b.Seq != 5 || !slices.Equal(names(b.Objects), []string{"b5-0"}) {
		t.Fatalf("base %+v after the second, want the one at 5", b)
	}
	if first, err := s.FirstDelta(ctx); err != nil || first != 3 {
		t.Fatalf("first delta %d, %v after the second base, want 3 (the first base's)", first, err)
	}
	ds, err := s.Deltas(ctx, 2)
	if err != nil || len(ds) != 4 || ds[0].Seq != 3 || len(ds[0].Objects) != 0 || len(ds[1].Objects) != 2 {
		t.Fatalf("deltas after 2: %+v, %v; want 3 (no objects) to 6", ds, err)
	}
	orphans, err := s.Unreferenced(ctx, farFuture)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"b3-0", "b3-1", "e1-a", "e1-b", "e2-a", "e2-b", "e3-a", "e3-b"}
	if !slices.Equal(names(orphans), want) {
		t.Fatalf("unreferenced after the second base: %v, want %v", names(orphans), want)
	}
	// Their grace counts from the compaction.
	if early, err := s.Unreferenced(ctx, before); err != nil || len(early) != 0 {
		t.Fatalf("unreferenced before the compaction: %v, %v; want none", names(early), err)
	}
	if n, err := s.DeleteObjects(ctx, append(names(orphans), "b5-0", "e4-a")); err != nil || n != len(want) {
		t.Fatalf("delete the orphans: %d, %v; want %d (the referenced kept)", n, err, len(want))
	}
	// Commits go on after the bases.
	if _, err := s.Commit(ctx, l2, meta.Checkpoint{Epoch: 70, Generation: 1, Seq: 6}); err != nil {
		t.Fatal(err)
	}
}

// A database of schema version 1 is migrated to the latest on open, its log kept: a
// delta of before version 3 has no row-count changes (not Counted); one committed
// after has them.
func TestMigrateSchema1(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dsn := oldDatabase(t, 1, meta.SchemaV1+`
		UPDATE weir_version SET seq = 1, epoch = 10;
		INSERT INTO weir_deltas VALUES (1, 10, 0, 1, '{}', '{}', '{}', '', now());
		INSERT INTO weir_objects VALUES ('e10-a', '', '', 1, now(), 1, 1);`)
	s := openStore(t, dsn)
	if v := committed(t, s); v.Seq != 1 || v.Epoch != 10 {
		t.Fatalf("committed %+v after the migration", v)
	}
	// Opened again, the store is of the latest version and is not migrated twice.
	again := openStore(t, dsn)
	checkSchemaVersion(t, dsn)
	again.Close()
	l := acquire(t, s, "a")
	if err := s.CommitBase(ctx, l, meta.Base{Seq: 1, Epoch: 10, Objects: []meta.Object{{Name: "b10-0"}}}); err != nil {
		t.Fatalf("a base in a migrated store: %v", err)
	}
	if ds, err := s.Deltas(ctx, 0); err != nil || len(ds) != 1 || len(ds[0].Objects) != 1 || ds[0].Counted {
		t.Fatalf("deltas after the migration: %+v, %v", ds, err)
	}
	checkCountedCommit(t, s, l, []meta.RowDelta{{Table: 7, Vnode: 3, Delta: -2}, {Table: 9, Vnode: 0, Delta: 5}})
}

// A database of schema version 2 is migrated to the latest on open: its deltas have
// no row count changes (not Counted), and one committed after has them.
func TestMigrateSchema2(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dsn := oldDatabase(t, 2, meta.SchemaV1+meta.SchemaV2+`
		UPDATE weir_version SET seq = 1, epoch = 10;
		INSERT INTO weir_deltas VALUES (1, 10, 0, 1, '{7}', '{3}', '{4}', '', now());`)
	s := openStore(t, dsn)
	checkSchemaVersion(t, dsn)
	ds, err := s.Deltas(ctx, 0)
	if err != nil || len(ds) != 1 || ds[0].Counted || len(ds[0].RowDeltas) != 1 {
		t.Fatalf("the version-2 delta after the migration: %+v, %v", ds, err)
	}
	checkCountedCommit(t, s, acquire(t, s, "a"), []meta.RowDelta{{Table: 7, Vnode: 3, Delta: 2}})
}

// oldDatabase is a new database recorded at schema version, whose tables and rows
// the statements make.
func oldDatabase(t *testing.T, version int, statements string) string {
	t.Helper()
	ctx := testContext(t)
	dsn := newDatabase(t)
	_, err := mustConnect(t, dsn).Exec(ctx, fmt.Sprintf(`CREATE TABLE weir_meta_schema (id int PRIMARY KEY CHECK (id = 1), version int NOT NULL);
		INSERT INTO weir_meta_schema VALUES (1, %d);`, version)+statements)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// checkSchemaVersion requires the database at dsn to record this build's version.
func checkSchemaVersion(t *testing.T, dsn string) {
	t.Helper()
	ctx := testContext(t)
	var version int
	if err := pgx.BeginFunc(ctx, mustConnect(t, dsn), func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT version FROM weir_meta_schema WHERE id = 1`).Scan(&version)
	}); err != nil || version != meta.SchemaVersion {
		t.Fatalf("schema version %d (%v) after the migration, want %d", version, err, meta.SchemaVersion)
	}
}

// checkCountedCommit commits epoch 11 at sequence 1 with the row count changes rd
// and requires the log to give them back, Counted.
func checkCountedCommit(t *testing.T, s *meta.Store, l meta.Lease, rd []meta.RowDelta) {
	t.Helper()
	ctx := testContext(t)
	if _, err := s.Commit(ctx, l, meta.Checkpoint{Epoch: 11, Seq: 1, Counted: true, RowDeltas: rd}); err != nil {
		t.Fatal(err)
	}
	if ds, err := s.Deltas(ctx, 1); err != nil || len(ds) != 1 || !ds[0].Counted || !slices.Equal(ds[0].RowDeltas, rd) {
		t.Fatalf("a delta committed after the migration: %+v, %v", ds, err)
	}
}

// mustConnect connects to dsn for the test's own statements, closed when it ends.
func mustConnect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}
