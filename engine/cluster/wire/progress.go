package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
)

// ProgressVersion is the version of the encoding of a backfill actor's progress
// (AppendBackfillStats), its first byte: a node's report of a barrier carries it to
// the coordinator (engine/cluster/control's Collected).
const ProgressVersion byte = 1

// The flags byte of an encoded progress.
const (
	progressDone byte = 1 << iota
	progressStarted
	progressLocal
	progressFlags = progressDone | progressStarted | progressLocal
)

// AppendBackfillStats appends the encoding of st: the version, a byte of flags
// (done, started, local) and every count as a uvarint, in BackfillStats' field order.
// A negative count, or a Completed above Owned, is an error.
func AppendBackfillStats(dst []byte, st executors.BackfillStats) ([]byte, error) {
	counts := progressCounts(st)
	for i, c := range counts {
		if c < 0 {
			return dst, fmt.Errorf("wire: backfill progress: count %d is %d, below 0", i, c)
		}
	}
	if err := checkVnodes(st); err != nil {
		return dst, err
	}
	var flags byte
	if st.Done {
		flags |= progressDone
	}
	if st.Started {
		flags |= progressStarted
	}
	if st.Local {
		flags |= progressLocal
	}
	dst = append(dst, ProgressVersion, flags)
	for _, c := range counts {
		dst = binary.AppendUvarint(dst, uint64(c))
	}
	return dst, nil
}

// DecodeBackfillStats decodes what AppendBackfillStats wrote, all of b. A version
// other than ProgressVersion, an unknown flag, a count out of range or trailing
// bytes are errors naming the field.
func DecodeBackfillStats(b []byte) (executors.BackfillStats, error) {
	r := NewReader(b)
	if v := r.Byte("progress version"); r.Err() == nil && v != ProgressVersion {
		return executors.BackfillStats{}, fmt.Errorf("wire: backfill progress: version %d, want %d", v, ProgressVersion)
	}
	flags := r.Byte("progress flags")
	if flags&^progressFlags != 0 {
		r.Fail("progress flags", "unknown flags %#x", flags&^progressFlags)
	}
	var c [progressCountN]int64
	for i := range c {
		limit := uint64(math.MaxInt64)
		switch i {
		case 1, 2: // Completed and Owned: vnodes
			limit = schema.MaxVnodeCount
		case 3, 4: // ReplicatedBytes and ReplicatedPeak: ints
			limit = math.MaxInt
		}
		c[i] = int64(r.Uvarint(fmt.Sprintf("progress count %d", i), limit))
	}
	if err := r.Finish(); err != nil {
		return executors.BackfillStats{}, fmt.Errorf("wire: backfill progress: %w", err)
	}
	st := executors.BackfillStats{
		Done: flags&progressDone != 0, Started: flags&progressStarted != 0, Local: flags&progressLocal != 0,
		Rows: c[0], Completed: int(c[1]), Owned: int(c[2]), ReplicatedBytes: int(c[3]), ReplicatedPeak: int(c[4]),
		SnapshotBatches: c[5], UpstreamMessages: c[6], SpilledChunks: c[7], UpstreamRowsForwarded: c[8],
		ReadsKept: c[9], ReadyTaken: c[10], StopFlushed: c[11], HeldBack: c[12],
	}
	if err := checkVnodes(st); err != nil {
		return executors.BackfillStats{}, err
	}
	return st, nil
}

// progressCountN is the number of counts an encoded progress holds.
const progressCountN = 13

// progressCounts are st's counts in field order (DecodeBackfillStats' c).
func progressCounts(st executors.BackfillStats) [progressCountN]int64 {
	return [progressCountN]int64{st.Rows, int64(st.Completed), int64(st.Owned), int64(st.ReplicatedBytes), int64(st.ReplicatedPeak),
		st.SnapshotBatches, st.UpstreamMessages, st.SpilledChunks, st.UpstreamRowsForwarded,
		st.ReadsKept, st.ReadyTaken, st.StopFlushed, st.HeldBack}
}

// checkVnodes refuses progress whose vnode counts no actor could have.
func checkVnodes(st executors.BackfillStats) error {
	if st.Completed > st.Owned || st.Owned > schema.MaxVnodeCount {
		return fmt.Errorf("wire: backfill progress: %d of %d vnodes completed, at most %d owned", st.Completed, st.Owned, schema.MaxVnodeCount)
	}
	return nil
}
