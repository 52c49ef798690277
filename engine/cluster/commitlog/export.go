package commitlog

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/storage"
	"gocloud.dev/blob"
)

// export is the upload of one commit: the objects of every store that exported
// part of it (the engine's store alone, or each node's), with the copies each kept
// to apply from (the engine's store's here, a node's on the node).
type export struct {
	l     *Log
	c     engine.CommitRequest
	objs  []objstore.Object // every part's, in part order
	parts []exportPart
}

// exportPart is one store's part of an export: the engine's store's, or a node's.
type exportPart struct {
	what   string             // names the store in errors
	store  *storage.Store     // the engine's store
	node   *engine.CommitNode // or a node
	objs   []objstore.Object
	paths  []string           // the engine's store's copies, in objs' order
	deltas []storage.RowDelta // the row count changes of objs
}

// nodeObjectBits is the size of each node's range of object numbers (the K of
// objstore.Name) in one export: node i's objects are numbered from i<<nodeObjectBits.
const nodeObjectBits = 32

// export uploads the sealed data up to c.Epoch of c.Store, or has each node upload
// its own, all at once (after staging the commit's table drops, whose runs are not
// exported), and checks that the nodes' objects do not overlap: an overlap would
// make the commit one that no store can apply, so it is refused before the commit
// point.
func (l *Log) export(ctx context.Context, c engine.CommitRequest, drops []uint32) (*export, error) {
	ex := &export{l: l, c: c}
	if len(c.Nodes) == 0 {
		u, err := objstore.UploadKeep(ctx, l.cfg.Bucket, c.Store, c.Epoch, l.cfg.Node, l.inc, storage.ExportOptions{TableBytes: l.cfg.TableBytes, Whole: true})
		if err != nil {
			return nil, fmt.Errorf("to bucket %s: %w", l.cfg.BucketURL, err)
		}
		ex.objs = u.Objects
		ex.parts = []exportPart{{what: "the store in " + c.Store.Dir(), store: c.Store, objs: u.Objects, paths: u.Paths, deltas: u.RowDeltas}}
	}
	// Every node's store must be where the engine's store is, which the commit is
	// fenced on: each node checks it.
	seq, err := c.Store.AppliedSequence()
	if err != nil {
		return nil, err
	}
	// The nodes export at once, each numbering its objects in a range of its own.
	first := uint64(len(ex.objs))
	parts := make([]exportPart, len(c.Nodes))
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i := range c.Nodes {
		n := &c.Nodes[i]
		parts[i] = exportPart{what: fmt.Sprintf("node %d", n.Node), node: n}
		wg.Go(func() {
			req, err := appendNodeRequest(nil, exportRequest{
				Epoch: c.Epoch, Sequence: seq, Committed: c.Store.CommittedEpoch(), Node: l.cfg.Node, Incarnation: l.inc,
				First: first + uint64(i)<<nodeObjectBits, Drops: drops, TableBytes: uint64(max(l.cfg.TableBytes, 0)),
			})
			var ans []byte
			if err == nil {
				ans, err = n.Call(ctx, req)
			}
			var x exported
			if err == nil {
				x, err = decodeExported(ans)
			}
			if err == nil && uint64(len(x.Objects)) >= 1<<nodeObjectBits {
				err = fmt.Errorf("%d objects, more than a node's range of names holds", len(x.Objects))
			}
			parts[i].objs, parts[i].deltas, errs[i] = x.Objects, x.RowDeltas, err
		})
	}
	wg.Wait()
	var failed error
	for i, p := range parts {
		if errs[i] != nil {
			// A node whose export failed dropped what it staged; the others drop
			// theirs (discard).
			failed = cmp.Or(failed, fmt.Errorf("%s: %w", p.what, errs[i]))
			continue
		}
		ex.objs = append(ex.objs, p.objs...)
		ex.parts = append(ex.parts, p)
	}
	if failed != nil {
		ex.discard()
		return nil, failed
	}
	if err := ex.check(drops); err != nil {
		// The objects stay in the bucket, recorded nowhere, as those of a failed
		// upload do: objstore.Collect deletes them.
		ex.discard()
		return nil, err
	}
	return ex, nil
}

// rowDeltas returns the row count changes of the whole export: every part's added
// up (their keys do not overlap, so each counted its own writes against the same
// committed data).
func (ex *export) rowDeltas() []storage.RowDelta {
	lists := make([][]storage.RowDelta, len(ex.parts))
	for i, p := range ex.parts {
		lists[i] = p.deltas
	}
	return storage.SumRowDeltas(lists...)
}

