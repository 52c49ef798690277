package executors

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/compute/exec"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/scalar"
)

// Scalar functions over timestamps that Arrow Go's compute registry does not have (it
// has no "day", "hour", "strftime" or timestamp-to-date cast in v18): each is a typed
// loop over the raw int64 values of one array, writing a freshly allocated buffer, with
// the input's validity bitmap carried over (NULL in, NULL out).
//
// Timestamps are read in UTC: the input must be a timestamp of any unit whose time zone
// is "" (naive, read as UTC) or "UTC"; any other zone is an error, as is any other type.

// Day is the UTC calendar day of a timestamp, as a date32 (days since 1970-01-01,
// rounded towards minus infinity, so 1969-12-31T23:59:59 is day -1).
func Day(x Expr) Expr { return dayExpr{x: x} }

type dayExpr struct{ x Expr }

func (d dayExpr) String() string { return "day(" + d.x.String() + ")" }

func (d dayExpr) Eval(ctx context.Context, rec arrow.RecordBatch) (compute.Datum, error) {
	return evalTimestampUnary(ctx, rec, d.x, d, func(mem memory.Allocator, ts *array.Timestamp, perSec int64) (arrow.ArrayData, error) {
		perDay := perSec * 86400
		n := ts.Len()
		buf := memory.NewResizableBuffer(mem)
		buf.Resize(n * arrow.Date32SizeBytes)
		out := arrow.Date32Traits.CastFromBytes(buf.Bytes())[:n]
		in := ts.TimestampValues()
		for i, v := range in {
			out[i] = arrow.Date32(floorDiv(int64(v), perDay))
		}
		return newFixedData(arrow.FixedWidthTypes.Date32, ts, buf, mem), nil
	})
}

// TimeOfDayHHMM is the UTC time of day of a timestamp as a string "HH:MM" (24-hour
// clock, zero-padded, seconds truncated: 23:59:59.999999 is "23:59").
func TimeOfDayHHMM(x Expr) Expr { return hhmmExpr{x: x} }

type hhmmExpr struct{ x Expr }

func (h hhmmExpr) String() string { return "time_of_day_hhmm(" + h.x.String() + ")" }

func (h hhmmExpr) Eval(ctx context.Context, rec arrow.RecordBatch) (compute.Datum, error) {
	return evalTimestampUnary(ctx, rec, h.x, h, func(mem memory.Allocator, ts *array.Timestamp, perSec int64) (arrow.ArrayData, error) {
		perMin := perSec * 60
		n := ts.Len()
		valid := n - ts.NullN()
		offBuf := memory.NewResizableBuffer(mem)
		offBuf.Resize((n + 1) * arrow.Int32SizeBytes)
		dataBuf := memory.NewResizableBuffer(mem)
		dataBuf.Resize(5 * valid)
		offs := arrow.Int32Traits.CastFromBytes(offBuf.Bytes())[:n+1]
		data := dataBuf.Bytes()
		in := ts.TimestampValues()
		pos := int32(0)
		offs[0] = 0
		for i, v := range in {
			if ts.IsValid(i) {
				m := floorMod(floorDiv(int64(v), perMin), 24*60) // minute of the day
				hh, mm := m/60, m%60
				d := data[pos : pos+5 : pos+5]
				d[0] = byte('0' + hh/10)
				d[1] = byte('0' + hh%10)
				d[2] = ':'
				d[3] = byte('0' + mm/10)
				d[4] = byte('0' + mm%10)
				pos += 5
			}
			offs[i+1] = pos
		}
		validity := validityOf(ts, mem)
		defer releaseBuf(validity)
		defer offBuf.Release()
		defer dataBuf.Release()
		return array.NewData(arrow.BinaryTypes.String, n, []*memory.Buffer{validity, offBuf, dataBuf}, nil, ts.NullN(), 0), nil
	})
}

// Between is x BETWEEN lo AND hi: lo <= x AND x <= hi, evaluated with Arrow's
// "greater_equal", "less_equal" and "and". It is NULL when any of x, lo, hi is NULL.
//
// This is deliberately Arrow's null-propagating "and", not "and_kleene": SQL's
// three-valued BETWEEN gives FALSE for 1 BETWEEN 2 AND NULL (FALSE AND NULL is FALSE),
// where Between gives NULL. The two differ only in rows where one bound is NULL and the
// other comparison is FALSE; as a filter or FILTER clause (q16's price buckets, which
// also have non-NULL literal bounds) NULL and FALSE both drop the row, so they agree.
func Between(x, lo, hi Expr) Expr {
	return betweenExpr{x: x, lo: lo, hi: hi,
		call: Call("and", Call("greater_equal", x, lo), Call("less_equal", x, hi))}
}

