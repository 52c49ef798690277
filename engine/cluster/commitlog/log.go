package commitlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
	"gocloud.dev/blob"
)

// The defaults of Config.
const (
	DefaultLeaseTTL = 10 * time.Second
	DefaultTimeout  = 30 * time.Second
	DefaultGrace    = 10 * time.Minute
	// DefaultBaseEvery is how many commits a base (the whole committed state) is
	// written after the last.
	DefaultBaseEvery = 64
)

// Config configures a Log. Meta and Bucket are the caller's, who closes them after
// the Log.
type Config struct {
	Meta   *meta.Store
	Bucket *blob.Bucket
	// BucketURL names the bucket in errors.
	BucketURL string
	// Node is this process's node number (from 1): its objects are named after it,
	// and it registers and holds the lease as "node-<Node>".
	Node uint64
	// LeaseTTL is the leader lease's time to live, renewed every third of it (0:
	// DefaultLeaseTTL).
	LeaseTTL time.Duration
	// Timeout bounds each commit and catch-up (0: DefaultTimeout).
	Timeout time.Duration
	// Grace is how long an object no commit references is kept before it is deleted
	// (0: DefaultGrace; negative: never collect). It must be longer than a commit,
	// or a base, can take: their objects are recorded before they are committed.
	Grace time.Duration
	// TableBytes sizes the uploaded sstables (storage.ExportOptions; 0: the
	// default). The engine's store holds every vnode, so they are cut by size only.
	TableBytes int
	// BaseEvery is how many commits after the log's last base (or its start) a
	// commit also writes a base: the whole committed state, which compacts the
	// history before the previous base (meta.Store.CommitBase) so that the bucket
	// and the log stay bounded and an empty directory catches up from the base; a
	// base that fails is tried again BaseEvery commits later (0: DefaultBaseEvery;
	// negative: never). The base is written in the background, from a snapshot of
	// the store at the commit that made it due, while the next checkpoints commit;
	// one at a time (a commit that finds one running writes none).
	BaseEvery int
	// BaseInline writes the base inside the commit that made it due, which the
	// engine's checkpoints then wait for: a deterministic order of the bucket's
	// writes, for simulations.
	BaseInline bool
	// Logger receives the log's warnings (default slog.Default()).
	Logger *slog.Logger
}

