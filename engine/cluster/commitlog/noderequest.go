package commitlog

import (
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/storage"
)

// A node's part of a checkpoint, as the log asks for it (engine.CommitNode's Call) and
// the node answers it with its own store (engine.NodeServer): export the node's
// sealed data, then apply the commit or discard the export; and, at a recovery, drop
// the node's uncommitted data and catch up from the log. Requests and answers travel
// in a versioned binary encoding (nodecodec.go), over a control stream when the node
// is another process.

// The kinds of a node request.
const (
	reqExport  byte = 1 // exportRequest, answered by exported
	reqApply   byte = 2 // applyRequest, answered by nothing
	reqDiscard byte = 3 // discardRequest, answered by nothing
	reqRecover byte = 4 // recoverRequest, answered by nothing
)

// exportRequest asks a node to upload its sealed data up to Epoch, as objstore
// objects named for node Node and incarnation Incarnation numbered from First, after
// staging the table drops of the commit (Drops), and to keep copies of them to apply
// the commit from. The node refuses when its store is not at the engine store's
// applied sequence Sequence and committed epoch Committed (it would skip deltas).
type exportRequest struct {
	Epoch       uint64
	Sequence    uint64
	Committed   uint64
	Node        uint64
	Incarnation uint64
	First       uint64
	Drops       []uint32
	TableBytes  uint64
}

// exported answers an exportRequest: the objects the node uploaded, in key order,
// and the row count changes they make (storage.Store.ExportCheckpoint).
type exported struct {
	Objects   []objstore.Object
	RowDeltas []storage.RowDelta
}

// applyRequest asks a node to apply the commit of Epoch: its kept copies of what it
// exported for Epoch, the other nodes' objects (Others, with their keys: those that
// may hold keys of vnodes the node's store holds are downloaded) and the commit's
// changes (Changes: encodeChanges' encoding, with the delta's Sequence, and
// RowDeltas, the row count changes of every node's objects together).
type applyRequest struct {
	Epoch     uint64
	Sequence  uint64
	Changes   []byte
	Others    []objstore.Object
	RowDeltas []storage.RowDelta
}

// discardRequest asks a node to drop the copies it kept for Epoch and the drops it
// staged: the commit did not happen.
type discardRequest struct {
	Epoch uint64
}

// recoverRequest asks a node to drop its store's uncommitted data and catch up from
// the log (a recovery), answering once its store is at the log's last commit.
type recoverRequest struct{}
