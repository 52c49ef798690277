package control

import (
	"bytes"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/engine/cluster/wire"
	"github.com/seed04fbb902/weir/executors"
)

var testStamp = Stamp{Term: 7, Generation: 3, Incarnation: 2}

func limit(v int64) *int64 { return &v }

// frameCases holds every message kind, with empty and full bodies and extreme values.
func frameCases() []struct {
	name string
	m    Message
} {
	huge := Stamp{Term: math.MaxUint64, Generation: math.MaxUint64, Incarnation: math.MaxUint64}
	return []struct {
		name string
		m    Message
	}{
		{"hello", Hello{Stamp: testStamp, Node: "n1", Role: "backfill", Addr: "127.0.0.1:4000"}},
		{"hello first", Hello{Stamp: Stamp{Incarnation: 1}, Node: "ü-node"}},
		{"accept", Accept{Stamp: testStamp}},
		{"accept huge stamp", Accept{Stamp: huge}},
		{"build empty", BuildActors{Stamp: testStamp}},
		{"build", BuildActors{Stamp: testStamp, ID: math.MaxUint64, SpecVersion: math.MaxUint32, Spec: []byte{0, 1, 2, 0xff}}},
		{"inject plain", Inject{Stamp: testStamp, Barrier: &executors.Barrier{Prev: 1, Curr: 2}}},
		{"inject add", Inject{Stamp: testStamp, Barrier: &executors.Barrier{Prev: 1 << 16, Curr: 2 << 16, Kind: executors.Checkpoint,
			Mutation: executors.Add{Actors: []executors.ActorID{1, 2}, Dispatchers: []executors.NewDispatcher{
				{Actor: 1, Fragment: 4, Kind: executors.Broadcast, Outputs: []executors.Output{{Actor: 2, Node: 1}}},
			}}}}},
		{"inject throttle", Inject{Stamp: huge, Barrier: &executors.Barrier{Prev: 5, Curr: 6,
			Mutation: executors.Throttle{Limits: map[executors.FragmentID]*int64{1: nil, 2: limit(-5)}}}}},
		{"teardown", Teardown{Stamp: testStamp, Generation: 2}},
		{"collected none", Collected{Stamp: testStamp, Epoch: 9}},
		{"collected", Collected{Stamp: testStamp, Epoch: math.MaxUint64, Actors: []executors.ActorID{0, 1, math.MaxUint32}, Pending: math.MaxUint64}},
		{"collected with progress", Collected{Stamp: testStamp, Epoch: 7 << 16, Actors: []executors.ActorID{4},
			Progress: &executors.BackfillStats{Rows: 1 << 40, Completed: 3, Owned: 8, Started: true, Local: true, UpstreamMessages: 9}, Pending: 64 << 20}},
		{"failed", Failed{Stamp: testStamp, Actor: 12, Err: "hash join: out of memory in actor 12"}},
		{"failed empty text", Failed{Stamp: testStamp, Actor: math.MaxUint32}},
		{"sealed empty", Sealed{Stamp: testStamp, Epoch: 1}},
		{"sealed", Sealed{Stamp: testStamp, Epoch: 2 << 16, Report: bytes.Repeat([]byte{7}, 300)}},
		{"built", Built{Stamp: testStamp, ID: math.MaxUint64}},
		{"built failed", Built{Stamp: testStamp, ID: 3, Err: "build actor 7 of view v: no such table"}},
		{"finishing", Finishing{Stamp: testStamp, Actor: math.MaxUint32}},
		{"call empty", Call{Stamp: testStamp}},
		{"call", Call{Stamp: huge, ID: math.MaxUint64, Payload: bytes.Repeat([]byte{0, 0xff}, 200)}},
		{"answer empty", Answer{Stamp: testStamp, ID: 1}},
		{"answer", Answer{Stamp: testStamp, ID: math.MaxUint64, Payload: []byte("node 2's part of epoch 9\x00\xff")}},
		{"answer failed", Answer{Stamp: huge, ID: 6, Err: "upload of node 2's part: context deadline exceeded"}},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	kinds := map[Kind]bool{}
	for _, tc := range frameCases() {
		t.Run(tc.name, func(t *testing.T) {
			f, err := AppendFrame([]byte("prefix"), tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(f, []byte("prefix")) {
				t.Fatal("AppendFrame did not append")
			}
			f = f[len("prefix"):]
			got, err := DecodeFrame(f)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind() != tc.m.Kind() || StampOf(got) != StampOf(tc.m) {
				t.Fatalf("decoded %s (%s), encoded %s (%s)", got.Kind(), StampOf(got), tc.m.Kind(), StampOf(tc.m))
			}
			if in, ok := tc.m.(Inject); ok {
				want, _ := wire.AppendBarrier(nil, in.Barrier)
				have, err := wire.AppendBarrier(nil, got.(Inject).Barrier)
				if err != nil || !bytes.Equal(want, have) {
					t.Fatalf("barrier %v decoded as %v (%v)", in.Barrier, got.(Inject).Barrier, err)
				}
			} else if !reflect.DeepEqual(got, tc.m) {
				t.Fatalf("decoded %#v, encoded %#v", got, tc.m)
			}
			again, err := AppendFrame(nil, got)
			if err != nil || !bytes.Equal(again, f) {
				t.Fatalf("re-encoded %x (%v), want %x", again, err, f)
			}
		})
		kinds[tc.m.Kind()] = true
	}
	for k := KindHello; k <= KindAnswer; k++ {
		if !kinds[k] {
			t.Errorf("no case of kind %s", k)
		}
	}
}

func TestAppendFrameRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Message
		want string
	}{
		{"nil", nil, "nil message"},
		{"incarnation 0", Accept{Stamp: Stamp{Term: 1}}, "incarnation 0"},
		{"no node", Hello{Stamp: testStamp}, "empty node name"},
		{"bad utf8", Hello{Stamp: testStamp, Node: "n", Role: "\xff"}, "role"},
		{"nul", Failed{Stamp: testStamp, Actor: 3, Err: "a\x00b"}, "NUL"},
		{"built nul", Built{Stamp: testStamp, ID: 3, Err: "a\x00b"}, "NUL"},
		{"answer nul", Answer{Stamp: testStamp, ID: 3, Err: "a\x00b"}, "call 3: error text: holds a NUL byte"},
		{"answer bad utf8", Answer{Stamp: testStamp, ID: 3, Err: "\xff"}, "error text: not valid UTF-8"},
		{"answer and error", Answer{Stamp: testStamp, ID: 3, Payload: []byte{1}, Err: "boom"}, "an answer of 1 bytes and an error"},
		{"call too long", Call{Stamp: testStamp, Payload: make([]byte, MaxFrameLen-8)}, "longer than"},
		{"answer too long", Answer{Stamp: testStamp, Payload: make([]byte, MaxFrameLen)}, "longer than"},
		{"no barrier", Inject{Stamp: testStamp}, "no barrier"},
		{"bad barrier", Inject{Stamp: testStamp, Barrier: &executors.Barrier{Prev: 2, Curr: 2}}, "epochs must increase"},
		{"too long", Sealed{Stamp: testStamp, Report: make([]byte, MaxFrameLen)}, "longer than"},
		{"progress of two actors", Collected{Stamp: testStamp, Actors: []executors.ActorID{1, 2}, Progress: &executors.BackfillStats{}}, "backfill progress with 2 actors"},
		{"bad progress", Collected{Stamp: testStamp, Actors: []executors.ActorID{1}, Progress: &executors.BackfillStats{Completed: 2, Owned: 1}}, "2 of 1 vnodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := AppendFrame([]byte("x"), tc.m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("AppendFrame: %v, want an error containing %q", err, tc.want)
			}
			if string(out) != "x" {
				t.Fatalf("a refused frame changed dst to %q", out)
			}
		})
	}
}