// Log is the commit log of one engine that holds the leader lease: an
// engine.CommitLog whose commit point is the meta store's fenced version update and
// whose data are sstables in the bucket.
type Log struct {
	cfg  Config
	name string
	inc  uint64
	log  *slog.Logger

	mu    sync.Mutex
	lease meta.Lease
	lost  error // the lease was lost (deposed): every later commit fails with it

	base uint64 // the sequence of the log's last base, or of the commit whose base failed last (0: none)
	// baseDone is closed when the base written in the background ends (nil: none
	// runs), and baseStop stops it; under mu.
	baseDone chan struct{}
	baseStop context.CancelFunc

	basesWritten, basesFailed atomic.Int64

	nodes *NodeServer // serves the engine's nodes' stores (ServeNode)

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

var (
	_ engine.CommitLog     = (*Log)(nil)
	_ engine.NodeCommitLog = (*Log)(nil)
)

// Open checks that the bucket answers, takes the leader lease (failing with
// meta.ErrLeaseHeld, naming the holder, while another holds it), registers the node
// with a new incarnation and starts renewing the lease and collecting unreferenced
// objects in the background.
func Open(ctx context.Context, cfg Config) (*Log, error) {
	if cfg.Meta == nil || cfg.Bucket == nil {
		return nil, errors.New("commitlog: a meta store and a bucket are required")
	}
	if cfg.Node == 0 {
		return nil, errors.New("commitlog: node numbers start at 1")
	}
	if cfg.LeaseTTL < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("commitlog: negative lease ttl %v or timeout %v", cfg.LeaseTTL, cfg.Timeout)
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.BaseEvery == 0 {
		cfg.BaseEvery = DefaultBaseEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Log{cfg: cfg, name: fmt.Sprintf("node-%d", cfg.Node), stop: make(chan struct{}), done: make(chan struct{}), nodes: NewNodeServer(cfg)}
	l.log = cfg.Logger.With("node", l.name)
	if ok, err := cfg.Bucket.IsAccessible(ctx); err != nil || !ok {
		if err == nil {
			err = errors.New("it does not exist")
		}
		return nil, fmt.Errorf("commitlog: bucket %s is not accessible: %w", cfg.BucketURL, err)
	}
	lease, err := cfg.Meta.AcquireLeader(ctx, l.name, cfg.LeaseTTL)
	if err != nil {
		return nil, fmt.Errorf("commitlog: %s: %w", l.name, err)
	}
	l.lease = lease
	if l.inc, err = cfg.Meta.RegisterNode(ctx, l.name, "", ""); err != nil {
		_ = cfg.Meta.Release(ctx, lease)
		return nil, fmt.Errorf("commitlog: %w", err)
	}
	b, ok, err := cfg.Meta.LatestBase(ctx)
	if err != nil {
		_ = cfg.Meta.Release(ctx, lease)
		return nil, fmt.Errorf("commitlog: %w", err)
	}
	if ok {
		l.base = b.Seq
	}
	go l.background()
	return l, nil
}

// ServeNode implements engine.NodeServer for the nodes of the log's own engine.
func (l *Log) ServeNode(ctx context.Context, node int, store *storage.Store, req []byte) ([]byte, error) {
	return l.nodes.ServeNode(ctx, node, store, req)
}

// Hold implements engine.NodeServer for the nodes of the log's own engine.
func (l *Log) Hold(ctx context.Context, node int, store *storage.Store, needs map[uint32]*vnode.Bitmap) error {
	return l.nodes.Hold(ctx, node, store, needs)
}

// Bases counts the bases the log wrote and those that failed (each tried again
// BaseEvery commits later).
func (l *Log) Bases() (written, failed int64) {
	return l.basesWritten.Load(), l.basesFailed.Load()
}

// Incarnation is the node's incarnation, bumped by every Open.
func (l *Log) Incarnation() uint64 { return l.inc }

// Lease is the lease the log holds.
func (l *Log) Lease() meta.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease
}

// Close stops renewing the lease and releases it, so that a successor need not wait
// for it to expire. Close the engine first.
func (l *Log) Close() error {
	var err error
	l.closeOnce.Do(func() {
		l.Quiesce()
		close(l.stop)
		<-l.done
		l.mu.Lock()
		lease, lost := l.lease, l.lost
		l.mu.Unlock()
		if lost != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Timeout)
		defer cancel()
		if rerr := l.cfg.Meta.Release(ctx, lease); rerr != nil {
			err = fmt.Errorf("commitlog: %s: %w", l.name, rerr)
		}
	})
	return err
}

// background renews the lease every third of its ttl and collects unreferenced
// objects every grace period, until Close. A renewal that finds the lease deposed
// marks the log lost; a failed one is retried at the next tick (the lease stays the
// log's until another holder takes it, which the commit's fence detects).
func (l *Log) background() {
	defer close(l.done)
	renew := time.NewTicker(l.cfg.LeaseTTL / 3)
	defer renew.Stop()
	var collect <-chan time.Time
	if l.cfg.Grace > 0 {
		t := time.NewTicker(l.cfg.Grace)
		defer t.Stop()
		collect = t.C
	}
	for {
		select {
		case <-l.stop:
			return
		case <-renew.C:
			l.renew()
		case <-collect:
			l.mu.Lock()
			lost := l.lost
			l.mu.Unlock()
			if lost != nil {
				continue // a deposed leader leaves the collection to its successor
			}
			ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Timeout)
			if n, err := l.Collect(ctx, l.cfg.Grace); err != nil {
				l.log.Warn("collect unreferenced objects", "error", err, "deleted", n)
			}
			cancel()
		}
	}
}

