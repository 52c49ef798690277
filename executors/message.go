package executors

import (
	"fmt"
	"slices"
	"strings"

	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// ActorID identifies an actor of the running graph.
type ActorID uint32

// FragmentID identifies a fragment: the actors that run one part of a plan in parallel.
type FragmentID uint32

// Message is what flows between executors: exactly one of Chunk, Barrier, Watermark is
// set.
type Message struct {
	Chunk     *vec.Chunk // owned by the receiver: Release it when done
	Barrier   *Barrier
	Watermark *Watermark
}

// ChunkMessage wraps a chunk.
func ChunkMessage(c *vec.Chunk) Message { return Message{Chunk: c} }

// BarrierMessage wraps a barrier.
func BarrierMessage(b *Barrier) Message { return Message{Barrier: b} }

// Release releases the message's chunk, if any.
func (m Message) Release() {
	if m.Chunk != nil {
		m.Chunk.Release()
	}
}

func (m Message) String() string {
	switch {
	case m.Chunk != nil:
		return fmt.Sprintf("chunk(%d rows, %d visible)", m.Chunk.NumRows(), m.Chunk.CountVisible())
	case m.Barrier != nil:
		return m.Barrier.String()
	case m.Watermark != nil:
		return fmt.Sprintf("watermark(column %d >= %d)", m.Watermark.Column, m.Watermark.Value)
	}
	return "empty message"
}

// BarrierKind says whether a barrier ends a checkpoint.
type BarrierKind uint8

// The barrier kinds.
const (
	Plain BarrierKind = iota
	Checkpoint
)

// Barrier separates epochs: data before it belongs to Prev, data after it to Curr. A
// barrier that carries an Add, Update or Stop mutation is always a checkpoint, so that
// a new backfill starts from fully committed upstream data and a rescale hands over
// fully persisted progress.
type Barrier struct {
	Prev, Curr Epoch
	Kind       BarrierKind
	Mutation   Mutation // nil: none
}

// Validate checks the barrier's own invariants.
func (b *Barrier) Validate() error {
	if b.Curr <= b.Prev {
		return fmt.Errorf("barrier %d -> %d: epochs must increase", b.Prev, b.Curr)
	}
	if b.Mutation != nil && b.Mutation.forcesCheckpoint() && b.Kind != Checkpoint {
		return fmt.Errorf("barrier %d -> %d carries a mutation (%s) that needs a checkpoint barrier", b.Prev, b.Curr, b.Mutation.kind())
	}
	return nil
}

// IsCheckpoint reports whether the barrier ends a checkpoint.
func (b *Barrier) IsCheckpoint() bool { return b.Kind == Checkpoint }

func (b *Barrier) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "barrier(%d -> %d", b.Prev, b.Curr)
	if b.Kind == Checkpoint {
		s.WriteString(", checkpoint")
	}
	if b.Mutation != nil {
		s.WriteString(", " + b.Mutation.kind())
	}
	s.WriteByte(')')
	return s.String()
}

// Watermark says that no later row will have Column below Value.
type Watermark struct {
	Column int
	Value  int64
}

// Mutation changes the running graph or its behaviour at a barrier. It is one of Add,
// Update, Pause, Resume, Throttle, Stop.
type Mutation interface {
	kind() string
	forcesCheckpoint() bool
}

// Add joins new actors to the graph (a new job's first barrier, or every actor's first
// barrier after recovery).
type Add struct {
	Actors []ActorID
	// PauseOnBootstrap starts the new actors under the engine's pause, until a
	// Resume without Fragments.
	PauseOnBootstrap bool
	// Dispatchers are new dispatchers of existing actors towards the new actors,
	// connected before the barrier is sent so that it reaches the new actors first.
	Dispatchers []NewDispatcher
}

// DispatcherKind is how a dispatcher routes rows to its outputs.
type DispatcherKind uint8

// The dispatcher kinds.
const (
	// Hash sends each row to the output that owns its vnode (distribution key).
	Hash DispatcherKind = iota
	// Broadcast sends every row to every output.
	Broadcast
	// Simple sends everything to its single output.
	Simple
	// NoShuffle sends everything to its single output, a co-located actor that owns
	// the same vnodes.
	NoShuffle
)

func (k DispatcherKind) String() string {
	switch k {
	case Hash:
		return "hash"
	case Broadcast:
		return "broadcast"
	case Simple:
		return "simple"
	case NoShuffle:
		return "no-shuffle"
	}
	return fmt.Sprintf("DispatcherKind(%d)", uint8(k))
}

// NewDispatcher is a dispatcher that an Add mutation gives an existing actor.
type NewDispatcher struct {
	Actor    ActorID // the upstream actor that gets the dispatcher
	Fragment FragmentID
	Kind     DispatcherKind
	Outputs  []Output
	// Mapping is the vnode -> output index mapping of a hash dispatcher.
	Mapping vnode.Mapping
}

