// Package commitlog is an engine.CommitLog over a cluster's meta store (PostgreSQL)
// and bucket (docs/design.md §8, "Checkpoint commit"): an engine opened with
// engine.Options{CommitLog: log} commits every checkpoint as sstables uploaded to the
// bucket and a version committed by the meta store's fenced update, and keeps its
// directory as a copy that it rebuilds from the log when it opens in an empty one.
//
// The process that opens a Log holds the leader lease, renewed in the background: a
// second Log on the same meta store is refused while the lease is live, and a holder
// whose lease was taken over fails its next commit with meta.ErrDeposed, committing
// nothing. A commit's catalog changes and table drops travel in the version log's
// delta (changes.go); the store keeps the sequence it applied last, so a catch-up
// reads only the deltas after it. Every Config.BaseEvery commits the Log writes a
// base, the whole committed state, from a snapshot in the background while the next
// checkpoints commit (WriteBase, inside the commit, with Config.BaseInline), which
// compacts the history before the previous base; an empty directory catches up from
// the base.
//
// # Files
//
//   - log.go: Config, Log, Open, Close; CatchUp, Commit and WriteBase.
//   - collect.go: Log.Collect and Collect: the objects no version references, and
//     those the meta store records nowhere (of an upload that died before its commit).
//   - export.go: a commit's upload, of the engine's store or of each node store
//     (engine.Options.NodeStores), its checks before the commit point, and its apply.
//   - nodeserver.go: NodeServer, a node's side of the log's requests (export, apply,
//     discard, recover) and Hold, which has a node's partial store gain the vnodes
//     its actors read from the log and give up the others after a recovery.
//   - noderequest.go, nodecodec.go: the node requests and their versioned encoding.
//   - changes.go: the versioned encoding of a commit's changes in a delta.
//
// The tests start a private PostgreSQL server (internal/pgtest) and fail, not skip,
// without one; TestKilledWriter kills a writing process with SIGKILL and rebuilds its
// state from the log in an empty directory.
package commitlog
