// Package storage is Weir's storage layer: the committed store on pebble, the
// node-local stores of uncommitted epochs, state tables, the backfill's replicated
// state table and progress table, and the snapshot read path.
//
// # Keys
//
// Every row lives under table id (4 bytes BE) | vnode (2 bytes BE) | memcomparable pk
// (package vec), so a scan of one vnode returns pk order. Table id 0 is reserved for
// metadata: the committed epoch, the catalog and the per-vnode row counts.
//
// # Epochs and visibility
//
// Writes of an epoch go to the writer's private memtable; at a barrier the writer seals
// them as epoch Prev into its node's store, where every reader on that node sees them.
// A checkpoint moves every sealed epoch up to its epoch from every node into pebble, with
// the new committed epoch, in one atomic, durable step (a synced batch, or for a large
// checkpoint sstables ingested together; see Options.IngestBytes): a checkpoint is
// atomic and durable, nothing else is. A reader's View is a pebble snapshot, the committed epoch read
// through it, and the node's sealed epochs above it, taken together under one lock, so
// a reader always sees a consistent state however checkpoints interleave.
//
// # Files
//
//   - store.go: Options, Store (Open, Close, the committed epoch and its waiters) and
//     Node, a simulated compute node's sealed, uncommitted epochs, and the Views of
//     both.
//   - dir.go: what Open accepts as a store's directory, and its lock (ErrInUse).
//   - keys.go: the storage key layout and the metadata keys.
//   - run.go: the memtable of an epoch's writes and the sorted, sealed run it becomes.
//   - writer.go: the chunk writer that state and replicated tables share.
//   - checkpoint.go: Checkpoint (merge the sealed runs, count rows, commit), the
//     catalog entries and table drops it stages.
//   - ingest.go: a large checkpoint written as sstables and ingested.
//   - remote.go: a checkpoint on object storage: ExportCheckpoint writes the sealed
//     runs as sstables, IngestFiles commits downloaded ones with a commit's Changes
//     (catalog entries, table drops, the version-log sequence: Staged, AppliedSequence).
//   - holds.go: a partial store (Options.Partial), which holds the committed data of
//     some vnodes of some tables only: what it holds (Holds, Missing, MayHold), and
//     Gain, which merges a log's objects into the vnodes it adds.
//   - statetable.go: StateTable, an actor's reads and writes of one table.
//   - lookup.go: StateTable.GetMany, batched point reads.
//   - iter.go: Iter, the pk-ordered iterator of one vnode, and ReuseIter.
//   - replicated.go: ReplicatedTable, a backfill's private view of its upstream.
//   - progress.go: ProgressTable and VnodeProgress, a backfill's per-vnode progress.
//   - snapshot.go: the snapshot read's API: VnodeSource and its two sources
//     (ReplicatedSource, ViewSource), SnapshotRequest, SnapshotBatch, SnapshotReader
//     (OpenSnapshot, Batches, Stop, Close) and ReadOne.
//   - snapshot_worker.go: the snapshot read's workers, which take rate-limit tokens and
//     read vnodes into decoded batches.
package storage