// Output is one downstream of a dispatcher.
type Output struct {
	Actor ActorID
	Node  int // compute node the actor runs on
}

// DispatcherUpdate changes one actor's dispatcher at an Update barrier.
type DispatcherUpdate struct {
	Actor ActorID
	// Fragment is the downstream fragment of the dispatcher to change (an actor has
	// one dispatcher per downstream fragment).
	Fragment FragmentID
	// AddOutputs are connected before the barrier is sent; RemoveOutputs are dropped
	// after it.
	AddOutputs    []Output
	RemoveOutputs []ActorID
	// Mapping, when set, is the new vnode -> output index mapping of a hash dispatcher,
	// installed after the barrier.
	Mapping vnode.Mapping
}

// MergeUpdate changes one actor's merge at an Update barrier: inputs from new upstream
// actors join when the barrier is first seen (each new input's first message is that
// barrier); inputs from removed actors are dropped after it. An added input names its
// actor's node, so that the merge's node knows whether the edge is within it or
// crosses to another.
type MergeUpdate struct {
	Actor        ActorID
	AddInputs    []Output
	RemoveInputs []ActorID
}

// Update reschedules a fragment: new dispatcher outputs and mappings, new merge inputs
// downstream, new actors' vnode bitmaps, and the actors to stop.
type Update struct {
	Dispatchers []DispatcherUpdate
	Merges      []MergeUpdate
	// Vnodes is the vnode bitmap of every actor of the rescheduled fragment after the
	// barrier (new actors start from the persisted state of these vnodes).
	Vnodes map[ActorID]*vnode.Bitmap
	Stop   []ActorID
}

// Pause stops snapshot reads and sources until a Resume; barriers keep flowing.
// Without Fragments it pauses every one (the engine's pause), undone by a Resume
// without Fragments. With Fragments it pauses only the backfills of those fragments
// (one view's own pause), undone only by a Resume naming them: the two pauses are
// independent, and a backfill reads only when neither holds.
type Pause struct {
	Fragments []FragmentID
}

// Resume undoes a Pause: without Fragments, the engine's pause (and pause on
// bootstrap); with Fragments, the own pause of those fragments' backfills (a view
// created paused among them).
type Resume struct {
	Fragments []FragmentID
}

// Engine reports whether the pause is the engine's: every fragment's.
func (p Pause) Engine() bool { return len(p.Fragments) == 0 }

// Names reports whether the pause is fragment f's own.
func (p Pause) Names(f FragmentID) bool { return slices.Contains(p.Fragments, f) }

// Engine reports whether the resume is the engine's: every fragment's.
func (r Resume) Engine() bool { return len(r.Fragments) == 0 }

// Names reports whether the resume undoes fragment f's own pause.
func (r Resume) Names(f FragmentID) bool { return slices.Contains(r.Fragments, f) }

// Throttle sets the rate limits of fragments: snapshot rows per second per actor. A nil
// limit removes it; a zero limit pauses.
type Throttle struct {
	Limits map[FragmentID]*int64
}

// Stop stops and removes actors (a dropped job). Dispatchers drop their outputs to
// the stopped actors after the barrier.
type Stop struct {
	Actors []ActorID
}

func (Add) kind() string      { return "add" }
func (Update) kind() string   { return "update" }
func (Pause) kind() string    { return "pause" }
func (Resume) kind() string   { return "resume" }
func (Throttle) kind() string { return "throttle" }
func (Stop) kind() string     { return "stop" }

func (Add) forcesCheckpoint() bool      { return true }
func (Update) forcesCheckpoint() bool   { return true }
func (Pause) forcesCheckpoint() bool    { return false }
func (Resume) forcesCheckpoint() bool   { return false }
func (Throttle) forcesCheckpoint() bool { return false }
func (Stop) forcesCheckpoint() bool     { return true }

// Stops reports whether a barrier carrying m stops actor id (a Stop naming it, or an
// Update that replaces it).
func Stops(m Mutation, id ActorID) bool {
	switch m := m.(type) {
	case Stop:
		return slices.Contains(m.Actors, id)
	case Update:
		return slices.Contains(m.Stop, id)
	}
	return false
}

// ForcesCheckpoint reports whether a barrier carrying m must be a checkpoint.
func ForcesCheckpoint(m Mutation) bool { return m != nil && m.forcesCheckpoint() }

// Limit returns the rate limit for fragment f under a Throttle: ok=false when the
// mutation does not name f.
func (t Throttle) Limit(f FragmentID) (limit *int64, ok bool) {
	limit, ok = t.Limits[f]
	return limit, ok
}
