package control

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/seed04fbb902/weir/engine/cluster/wire"
	"github.com/seed04fbb902/weir/executors"
)

// FrameVersion is the format version, the first byte of every frame. A change to any
// encoding of this package bumps it.
const FrameVersion byte = 6

// MaxFrameLen is the longest frame AppendFrame writes: grpc's default limit on a
// received message, so that a frame the encoder accepts is never refused by the
// receiving transport.
const MaxFrameLen = 4 << 20

// Kind is the second byte of a frame: which message it holds.
type Kind byte

// The kinds. Hello, Collected, Failed, Sealed, Built, Finishing and Answer go from a
// node to the coordinator; Accept, BuildActors, Inject, Teardown and Call from the
// coordinator to a node.
const (
	KindHello       Kind = 1
	KindAccept      Kind = 2
	KindBuildActors Kind = 3
	KindInject      Kind = 4
	KindTeardown    Kind = 5
	KindCollected   Kind = 6
	KindFailed      Kind = 7
	KindSealed      Kind = 8
	KindBuilt       Kind = 9
	KindFinishing   Kind = 10
	KindCall        Kind = 11
	KindAnswer      Kind = 12
)

func (k Kind) String() string {
	switch k {
	case KindHello:
		return "hello"
	case KindAccept:
		return "accept"
	case KindBuildActors:
		return "build-actors"
	case KindInject:
		return "inject"
	case KindTeardown:
		return "teardown"
	case KindCollected:
		return "collected"
	case KindFailed:
		return "failed"
	case KindSealed:
		return "sealed"
	case KindBuilt:
		return "built"
	case KindFinishing:
		return "finishing"
	case KindCall:
		return "call"
	case KindAnswer:
		return "answer"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// FromNode reports whether messages of kind k travel from a node to the coordinator.
func (k Kind) FromNode() bool {
	switch k {
	case KindHello, KindCollected, KindFailed, KindSealed, KindBuilt, KindFinishing, KindAnswer:
		return true
	}
	return false
}

// Stamp is what every message carries besides its body: the leader's term, the
// graph's generation and the node's incarnation. The receiving side refuses a message
// whose stamp is stale (see RefusedError).
type Stamp struct {
	Term, Generation, Incarnation uint64
}

func (s Stamp) String() string {
	return fmt.Sprintf("term %d, generation %d, incarnation %d", s.Term, s.Generation, s.Incarnation)
}

func (s Stamp) stamped() Stamp { return s }

// Message is one of Hello, Accept, BuildActors, Inject, Teardown, Collected, Failed,
// Sealed, Built, Finishing, Call and Answer; each embeds its Stamp.
type Message interface {
	Kind() Kind
	stamped() Stamp
}

// StampOf returns m's stamp.
func StampOf(m Message) Stamp { return m.stamped() }

// Hello opens a node's stream. Its stamp holds the node's incarnation (from the meta
// store's registration) and the highest term and generation the node has seen (0 on
// its first stream).
type Hello struct {
	Stamp
	// Node is the node's name in the meta store's registry.
	Node string
	// Role is the node's optional role (such as "backfill"); empty for a regular node.
	Role string
	// Addr is where the node serves its exchange streams.
	Addr string
}

// Accept answers a Hello: its stamp holds the leader's term, the graph's current
// generation and the node's incarnation.
type Accept struct{ Stamp }

// BuildActors asks a node to build actors: ID names the request, and Spec is an
// opaque payload in the engine's encoding of the actor specs, of version
// SpecVersion.
type BuildActors struct {
	Stamp
	ID          uint64
	SpecVersion uint32
	Spec        []byte
}

// Inject asks a node to inject a barrier at its sources.
type Inject struct {
	Stamp
	Barrier *executors.Barrier
}

// Teardown asks a node to stop every actor of Generation (and of any generation
// before it) and drop their uncommitted data.
type Teardown struct {
	Stamp
	Generation uint64
}

// Collected reports that Actors have passed the barrier that starts epoch Epoch (its
// Curr). A node may report each actor on its own or several at once. Progress is a
// backfill actor's progress as it passed the barrier: the coordinator knows a
// backfill's progress (and that it is done) from these reports alone; with it,
// Actors holds that one actor. Pending is the node's uncommitted bytes as the report
// left (its sealed epochs and its state tables' writes since), by which the
// coordinator spaces checkpoints while a backfill runs.
type Collected struct {
	Stamp
	Epoch    executors.Epoch
	Actors   []executors.ActorID
	Progress *executors.BackfillStats
	Pending  uint64
}

// Failed reports that Actor failed, with the error's text.
type Failed struct {
	Stamp
	Actor executors.ActorID
	Err   string
}

// Sealed reports that every actor of the node has sealed epoch Epoch, with an opaque
// report (the objects the node wrote and their deltas, in the engine's encoding).
type Sealed struct {
	Stamp
	Epoch  executors.Epoch
	Report []byte
}

// Built answers the BuildActors whose ID it carries: the node built every actor of
// its spec (Err empty), or built none of them, for the reason Err gives.
type Built struct {
	Stamp
	ID  uint64
	Err string
}

// Kind returns KindHello.
func (Hello) Kind() Kind { return KindHello }

// Kind returns KindAccept.
func (Accept) Kind() Kind { return KindAccept }

// Kind returns KindBuildActors.
func (BuildActors) Kind() Kind { return KindBuildActors }

// Kind returns KindInject.
func (Inject) Kind() Kind { return KindInject }

// Kind returns KindTeardown.
func (Teardown) Kind() Kind { return KindTeardown }

// Kind returns KindCollected.
func (Collected) Kind() Kind { return KindCollected }

// Kind returns KindFailed.
func (Failed) Kind() Kind { return KindFailed }

// Kind returns KindSealed.
func (Sealed) Kind() Kind { return KindSealed }

// Kind returns KindBuilt.
func (Built) Kind() Kind { return KindBuilt }

// Finishing tells the coordinator that Actor's backfill has read its whole snapshot:
// it is done at the next barrier, which the coordinator injects at once, as a
// checkpoint, rather than at its next interval.
type Finishing struct {
	Stamp
	Actor executors.ActorID
}

// Kind returns KindFinishing.
func (Finishing) Kind() Kind { return KindFinishing }

// Call asks a node for its part of a checkpoint on behalf of the commit log: ID names
// the request, and Payload is opaque (the commit log's encoding). The node answers it
// with the Answer of the same ID once it is served, which may take a while (an
// upload): the frames that follow a Call are not held behind it.
type Call struct {
	Stamp
	ID      uint64
	Payload []byte
}

// Answer answers the Call whose ID it carries: with Payload (opaque, the commit log's
// encoding) when Err is empty, or with no payload, for the reason Err gives.
type Answer struct {
	Stamp
	ID      uint64
	Payload []byte
	Err     string
}

// Kind returns KindCall.
func (Call) Kind() Kind { return KindCall }

// Kind returns KindAnswer.
func (Answer) Kind() Kind { return KindAnswer }

// withStamp returns m with its stamp replaced by s.
func withStamp(m Message, s Stamp) (Message, error) {
	switch x := m.(type) {
	case Hello:
		x.Stamp = s
		return x, nil
	case Accept:
		x.Stamp = s
		return x, nil
	case BuildActors:
		x.Stamp = s
		return x, nil
	case Inject:
		x.Stamp = s
		return x, nil
	case Teardown:
		x.Stamp = s
		return x, nil
	case Collected:
		x.Stamp = s
		return x, nil
	case Failed:
		x.Stamp = s
		return x, nil
	case Sealed:
		x.Stamp = s
		return x, nil
	case Built:
		x.Stamp = s
		return x, nil
	case Finishing:
		x.Stamp = s
		return x, nil
	case Call:
		x.Stamp = s
		return x, nil
	case Answer:
		x.Stamp = s
		return x, nil
	}
	return nil, fmt.Errorf("control: unknown message type %T", m)
}

// AppendFrame appends the frame of m to dst:
//
//	version (byte) | kind (byte) | term | generation | incarnation (uvarints) | body
//
// A string or a byte string is a uvarint length then its bytes; an id, a uvarint; an
// epoch, a uint64 big-endian. The bodies:
//
//	hello:        node | role | addr
//	accept:       nothing
//	build-actors: id | spec version | spec
//	inject:       the barrier as wire.AppendBarrier writes it, to the end of the frame
//	teardown:     generation (uvarint)
//	collected:    epoch | actors (a uvarint count, then the ids) | progress flag (byte)
//	              [| progress as wire.AppendBackfillStats writes it, length-prefixed]
//	failed:       actor | error text
//	sealed:       epoch | report
//	built:        id | error text (empty: built)
//	finishing:    actor
//	call:         id | payload
//	answer:       id | payload | error text (empty: answered with the payload)
//
// It fails on an incarnation of 0 (incarnations count from 1), a Hello without a
// node name, a string that is not UTF-8 or holds a NUL byte, an Inject without a
// barrier or with one AppendBarrier refuses, an Answer with both a payload and an
// error, and a frame longer than MaxFrameLen (which bounds a payload).
func AppendFrame(dst []byte, m Message) ([]byte, error) {
	if m == nil {
		return dst, fmt.Errorf("control: a nil message")
	}
	s := m.stamped()
	fail := func(format string, args ...any) ([]byte, error) {
		return dst, fmt.Errorf("control: %s frame (%s): %s", m.Kind(), s, fmt.Sprintf(format, args...))
	}
	if s.Incarnation == 0 {
		return fail("incarnation 0: incarnations count from 1")
	}
	start := len(dst)
	out := append(dst, FrameVersion, byte(m.Kind()))
	out = binary.AppendUvarint(out, s.Term)
	out = binary.AppendUvarint(out, s.Generation)
	out = binary.AppendUvarint(out, s.Incarnation)
	switch x := m.(type) {
	case Hello:
		if x.Node == "" {
			return fail("empty node name")
		}
		for _, f := range []struct{ what, v string }{{"node", x.Node}, {"role", x.Role}, {"addr", x.Addr}} {
			if err := checkText(f.v); err != nil {
				return fail("%s %q: %v", f.what, f.v, err)
			}
			out = appendBytes(out, f.v)
		}
	case Accept:
	case BuildActors:
		out = binary.AppendUvarint(out, x.ID)
		out = binary.AppendUvarint(out, uint64(x.SpecVersion))
		out = appendBytes(out, x.Spec)
	case Inject:
		if x.Barrier == nil {
			return fail("no barrier")
		}
		var err error
		if out, err = wire.AppendBarrier(out, x.Barrier); err != nil {
			return fail("%v", err)
		}
	case Teardown:
		out = binary.AppendUvarint(out, x.Generation)
	case Collected:
		out = binary.BigEndian.AppendUint64(out, uint64(x.Epoch))
		out = binary.AppendUvarint(out, uint64(len(x.Actors)))
		for _, a := range x.Actors {
			out = binary.AppendUvarint(out, uint64(a))
		}
		out = binary.AppendUvarint(out, x.Pending)
		if x.Progress == nil {
			out = append(out, 0)
			break
		}
		if len(x.Actors) != 1 {
			return fail("backfill progress with %d actors, want 1", len(x.Actors))
		}
		p, err := wire.AppendBackfillStats(nil, *x.Progress)
		if err != nil {
			return fail("actor %d: %v", x.Actors[0], err)
		}
		out = append(out, 1)
		out = appendBytes(out, p)
	case Failed:
		if err := checkText(x.Err); err != nil {
			return fail("actor %d: error text: %v", x.Actor, err)
		}
		out = binary.AppendUvarint(out, uint64(x.Actor))
		out = appendBytes(out, x.Err)
	case Sealed:
		out = binary.BigEndian.AppendUint64(out, uint64(x.Epoch))
		out = appendBytes(out, x.Report)
	case Built:
		if err := checkText(x.Err); err != nil {
			return fail("build %d: error text: %v", x.ID, err)
		}
		out = binary.AppendUvarint(out, x.ID)
		out = appendBytes(out, x.Err)
	case Finishing:
		out = binary.AppendUvarint(out, uint64(x.Actor))
	case Call:
		out = binary.AppendUvarint(out, x.ID)
		out = appendBytes(out, x.Payload)
	case Answer:
		if err := checkText(x.Err); err != nil {
			return fail("call %d: error text: %v", x.ID, err)
		}
		if x.Err != "" && len(x.Payload) > 0 {
			return fail("call %d: an answer of %d bytes and an error", x.ID, len(x.Payload))
		}
		out = binary.AppendUvarint(out, x.ID)
		out = appendBytes(out, x.Payload)
		out = appendBytes(out, x.Err)
	default:
		return dst, fmt.Errorf("control: unknown message type %T", m)
	}
	if n := len(out) - start; n > MaxFrameLen {
		return fail("%d bytes, longer than the %d a frame may hold", n, MaxFrameLen)
	}
	return out, nil
}

func appendBytes[T string | []byte](dst []byte, v T) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(v))), v...)
}

