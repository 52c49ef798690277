package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"gocloud.dev/blob"

	"github.com/seed04fbb902/weir/engine/cluster/commitlog"
	"github.com/seed04fbb902/weir/engine/cluster/meta"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/internal/faultblob"
	"github.com/seed04fbb902/weir/internal/pgtest"
)

// Commit-log seeds (a third of the seeds when Options.Postgres is set) commit
// through cluster mode's commit log: the version log in a PostgreSQL database of
// their own and the sstables in a file:// bucket, the engine's in-memory directory a
// rebuildable copy of it. A crash then loses nothing the log committed, whatever the
// file system image kept, and some reopens start from an empty directory (a leader
// elsewhere) and rebuild it from the log. Every reopen is a new leader: a new
// lease term and a new incarnation. Their faults add a bucket that refuses the
// writes of one checkpoint (the first object, or every one after the first) and a
// leader deposed before its commit (its lease expired and a successor took it): the
// checkpoint fails naming the bucket or the lease, the log's committed version does
// not move, and the next leader holds the last committed state. At the end of the
// seed the unreferenced objects are collected, and the bucket must hold exactly the
// objects the log references.

// clusterLog is a commit-log seed's meta store, bucket and current leader.
type clusterLog struct {
	server string // the server's DSN (its postgres database)
	dbName string
	meta   *meta.Store
	dir    string       // the bucket's directory
	inner  *blob.Bucket // the file:// bucket
	bucket *blob.Bucket // inner, through faults
	url    string
	faults faultblob.Faults
	log    *commitlog.Log // the current leader's
	nodes  uint64         // leaders opened so far (the last one's node number)
}

// setupLog gives a commit-log seed its database, bucket and first leader.
func (r *runner) setupLog() error {
	c := &clusterLog{server: r.opts.Postgres, dbName: fmt.Sprintf("weir_sim_%d_%d", r.seed, time.Now().UnixNano())}
	dsn, err := pgtest.CreateDatabase(r.ctx, c.server, c.dbName)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	r.clog = c
	if c.meta, err = meta.Open(r.ctx, dsn); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if c.dir, err = os.MkdirTemp("", "weir-sim-bucket-"); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	c.url = "file://" + c.dir
	if c.inner, err = objstore.OpenBucket(r.ctx, c.url); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	c.bucket = faultblob.Wrap(c.inner, &c.faults)
	return r.newLeader()
}

// newLeader closes the current leader's log (the engine is closed or crashed) and
// opens the next one's, which takes the lease with a new term.
func (r *runner) newLeader() error {
	c := r.clog
	if c.log != nil {
		err := c.log.Close()
		c.log = nil
		if err != nil && !errors.Is(err, meta.ErrDeposed) {
			return fmt.Errorf("sim: close the leader's commit log: %w", err)
		}
	}
	c.nodes++
	l, err := commitlog.Open(r.ctx, commitlog.Config{
		Meta: c.meta, Bucket: c.bucket, BucketURL: c.url, Node: c.nodes,
		LeaseTTL: 30 * time.Second, Grace: -1, TableBytes: 4 << 10,
		BaseEvery:  2 + int(r.seed%7), // bases, and compactions, within a seed's commits
		BaseInline: true,              // the bucket's writes in the seed's order: its faults hit them so
		Logger:     r.opts.Logger,
	})
	if err != nil {
		return fmt.Errorf("sim: open the commit log of leader node-%d: %w", c.nodes, err)
	}
	c.log = l
	r.eo.CommitLog = l
	return nil
}

