package wire

import (
	"math"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vnode"
)

func everyOther(count int) *vnode.Bitmap {
	b := vnode.NewBitmap(count)
	for v := 0; v < count; v += 2 {
		b.Add(vnode.Vnode(v))
	}
	return b
}

// barrierCases covers every mutation type and its edge cases.
func barrierCases() []struct {
	name string
	b    executors.Barrier
} {
	full, err := vnode.EvenSplit(vnode.MaxCount, 3)
	if err != nil {
		panic(err)
	}
	const big = executors.Epoch(math.MaxUint64)
	return []struct {
		name string
		b    executors.Barrier
	}{
		{"plain", executors.Barrier{Prev: 1, Curr: 2}},
		{"checkpoint", executors.Barrier{Prev: 1 << 16, Curr: 2 << 16, Kind: executors.Checkpoint}},
		{"big epochs", executors.Barrier{Prev: big - 1, Curr: big, Kind: executors.Checkpoint}},
		{"zero prev", executors.Barrier{Prev: 0, Curr: 1}},
		{"add empty", executors.Barrier{Prev: 1, Curr: 2, Kind: executors.Checkpoint, Mutation: executors.Add{}}},
		{"add full", executors.Barrier{Prev: 3, Curr: 4, Kind: executors.Checkpoint, Mutation: executors.Add{
			Actors:           []executors.ActorID{0, 7, math.MaxUint32},
			PauseOnBootstrap: true,
			Dispatchers: []executors.NewDispatcher{
				{Actor: 1, Fragment: 2, Kind: executors.Hash, Outputs: []executors.Output{{Actor: 7, Node: 0}, {Actor: 8, Node: -1}, {Actor: 9, Node: math.MaxInt32}}, Mapping: full},
				{Actor: 3, Fragment: math.MaxUint32, Kind: executors.Broadcast, Outputs: []executors.Output{{Actor: 7, Node: 2}}},
				{Actor: 4, Fragment: 5, Kind: executors.Simple},
				{Actor: 5, Fragment: 6, Kind: executors.NoShuffle, Outputs: []executors.Output{{Actor: 9}}, Mapping: vnode.Mapping{0}},
			},
		}}},
		{"update empty", executors.Barrier{Prev: 1, Curr: 2, Kind: executors.Checkpoint, Mutation: executors.Update{}}},
		{"update full", executors.Barrier{Prev: 5, Curr: 9, Kind: executors.Checkpoint, Mutation: executors.Update{
			Dispatchers: []executors.DispatcherUpdate{
				{Actor: 1, Fragment: 2, AddOutputs: []executors.Output{{Actor: 10, Node: 3}}, RemoveOutputs: []executors.ActorID{4, 5}, Mapping: full},
				{Actor: 2, Fragment: 2},
			},
			Merges: []executors.MergeUpdate{
				{Actor: 10, AddInputs: []executors.Output{{Actor: 1, Node: 2}, {Actor: 2}}, RemoveInputs: []executors.ActorID{3}},
				{Actor: 11},
			},
			Vnodes: map[executors.ActorID]*vnode.Bitmap{
				10:             vnode.NewBitmap(1, 0),
				11:             vnode.NewBitmap(1),
				12:             vnode.Full(vnode.MaxCount),
				13:             everyOther(vnode.MaxCount),
				14:             vnode.FromRange(256, 17, 200),
				math.MaxUint32: nil,
			},
			Stop: []executors.ActorID{4, 5},
		}}},
		{"pause engine", executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Pause{}}},
		{"pause fragments", executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Pause{Fragments: []executors.FragmentID{3, 1, math.MaxUint32}}}},
		{"resume engine", executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Resume{}}},
		{"resume fragments", executors.Barrier{Prev: 1, Curr: 2, Kind: executors.Checkpoint, Mutation: executors.Resume{Fragments: []executors.FragmentID{9}}}},
		{"throttle empty", executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Throttle{}}},
		{"throttle nil zero positive", executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Throttle{Limits: map[executors.FragmentID]*int64{
			1: nil, 2: limit(0), 3: limit(1000), 4: limit(math.MaxInt64), 5: limit(-1),
		}}}},
		{"stop empty", executors.Barrier{Prev: 1, Curr: 2, Kind: executors.Checkpoint, Mutation: executors.Stop{}}},
		{"stop", executors.Barrier{Prev: 1, Curr: 2, Kind: executors.Checkpoint, Mutation: executors.Stop{Actors: []executors.ActorID{5, 3, 5}}}},
	}
}

