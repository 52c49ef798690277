package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"
	"github.com/seed04fbb902/weir/schema"
)

const (
	pkgArrow   = "github.com/apache/arrow-go/v18/arrow"
	pkgArray   = "github.com/apache/arrow-go/v18/arrow/array"
	pkgMemory  = "github.com/apache/arrow-go/v18/arrow/memory"
	pkgDecimal = "github.com/apache/arrow-go/v18/arrow/decimal128"
	pkgVec     = "github.com/seed04fbb902/weir/vec"
	pkgSchema  = "github.com/seed04fbb902/weir/schema"
	pkgBinary  = "encoding/binary"
	pkgMath    = "math"
)

// kindInfo is everything the generator knows about one column kind. Every template
// reads this table; no kernel enumerates kinds by hand.
type kindInfo struct {
	goType   func() *jen.Statement // field type in row and pk structs
	array    string                // Arrow array type in package array
	builder  string                // Arrow builder type in package array
	keyFunc  string                // suffix of vec.AppendKey*/vec.DecodeKey*
	toKey    func(x jen.Code) jen.Code
	fromKey  func(x jen.Code) jen.Code
	compare  func(a, b jen.Code) jen.Code                                    // three-way compare of two Go values
	putValue func(row jen.Code, off func(int) jen.Code, x jen.Code) jen.Code // off(k) is the slot's offset plus k
	getValue func(slot func(off int) jen.Code) jen.Code                      // slot(off) is the value bytes from off on
	values   string                                                          // typed accessor of the raw value slice (e.g. Int64Values); "" if none
	ordered  bool                                                            // a plain < orders two values as the key does
	minMax   [2]string                                                       // for ordered kinds: math constants of the smallest and largest value
	varLen   bool
	byteKey  bool // key decode goes through DecodeKeyBytes
}

func le(fn string) *jen.Statement { return jen.Qual(pkgBinary, "LittleEndian").Dot(fn) }

func slot(row jen.Code, off jen.Code) *jen.Statement {
	return jen.Add(row).Index(off, jen.Empty())
}

func ident(x jen.Code) jen.Code { return x }

func cmpOrdered(a, b jen.Code) jen.Code { return jen.Qual("cmp", "Compare").Call(a, b) }