func TestDecodeFrameRefuses(t *testing.T) {
	hdr := func(k Kind, rest ...byte) []byte { return append([]byte{FrameVersion, byte(k), 7, 3, 2}, rest...) }
	for _, tc := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"empty", nil, "shorter than"},
		{"version", []byte{FrameVersion + 1, byte(KindAccept), 0, 0, 1}, "unknown frame version"},
		{"kind 0", []byte{FrameVersion, 0, 0, 0, 1}, "unknown frame kind 0"},
		{"kind 13", []byte{FrameVersion, 13, 0, 0, 1}, "unknown frame kind 13"},
		{"old version", []byte{5, byte(KindCall), 0, 0, 1, 1, 0}, "unknown frame version 5"},
		{"finishing actor range", hdr(KindFinishing, 0x80, 0x80, 0x80, 0x80, 0x10), "out of range"},
		{"no stamp", []byte{FrameVersion, byte(KindAccept)}, "term"},
		{"non-minimal", []byte{FrameVersion, byte(KindAccept), 0x80, 0x00, 0, 1}, "non-minimal"},
		{"incarnation 0", []byte{FrameVersion, byte(KindAccept), 1, 1, 0}, "incarnation: 0"},
		{"trailing", hdr(KindAccept, 0), "1 trailing bytes"},
		{"hello no node", hdr(KindHello, 0, 0, 0), "empty node name"},
		{"hello long node", hdr(KindHello, 100, 'n'), "node: 100 out of range"},
		{"hello bad utf8", hdr(KindHello, 1, 'n', 1, 0xff, 0), "role: not valid UTF-8"},
		{"build huge spec", hdr(KindBuildActors, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f), "spec"},
		{"spec version", hdr(KindBuildActors, 1, 0x80, 0x80, 0x80, 0x80, 0x10, 0), "spec version"},
		{"inject bad barrier", hdr(KindInject, wire.Version, byte(wire.KindAck)), "barrier"},
		{"inject nothing", hdr(KindInject), "barrier"},
		{"teardown missing", hdr(KindTeardown), "teardown generation"},
		{"collected short epoch", hdr(KindCollected, 1, 2, 3), "epoch: truncated"},
		{"collected many actors", hdr(KindCollected, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f), "actors"},
		{"collected actor range", hdr(KindCollected, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0x80, 0x80, 0x80, 0x80, 0x10), "out of range"},
		{"collected no pending", hdr(KindCollected, 0, 0, 0, 0, 0, 0, 0, 1, 1, 4), "pending bytes: truncated"},
		{"collected long pending", hdr(KindCollected, 0, 0, 0, 0, 0, 0, 0, 1, 1, 4, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01), "pending bytes"},
		{"collected no progress flag", hdr(KindCollected, 0, 0, 0, 0, 0, 0, 0, 1, 1, 4, 0), "progress flag: truncated"},
		{"collected bad progress flag", hdr(KindCollected, 0, 0, 0, 0, 0, 0, 0, 1, 1, 4, 0, 2), "flag byte 2"},
		{"collected progress of no actor", hdr(KindCollected, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 15, wire.ProgressVersion, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), "with 0 actors"},
		{"collected bad progress", hdr(KindCollected, 0, 0, 0, 0, 0, 0, 0, 1, 1, 4, 0, 1, 2, wire.ProgressVersion+1, 0), "backfill progress: version"},
		{"failed nul", hdr(KindFailed, 1, 1, 0), "NUL"},
		{"sealed short report", hdr(KindSealed, 0, 0, 0, 0, 0, 0, 0, 1, 5, 1, 2), "report"},
		{"built no text", hdr(KindBuilt, 1), "error text: truncated"},
		{"built bad utf8", hdr(KindBuilt, 1, 1, 0xff), "error text: not valid UTF-8"},
		{"call no id", hdr(KindCall), "id: truncated"},
		{"call no payload", hdr(KindCall, 1), "payload: truncated"},
		{"call short payload", hdr(KindCall, 1, 5, 1, 2), "payload: 5 out of range"},
		{"call huge payload", hdr(KindCall, 1, 0xff, 0xff, 0xff, 0xff, 0x0f), "payload"},
		{"call trailing", hdr(KindCall, 1, 1, 9, 9), "1 trailing bytes"},
		{"answer no text", hdr(KindAnswer, 1, 0), "error text: truncated"},
		{"answer nul", hdr(KindAnswer, 1, 0, 1, 0), "error text: holds a NUL byte"},
		{"answer bad utf8", hdr(KindAnswer, 1, 0, 1, 0xff), "error text: not valid UTF-8"},
		{"answer and error", hdr(KindAnswer, 1, 1, 'x', 1, 'e'), "payload: an answer of 1 bytes and an error"},
		{"answer huge payload", hdr(KindAnswer, 1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0), "payload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := DecodeFrame(tc.frame)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeFrame(%x) = %v, %v; want an error containing %q", tc.frame, m, err, tc.want)
			}
		})
	}
}

