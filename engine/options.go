package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// Options configure an engine. The zero value of every field means its default.
type Options struct {
	// Nodes is the number of simulated compute nodes (default 2). Each has its own
	// uncommitted store; actors are placed across them.
	Nodes int
	// NodeRoles gives node i the role NodeRoles[i] (letters, digits, '-', '_', '.');
	// the nodes past its end and those of role "" are regular. Tables and views run
	// on the regular nodes, at least one of which there must be; a view created with
	// MVOptions.BackfillOn runs on the nodes of that role while it backfills.
	NodeRoles []string
	// VnodeCount is the vnode count of tables that do not set theirs (default 256).
	VnodeCount int
	// BarrierInterval is how often the coordinator injects a barrier (default 100ms).
	// A negative interval injects barriers only on demand (WaitCheckpoint and DDL).
	BarrierInterval time.Duration
	// CheckpointEvery makes every n-th barrier a checkpoint (default 1: every barrier).
	// Barriers that add, reschedule or stop jobs are always checkpoints.
	CheckpointEvery int
	// BackfillCheckpointInterval spaces checkpoints while a backfill runs: a barrier
	// that CheckpointEvery makes a checkpoint is one only once this long (and at most
	// half the time the oldest running backfill has run, so that a short build's last
	// commit stays short) has passed since the last checkpoint, or once a node holds
	// BackfillCheckpointBytes not yet committed (default 1s; negative: every barrier
	// CheckpointEvery names, as when no backfill runs). A backfill's operators
	// rewrite the same keys epoch after epoch (an aggregate's groups), and a
	// checkpoint writes each key's last value once.
	// The barrier at which a backfill becomes done is always a checkpoint, as are
	// WaitCheckpoint's and every DDL's; writes made meanwhile are durable at the next.
	BackfillCheckpointInterval time.Duration
	// BackfillCheckpointBytes is the uncommitted bytes of a node (storage.Node's
	// PendingBytes, as the node reported them with a barrier since the last
	// checkpoint) from which the next barrier is a checkpoint during a backfill
	// however recent the last one (default 64 MiB; at most half of a positive
	// BackfillMemoryBudget, so that backfills never stop for a commit that is not
	// coming).
	BackfillCheckpointBytes int64
	// ChunkSize is the most rows per batch of a scan (default 1024).
	ChunkSize int
	// BackfillWorkers is the number of goroutines each arrangement backfill actor
	// reads its snapshot with (default: DefaultBackfillWorkers, 1 or 2 by the cores;
	// a no-shuffle backfill reads with one).
	BackfillWorkers int
	// BackfillBufferBudget is the memory each backfill actor's epoch buffer of
	// upstream changes may hold before it spills to SpillDir (default 64 MiB; "": the
	// system's temporary directory).
	BackfillBufferBudget int64
	SpillDir             string
	// BackfillMemoryBudget is the uncommitted bytes a node may hold (storage.Node's
	// PendingBytes: its sealed epochs and its state tables' writes since their seals)
	// before the backfills on it stop taking snapshot batches, once their epoch has
	// some, until a checkpoint commit brings it back under (but for the batches ready
	// at the barrier). Default 512 MiB; negative: no budget. When checkpoints take
	// longer than the barrier interval, a backfill would otherwise keep reading into
	// epochs that grow as long as the commits fall behind.
	BackfillMemoryBudget int64
	// StateCacheBytes is the memory each node's operators may hold as cached state
	// (the rows of the joins' sides, evicted in CLOCK order, a copy of their state tables:
	// executors.StateCache), shared by the node's actors. Default
	// executors.DefaultStateCacheBytes (256 MiB); negative: no cache, every join
	// probe reads its table.
	StateCacheBytes int64
	// AlwaysReplicate turns off local reads: by default an arrangement backfill whose
	// upstream table's owners of its vnodes all run on its own node reads that node's
	// uncommitted store instead of replicating the change stream.
	AlwaysReplicate bool
	// ChannelCapacity is the number of messages an exchange channel buffers before
	// its sender blocks (default 16).
	ChannelCapacity int
	// FS is the file system of the store (default: the OS's). Tests use pebble's
	// in-memory and crashable file systems.
	FS vfs.FS
	// CacheSize and MemTableSize size pebble (defaults: storage.Options').
	CacheSize    int64
	MemTableSize uint64
	// IngestBytes is the checkpoint size from which a checkpoint is committed by
	// ingesting sstables instead of a batch (storage.Options.IngestBytes: 0 is
	// storage.DefaultIngestBytes, negative never).
	IngestBytes int
	// PauseOnBootstrap starts every job paused after open or recovery, until Resume.
	PauseOnBootstrap bool
	// Mem allocates Arrow buffers. The default is a vec.PoolAllocator of the engine's
	// own, so that the batches its actors build and release (a backfill's snapshot
	// batches, by the million) reuse their buffers instead of making garbage; the
	// records Scan hands out then come from Arrow's Go allocator, so that values
	// taken from them (an array.String's Value aliases its buffer) stay valid after
	// the record's Release, as the collector keeps them. A Mem the caller sets is used
	// for both: with a pool, a value kept past Release must be copied.
	Mem memory.Allocator
	// Cache is a pebble block cache (pebble.NewCache) to share with other engines or
	// stores of the process instead of one of CacheSize of the engine's own
	// (storage.Options.Cache); CacheSize is then not used. Each engine reserves its
	// memtables' size in it (with NodeStores, each of its stores does), and
	// StorageMetrics reports the whole cache's figures. With NodeStores and no Cache,
	// the engine's stores share one of CacheSize.
	Cache *pebble.Cache
	// Logger receives the engine's logs (default slog.Default()).
	Logger *slog.Logger
	// OnBarrier, when set, is called after every barrier round (by the coordinator,
	// with the engine's lock held: it must not call the engine), e.g. for metrics.
	OnBarrier func(BarrierStats)
	// Hooks are fault-injection points for tests and simulations (see Hooks).
	Hooks Hooks
	// CommitLog, when set, is where checkpoints commit, and the directory holds a
	// rebuildable copy of what it committed (see CommitLog); nil commits into the
	// directory's store.
	CommitLog CommitLog
	// NodeStores, with a CommitLog, gives every node a store of its own, as a
	// compute process has one: in the directory's weir-nodes/node-<i>, a rebuildable
	// copy of the log's committed state plus the node's sealed, uncommitted data.
	// Every checkpoint then exports each node's store on its own and commits the
	// exports together; every store applies the commit (see CommitRequest). Without
	// it, every node's uncommitted data is in the directory's one store.
	NodeStores bool
	// Exchange, when set, carries every edge between actors on different nodes
	// (see Exchange); nil makes every edge a Go channel.
	Exchange Exchange
	// Control, when set, carries the actors' reports from their nodes to the
	// barrier coordinator (see Control); nil makes each a channel send.
	Control Control
	// RemoteNodes are the nodes whose side runs in another process, a compute
	// process serving it with a Host: the engine opens no store and no side of a
	// graph for them, and reaches them only through Control (their builds and
	// barriers, the commit log's requests) and Exchange (their edges). They need
	// NodeStores, a Control and an Exchange. Node 0 stays in this process: it takes
	// the tables' DML actors, which the writers send into.
	RemoteNodes []int
}

