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
package storage