func checkText(v string) error {
	if !utf8.ValidString(v) {
		return fmt.Errorf("not valid UTF-8")
	}
	if strings.IndexByte(v, 0) >= 0 {
		return fmt.Errorf("holds a NUL byte")
	}
	return nil
}

// DecodeFrame decodes what AppendFrame wrote. It fails, naming the kind, the stamp and
// the field, on an unknown version or kind, truncated input, a length or count longer
// than the rest of the frame could hold, a non-minimal varint, an id out of the uint32
// range, an incarnation of 0, text AppendFrame refuses, a barrier DecodeBarrier
// refuses, an Answer with both a payload and an error, and trailing bytes. It
// allocates nothing larger than a constant times the frame, and the byte strings it
// returns (Spec, Report, Payload) alias frame.
func DecodeFrame(frame []byte) (Message, error) {
	if len(frame) < 2 {
		return nil, fmt.Errorf("control: frame of %d bytes, shorter than its 2-byte header", len(frame))
	}
	if frame[0] != FrameVersion {
		return nil, fmt.Errorf("control: unknown frame version %d (want %d)", frame[0], FrameVersion)
	}
	k := Kind(frame[1])
	if k < KindHello || k > KindAnswer {
		return nil, fmt.Errorf("control: unknown frame kind %d", frame[1])
	}
	r := wire.NewReader(frame[2:])
	s := Stamp{
		Term:        r.Uvarint("term", math.MaxUint64),
		Generation:  r.Uvarint("generation", math.MaxUint64),
		Incarnation: r.Uvarint("incarnation", math.MaxUint64),
	}
	if r.Err() == nil && s.Incarnation == 0 {
		r.Fail("incarnation", "0: incarnations count from 1")
	}
	var m Message
	switch k {
	case KindHello:
		h := Hello{Stamp: s, Node: text(r, "node"), Role: text(r, "role"), Addr: text(r, "addr")}
		if r.Err() == nil && h.Node == "" {
			r.Fail("node", "empty node name")
		}
		m = h
	case KindAccept:
		m = Accept{Stamp: s}
	case KindBuildActors:
		b := BuildActors{Stamp: s, ID: r.Uvarint("id", math.MaxUint64)}
		b.SpecVersion = uint32(r.Uvarint("spec version", math.MaxUint32))
		b.Spec = r.Prefixed("spec")
		m = b
	case KindInject:
		in := Inject{Stamp: s}
		if r.Err() == nil {
			b, err := wire.DecodeBarrier(r.Rest())
			if err != nil {
				r.Fail("barrier", "%v", err)
			}
			in.Barrier = b
		}
		m = in
	case KindTeardown:
		m = Teardown{Stamp: s, Generation: r.Uvarint("teardown generation", math.MaxUint64)}
	case KindCollected:
		c := Collected{Stamp: s, Epoch: executors.Epoch(r.U64("epoch"))}
		if n := r.Uvarint("actors", uint64(r.Len())); n > 0 {
			c.Actors = make([]executors.ActorID, n)
			for i := range c.Actors {
				c.Actors[i] = executors.ActorID(r.Uvarint("actors", math.MaxUint32))
			}
		}
		c.Pending = r.Uvarint("pending bytes", math.MaxUint64)
		if r.Flag("progress flag") {
			p := r.Prefixed("progress")
			if r.Err() == nil {
				st, err := wire.DecodeBackfillStats(p)
				switch {
				case err != nil:
					r.Fail("progress", "%v", err)
				case len(c.Actors) != 1:
					r.Fail("progress", "backfill progress with %d actors, want 1", len(c.Actors))
				default:
					c.Progress = &st
				}
			}
		}
		m = c
	case KindFailed:
		m = Failed{Stamp: s, Actor: executors.ActorID(r.Uvarint("actor", math.MaxUint32)), Err: text(r, "error text")}
	case KindSealed:
		m = Sealed{Stamp: s, Epoch: executors.Epoch(r.U64("epoch")), Report: r.Prefixed("report")}
	case KindBuilt:
		m = Built{Stamp: s, ID: r.Uvarint("id", math.MaxUint64), Err: text(r, "error text")}
	case KindFinishing:
		m = Finishing{Stamp: s, Actor: executors.ActorID(r.Uvarint("actor", math.MaxUint32))}
	case KindCall:
		m = Call{Stamp: s, ID: r.Uvarint("id", math.MaxUint64), Payload: r.Prefixed("payload")}
	case KindAnswer:
		a := Answer{Stamp: s, ID: r.Uvarint("id", math.MaxUint64), Payload: r.Prefixed("payload")}
		a.Err = text(r, "error text")
		if r.Err() == nil && a.Err != "" && len(a.Payload) > 0 {
			r.Fail("payload", "an answer of %d bytes and an error", len(a.Payload))
		}
		m = a
	}
	if err := r.Finish(); err != nil {
		return nil, fmt.Errorf("control: %s frame (%s): %w", k, s, err)
	}
	return m, nil
}

// text reads a length-prefixed string that checkText accepts.
func text(r *wire.Reader, field string) string {
	v := string(r.Prefixed(field))
	if r.Err() == nil {
		if err := checkText(v); err != nil {
			r.Fail(field, "%v", err)
		}
	}
	return v
}
