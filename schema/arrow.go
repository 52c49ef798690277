package schema

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
)

// TypeOfArrow is the column type whose ArrowType is dt: the inverse of Type.ArrowType.
// Decimals keep dt's precision and scale; a timestamp maps only in microseconds,
// without a time zone (Timestamp) or in UTC (Timestamptz). Any other Arrow type is an
// error naming it.
func TypeOfArrow(dt arrow.DataType) (Type, error) {
	switch t := dt.(type) {
	case *arrow.BooleanType:
		return Type{Kind: Boolean}, nil
	case *arrow.Int16Type:
		return Type{Kind: Int16}, nil
	case *arrow.Int32Type:
		return Type{Kind: Int32}, nil
	case *arrow.Int64Type:
		return Type{Kind: Int64}, nil
	case *arrow.Float32Type:
		return Type{Kind: Float32}, nil
	case *arrow.Float64Type:
		return Type{Kind: Float64}, nil
	case *arrow.Decimal128Type:
		return Type{Kind: Decimal, Precision: t.Precision, Scale: t.Scale}, nil
	case *arrow.StringType:
		return Type{Kind: Varchar}, nil
	case *arrow.BinaryType:
		return Type{Kind: Bytea}, nil
	case *arrow.Date32Type:
		return Type{Kind: Date}, nil
	case *arrow.TimestampType:
		if t.Unit == arrow.Microsecond && t.TimeZone == "" {
			return Type{Kind: Timestamp}, nil
		}
		if t.Unit == arrow.Microsecond && t.TimeZone == "UTC" {
			return Type{Kind: Timestamptz}, nil
		}
	}
	return Type{}, fmt.Errorf("unsupported Arrow type %s", dt)
}
