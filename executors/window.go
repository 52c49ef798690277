package executors

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Tumbling windows (Nexmark q7, q8: TUMBLE(t, date_time, 10s)) are two expressions
// used in a Project next to the input's columns:
//
//	window_start = TumbleStart(ts, size) = floor(ts / size) * size
//	window_end   = TumbleEnd(ts, size)   = window_start + size
//
// Windows are aligned on the Unix epoch (1970-01-01T00:00:00 UTC), so a timestamp
// exactly on a boundary starts its window, and the floor is towards minus infinity
// (1969-12-31T23:59:59 is in the window [-10s, 0) for size 10s). The argument is a
// timestamp of any unit with no time zone or "UTC"; the result has the argument's type.
// NULL in, NULL out. size must be positive and a whole number of the argument's unit.
// A window whose bound does not fit in int64 ticks (timestamps within size of the
// extremes of the type) is an error, not a wrapped value.
func TumbleStart(x Expr, size time.Duration) Expr { return tumbleExpr{x: x, size: size} }

// TumbleEnd is TumbleStart(x, size) + size: the exclusive end of x's window.
func TumbleEnd(x Expr, size time.Duration) Expr {
	return tumbleExpr{x: x, size: size, end: true}
}

type tumbleExpr struct {
	x    Expr
	size time.Duration
	end  bool
}

func (t tumbleExpr) String() string {
	name := "tumble_start"
	if t.end {
		name = "tumble_end"
	}
	return fmt.Sprintf("%s(%s, %s)", name, t.x, t.size)
}

func (t tumbleExpr) Eval(ctx context.Context, rec arrow.RecordBatch) (compute.Datum, error) {
	return evalTimestampUnary(ctx, rec, t.x, t, func(mem memory.Allocator, ts *array.Timestamp, perSec int64) (arrow.ArrayData, error) {
		nsPerTick := int64(time.Second) / perSec
		if t.size <= 0 || int64(t.size)%nsPerTick != 0 {
			return nil, fmt.Errorf("window size %s: want a positive whole number of %s", t.size, time.Duration(nsPerTick))
		}
		size := int64(t.size) / nsPerTick
		n := ts.Len()
		buf := memory.NewResizableBuffer(mem)
		buf.Resize(n * arrow.TimestampSizeBytes)
		out := arrow.TimestampTraits.CastFromBytes(buf.Bytes())[:n]
		var bad int
		if ts.NullN() == 0 {
			bad = tumble(ts.TimestampValues(), out, size, t.end, nil)
		} else {
			bad = tumble(ts.TimestampValues(), out, size, t.end, ts)
		}
		if bad >= 0 {
			buf.Release()
			return nil, fmt.Errorf("row %d: timestamp %d (%s since the epoch): window bound out of the range of int64",
				bad, int64(ts.Value(bad)), time.Duration(nsPerTick))
		}
		return newFixedData(ts.DataType(), ts, buf, mem), nil
	})
}

// tumble writes the window start (or end) of each in[i] to out[i], in ticks, and
// returns the first row whose bound overflows int64, or -1. NULL rows are computed
// like the others (one branch-free pass); with nulls != nil, a NULL row whose arbitrary
// value would overflow is not an error (its output is 0).
func tumble(in, out []arrow.Timestamp, size int64, end bool, nulls *array.Timestamp) int {
	minQ := math.MinInt64 / size // the least q with q*size representable
	maxStart := int64(math.MaxInt64)
	if end {
		maxStart -= size
	}
	add := int64(0)
	if end {
		add = size
	}
	for i, v := range in {
		q := int64(v) / size
		if int64(v)-q*size < 0 {
			q--
		}
		if q < minQ || q*size > maxStart {
			// Out of range, unless the row is NULL (its value is arbitrary).
			if nulls != nil && nulls.IsNull(i) {
				out[i] = 0
				continue
			}
			return i
		}
		out[i] = arrow.Timestamp(q*size + add)
	}
	return -1
}