// close stops what setupLog started (the engine is closed or crashed).
func (c *clusterLog) close(ctx context.Context) error {
	var errs []error
	if c.log != nil {
		if err := c.log.Close(); err != nil && !errors.Is(err, meta.ErrDeposed) {
			errs = append(errs, err)
		}
	}
	if c.bucket != nil {
		errs = append(errs, c.bucket.Close())
	}
	if c.inner != nil {
		errs = append(errs, c.inner.Close())
	}
	if c.meta != nil {
		c.meta.Close()
		errs = append(errs, pgtest.DropDatabase(ctx, c.server, c.dbName))
	}
	if c.dir != "" {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}

// logFaultStep (commit-log seeds) writes a few rows, then makes the checkpoint that
// commits them fail: the bucket refuses its writes, or the leader is deposed before
// it commits. The checkpoint must fail naming the fault and the log's committed
// version stay where it was; the next leader (after a deposition, on an empty
// directory, as a successor elsewhere would be) must hold the last committed state.
func (r *runner) logFaultStep() error {
	c := r.clog
	kind := []string{"bucket_write_error", "deposed_leader_commit"}[r.rng.IntN(2)]
	after := r.rng.IntN(2) // bucket: objects written before the refusal
	if err := r.writeStep("insert"); err != nil {
		return err
	}
	before, err := c.meta.Committed(r.ctx)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	named := c.url
	_, baseFailed := c.log.Bases()
	switch kind {
	case "bucket_write_error":
		c.faults.Arm(after)
	case "deposed_leader_commit":
		named = "leader deposed"
		if err := c.meta.Expire(r.ctx); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		// The successor takes the lease now; it opens its engine after the old
		// leader's commit failed.
		old := c.log
		c.log = nil
		if err := r.newLeader(); err != nil {
			return err
		}
		defer func() {
			if err := old.Close(); err != nil && !errors.Is(err, meta.ErrDeposed) {
				r.fail("engine error", "close the deposed leader's log: %v", err)
			}
		}()
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.CallTimeout)
	_, err = r.e.WaitCheckpoint(ctx)
	cancel()
	hits := c.faults.Disarm()
	r.rep.Barriers++
	if r.ctx.Err() != nil {
		return r.ctx.Err()
	}
	if err == nil && kind == "bucket_write_error" && hits == 0 && after > 0 {
		// The checkpoint was one object: it was written before the refusal.
		r.tracef("%s: the checkpoint's only object was written before the refusal", kind)
		r.rep.Sometimes["bucket_fault_after_the_last_object"]++
		r.pending = 0
		return r.afterCall()
	}
	if _, failed := c.log.Bases(); err == nil && kind == "bucket_write_error" && hits > 0 && failed > baseFailed {
		// The checkpoint committed, and the base its commit wrote then met the
		// refusal: it failed, to be written at a later commit.
		r.tracef("%s: the checkpoint committed; the base after it failed", kind)
		r.rep.Sometimes["bucket_fault_failed_a_base"]++
		r.pending = 0
		return r.afterCall()
	}
	if err == nil || !strings.Contains(err.Error(), named) {
		r.fail("I6 durability", "checkpoint after %s: %v (want an error naming %s)", kind, err, named)
		return errStop
	}
	r.rep.Faults[kind]++
	r.tracef("%s: the checkpoint failed: %v", kind, err)
	now, cerr := c.meta.Committed(r.ctx)
	if cerr != nil {
		return fmt.Errorf("sim: %w", cerr)
	}
	if now != before {
		r.fail("I6 durability", "%s: the log's committed version moved from %+v to %+v", kind, before, now)
		return errStop
	}
	if got := r.e.CommittedEpoch(); got != r.committed {
		r.fail("I6 durability", "%s: the committed epoch moved from %d to %d", kind, r.committed, got)
		return errStop
	}
	if _, _, err := r.e.Barrier(r.ctx); err == nil {
		r.fail("I6 durability", "the engine accepted a barrier after its checkpoint failed (%s)", kind)
	}
	_ = r.e.Crash()
	r.e = nil
	if kind == "deposed_leader_commit" {
		r.fs = vfs.NewCrashableMem()
		r.rep.Sometimes["rebuilt_from_an_empty_directory"]++
	} else if err := r.newLeader(); err != nil {
		return err
	}
	return r.reopen(r.committed, nil, nil)
}

// checkBucket (commit-log seeds, at the end, the engine closed) collects every
// object no committed version or base references, those recorded by a failed commit,
// those uploaded before one failed and those of the history a base compacted, and
// then requires the bucket to hold exactly the objects the log references.
func (r *runner) checkBucket() error {
	c := r.clog
	if _, err := c.log.Collect(r.ctx, 0); err != nil {
		r.fail("engine error", "collect: %v", err)
		return errStop
	}
	referenced, err := commitlog.Referenced(r.ctx, c.meta)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if first, err := c.meta.FirstDelta(r.ctx); err == nil && first > 1 {
		r.rep.Sometimes["log_compacted_by_a_base"]++
	}
	now := time.Now().Add(time.Second) // past every object's modification time
	if _, err := objstore.Collect(r.ctx, c.inner, func(name string) bool { return referenced[name] }, 0, now); err != nil {
		r.fail("engine error", "collect the bucket: %v", err)
		return errStop
	}
	var held []string
	it := c.inner.List(nil)
	for {
		o, err := it.Next(r.ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("sim: list bucket %s: %w", c.url, err)
		}
		held = append(held, o.Key)
	}
	var want []string
	for name := range referenced {
		want = append(want, name)
	}
	slices.Sort(want)
	slices.Sort(held)
	if !slices.Equal(held, want) {
		r.fail("I6 durability", "after collection bucket %s holds %d objects, the log references %d (held %v, referenced %v)", c.url, len(held), len(want), held, want)
		return errStop
	}
	r.rep.Sometimes["bucket_checked_after_collection"]++
	return nil
}