// check fails when two of the export's objects hold overlapping key ranges (two
// nodes wrote one vnode of a table between two checkpoints), or when one's key range
// spans a table the commit drops: no store could apply such a commit, so it is
// refused before its commit point.
func (ex *export) check(drops []uint32) error {
	type bound struct {
		o    objstore.Object
		what string
	}
	var bs []bound
	for _, p := range ex.parts {
		for _, o := range p.objs {
			bs = append(bs, bound{o, p.what})
		}
	}
	for _, b := range bs {
		if len(b.o.Smallest) < 4 || len(b.o.Largest) < 4 {
			return fmt.Errorf("object %s (of %s): keys %x..%x are shorter than a table id", b.o.Name, b.what, b.o.Smallest, b.o.Largest)
		}
		lo, hi := binary.BigEndian.Uint32(b.o.Smallest), binary.BigEndian.Uint32(b.o.Largest)
		for _, t := range drops {
			if lo <= t && t <= hi {
				return fmt.Errorf("object %s (of %s, tables %d to %d) spans table %d, which the commit drops", b.o.Name, b.what, lo, hi, t)
			}
		}
	}
	// Each part's row count changes are of the vnodes its own objects hold, none of
	// table 0 or of a table the commit drops: a store refuses such a change when it
	// applies the commit, and the log must not record one it refuses.
	for _, p := range ex.parts {
		for _, d := range p.deltas {
			if d.Table == storage.MetaTable || slices.Contains(drops, d.Table) {
				return fmt.Errorf("%s counted a row count change of table %d vnode %d, which is reserved or which the commit drops", p.what, d.Table, d.Vnode)
			}
			prefix := storage.AppendKey(nil, d.Table, d.Vnode, nil)
			if !slices.ContainsFunc(p.objs, func(o objstore.Object) bool {
				return bytes.Compare(o.Smallest[:min(len(o.Smallest), len(prefix))], prefix) <= 0 &&
					bytes.Compare(prefix, o.Largest[:min(len(o.Largest), len(prefix))]) <= 0
			}) {
				return fmt.Errorf("%s counted a row count change of table %d vnode %d, which none of its objects holds", p.what, d.Table, d.Vnode)
			}
		}
	}
	slices.SortFunc(bs, func(a, b bound) int { return bytes.Compare(a.o.Smallest, b.o.Smallest) })
	for i := 1; i < len(bs); i++ {
		a, b := bs[i-1], bs[i]
		if bytes.Compare(a.o.Largest, b.o.Smallest) >= 0 {
			return fmt.Errorf("objects %s (of %s, keys %x..%x) and %s (of %s, keys %x..%x) overlap: two nodes wrote, or own, the same vnode of a table since the last checkpoint",
				a.o.Name, a.what, a.o.Smallest, a.o.Largest, b.o.Name, b.what, b.o.Smallest, b.o.Largest)
		}
	}
	return nil
}

// discard removes the copies the export kept (a commit that did not happen), and the
// drops the nodes staged: each node that exported is asked to drop its own (a node
// that cannot be reached drops them at its recovery).
func (ex *export) discard() {
	req, rerr := appendNodeRequest(nil, discardRequest{Epoch: ex.c.Epoch})
	for i, p := range ex.parts {
		if p.node == nil {
			p.store.DiscardIngestFiles(p.paths)
			ex.parts[i].paths = nil
			continue
		}
		err := rerr
		if err == nil {
			_, err = p.node.Call(context.Background(), req)
		}
		if err != nil {
			ex.l.log.Warn("a node did not drop its export of a commit that did not happen", "node", p.node.Node, "epoch", ex.c.Epoch, "error", err)
		}
	}
	ex.parts = nil
}

// apply applies the committed export at epoch with ch to every store at once: each
// node's from its copies and the other nodes' objects, downloaded, and the engine's
// store, which exported none, from all of them downloaded. Without node stores, the
// engine's store applies its copies. A node lost before it answered is passed over:
// the others and the engine's store apply the commit, and the error then says which
// nodes are behind (engine.ErrNodesBehind), which a recovery catches up; any other
// failure names every store that failed.
func (ex *export) apply(ctx context.Context, b *blob.Bucket, epoch uint64, ch storage.Changes) error {
	if len(ex.c.Nodes) == 0 {
		p := ex.parts[0]
		ex.parts[0].paths = nil
		return objstore.ApplyLocal(p.store, epoch, p.paths, ch)
	}
	changes, err := encodeChanges(ch)
	if err != nil {
		ex.discard()
		return err
	}
	// Every node applies at once, and the engine's store with them.
	errs := make([]error, len(ex.parts))
	var wg sync.WaitGroup
	for i, p := range ex.parts {
		var others []objstore.Object
		for j, q := range ex.parts {
			if j != i {
				others = append(others, q.objs...)
			}
		}
		wg.Go(func() {
			req, err := appendNodeRequest(nil, applyRequest{Epoch: epoch, Sequence: ch.Sequence, Changes: changes, Others: others, RowDeltas: ch.RowDeltas})
			if err == nil {
				_, err = p.node.Call(ctx, req)
			}
			errs[i] = err
		})
	}
	serr := objstore.Apply(ctx, b, ex.c.Store, epoch, objectNames(metaObjects(ex.objs)), ch)
	wg.Wait()
	var behind []error // the nodes lost before they applied the commit
	var failed []error // the nodes that failed to apply it (each dropped its copies)
	for i, p := range ex.parts {
		switch err := errs[i]; {
		case errors.Is(err, engine.ErrNodeLost):
			behind = append(behind, fmt.Errorf("%s: %w", p.what, err))
		case err != nil:
			failed = append(failed, fmt.Errorf("%s: %w", p.what, err))
		}
	}
	if serr != nil {
		failed = append(failed, fmt.Errorf("the store in %s: %w", ex.c.Store.Dir(), serr))
	}
	if len(failed) > 0 {
		return errors.Join(failed...)
	}
	if len(behind) > 0 {
		return fmt.Errorf("%w: %w", engine.ErrNodesBehind, errors.Join(behind...))
	}
	return nil
}
