package commitlog

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
)

// NodeServer answers the log's requests on a node, with the node's own store (an
// engine.NodeServer): it exports the store's sealed data to the bucket and keeps
// copies of what it wrote until the commit is applied or discarded, and catches the
// store up from the log at a recovery. A Log serves its own engine's nodes
// (Log.ServeNode); a compute process makes one of its own over the same meta store
// and bucket.
type NodeServer struct {
	cfg Config

	mu    sync.Mutex
	kept  map[*storage.Store]keptExport
	locks map[*storage.Store]*sync.Mutex // per store: its applies, recoveries and gains, one at a time
	uses  map[*storage.Store]*storeUses  // per store, under its lock
}

// storeUses are the vnodes the actors built since a node's last recovery asked its
// store to hold (Hold): at the first commit after the recovery, the store gives up
// the others.
type storeUses struct {
	needs map[uint32]*vnode.Bitmap // what the actors asked for so far
	armed bool                     // set by the recovery, cleared by the first commit
}

// keptExport is what a node exported for a commit not yet applied or discarded: the
// copies of its objects in its store's ingest directory.
type keptExport struct {
	epoch uint64
	paths []string
}

var _ engine.NodeServer = (*NodeServer)(nil)

// NewNodeServer returns the node server of the log cfg names (cfg.Meta and
// cfg.Bucket are used; a zero Timeout is DefaultTimeout).
func NewNodeServer(cfg Config) *NodeServer {
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &NodeServer{cfg: cfg, kept: map[*storage.Store]keptExport{}, locks: map[*storage.Store]*sync.Mutex{}, uses: map[*storage.Store]*storeUses{}}
}

// ServeNode implements engine.NodeServer: it decodes req, serves it on store, and
// returns the answer's encoding.
func (s *NodeServer) ServeNode(ctx context.Context, node int, store *storage.Store, req []byte) ([]byte, error) {
	r, err := decodeNodeRequest(req)
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", node, err)
	}
	what := fmt.Sprintf("node %d (store in %s)", node, store.Dir())
	switch r := r.(type) {
	case exportRequest:
		x, err := s.export(ctx, store, r)
		if err != nil {
			return nil, fmt.Errorf("%s: export epoch %d: %w", what, r.Epoch, err)
		}
		return appendExported(nil, x)
	case applyRequest:
		defer s.lock(store)()
		if err := s.apply(ctx, store, r); err != nil {
			return nil, fmt.Errorf("%s: apply epoch %d: %w", what, r.Epoch, err)
		}
		return nil, nil
	case discardRequest:
		s.discard(store, r.Epoch)
		return nil, nil
	case recoverRequest:
		defer s.lock(store)()
		if store.Partial() {
			// The actors built from now on say what the store keeps.
			s.uses[store] = &storeUses{needs: map[uint32]*vnode.Bitmap{}, armed: true}
		}
		s.discard(store, 0)
		store.DropUncommitted()
		store.DiscardStaged()
		if _, err := catchUp(ctx, s.cfg, store); err != nil {
			return nil, fmt.Errorf("%s: recover: %w", what, err)
		}
		return nil, nil
	}
	return nil, fmt.Errorf("%s: a request of type %T", what, r)
}

// lock takes store's lock, which orders its applies, recoveries and gains, and
// returns its unlock.
func (s *NodeServer) lock(store *storage.Store) func() {
	s.mu.Lock()
	l := s.locks[store]
	if l == nil {
		l = &sync.Mutex{}
		s.locks[store] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// HoldTimeout bounds a Hold that gains vnodes (or the log's Timeout, when longer):
// it downloads and merges every object of the log's base and deltas that may hold
// them, which for a large table's vnodes takes much longer than a commit.
const HoldTimeout = 10 * time.Minute

// Hold implements engine.NodeServer: a partial store (a node's) that does not hold
// every vnode of needs gains the others from the log, at the sequence it applied:
// the objects of the log's base and of its deltas up to that sequence that may hold
// keys of them are downloaded and merged into it (objstore.Gain). A whole store
// holds every vnode already. What the actors built since the store's last recovery
// asked for is kept: the first commit the store applies after the recovery gives up
// the vnodes none of them asked for (the actors that read them were torn down by the
// recovery, which dropped their uncommitted data), so that a store holds what its
// node's actors read, not every vnode they ever read.
func (s *NodeServer) Hold(ctx context.Context, node int, store *storage.Store, needs map[uint32]*vnode.Bitmap) error {
	defer s.lock(store)()
	if err := s.use(store, needs); err != nil {
		return fmt.Errorf("node %d: hold vnodes: %w", node, err)
	}
	missing, err := store.Missing(needs)
	if err != nil || missing == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.Timeout, HoldTimeout))
	defer cancel()
	seq, err := store.AppliedSequence()
	if err != nil {
		return fmt.Errorf("node %d: %w", node, err)
	}
	objects, err := gainObjects(ctx, s.cfg, seq, missing)
	if err == nil {
		err = objstore.Gain(ctx, s.cfg.Bucket, store, seq, missing, objects)
	}
	if err != nil {
		return fmt.Errorf("node %d (store in %s): hold vnodes %s: %w", node, store.Dir(), describeRanges(missing), err)
	}
	return nil
}

