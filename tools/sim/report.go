package sim

import (
	"fmt"
	"sort"
)

// Report holds the figures of a run (docs/testing.md "Figures").
type Report struct {
	Seeds              int              `json:"seeds"`
	LogSeeds           int              `json:"commit_log_seeds"`
	Steps              int64            `json:"steps"`
	Barriers           int64            `json:"barriers"`
	Checkpoints        int64            `json:"checkpoints"`
	CheckpointsChecked int64            `json:"checkpoints_checked"`
	RowsCompared       int64            `json:"rows_compared"`
	RowsByOp           map[string]int64 `json:"rows_by_op"`
	Views              map[string]int64 `json:"views"`
	Faults             map[string]int64 `json:"faults"`
	Sometimes          map[string]int64 `json:"sometimes"`
	Mismatches         int64            `json:"mismatches"`
	Failures           []Failure        `json:"failures,omitempty"`
	// ZeroCounters lists the "sometimes" counters and fault kinds that stayed 0: a
	// scenario the run never exercised. A run with any is a failed run.
	ZeroCounters []string `json:"zero_counters,omitempty"`
	Seconds      float64  `json:"seconds"`
}

// Failure is one mismatch (or an engine error the simulation did not expect), with
// the seed that replays it.
type Failure struct {
	Seed      uint64 `json:"seed"`
	Step      int    `json:"step"`
	Invariant string `json:"invariant"`
	Message   string `json:"message"`
}

func (f Failure) String() string {
	return fmt.Sprintf("seed %d step %d: %s: %s (replay: weir sim --seeds %d)", f.Seed, f.Step, f.Invariant, f.Message, f.Seed)
}

// FaultKinds and SometimesCounters are the counters a run must see above zero.
var (
	FaultKinds = []string{"crash_mid_epoch", "crash_before_commit", "crash_after_commit", "crash_during_rescale",
		"rescale", "pause", "resume", "throttle", "pause_on_bootstrap", "io_error_enospc", "io_error_eio", "edge_break", "control_stream_lost", "late_reply"}
	SometimesCounters = []string{
		"update_straddling_position",        // a pk-changing update with one key backfilled and the other not
		"crash_mid_epoch_with_writes",       // a crash with uncommitted writes in flight
		"vnode_finishing_alone",             // a vnode Completed while others of its scan are not
		"inprogress_vnode_moved_by_rescale", // a rescale while a vnode is InProgress
		"actor_with_mixed_states",           // after a rescale, an actor owning vnodes in two or three states
		"pause_during_tombstone_run",        // a range delete of 20+ rows while a backfill is paused or throttled
		"view_over_backfilling_view",        // the view over a view created while its upstream view backfills
		"checkpoint_while_backfilling",      // a checkpoint checked with a backfill under way (I2 checked)
		"backfill_held_back_by_memory",      // an actor that stopped reading an epoch's snapshot over the memory budget
		"checkpoint_spaced_by_backfill",     // a barrier CheckpointEvery names that a running backfill kept from being a checkpoint
		"checkpoint_ingested",               // a checkpoint committed by ingesting sstables (half the seeds try every one)
		"state_cache_evicted",               // a join's cached rows dropped over the node's budget
		"state_cache_refilled",              // a join probe that read its table and cached the rows (a miss)
		"state_cache_hit",                   // a join probe answered from the cache
		"state_cache_known_absent",          // a join probe of a key known to have no row, answered without a read
		"barrier_injected_over_control",     // a barrier a node took from its control stream and injected (cluster-shaped seeds)
		"actors_built_over_control",         // a build spec a node took from its control stream and built (cluster-shaped seeds)
		"agg_group_evicted",                 // an aggregate group dropped over the node's budget after a checkpoint wrote it
		"agg_group_reloaded",                // an evicted aggregate group read back from its tables
		"view_backfilled_on_role_nodes",     // a view created to backfill on the seed's backfill node
		"view_moved_off_role_nodes",         // such a view seen on the regular nodes after its backfill
	}
)

// LogFaultKinds and LogSometimes are the counters a run with commit-log seeds must
// see above zero as well.
var (
	LogFaultKinds = []string{"bucket_write_error", "deposed_leader_commit"}
	LogSometimes  = []string{
		"rebuilt_from_an_empty_directory", // a leader that opened on an empty directory rebuilt it from the log
		"crash_commit_kept_by_the_log",    // a crash image older than the log's commit, caught up on reopen
		"bucket_checked_after_collection", // a seed's bucket held exactly the referenced objects after collection
		"log_compacted_by_a_base",         // a seed's log compacted its history into a base (and a reopen on an empty directory starts from it)
	}
)

// NewReport returns an empty report with every counter present.
func NewReport() *Report {
	r := &Report{RowsByOp: map[string]int64{}, Views: map[string]int64{}, Faults: map[string]int64{}, Sometimes: map[string]int64{}}
	for _, k := range FaultKinds {
		r.Faults[k] = 0
	}
	for _, k := range SometimesCounters {
		r.Sometimes[k] = 0
	}
	return r
}

// Finish fills ZeroCounters.
func (r *Report) Finish() {
	r.ZeroCounters = nil
	r.zeros("faults.", r.Faults, FaultKinds)
	r.zeros("sometimes.", r.Sometimes, SometimesCounters)
	if r.LogSeeds > 0 {
		r.zeros("faults.", r.Faults, LogFaultKinds)
		r.zeros("sometimes.", r.Sometimes, LogSometimes)
	}
}

// zeros adds to ZeroCounters the keys whose count in m is 0, after prefix.
func (r *Report) zeros(prefix string, m map[string]int64, keys []string) {
	for _, k := range keys {
		if m[k] == 0 {
			r.ZeroCounters = append(r.ZeroCounters, prefix+k)
		}
	}
}

// OK reports whether the run had no mismatch and no counter left at zero.
func (r *Report) OK() bool { return r.Mismatches == 0 && len(r.ZeroCounters) == 0 }

// Merge adds the figures of o to r.
func (r *Report) Merge(o *Report) {
	r.Seeds += o.Seeds
	r.LogSeeds += o.LogSeeds
	r.Steps += o.Steps
	r.Barriers += o.Barriers
	r.Checkpoints += o.Checkpoints
	r.CheckpointsChecked += o.CheckpointsChecked
	r.RowsCompared += o.RowsCompared
	r.Mismatches += o.Mismatches
	for _, m := range []struct{ dst, src map[string]int64 }{
		{r.RowsByOp, o.RowsByOp}, {r.Views, o.Views}, {r.Faults, o.Faults}, {r.Sometimes, o.Sometimes},
	} {
		for k, v := range m.src {
			m.dst[k] += v
		}
	}
	r.Failures = append(r.Failures, o.Failures...)
	sort.SliceStable(r.Failures, func(i, j int) bool { return r.Failures[i].Seed < r.Failures[j].Seed })
}
