// Package meta is a Weir cluster's meta store in PostgreSQL (docs/design.md §8): the
// leader lease, the node registry, the version log whose update is the commit point of
// every checkpoint, and the objects that log references, for garbage collection.
//
// # Fencing
//
// Every acquisition of the lease bumps its term. A commit moves the version row from
// the sequence the leader read to the next in one statement that also requires the
// leader's term to be current, the epoch to be above the committed one and the
// generation not below it; the delta row, the object references and a notification
// join it in one transaction. A commit that moved nothing reads why (ErrDeposed,
// ErrEpochCommitted, ErrStaleGeneration, ErrConflict). Expiry, ages and commit times
// use the database's clock, never the caller's. Registration bumps a node's
// incarnation, and CheckIncarnation refuses an older one.
//
// # Tables
//
// Open creates the tables weir_meta_schema (the schema version), weir_leader,
// weir_nodes, weir_version, weir_deltas, weir_bases and weir_objects when they do not
// exist, migrates a database of schema version 1 to 2 (which adds the bases), and
// refuses a database of a newer schema version (schema.go describes each table).
//
// # Files
//
//   - store.go: Store, Open, Close, Now; the connection helpers and value checks.
//   - schema.go: the tables and the schema version check.
//   - errors.go: the errors the calls wrap.
//   - lease.go: Lease, AcquireLeader, Renew, Release, Expire.
//   - nodes.go: Node, RegisterNode, CheckIncarnation, Nodes.
//   - commit.go: Checkpoint, Object, RowDelta, Delta, Version; Commit, Committed,
//     Deltas.
//   - listen.go: Listener, Notification: the announcements of new sequences.
//   - objects.go: AddObjects, Unreferenced, DeleteObjects, Recorded: the records garbage
//     collection works from.
//   - base.go: Base, CommitBase, LatestBase, FirstDelta: the log's history
//     compacted into the whole committed state at one sequence.
//
// The tests start a private PostgreSQL server with scripts/pg.sh (main_test.go) and
// fail, not skip, without one: `make pg-install` installs it.
package meta