// use records needs as asked for on store since its last recovery (nothing before
// its first); store's lock is held.
func (s *NodeServer) use(store *storage.Store, needs map[uint32]*vnode.Bitmap) error {
	u := s.uses[store]
	if u == nil || !u.armed {
		return nil
	}
	for t, b := range needs {
		if err := storage.AddVnodes(u.needs, t, b); err != nil {
			return err
		}
	}
	return nil
}

// keep has store give up the vnodes the actors built since its last recovery did
// not ask for (Hold), at the first commit it applied after the recovery (or the next,
// when that fails); store's lock is held. It relies on every graph that places
// actors on the node beginning with a recovery, which arms it: a node that comes
// back after it was left down is given actors only by a recovery.
func (s *NodeServer) keep(store *storage.Store) error {
	u := s.uses[store]
	if u == nil || !u.armed {
		return nil
	}
	if _, err := store.Keep(u.needs); err != nil {
		return err
	}
	u.armed = false
	return nil
}

// logger is where the node server's warnings go.
func (s *NodeServer) logger() *slog.Logger {
	if s.cfg.Logger != nil {
		return s.cfg.Logger
	}
	return slog.Default()
}

// gainObjects returns the names of the objects of the log's commits up to sequence
// seq (its base's, then its deltas', oldest first) that may hold keys of ranges.
func gainObjects(ctx context.Context, cfg Config, seq uint64, ranges map[uint32]*vnode.Bitmap) ([]string, error) {
	if seq == 0 {
		return nil, nil
	}
	var names []string
	from := uint64(0)
	b, ok, err := cfg.Meta.LatestBase(ctx)
	if err != nil {
		return nil, err
	}
	if ok {
		if b.Seq > seq {
			return nil, fmt.Errorf("the log's base is at sequence %d, above the store's %d: the store is behind the log", b.Seq, seq)
		}
		names = appendOverlapping(names, b.Objects, ranges)
		from = b.Seq
	}
	deltas, err := cfg.Meta.Deltas(ctx, from)
	if err != nil {
		return nil, err
	}
	if from < seq && (len(deltas) == 0 || deltas[0].Seq != from+1) {
		return nil, fmt.Errorf("the log holds no delta at sequence %d", from+1)
	}
	for _, d := range deltas {
		if d.Seq > seq {
			break
		}
		names = appendOverlapping(names, d.Objects, ranges)
	}
	return names, nil
}

// appendOverlapping appends the names of objs that may hold keys of ranges.
func appendOverlapping(names []string, objs []meta.Object, ranges map[uint32]*vnode.Bitmap) []string {
	for _, o := range objs {
		if storage.RangesBetween(ranges, o.Smallest, o.Largest) {
			names = append(names, o.Name)
		}
	}
	return names
}

// describeRanges names ranges for an error: table:vnodes, in table order.
func describeRanges(ranges map[uint32]*vnode.Bitmap) string {
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(ranges)) {
		parts = append(parts, fmt.Sprintf("%d:%s", t, ranges[t]))
	}
	return strings.Join(parts, " ")
}