func (l *Log) renew() {
	l.mu.Lock()
	cur, lost := l.lease, l.lost
	l.mu.Unlock()
	if lost != nil {
		return
	}
	// Up to half the ttl: a renewal that times out is retried at the next tick, a
	// third of the ttl after the last one began. Only this goroutine changes the
	// lease, so l.mu is not held meanwhile (a commit reads the lease under it).
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.LeaseTTL/2)
	defer cancel()
	lease, err := l.cfg.Meta.Renew(ctx, cur)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case errors.Is(err, meta.ErrDeposed):
		l.loseLocked(err)
	case err != nil:
		l.log.Warn("renew the leader lease", "error", err)
	default:
		l.lease = lease
	}
}

// loseLocked marks the lease lost (once) for err, a meta.ErrDeposed; l.mu is held.
func (l *Log) loseLocked(err error) {
	if l.lost == nil {
		l.lost = fmt.Errorf("commitlog: %s lost the leader lease: %w", l.name, err)
		l.log.Error("leader lease lost; commits will fail", "error", err)
	}
}

// CatchUp applies to store every delta of the log above the sequence store applied
// last, in order: the objects, downloaded, and the catalog changes and drops. An
// empty store first applies the log's base, if it has one, and then the deltas after
// it. A store with commits but no applied sequence holds commits the log lacks (an
// embedded engine's directory) and is refused, and so is a store whose sequence the
// log has compacted away. It returns the generation of the log's last commit.
func (l *Log) CatchUp(ctx context.Context, store *storage.Store) (uint64, error) {
	return catchUp(ctx, l.cfg, store)
}

// catchUp is CatchUp of the log cfg names.
func catchUp(ctx context.Context, cfg Config, store *storage.Store) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	applied, err := store.AppliedSequence()
	if err != nil {
		return 0, fmt.Errorf("commitlog: catch up: %w", err)
	}
	if applied == 0 && store.CommittedEpoch() > 0 {
		return 0, fmt.Errorf("commitlog: catch up: the store has committed epoch %d without the log (an embedded engine's directory?)", store.CommittedEpoch())
	}
	var gen uint64 // of the last delta the store holds
	if applied == 0 {
		// An empty store starts from the log's base, if it has one.
		b, ok, err := cfg.Meta.LatestBase(ctx)
		if err != nil {
			return 0, fmt.Errorf("commitlog: catch up: %w", err)
		}
		if ok {
			ch, err := decodeChanges(b.Catalog)
			if err != nil {
				return 0, fmt.Errorf("commitlog: catch up: the base at sequence %d (epoch %d): %w", b.Seq, b.Epoch, err)
			}
			ch.Sequence = b.Seq
			if err := objstore.ApplyBase(ctx, cfg.Bucket, store, b.Epoch, heldNames(store, b.Objects), ch); err != nil {
				return 0, fmt.Errorf("commitlog: catch up: the base at sequence %d: %w", b.Seq, err)
			}
			applied, gen = b.Seq, b.Generation
		}
	}
	// From the delta the store applied last, which must be this log's: a directory
	// of another cluster (or a log that lost commits) is refused before anything of
	// this log is applied to it.
	deltas, err := cfg.Meta.Deltas(ctx, max(applied, 1)-1)
	if err != nil {
		return 0, fmt.Errorf("commitlog: catch up from sequence %d: %w", applied, err)
	}
	if applied > 0 {
		if len(deltas) == 0 || deltas[0].Seq != applied || deltas[0].Epoch != store.CommittedEpoch() {
			v, verr := cfg.Meta.Committed(ctx)
			if verr != nil {
				return 0, fmt.Errorf("commitlog: catch up: %w", verr)
			}
			first, ferr := cfg.Meta.FirstDelta(ctx)
			if ferr != nil {
				return 0, fmt.Errorf("commitlog: catch up: %w", ferr)
			}
			if first > applied && applied <= v.Seq {
				return 0, fmt.Errorf("commitlog: catch up: the store applied sequence %d, which the log in %s has compacted (it holds the deltas from sequence %d to %d and a base): start the directory empty, and it rebuilds from the base",
					applied, cfg.Meta, first, v.Seq)
			}
			return 0, fmt.Errorf("commitlog: catch up: the store applied sequence %d at epoch %d, which the log in %s does not hold (it is at sequence %d, epoch %d): a directory of another cluster?",
				applied, store.CommittedEpoch(), cfg.Meta, v.Seq, v.Epoch)
		}
		gen = deltas[0].Generation
		deltas = deltas[1:]
	}
	for _, d := range deltas {
		ch, err := decodeChanges(d.Catalog)
		if err != nil {
			return 0, fmt.Errorf("commitlog: catch up: sequence %d (epoch %d): %w", d.Seq, d.Epoch, err)
		}
		if d.Epoch <= store.CommittedEpoch() {
			return 0, fmt.Errorf("commitlog: catch up: sequence %d commits epoch %d, but the store, at sequence %d, has committed epoch %d", d.Seq, d.Epoch, applied, store.CommittedEpoch())
		}
		ch.Sequence = d.Seq
		// A delta of schema version 2 or before has no counts: the store counts.
		ch.Counted, ch.RowDeltas = d.Counted, storageRowDeltas(d.RowDeltas)
		if err := objstore.Apply(ctx, cfg.Bucket, store, d.Epoch, heldNames(store, d.Objects), ch); err != nil {
			return 0, fmt.Errorf("commitlog: catch up: sequence %d: %w", d.Seq, err)
		}
		applied, gen = d.Seq, d.Generation
	}
	return gen, nil
}

