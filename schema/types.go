package schema

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
)

// Kind is the logical type of a column.
type Kind uint8

// The column kinds a schema file may declare.
const (
	Invalid Kind = iota
	Boolean
	Int16
	Int32
	Int64
	Float32
	Float64
	Decimal
	Varchar
	Bytea
	Date
	Timestamp
	Timestamptz
)

var kindNames = [...]string{
	Invalid:     "invalid",
	Boolean:     "boolean",
	Int16:       "int16",
	Int32:       "int32",
	Int64:       "int64",
	Float32:     "float32",
	Float64:     "float64",
	Decimal:     "decimal",
	Varchar:     "varchar",
	Bytea:       "bytea",
	Date:        "date",
	Timestamp:   "timestamp",
	Timestamptz: "timestamptz",
}

// Kinds lists every valid kind in declaration order (the type table that tests and the
// generator iterate over).
var Kinds = []Kind{Boolean, Int16, Int32, Int64, Float32, Float64, Decimal, Varchar, Bytea, Date, Timestamp, Timestamptz}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MaxDecimalPrecision is the largest decimal precision (it fits a 128-bit integer).
const MaxDecimalPrecision = 38

// Type is a column type: a kind, plus precision and scale for decimals.
type Type struct {
	Kind      Kind
	Precision int32 // decimal only: 1..38
	Scale     int32 // decimal only: 0..Precision
}

func (t Type) String() string {
	if t.Kind == Decimal {
		return fmt.Sprintf("decimal(%d,%d)", t.Precision, t.Scale)
	}
	return t.Kind.String()
}

// VarLen reports whether values of the type have a variable width (varchar, bytea).
func (t Type) VarLen() bool { return t.Kind == Varchar || t.Kind == Bytea }

// Width is the number of bytes of a fixed-width value, as stored in a row value's slot
// and in Arrow's value buffer. Variable-width types return 0.
func (t Type) Width() int {
	switch t.Kind {
	case Boolean:
		return 1
	case Int16:
		return 2
	case Int32, Float32, Date:
		return 4
	case Int64, Float64, Timestamp, Timestamptz:
		return 8
	case Decimal:
		return 16
	}
	return 0
}

// ArrowType is the Arrow type that holds the column in a chunk: timestamps are
// microseconds (timestamptz in UTC), dates are days since the Unix epoch, decimals are
// 128-bit with the column's precision and scale.
func (t Type) ArrowType() arrow.DataType {
	switch t.Kind {
	case Boolean:
		return arrow.FixedWidthTypes.Boolean
	case Int16:
		return arrow.PrimitiveTypes.Int16
	case Int32:
		return arrow.PrimitiveTypes.Int32
	case Int64:
		return arrow.PrimitiveTypes.Int64
	case Float32:
		return arrow.PrimitiveTypes.Float32
	case Float64:
		return arrow.PrimitiveTypes.Float64
	case Decimal:
		return &arrow.Decimal128Type{Precision: t.Precision, Scale: t.Scale}
	case Varchar:
		return arrow.BinaryTypes.String
	case Bytea:
		return arrow.BinaryTypes.Binary
	case Date:
		return arrow.FixedWidthTypes.Date32
	case Timestamp:
		return &arrow.TimestampType{Unit: arrow.Microsecond}
	case Timestamptz:
		return &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	}
	panic(fmt.Sprintf("schema: ArrowType of invalid kind %d", t.Kind))
}
