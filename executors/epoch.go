package executors

import (
	"fmt"
	"time"
)

// Epoch identifies a span of the stream between two barriers: milliseconds since the
// Unix epoch shifted left 16 bits, plus a sequence in the low 16 bits so that barriers
// injected in the same millisecond stay ordered. Epochs strictly increase.
type Epoch uint64

// EpochSeqBits is the number of low bits that hold the sequence.
const EpochSeqBits = 16

// EpochAt is the first epoch of millisecond t.
func EpochAt(t time.Time) Epoch { return Epoch(uint64(t.UnixMilli()) << EpochSeqBits) }

// Time is the millisecond the epoch was taken in.
func (e Epoch) Time() time.Time { return time.UnixMilli(int64(uint64(e) >> EpochSeqBits)).UTC() }

// Seq is the epoch's sequence within its millisecond.
func (e Epoch) Seq() uint16 { return uint16(e) }

func (e Epoch) String() string {
	return fmt.Sprintf("%d(%s+%d)", uint64(e), e.Time().Format("2006-01-02T15:04:05.000Z"), e.Seq())
}

// NextEpoch returns the epoch after prev for a barrier injected at now: the first epoch
// of now's millisecond when that is above prev, else prev + 1 (a clock that stood
// still or went back, or several barriers in one millisecond).
func NextEpoch(prev Epoch, now time.Time) Epoch {
	if e := EpochAt(now); e > prev {
		return e
	}
	return prev + 1
}