// Commit uploads c.Store's sealed data up to c.Epoch (with node stores, each
// node's, exported on its own), commits it with c.Store's staged changes at the
// sequence after the store's in one fenced transaction of the meta store, and
// applies it to every store: each from the copies it kept while uploading, and the
// objects the other stores exported downloaded. It fails, changing nothing in the
// log, when the lease was lost (meta.ErrDeposed), when the log moved past the store
// (meta.ErrConflict: another leader committed), when an upload fails, and when the
// node stores' exports overlap; a commit whose outcome is unknown
// (meta.ErrOutcomeUnknown) or that committed but could not be applied says so: a
// reopen catches up from the log.
func (l *Log) Commit(ctx context.Context, c engine.CommitRequest) (storage.CheckpointStats, error) {
	epoch, store := c.Epoch, c.Store
	st := storage.CheckpointStats{Epoch: epoch}
	l.mu.Lock()
	lease, lost := l.lease, l.lost
	l.mu.Unlock()
	if lost != nil {
		return st, fmt.Errorf("commitlog: commit epoch %d: %w", epoch, lost)
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	applied, err := store.AppliedSequence()
	if err != nil {
		return st, fmt.Errorf("commitlog: commit epoch %d: %w", epoch, err)
	}
	ch := store.Staged()
	ex, err := l.export(ctx, c, ch.Drops)
	if err != nil {
		if errors.Is(err, engine.ErrNodeLost) {
			// Before the commit point: a recovery (every node catches up anew)
			// mends it, as it does an actor's failure.
			return st, fmt.Errorf("commitlog: commit epoch %d: %w (%w)", epoch, err, engine.ErrNotCommitted)
		}
		return st, fmt.Errorf("commitlog: commit epoch %d: %w", epoch, err)
	}
	// The row count changes the exports counted: the version log keeps them, and no
	// store that applies the commit counts them again.
	ch.Counted, ch.RowDeltas = true, ex.rowDeltas()
	changes, err := encodeChanges(ch)
	if err == nil {
		// The sequence the store applied last: the commit fails with
		// meta.ErrConflict if the log has moved past it (another leader committed).
		mc := meta.Checkpoint{Epoch: epoch, Generation: c.Generation, Seq: applied, Catalog: changes, Objects: metaObjects(ex.objs),
			Counted: true, RowDeltas: metaRowDeltas(ch.RowDeltas)}
		for _, o := range ex.objs {
			st.Bytes += int(o.Size)
		}
		// Recorded before the commit, so that a commit that fails leaves them to
		// Collect.
		if err = l.cfg.Meta.AddObjects(ctx, mc.Objects); err == nil {
			ch.Sequence, err = l.cfg.Meta.Commit(ctx, lease, mc)
		}
	}
	if err != nil {
		ex.discard()
		if errors.Is(err, meta.ErrDeposed) {
			l.mu.Lock()
			l.loseLocked(err)
			l.mu.Unlock()
		}
		return st, fmt.Errorf("commitlog: commit epoch %d: %w", epoch, err)
	}
	if err := ex.apply(ctx, l.cfg.Bucket, epoch, ch); err != nil {
		if errors.Is(err, engine.ErrNodesBehind) {
			return st, fmt.Errorf("commitlog: epoch %d is committed at sequence %d and applied to the engine's store: %w", epoch, ch.Sequence, err)
		}
		return st, fmt.Errorf("commitlog: epoch %d is committed at sequence %d but not applied (reopen to catch up): %w", epoch, ch.Sequence, err)
	}
	st.Ingested = len(ex.objs)
	st.Catalog = len(ch.Catalog)
	l.mu.Lock()
	due := l.cfg.BaseEvery > 0 && ch.Sequence >= l.base+uint64(l.cfg.BaseEvery) && l.baseDone == nil
	l.mu.Unlock()
	switch {
	case !due:
	case l.cfg.BaseInline:
		// The commit stands whatever happens to the base.
		_, err := l.WriteBase(ctx, store)
		l.baseEnded(ch.Sequence, err)
	default:
		v, err := store.View()
		if err != nil {
			l.baseEnded(ch.Sequence, err)
			break
		}
		done := make(chan struct{})
		bctx, stop := context.WithCancel(context.Background())
		l.mu.Lock()
		l.baseDone, l.baseStop = done, stop
		l.mu.Unlock()
		go func() {
			defer close(done)
			defer stop()
			_, err := l.writeBase(bctx, store, v)
			v.Release()
			if bctx.Err() != nil && err != nil {
				// Stopped by Quiesce: the engine closes. A later commit writes it.
				l.log.Info("a base of the log was stopped before it was written", "sequence", ch.Sequence)
			} else {
				l.baseEnded(ch.Sequence, err)
			}
			l.mu.Lock()
			l.baseDone, l.baseStop = nil, nil
			l.mu.Unlock()
		}()
	}
	return st, nil
}

// baseEnded records the end of the base due at sequence seq: a failed one is tried
// again BaseEvery commits later, not at every commit, so that a base that cannot be
// written does not stall every checkpoint.
func (l *Log) baseEnded(seq uint64, err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	l.base = max(l.base, seq)
	l.mu.Unlock()
	l.basesFailed.Add(1)
	l.log.Warn("write a base of the log; the next try is BaseEvery commits on", "sequence", seq, "error", err)
}

// Quiesce stops the base being written in the background, if any, and waits for it
// to end: it reads the engine's store, which must not close under it. A later
// commit writes the base instead. The engine calls it before it closes its stores
// (engine.Quiescer), and Close calls it.
func (l *Log) Quiesce() {
	l.mu.Lock()
	done, stop := l.baseDone, l.baseStop
	l.mu.Unlock()
	if done != nil {
		stop()
		<-done
	}
}

// WaitBase waits for the base being written in the background, if any, to be
// written (or to fail).
func (l *Log) WaitBase() {
	l.mu.Lock()
	done := l.baseDone
	l.mu.Unlock()
	if done != nil {
		<-done
	}
}

var _ engine.Quiescer = (*Log)(nil)

// WriteBase uploads store's whole committed state (which must be this log's, at its
// last commit) as the log's base and commits it (meta.Store.CommitBase), which
// compacts the log's history before the previous base. Its objects are recorded
// before the base is committed, so that a base that fails to commit leaves them to
// Collect (those of an upload that fails are left to objstore.Collect). The store's
// checkpoints wait while it exports; Commit writes its bases so with
// Config.BaseInline, and from a snapshot in the background otherwise.
func (l *Log) WriteBase(ctx context.Context, store *storage.Store) (meta.Base, error) {
	return l.writeBase(ctx, store, nil)
}

// writeBase is WriteBase of the committed state v holds (a View of store), or with v
// nil of store's.
func (l *Log) writeBase(ctx context.Context, store *storage.Store, v *storage.View) (meta.Base, error) {
	l.mu.Lock()
	lease, lost := l.lease, l.lost
	l.mu.Unlock()
	if lost != nil {
		return meta.Base{}, fmt.Errorf("commitlog: write a base: %w", lost)
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	o := storage.ExportOptions{TableBytes: l.cfg.TableBytes, Whole: true}
	var info storage.BaseInfo
	var objs []objstore.Object
	var err error
	if v != nil {
		info, objs, err = objstore.UploadBaseView(ctx, l.cfg.Bucket, store, v, l.cfg.Node, l.inc, o)
	} else {
		info, objs, err = objstore.UploadBase(ctx, l.cfg.Bucket, store, l.cfg.Node, l.inc, o)
	}
	if err != nil {
		return meta.Base{}, fmt.Errorf("commitlog: write a base to bucket %s: %w", l.cfg.BucketURL, err)
	}
	catalog, err := encodeChanges(storage.Changes{Catalog: info.Catalog})
	if err != nil {
		return meta.Base{}, fmt.Errorf("commitlog: write the base at sequence %d: %w", info.Sequence, err)
	}
	deltas, err := l.cfg.Meta.Deltas(ctx, info.Sequence-1)
	if err != nil {
		return meta.Base{}, fmt.Errorf("commitlog: write the base at sequence %d: %w", info.Sequence, err)
	}
	if len(deltas) == 0 || deltas[0].Seq != info.Sequence {
		return meta.Base{}, fmt.Errorf("commitlog: write the base at sequence %d: the log holds no such delta", info.Sequence)
	}
	b := meta.Base{Seq: info.Sequence, Epoch: info.Epoch, Generation: deltas[0].Generation, Catalog: catalog, Objects: metaObjects(objs)}
	if err := l.cfg.Meta.AddObjects(ctx, b.Objects); err != nil {
		return meta.Base{}, fmt.Errorf("commitlog: write the base at sequence %d: %w", info.Sequence, err)
	}
	if err := l.cfg.Meta.CommitBase(ctx, lease, b); err != nil {
		if errors.Is(err, meta.ErrDeposed) {
			l.mu.Lock()
			l.loseLocked(err)
			l.mu.Unlock()
		}
		return meta.Base{}, fmt.Errorf("commitlog: %w", err)
	}
	l.mu.Lock()
	l.base = max(l.base, b.Seq)
	l.mu.Unlock()
	l.basesWritten.Add(1)
	return b, nil
}

// metaRowDeltas converts a commit's row count changes for the meta store.
func metaRowDeltas(ds []storage.RowDelta) []meta.RowDelta {
	out := make([]meta.RowDelta, len(ds))
	for i, d := range ds {
		out[i] = meta.RowDelta{Table: d.Table, Vnode: d.Vnode, Delta: d.Delta}
	}
	return out
}

// storageRowDeltas converts a delta's row count changes for a store.
func storageRowDeltas(ds []meta.RowDelta) []storage.RowDelta {
	out := make([]storage.RowDelta, len(ds))
	for i, d := range ds {
		out[i] = storage.RowDelta{Table: d.Table, Vnode: d.Vnode, Delta: d.Delta}
	}
	return out
}

// metaObjects are uploaded objects as the meta store records them.
func metaObjects(objs []objstore.Object) []meta.Object {
	out := make([]meta.Object, len(objs))
	for i, o := range objs {
		out[i] = meta.Object{Name: o.Name, Smallest: o.Smallest, Largest: o.Largest, Size: o.Size}
	}
	return out
}

// heldNames are the names of the objects of objs that may hold keys of vnodes store
// holds (every one, for a whole store): those a catch-up downloads.
func heldNames(store *storage.Store, objs []meta.Object) []string {
	var out []string
	for _, o := range objs {
		if store.MayHold(o.Smallest, o.Largest) {
			out = append(out, o.Name)
		}
	}
	return out
}

// objectNames are the names of objs, in their order.
func objectNames(objs []meta.Object) []string {
	names := make([]string, len(objs))
	for i, o := range objs {
		names[i] = o.Name
	}
	return names
}