type betweenExpr struct {
	x, lo, hi Expr
	call      Expr
}

func (b betweenExpr) String() string {
	return "(" + b.x.String() + " BETWEEN " + b.lo.String() + " AND " + b.hi.String() + ")"
}

func (b betweenExpr) Eval(ctx context.Context, rec arrow.RecordBatch) (compute.Datum, error) {
	d, err := b.call.Eval(ctx, rec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b, err)
	}
	return d, nil
}

// timestampKernel computes an output array from a timestamp array whose unit has
// perSec ticks per second.
type timestampKernel func(mem memory.Allocator, ts *array.Timestamp, perSec int64) (arrow.ArrayData, error)

// evalTimestampUnary evaluates x over rec, checks that it is a UTC timestamp, and
// applies k to it. A scalar argument gives a scalar result.
func evalTimestampUnary(ctx context.Context, rec arrow.RecordBatch, x Expr, self fmt.Stringer, k timestampKernel) (compute.Datum, error) {
	mem := exec.GetAllocator(ctx)
	d, err := x.Eval(ctx, rec)
	if err != nil {
		return nil, err
	}
	defer d.Release()
	var arr arrow.Array
	isScalar := false
	switch v := d.(type) {
	case *compute.ArrayDatum:
		arr = v.MakeArray()
	case *compute.ScalarDatum:
		isScalar = true
		if arr, err = scalar.MakeArrayFromScalar(v.Value, 1, mem); err != nil {
			return nil, fmt.Errorf("%s: %w", self, err)
		}
	default:
		return nil, fmt.Errorf("%s: argument %s is a %s, want an array or a scalar", self, x, d.Kind())
	}
	defer arr.Release()
	perSec, err := utcTimestampUnit(x, arr.DataType())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", self, err)
	}
	data, err := k(mem, arr.(*array.Timestamp), perSec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", self, err)
	}
	defer data.Release()
	out := array.MakeFromData(data)
	defer out.Release()
	if isScalar {
		s, err := scalar.GetScalar(out, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", self, err)
		}
		return compute.NewDatum(s), nil
	}
	return compute.NewDatum(out), nil
}

// utcTimestampUnit returns the ticks per second of t, the type of argument x, a
// timestamp type in UTC.
func utcTimestampUnit(x fmt.Stringer, t arrow.DataType) (int64, error) {
	ts, ok := t.(*arrow.TimestampType)
	if !ok {
		return 0, fmt.Errorf("argument %s is %s, want a timestamp", x, t)
	}
	if ts.TimeZone != "" && ts.TimeZone != "UTC" {
		return 0, fmt.Errorf("argument %s is %s: time zone %q, want none or UTC", x, t, ts.TimeZone)
	}
	return int64(1e9 / ts.Unit.Multiplier()), nil
}

// validityOf returns a validity bitmap for a's rows starting at bit 0 (nil when a has
// no NULLs): a's own buffer, retained, when a has no offset, else a copy. The caller
// releases it (releaseBuf).
func validityOf(a arrow.Array, mem memory.Allocator) *memory.Buffer {
	if a.NullN() == 0 {
		return nil
	}
	src := a.Data().Buffers()[0]
	if a.Data().Offset() == 0 {
		src.Retain()
		return src
	}
	b := memory.NewResizableBuffer(mem)
	b.Resize(int(bitutil.BytesForBits(int64(a.Len()))))
	bitutil.CopyBitmap(src.Bytes(), a.Data().Offset(), a.Len(), b.Bytes(), 0)
	return b
}

func releaseBuf(b *memory.Buffer) {
	if b != nil {
		b.Release()
	}
}

// newFixedData is a fixed-width array of type t over data (which it takes over), with
// the validity of in.
func newFixedData(t arrow.DataType, in arrow.Array, data *memory.Buffer, mem memory.Allocator) arrow.ArrayData {
	validity := validityOf(in, mem)
	defer releaseBuf(validity)
	defer data.Release()
	return array.NewData(t, in.Len(), []*memory.Buffer{validity, data}, nil, in.NullN(), 0)
}

// floorDiv is a / b rounded towards minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// floorMod is a - floorDiv(a, b)*b, in [0, b) (b > 0).
func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