// TestDecodeFrameAllocation: lengths and counts claiming more than the frame holds
// (2^32 actors, a 4 GiB spec or payload) allocate nothing for them.
func TestDecodeFrameAllocation(t *testing.T) {
	frames := [][]byte{
		{FrameVersion, byte(KindCollected), 7, 3, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		{FrameVersion, byte(KindBuildActors), 7, 3, 2, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		{FrameVersion, byte(KindCall), 7, 3, 2, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		{FrameVersion, byte(KindAnswer), 7, 3, 2, 1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0},
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		for _, f := range frames {
			if _, err := DecodeFrame(f); err == nil {
				t.Fatalf("DecodeFrame(%x) accepted it", f)
			}
		}
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("%d refused frames of at most 18 bytes allocated %d bytes", 10*len(frames), n)
	}
}

// FuzzDecodeFrame feeds DecodeFrame arbitrary frames: it must return an error or a
// message that encodes again, and the encoding of what that decodes to is the same.
// Every kind but inject (whose barrier's bitmaps have several encodings) re-encodes
// to the very input: the format is canonical.
func FuzzDecodeFrame(f *testing.F) {
	for _, tc := range frameCases() {
		frame, err := AppendFrame(nil, tc.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame)
	}
	// Calls and answers at the edges of what decodes: an answer of both a payload and
	// an error, and bodies cut short.
	hdr := []byte{FrameVersion, byte(KindAnswer), 7, 3, 2}
	f.Add(append(hdr[:len(hdr):len(hdr)], 1, 1, 'x', 1, 'e'))
	f.Add(append(hdr[:len(hdr):len(hdr)], 1, 0, 0))
	f.Add(append(hdr[:len(hdr):len(hdr)], 1, 2, 'x'))
	f.Add([]byte{FrameVersion, byte(KindCall), 7, 3, 2, 1, 3, 'a', 'b'})
	f.Fuzz(func(t *testing.T, frame []byte) {
		m, err := DecodeFrame(frame)
		if err != nil {
			return
		}
		again, err := AppendFrame(nil, m)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", m, err)
		}
		if m.Kind() != KindInject && !bytes.Equal(again, frame) {
			t.Fatalf("re-encoded %x, decoded from %x", again, frame)
		}
		m2, err := DecodeFrame(again)
		if err != nil {
			t.Fatalf("re-encoded %x does not decode: %v", again, err)
		}
		third, err := AppendFrame(nil, m2)
		if err != nil || !bytes.Equal(third, again) {
			t.Fatalf("second re-encoding %x (%v), first %x", third, err, again)
		}
	})
}
