package engine

import (
	"slices"
	"strings"
	"time"

	"github.com/seed04fbb902/weir/executors"
)

// JobProgress is the state of one materialized view's creation job: its backfill, as
// of the last barrier each of its actors passed (the actors report their progress
// with every barrier). An actor that has passed only its first barrier (after an
// open, a recovery or a rescale) has not loaded its progress yet: until its next
// report, it is counted with the committed progress of its vnodes.
type JobProgress struct {
	Name        string
	Upstream    string
	Backfill    BackfillKind
	Parallelism int
	RateLimit   *int64
	Paused      bool
	// RowsConsumed is the snapshot rows the backfill has read (restored after recovery:
	// it never goes backwards).
	RowsConsumed int64
	// VnodesCompleted of VnodesTotal upstream vnodes have finished their snapshot.
	VnodesCompleted, VnodesTotal int
	// UpstreamRows is the upstream's committed row count: the estimate of the rows to
	// read.
	UpstreamRows int64
	// RowsPerSecond is the read rate since the previous Progress call (the rows move
	// at barriers, when the actors report them).
	RowsPerSecond float64
	// Percent is RowsConsumed of UpstreamRows, capped below 100 until every actor is
	// done, then 100.
	Percent float64
	// Done reports that every actor finished its backfill: the view follows its upstream.
	Done bool
	// ReplicatedBytes is the memory the backfill's replicated epochs held at the last
	// barrier, and ReplicatedPeak the sum of the running actors' peaks.
	ReplicatedBytes, ReplicatedPeak int
	// SpilledChunks counts upstream chunks the backfill's epoch buffers spilled to
	// disk (by the actors running now).
	SpilledChunks int64
	// Actors are the backfill actors running now, by scan and actor.
	Actors []ActorProgress
	// BackfillOn is the role of the nodes the job runs on while it backfills
	// (MVOptions.BackfillOn), until it has moved onto the regular nodes; then "".
	BackfillOn string
	// Nodes are the nodes the job's actors run on, ascending.
	Nodes []int
}

// ActorProgress is one backfill actor of a job.
type ActorProgress struct {
	Actor executors.ActorID
	Node  int
	// Upstream is the table or view the actor's scan reads.
	Upstream string
	// Rows is the snapshot rows it consumed (restored after recovery); Completed of
	// Owned upstream vnodes finished their snapshot.
	Rows             int64
	Completed, Owned int
	Done             bool
	// UpstreamMessages counts the upstream messages (chunks and barriers) it took
	// while backfilling, and UpstreamRowsForwarded the upstream rows it passed
	// downstream (both since the actor started: they restart at a recovery or rescale).
	UpstreamMessages      int64
	UpstreamRowsForwarded int64
	ReplicatedBytes       int
	// ReadsKept counts the barriers its snapshot read went on across (epochs with no
	// upstream change), since the actor started.
	ReadsKept int64
	// ReadyTaken counts the snapshot batches its read had ready when a barrier closed
	// the read, taken before the barrier rather than read again, since the actor
	// started.
	ReadyTaken int64
	// StopFlushed counts the batches its read delivered after it was stopped at a
	// barrier, mostly the partial ones its workers were filling, since the actor
	// started.
	StopFlushed int64
	// HeldBack counts the epochs in which the actor stopped taking snapshot batches
	// before the barrier because its node held more uncommitted bytes than
	// Options.BackfillMemoryBudget.
	HeldBack int64
	// LocalReads: it reads its node's store (every upstream owner of its vnodes runs
	// on its node, or a no-shuffle backfill); otherwise it replicates the change
	// stream of upstream actors on other nodes.
	LocalReads bool
}

type progressSample struct {
	rows int64
	at   time.Time
}

// Progress lists every materialized view's job, by name.
func (e *Engine) Progress() []JobProgress {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.samples == nil {
		e.samples = map[string]progressSample{}
	}
	now := time.Now()
	var out []JobProgress
	for _, o := range e.cat.sorted() {
		if o.Kind != kindMV {
			continue
		}
		p := JobProgress{Name: o.Name, Upstream: strings.Join(o.Upstreams, ","), Backfill: BackfillKind(o.Backfill), Parallelism: o.Parallelism, RateLimit: copyLimit(o.RateLimit), Paused: o.Paused || e.paused}
		if o.Role != "" && len(e.nodesOf(o.Role)) > 0 {
			p.BackfillOn = o.Role // else it runs on the regular nodes: no node has the role now
		}
		for _, u := range o.Upstreams {
			if up, ok := e.cat.objects[u]; ok {
				n, _ := e.store.TableRowCount(up.ID)
				p.UpstreamRows += n
			}
		}
		p.Done = true
		started := true
		if j, ok := e.g.jobs[o.Name]; ok {
			for _, a := range j.actors() {
				if !slices.Contains(p.Nodes, a.node) {
					p.Nodes = append(p.Nodes, a.node)
				}
				if a.frag.pn.kind != scanNode {
					continue
				}
				st := a.progress // as of the last barrier the actor passed
				p.Actors = append(p.Actors, ActorProgress{Actor: a.id, Node: a.node, Upstream: a.frag.up.obj.Name, Rows: st.Rows,
					Completed: st.Completed, Owned: st.Owned, Done: st.Done, UpstreamMessages: st.UpstreamMessages, UpstreamRowsForwarded: st.UpstreamRowsForwarded, ReplicatedBytes: st.ReplicatedBytes, ReadsKept: st.ReadsKept, ReadyTaken: st.ReadyTaken, StopFlushed: st.StopFlushed, HeldBack: st.HeldBack, LocalReads: st.Local})
				started = started && st.Started
				p.RowsConsumed += st.Rows
				p.VnodesCompleted += st.Completed
				p.VnodesTotal += st.Owned
				p.Done = p.Done && st.Done
				p.ReplicatedBytes += st.ReplicatedBytes
				p.ReplicatedPeak += st.ReplicatedPeak
				p.SpilledChunks += st.SpilledChunks
			}
		}
		slices.Sort(p.Nodes)
		last, seen := e.samples[o.Name]
		if !started && seen {
			// Actors still loading their progress (after recovery or a rescale): report
			// what was last known rather than going backwards.
			p.RowsConsumed = max(p.RowsConsumed, last.rows)
		}
		if seen && now.After(last.at) && p.RowsConsumed >= last.rows {
			p.RowsPerSecond = float64(p.RowsConsumed-last.rows) / now.Sub(last.at).Seconds()
		}
		e.samples[o.Name] = progressSample{rows: p.RowsConsumed, at: now}
		switch {
		case p.Done:
			p.Percent = 100
		case p.UpstreamRows > 0:
			p.Percent = min(99.9, 100*float64(p.RowsConsumed)/float64(p.UpstreamRows))
		}
		out = append(out, p)
	}
	return out
}
