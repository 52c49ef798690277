package wire

import (
	"math"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/executors"
)

func progressCases() []executors.BackfillStats {
	return []executors.BackfillStats{
		{},
		{Started: true, Owned: 16, Completed: 3, Rows: 12345, UpstreamMessages: 7},
		{Done: true, Started: true, Local: true, Rows: math.MaxInt64, Completed: 32768, Owned: 32768,
			ReplicatedBytes: 1 << 40, ReplicatedPeak: 1 << 41, SnapshotBatches: 1, SpilledChunks: 2, UpstreamRowsForwarded: 3,
			ReadsKept: 4, ReadyTaken: 5, StopFlushed: 6, HeldBack: 7},
	}
}

// Every field of a backfill's progress survives the round trip.
func TestBackfillStatsRoundTrip(t *testing.T) {
	for _, st := range progressCases() {
		b, err := AppendBackfillStats([]byte("prefix"), st)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeBackfillStats(b[len("prefix"):])
		if err != nil {
			t.Fatalf("%+v: %v", st, err)
		}
		if got != st {
			t.Fatalf("round trip of %+v gave %+v", st, got)
		}
	}
}

// What no backfill reports, and what no encoder writes, is refused, naming why.
func TestBackfillStatsRefused(t *testing.T) {
	if _, err := AppendBackfillStats(nil, executors.BackfillStats{Rows: -1}); err == nil || !strings.Contains(err.Error(), "below 0") {
		t.Fatalf("negative rows: %v", err)
	}
	if _, err := AppendBackfillStats(nil, executors.BackfillStats{Completed: 3, Owned: 2}); err == nil || !strings.Contains(err.Error(), "3 of 2 vnodes") {
		t.Fatalf("more completed than owned: %v", err)
	}
	good, err := AppendBackfillStats(nil, progressCases()[1])
	if err != nil {
		t.Fatal(err)
	}
	completedAbove := append([]byte(nil), good...)
	completedAbove[4], completedAbove[5] = 17, 16 // after the version, the flags and two bytes of rows
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "progress version: truncated"},
		{"another version", append([]byte{ProgressVersion + 1}, good[1:]...), "version 2, want 1"},
		{"an unknown flag", append([]byte{ProgressVersion, 0x80}, good[2:]...), "unknown flags 0x80"},
		{"truncated", good[:len(good)-1], "progress count 12: truncated"},
		{"trailing", append(append([]byte(nil), good...), 0), "1 trailing bytes"},
		{"non-minimal", append(append([]byte{ProgressVersion, 0}, 0x80, 0x00), good[3:]...), "non-minimal"},
		{"completed above owned", completedAbove, "17 of 16 vnodes"},
	} {
		if _, err := DecodeBackfillStats(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func FuzzDecodeBackfillStats(f *testing.F) {
	for _, st := range progressCases() {
		b, err := AppendBackfillStats(nil, st)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := DecodeBackfillStats(b)
		if err != nil {
			return
		}
		again, err := AppendBackfillStats(nil, st)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", st, err)
		}
		if string(again) != string(b) {
			t.Fatalf("%x decoded to %+v, which encodes to %x", b, st, again)
		}
	})
}