func TestBarrierRoundTrip(t *testing.T) {
	for _, tc := range barrierCases() {
		t.Run(tc.name, func(t *testing.T) {
			md, err := AppendBarrier([]byte("prefix"), &tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(md), "prefix") {
				t.Fatalf("AppendBarrier dropped the prefix of dst")
			}
			md = md[len("prefix"):]
			got, err := DecodeBarrier(md)
			if err != nil {
				t.Fatal(err)
			}
			if err := barriersEqual(&tc.b, got); err != nil {
				t.Fatal(err)
			}
			m, err := DecodeMessage(nil, md, nil)
			if err != nil || m.Barrier == nil || m.Chunk != nil || m.Watermark != nil {
				t.Fatalf("DecodeMessage: %v, %v", m, err)
			}
			// Every strict prefix is truncated input: an error, never a panic.
			for n := range len(md) {
				if _, err := DecodeBarrier(md[:n]); err == nil {
					t.Fatalf("prefix of %d of %d bytes decoded", n, len(md))
				}
			}
			if _, err := DecodeBarrier(append(md, 0)); err == nil || !strings.Contains(err.Error(), "trailing") {
				t.Fatalf("trailing byte: %v", err)
			}
		})
	}
}

func TestAppendBarrierRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    executors.Barrier
		want string
	}{
		{"epochs", executors.Barrier{Prev: 2, Curr: 2}, "epochs must increase"},
		{"needs checkpoint", executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Stop{}}, "needs a checkpoint"},
		{"pointer mutation", executors.Barrier{Prev: 1, Curr: 2, Mutation: &executors.Pause{}}, "unknown mutation type *executors.Pause"},
		{"kind", executors.Barrier{Prev: 1, Curr: 2, Kind: 7}, "unknown barrier kind 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := AppendBarrier(nil, &tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDecodeBarrierRefuses(t *testing.T) {
	good, err := AppendBarrier(nil, &executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Pause{Fragments: []executors.FragmentID{1}}})
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	const body = HeaderLen + 16 // after the epochs
	for _, tc := range []struct {
		name string
		md   []byte
		want string
	}{
		{"empty", nil, "shorter than"},
		{"version", edit(func(b []byte) []byte { b[0] = 9; return b }), "unknown format version 9"},
		{"kind", edit(func(b []byte) []byte { b[1] = 77; return b }), "unknown message kind 77"},
		{"other kind", AppendEnd(nil), "end message where a barrier was expected"},
		{"barrier kind", edit(func(b []byte) []byte { b[body] = 2; return b }), "unknown kind 2"},
		{"tag", edit(func(b []byte) []byte { b[body+1] = 42; return b }), "unknown mutation tag 42"},
		{"count", edit(func(b []byte) []byte { b[body+2] = 100; return b }), "pause.fragments: 100 out of range"},
		{"huge count", append(edit(func(b []byte) []byte { return b[:body+2] }), 0xff, 0xff, 0xff, 0xff, 0x0f), "out of range"},
		{"epochs", edit(func(b []byte) []byte { b[HeaderLen+15] = 1; return b }), "epochs must increase"},
		{"id range", append(edit(func(b []byte) []byte { return append(b[:body+2], 1) }), 0xff, 0xff, 0xff, 0xff, 0x1f), "4294967295"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeBarrier(tc.md)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDecodeThrottleRefusesRepeatedKey(t *testing.T) {
	md, err := AppendBarrier(nil, &executors.Barrier{Prev: 1, Curr: 2, Mutation: executors.Throttle{Limits: map[executors.FragmentID]*int64{4: nil, 5: nil}}})
	if err != nil {
		t.Fatal(err)
	}
	// The limits are fragment 4 (flag 0) then fragment 5 (flag 0): make the second 4.
	md[len(md)-2] = 4
	if _, err := DecodeBarrier(md); err == nil || !strings.Contains(err.Error(), "keys must increase") {
		t.Fatalf("got %v", err)
	}
}
