package schema_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/schema"
)

func TestTypeOfArrow(t *testing.T) {
	for _, tc := range []struct {
		dt   arrow.DataType
		want schema.Type
		err  string
	}{
		{arrow.FixedWidthTypes.Boolean, schema.Type{Kind: schema.Boolean}, ""},
		{arrow.PrimitiveTypes.Int16, schema.Type{Kind: schema.Int16}, ""},
		{arrow.PrimitiveTypes.Int32, schema.Type{Kind: schema.Int32}, ""},
		{arrow.PrimitiveTypes.Int64, schema.Type{Kind: schema.Int64}, ""},
		{arrow.PrimitiveTypes.Float32, schema.Type{Kind: schema.Float32}, ""},
		{arrow.PrimitiveTypes.Float64, schema.Type{Kind: schema.Float64}, ""},
		{&arrow.Decimal128Type{Precision: 12, Scale: 3}, schema.Type{Kind: schema.Decimal, Precision: 12, Scale: 3}, ""},
		{arrow.BinaryTypes.String, schema.Type{Kind: schema.Varchar}, ""},
		{arrow.BinaryTypes.Binary, schema.Type{Kind: schema.Bytea}, ""},
		{arrow.FixedWidthTypes.Date32, schema.Type{Kind: schema.Date}, ""},
		{&arrow.TimestampType{Unit: arrow.Microsecond}, schema.Type{Kind: schema.Timestamp}, ""},
		{&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, schema.Type{Kind: schema.Timestamptz}, ""},
		{&arrow.TimestampType{Unit: arrow.Millisecond}, schema.Type{}, "unsupported Arrow type timestamp[ms]"},
		{&arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}, schema.Type{}, "unsupported Arrow type timestamp[ns, tz=UTC]"},
		{&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "Europe/Paris"}, schema.Type{}, "unsupported Arrow type timestamp[us, tz=Europe/Paris]"},
		{arrow.PrimitiveTypes.Int8, schema.Type{}, "unsupported Arrow type int8"},
		{arrow.PrimitiveTypes.Uint64, schema.Type{}, "unsupported Arrow type uint64"},
		{arrow.BinaryTypes.LargeString, schema.Type{}, "unsupported Arrow type large_utf8"},
		{arrow.FixedWidthTypes.Date64, schema.Type{}, "unsupported Arrow type date64"},
		{&arrow.Decimal256Type{Precision: 40, Scale: 2}, schema.Type{}, "unsupported Arrow type decimal256(40, 2)"},
		{arrow.ListOf(arrow.PrimitiveTypes.Int64), schema.Type{}, "unsupported Arrow type list<item: int64, nullable>"},
	} {
		got, err := schema.TypeOfArrow(tc.dt)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("TypeOfArrow(%s) = %v, %v; want error %q", tc.dt, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("TypeOfArrow(%s) = %v, %v; want %v", tc.dt, got, err, tc.want)
		}
	}
}

// TestTypeOfArrowInverts checks that TypeOfArrow undoes ArrowType for every kind.
func TestTypeOfArrowInverts(t *testing.T) {
	for _, k := range schema.Kinds {
		typ := schema.Type{Kind: k}
		if k == schema.Decimal {
			typ.Precision, typ.Scale = schema.MaxDecimalPrecision, 4
		}
		got, err := schema.TypeOfArrow(typ.ArrowType())
		if err != nil || got != typ {
			t.Errorf("TypeOfArrow(%s.ArrowType()) = %v, %v", typ, got, err)
		}
	}
}