var kinds = map[schema.Kind]*kindInfo{
	schema.Boolean: {
		goType: jen.Bool, array: "Boolean", builder: "BooleanBuilder", keyFunc: "Bool",
		toKey: ident, fromKey: ident,
		compare: func(a, b jen.Code) jen.Code { return jen.Qual(pkgVec, "CompareBool").Call(a, b) },
		putValue: func(row jen.Code, off func(int) jen.Code, x jen.Code) jen.Code {
			return jen.If(x).Block(jen.Add(row).Index(off(0)).Op("=").Lit(1))
		},
		getValue: func(slot func(int) jen.Code) jen.Code { return jen.Add(slot(0)).Index(jen.Lit(0)).Op("!=").Lit(0) },
	},
	schema.Int16: withMinMax(intKind(jen.Int16, "Int16", "Int16", "Uint16", jen.Uint16, nil), "MinInt16", "MaxInt16"),
	schema.Int32: withMinMax(intKind(jen.Int32, "Int32", "Int32", "Uint32", jen.Uint32, nil), "MinInt32", "MaxInt32"),
	schema.Int64: withMinMax(intKind(jen.Int64, "Int64", "Int64", "Uint64", jen.Uint64, nil), "MinInt64", "MaxInt64"),
	schema.Date: withMinMax(intKind(func() *jen.Statement { return jen.Qual(pkgArrow, "Date32") }, "Date32", "Int32", "Uint32", jen.Uint32,
		func() *jen.Statement { return jen.Int32() }), "MinInt32", "MaxInt32"),
	schema.Timestamp: withMinMax(intKind(func() *jen.Statement { return jen.Qual(pkgArrow, "Timestamp") }, "Timestamp", "Int64", "Uint64", jen.Uint64,
		func() *jen.Statement { return jen.Int64() }), "MinInt64", "MaxInt64"),
	schema.Timestamptz: withMinMax(intKind(func() *jen.Statement { return jen.Qual(pkgArrow, "Timestamp") }, "Timestamp", "Int64", "Uint64", jen.Uint64,
		func() *jen.Statement { return jen.Int64() }), "MinInt64", "MaxInt64"),
	schema.Float32: floatKind(jen.Float32, "Float32", "Uint32"),
	schema.Float64: floatKind(jen.Float64, "Float64", "Uint64"),
	schema.Decimal: {
		goType: func() *jen.Statement { return jen.Qual(pkgDecimal, "Num") }, array: "Decimal128", builder: "Decimal128Builder", keyFunc: "Decimal",
		toKey: ident, fromKey: ident,
		compare: func(a, b jen.Code) jen.Code { return jen.Add(a).Dot("Cmp").Call(b) },
		putValue: func(row jen.Code, off func(int) jen.Code, x jen.Code) jen.Code {
			return jen.Block(
				le("PutUint64").Call(slot(row, off(0)), jen.Add(x).Dot("LowBits").Call()),
				le("PutUint64").Call(slot(row, off(8)), jen.Uint64().Call(jen.Add(x).Dot("HighBits").Call())),
			)
		},
		getValue: func(slot func(int) jen.Code) jen.Code {
			return jen.Qual(pkgDecimal, "New").Call(jen.Int64().Call(le("Uint64").Call(slot(8))), le("Uint64").Call(slot(0)))
		},
	},
	schema.Varchar: {
		goType: jen.String, array: "String", builder: "StringBuilder", keyFunc: "String",
		toKey: ident, fromKey: func(x jen.Code) jen.Code { return jen.String().Call(x) },
		compare: func(a, b jen.Code) jen.Code { return jen.Qual("strings", "Compare").Call(a, b) },
		varLen:  true, byteKey: true,
	},
	schema.Bytea: {
		goType: func() *jen.Statement { return jen.Index().Byte() }, array: "Binary", builder: "BinaryBuilder", keyFunc: "Bytes",
		toKey: ident, fromKey: ident,
		compare: func(a, b jen.Code) jen.Code { return jen.Qual("bytes", "Compare").Call(a, b) },
		varLen:  true, byteKey: true,
	},
}

func withMinMax(k *kindInfo, min, max string) *kindInfo {
	k.minMax = [2]string{min, max}
	return k
}

// intKind describes an integer-like kind; keyType is the integer type the key codec
// takes when it differs from the Go type (dates and timestamps).
func intKind(goType func() *jen.Statement, array, keyFunc, leFunc string, uns func() *jen.Statement, keyType func() *jen.Statement) *kindInfo {
	k := &kindInfo{goType: goType, array: array, builder: array + "Builder", keyFunc: keyFunc, compare: cmpOrdered,
		values: "Values", ordered: true}
	k.toKey, k.fromKey = ident, ident
	if keyType != nil {
		k.toKey = func(x jen.Code) jen.Code { return keyType().Call(x) }
		k.fromKey = func(x jen.Code) jen.Code { return goType().Call(x) }
	}
	k.putValue = func(row jen.Code, off func(int) jen.Code, x jen.Code) jen.Code {
		return le("Put"+leFunc).Call(slot(row, off(0)), uns().Call(x))
	}
	k.getValue = func(slot func(int) jen.Code) jen.Code {
		return goType().Call(le(leFunc).Call(slot(0)))
	}
	return k
}

func floatKind(goType func() *jen.Statement, name, leFunc string) *kindInfo {
	return &kindInfo{
		goType: goType, array: name, builder: name + "Builder", keyFunc: name,
		toKey: ident, fromKey: ident,
		compare: func(a, b jen.Code) jen.Code { return jen.Qual(pkgVec, "Compare"+name).Call(a, b) },
		putValue: func(row jen.Code, off func(int) jen.Code, x jen.Code) jen.Code {
			return le("Put"+leFunc).Call(slot(row, off(0)), jen.Qual(pkgMath, name+"bits").Call(x))
		},
		getValue: func(slot func(int) jen.Code) jen.Code {
			return jen.Qual(pkgMath, name+"frombits").Call(le(leFunc).Call(slot(0)))
		},
	}
}

func kindOf(t schema.Type) *kindInfo {
	k, ok := kinds[t.Kind]
	if !ok {
		panic(fmt.Sprintf("gen: no kind info for %s", t))
	}
	return k
}