// Hooks are named points of a checkpoint at which a test or a simulation may act, for
// example take a crash image of a crashable file system. Each runs on the
// coordinator with the engine's lock held: it must not call the engine. Nil hooks are
// skipped.
type Hooks struct {
	// BeforeCommit runs once every actor has passed checkpoint barrier epoch on (their
	// state writes are sealed) and before the checkpoint is committed.
	BeforeCommit func(epoch executors.Epoch)
	// AfterCommit runs right after the checkpoint of epoch is committed.
	AfterCommit func(epoch executors.Epoch)
	// Rebalance, when set, chooses the vnode mapping of each fragment of a view that
	// RescheduleMV moves from `from` to `to` actors, instead of vnode.Rebalance's
	// balanced minimal move. A simulation uses it for degenerate splits: an actor
	// with no vnode, one with all of them. The result must be valid for `to` actors.
	Rebalance func(m vnode.Mapping, from, to int) vnode.Mapping
}

func (o *Options) fill() error {
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.Nodes < 0 || o.Nodes > 64 {
		return fmt.Errorf("engine: %d nodes, want 1..64", o.Nodes)
	}
	if err := checkRoles(o.NodeRoles, o.Nodes); err != nil {
		return err
	}
	if err := checkRemote(o); err != nil {
		return err
	}
	if o.NodeStores && o.CommitLog == nil {
		return errors.New("engine: NodeStores needs a CommitLog, which commits the nodes' stores together")
	}
	if _, ok := o.CommitLog.(NodeCommitLog); o.NodeStores && !ok {
		return fmt.Errorf("engine: NodeStores needs a CommitLog that commits the nodes' own stores (an engine.NodeCommitLog), not a %T", o.CommitLog)
	}
	if o.VnodeCount == 0 {
		o.VnodeCount = schema.DefaultVnodeCount
	}
	if o.VnodeCount < 1 || o.VnodeCount > schema.MaxVnodeCount {
		return fmt.Errorf("engine: vnode count %d, want 1..%d", o.VnodeCount, schema.MaxVnodeCount)
	}
	if o.BarrierInterval == 0 {
		o.BarrierInterval = 100 * time.Millisecond
	}
	if o.CheckpointEvery == 0 {
		o.CheckpointEvery = 1
	}
	if o.CheckpointEvery < 0 {
		return fmt.Errorf("engine: CheckpointEvery %d, want >= 1", o.CheckpointEvery)
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = 1024
	}
	if o.ChunkSize < 0 {
		return fmt.Errorf("engine: ChunkSize %d, want >= 1", o.ChunkSize)
	}
	if o.BackfillWorkers == 0 {
		o.BackfillWorkers = DefaultBackfillWorkers(runtime.GOMAXPROCS(0))
	}
	if o.BackfillWorkers < 0 {
		return fmt.Errorf("engine: BackfillWorkers %d, want >= 1", o.BackfillWorkers)
	}
	if o.BackfillMemoryBudget == 0 {
		o.BackfillMemoryBudget = DefaultBackfillMemoryBudget
	}
	if o.BackfillCheckpointInterval == 0 {
		o.BackfillCheckpointInterval = DefaultBackfillCheckpointInterval
	}
	if o.BackfillCheckpointBytes == 0 {
		o.BackfillCheckpointBytes = DefaultBackfillCheckpointBytes
	}
	if o.BackfillCheckpointBytes < 0 {
		return fmt.Errorf("engine: BackfillCheckpointBytes %d, want >= 1", o.BackfillCheckpointBytes)
	}
	if o.BackfillMemoryBudget > 0 {
		o.BackfillCheckpointBytes = min(o.BackfillCheckpointBytes, max(o.BackfillMemoryBudget/2, 1))
	}
	if o.StateCacheBytes == 0 {
		o.StateCacheBytes = executors.DefaultStateCacheBytes
	}
	if o.ChannelCapacity == 0 {
		o.ChannelCapacity = 16
	}
	if o.ChannelCapacity < 0 {
		return fmt.Errorf("engine: ChannelCapacity %d, want >= 1", o.ChannelCapacity)
	}
	if o.Mem == nil {
		o.Mem = vec.NewPoolAllocator()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// DefaultBackfillMemoryBudget is Options.BackfillMemoryBudget's default.
const DefaultBackfillMemoryBudget = 512 << 20

// The defaults of Options.BackfillCheckpointInterval and BackfillCheckpointBytes.
const (
	DefaultBackfillCheckpointInterval = time.Second
	DefaultBackfillCheckpointBytes    = 64 << 20
)

// DefaultBackfillWorkers is Options.BackfillWorkers' default for a process of procs
// cores (GOMAXPROCS): half of them, at least 1 and at most 2. A build is bound by its
// checkpoints as soon as its readers outrun the commits, and the commits (encoding
// and writing sstables, on up to GOMAXPROCS goroutines) share the cores with the
// readers: on 2 cores a second reader per actor made no idle build faster, and cost
// arrangement's idle builds more CPU than no-shuffle's single reader, most of it in
// pebble's allocation of block cache blocks from more threads; with one reader the
// two kinds' idle builds take the same CPU and time (the backfill rows of
// bench/RESULTS.md). The cap of 2 is the default every earlier measurement used;
// more cores than this machine's were not measured.
func DefaultBackfillWorkers(procs int) int { return min(max(procs/2, 1), 2) }

// TableOptions configure a new table.
type TableOptions struct {
	// Parallelism is the number of actors that materialize the table (default: the
	// number of nodes; at most the vnode count).
	Parallelism int
}

// MVOptions configure a new materialized view.
type MVOptions struct {
	// Parallelism is the number of the view's actors (default: the number of nodes;
	// for a no-shuffle backfill, the upstream's parallelism, which it must equal).
	Parallelism int
	// Backfill is how the view reads the upstream's existing rows (default
	// ArrangementBackfill).
	Backfill BackfillKind
	// RateLimit limits the backfill's snapshot reads, in rows per second per actor;
	// nil: unlimited, 0: paused (RowsPerSecond makes one). A negative limit is
	// refused.
	RateLimit *int64
	// Paused starts the view's backfill paused until ResumeMV (see PauseMV).
	Paused bool
	// Background makes CreateMV return as soon as the view exists, while its backfill
	// runs (see Progress and WaitBackfill). Otherwise CreateMV returns once the backfill
	// is done, unless the view starts paused (or the engine is) or rate limited to 0.
	Background bool
	// BackfillOn runs the view's actors on the nodes of this role (Options.NodeRoles)
	// while it backfills; once its backfill is done they move onto the regular nodes
	// in one checkpoint Update barrier. Empty: the regular nodes throughout. A
	// no-shuffle backfill cannot have one.
	BackfillOn string
}

// RowsPerSecond is a rate limit of n snapshot rows per second per actor, for
// MVOptions.RateLimit and SetRateLimit (0 pauses the backfill; nil, not a call of
// this, is unlimited).
func RowsPerSecond(n int64) *int64 { return &n }

// The rules every option of CreateTable, CreateMV, RescheduleMV and SetRateLimit
// follows, checked before anything is written or any actor is built.

// validate checks the options of a new table t (its vnode count already set).
func (o TableOptions) validate(t *schema.Table) error {
	if o.Parallelism != 0 {
		if err := checkParallelism(o.Parallelism, t.VnodeCount); err != nil {
			return fmt.Errorf("%w (the table's vnode count)", err)
		}
	}
	return nil
}

// validate checks what MVOptions say on their own; the parallelism's upper bound,
// the vnode count of each of the view's nodes, is checked by checkParallelism once
// the plan is lowered.
func (o MVOptions) validate() error {
	if o.Parallelism < 0 {
		return fmt.Errorf("parallelism %d: want 1 up to the vnode count (or 0 for the default)", o.Parallelism)
	}
	switch o.Backfill {
	case "", ArrangementBackfill, NoShuffleBackfill:
	default:
		return fmt.Errorf("unknown backfill kind %q (want %q or %q)", o.Backfill, ArrangementBackfill, NoShuffleBackfill)
	}
	return checkRateLimit(o.RateLimit)
}

// checkRateLimit refuses a negative rate limit (nil is unlimited, 0 paused).
func checkRateLimit(limit *int64) error {
	if limit != nil && *limit < 0 {
		return fmt.Errorf("rate limit %d rows/s: want >= 0 (0 pauses; nil for unlimited)", *limit)
	}
	return nil
}

// checkParallelism refuses a parallelism outside 1..vnodes (every actor owns at least
// one vnode).
func checkParallelism(p, vnodes int) error {
	if p < 1 || p > vnodes {
		return fmt.Errorf("parallelism %d: want 1..%d", p, vnodes)
	}
	return nil
}

// checkRemote checks Options.RemoteNodes.
func checkRemote(o *Options) error {
	if len(o.RemoteNodes) == 0 {
		return nil
	}
	switch {
	case !o.NodeStores:
		return errors.New("engine: remote nodes need NodeStores: each keeps its store in its own process")
	case o.Control == nil:
		return errors.New("engine: remote nodes need a Control, which reaches their processes")
	case o.Exchange == nil:
		return errors.New("engine: remote nodes need an Exchange, which carries their edges")
	}
	seen := map[int]bool{}
	for _, n := range o.RemoteNodes {
		switch {
		case n == 0:
			return errors.New("engine: node 0 cannot be remote: it takes the tables' DML actors in the engine's process")
		case n < 0 || n >= o.Nodes:
			return fmt.Errorf("engine: remote node %d: the engine has nodes 0 to %d", n, o.Nodes-1)
		case seen[n]:
			return fmt.Errorf("engine: remote node %d named twice", n)
		}
		seen[n] = true
	}
	return nil
}