// export uploads store's sealed data up to r.Epoch, keeping copies.
func (s *NodeServer) export(ctx context.Context, store *storage.Store, r exportRequest) (exported, error) {
	// The store must be where the engine's store is, which the commit is fenced on:
	// a store left behind would skip the deltas between.
	seq, err := store.AppliedSequence()
	if err != nil {
		return exported{}, err
	}
	if seq != r.Sequence || store.CommittedEpoch() != r.Committed {
		return exported{}, fmt.Errorf("the store applied sequence %d at epoch %d, the engine's store sequence %d at epoch %d: reopen to catch it up",
			seq, store.CommittedEpoch(), r.Sequence, r.Committed)
	}
	s.discard(store, 0) // an export of an earlier commit that neither applied nor discarded
	for _, t := range r.Drops {
		if err := store.StageDropTable(t); err != nil {
			store.DiscardStaged()
			return exported{}, err
		}
	}
	// Not Whole: each sstable holds consecutive vnodes of one table, all of them
	// written by this node, so that no other node's sstable overlaps it.
	u, err := objstore.UploadKeepFrom(ctx, s.cfg.Bucket, store, r.Epoch, r.Node, r.Incarnation, r.First, storage.ExportOptions{TableBytes: int(min(r.TableBytes, 1<<40))})
	if err != nil {
		store.DiscardStaged()
		return exported{}, fmt.Errorf("to bucket %s: %w", s.cfg.BucketURL, err)
	}
	s.mu.Lock()
	s.kept[store] = keptExport{epoch: r.Epoch, paths: u.Paths}
	s.mu.Unlock()
	return exported{Objects: u.Objects, RowDeltas: u.RowDeltas}, nil
}

// apply applies the commit of r.Epoch to store from its kept copies and the other
// nodes' objects.
func (s *NodeServer) apply(ctx context.Context, store *storage.Store, r applyRequest) error {
	s.mu.Lock()
	k, ok := s.kept[store]
	delete(s.kept, store)
	s.mu.Unlock()
	ch, err := decodeChanges(r.Changes)
	if err == nil && (!ok || k.epoch != r.Epoch) {
		err = fmt.Errorf("the node kept no export of epoch %d", r.Epoch)
	}
	if err == nil {
		// The row count changes every node's export counted: no store counts them
		// again.
		ch.Sequence, ch.Counted, ch.RowDeltas = r.Sequence, true, r.RowDeltas
		// ApplyWith consumes the copies, whatever its result.
		// A partial store downloads the objects that may hold keys of its vnodes
		// only (IngestFiles keeps only those keys of them).
		var others []string
		for _, o := range r.Others {
			if store.MayHold(o.Smallest, o.Largest) {
				others = append(others, o.Name)
			}
		}
		err = objstore.ApplyWith(ctx, s.cfg.Bucket, store, r.Epoch, k.paths, others, ch)
		k.paths = nil
		if err == nil {
			// Giving vnodes up only saves work: the commit is applied whatever
			// its result, and a failure is tried again at the next commit (a
			// fault that fails the store fails that commit's apply).
			if kerr := s.keep(store); kerr != nil {
				s.logger().Warn("a node store could not give up the vnodes no actor reads; it tries again at the next commit",
					"store", store.Dir(), "epoch", r.Epoch, "error", kerr)
			}
		}
	}
	if err != nil {
		store.DiscardIngestFiles(k.paths)
		store.DiscardStaged()
	}
	return err
}

// discard drops the copies store kept for epoch (0: for any epoch) and what it
// staged.
func (s *NodeServer) discard(store *storage.Store, epoch uint64) {
	s.mu.Lock()
	k, ok := s.kept[store]
	ok = ok && (epoch == 0 || k.epoch == epoch)
	if ok {
		delete(s.kept, store)
	}
	s.mu.Unlock()
	if ok {
		store.DiscardIngestFiles(k.paths)
		store.DiscardStaged()
	}
}

// RecoverNodes implements engine.NodeCommitLog: each node drops its store's
// uncommitted data and the copies it kept, and catches up from the log.
func (l *Log) RecoverNodes(ctx context.Context, nodes []engine.CommitNode) error {
	req, err := appendNodeRequest(nil, recoverRequest{})
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if _, err := n.Call(ctx, req); err != nil {
			return fmt.Errorf("commitlog: recover node %d: %w", n.Node, err)
		}
	}
	return nil
}
