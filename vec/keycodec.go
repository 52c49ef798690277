package vec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// Key column markers.
const (
	KeyNullFirst byte = 0x00
	KeyValue     byte = 0x01
	KeyNullLast  byte = 0x02
)

// ErrKeyTruncated is returned when a key ends inside a column.
var ErrKeyTruncated = errors.New("key truncated")

// errNonCanonicalFloat rejects float encodings the encoder never produces (-0, NaNs
// other than the canonical one), so that every key that decodes re-encodes to itself
// and comparing encoded keys agrees with comparing decoded values.
var errNonCanonicalFloat = errors.New("non-canonical float key (-0 or a non-canonical NaN)")

// The bits of the canonical NaNs that AppendKeyFloat64/32 write.
var (
	canonicalNaN64 uint64 = 0x7FF8000000000001 // the bits keys pin for every float64 NaN
	canonicalNaN32 uint32 = 0x7FC00000         // the bits keys pin for every float32 NaN
)

// KeyNullMarker is the marker of a NULL in a column with the given nulls order.
func KeyNullMarker(nullsFirst bool) byte {
	if nullsFirst {
		return KeyNullFirst
	}
	return KeyNullLast
}

// AppendKeyNull appends a NULL column.
func AppendKeyNull(dst []byte, nullsFirst bool) []byte {
	return append(dst, KeyNullMarker(nullsFirst))
}

func descMask64(desc bool) uint64 {
	if desc {
		return math.MaxUint64
	}
	return 0
}

// AppendKeyBool appends a non-null boolean (marker included).
func AppendKeyBool(dst []byte, v bool, desc bool) []byte {
	var b byte
	if v {
		b = 1
	}
	if desc {
		b = ^b
	}
	return append(dst, KeyValue, b)
}

// AppendKeyInt16 appends a non-null int16 (marker included).
func AppendKeyInt16(dst []byte, v int16, desc bool) []byte {
	u := uint16(v) ^ 0x8000 ^ uint16(descMask64(desc))
	return binary.BigEndian.AppendUint16(append(dst, KeyValue), u)
}

// AppendKeyInt32 appends a non-null int32 or date (marker included).
func AppendKeyInt32(dst []byte, v int32, desc bool) []byte {
	u := uint32(v) ^ 0x80000000 ^ uint32(descMask64(desc))
	return binary.BigEndian.AppendUint32(append(dst, KeyValue), u)
}

// AppendKeyInt64 appends a non-null int64 or timestamp (marker included).
func AppendKeyInt64(dst []byte, v int64, desc bool) []byte {
	u := uint64(v) ^ (1 << 63) ^ descMask64(desc)
	return binary.BigEndian.AppendUint64(append(dst, KeyValue), u)
}

// CanonicalFloat64 maps -0 to +0 and every NaN to the canonical quiet NaN.
func CanonicalFloat64(v float64) float64 {
	if v != v {
		return math.Float64frombits(canonicalNaN64)
	}
	if v == 0 {
		return 0
	}
	return v
}

// CanonicalFloat32 maps -0 to +0 and every NaN to the canonical quiet NaN.
func CanonicalFloat32(v float32) float32 {
	if v != v {
		return math.Float32frombits(canonicalNaN32)
	}
	if v == 0 {
		return 0
	}
	return v
}

// AppendKeyFloat64 appends a non-null float64 (marker included).
func AppendKeyFloat64(dst []byte, v float64, desc bool) []byte {
	u := math.Float64bits(CanonicalFloat64(v))
	if u&(1<<63) != 0 {
		u = ^u
	} else {
		u ^= 1 << 63
	}
	return binary.BigEndian.AppendUint64(append(dst, KeyValue), u^descMask64(desc))
}

// AppendKeyFloat32 appends a non-null float32 (marker included).
func AppendKeyFloat32(dst []byte, v float32, desc bool) []byte {
	u := math.Float32bits(CanonicalFloat32(v))
	if u&(1<<31) != 0 {
		u = ^u
	} else {
		u ^= 1 << 31
	}
	return binary.BigEndian.AppendUint32(append(dst, KeyValue), u^uint32(descMask64(desc)))
}

// AppendKeyDecimal appends a non-null decimal's unscaled 128-bit value (marker included).
func AppendKeyDecimal(dst []byte, v decimal128.Num, desc bool) []byte {
	m := descMask64(desc)
	dst = binary.BigEndian.AppendUint64(append(dst, KeyValue), uint64(v.HighBits())^(1<<63)^m)
	return binary.BigEndian.AppendUint64(dst, v.LowBits()^m)
}

// AppendKeyBytes appends a non-null varchar or bytea in escaped groups (marker included).
func AppendKeyBytes(dst []byte, v []byte, desc bool) []byte { return appendKeyGroups(dst, v, desc) }

// AppendKeyString is AppendKeyBytes for a string, without converting it.
func AppendKeyString(dst []byte, v string, desc bool) []byte { return appendKeyGroups(dst, v, desc) }

// appendKeyGroups writes the marker, then v in groups of 8 bytes each followed by 0xFF,
// the last group zero-padded and followed by 0xFF minus its padding; desc inverts every
// byte after the marker. It is instantiated once for string and once for []byte, so
// neither copies nor converts v.
func appendKeyGroups[T ~string | ~[]byte](dst []byte, v T, desc bool) []byte {
	dst = append(dst, KeyValue)
	start := len(dst)
	for {
		if len(v) >= 8 {
			dst = append(dst, v[:8]...)
			dst = append(dst, 0xFF)
			v = v[8:]
			continue
		}
		pad := 8 - len(v)
		dst = append(dst, v...)
		for i := 0; i < pad; i++ {
			dst = append(dst, 0)
		}
		dst = append(dst, byte(0xFF-pad))
		break
	}
	if desc {
		for i := start; i < len(dst); i++ {
			dst[i] = ^dst[i]
		}
	}
	return dst
}

// DecodeKeyMarker reads a column's marker. It returns null=true for a NULL (which must
// use the marker of the column's nulls order) and the rest of the key.
func DecodeKeyMarker(src []byte, nullsFirst bool) (null bool, rest []byte, err error) {
	if len(src) == 0 {
		return false, nil, ErrKeyTruncated
	}
	switch src[0] {
	case KeyValue:
		return false, src[1:], nil
	case KeyNullMarker(nullsFirst):
		return true, src[1:], nil
	}
	return false, nil, fmt.Errorf("bad key marker 0x%02x", src[0])
}

// DecodeKeyBool decodes a boolean value (after its marker).
func DecodeKeyBool(src []byte, desc bool) (bool, []byte, error) {
	if len(src) < 1 {
		return false, nil, ErrKeyTruncated
	}
	b := src[0]
	if desc {
		b = ^b
	}
	if b > 1 {
		return false, nil, fmt.Errorf("bad boolean key byte 0x%02x", src[0])
	}
	return b == 1, src[1:], nil
}

// DecodeKeyInt16 decodes an int16 value (after its marker).
func DecodeKeyInt16(src []byte, desc bool) (int16, []byte, error) {
	if len(src) < 2 {
		return 0, nil, ErrKeyTruncated
	}
	u := binary.BigEndian.Uint16(src) ^ uint16(descMask64(desc)) ^ 0x8000
	return int16(u), src[2:], nil
}

// DecodeKeyInt32 decodes an int32 or date value (after its marker).
func DecodeKeyInt32(src []byte, desc bool) (int32, []byte, error) {
	if len(src) < 4 {
		return 0, nil, ErrKeyTruncated
	}
	u := binary.BigEndian.Uint32(src) ^ uint32(descMask64(desc)) ^ 0x80000000
	return int32(u), src[4:], nil
}

// DecodeKeyInt64 decodes an int64 or timestamp value (after its marker).
func DecodeKeyInt64(src []byte, desc bool) (int64, []byte, error) {
	if len(src) < 8 {
		return 0, nil, ErrKeyTruncated
	}
	u := binary.BigEndian.Uint64(src) ^ descMask64(desc) ^ (1 << 63)
	return int64(u), src[8:], nil
}

// DecodeKeyFloat64 decodes a float64 value (after its marker).
func DecodeKeyFloat64(src []byte, desc bool) (float64, []byte, error) {
	if len(src) < 8 {
		return 0, nil, ErrKeyTruncated
	}
	u := binary.BigEndian.Uint64(src) ^ descMask64(desc)
	if u&(1<<63) != 0 {
		u ^= 1 << 63
	} else {
		u = ^u
	}
	if u == 1<<63 || (u != canonicalNaN64 && u&0x7FF0000000000000 == 0x7FF0000000000000 && u&0xFFFFFFFFFFFFF != 0) {
		return 0, nil, errNonCanonicalFloat
	}
	return math.Float64frombits(u), src[8:], nil
}

// DecodeKeyFloat32 decodes a float32 value (after its marker).
func DecodeKeyFloat32(src []byte, desc bool) (float32, []byte, error) {
	if len(src) < 4 {
		return 0, nil, ErrKeyTruncated
	}
	u := binary.BigEndian.Uint32(src) ^ uint32(descMask64(desc))
	if u&(1<<31) != 0 {
		u ^= 1 << 31
	} else {
		u = ^u
	}
	if u == 1<<31 || (u != canonicalNaN32 && u&0x7F800000 == 0x7F800000 && u&0x7FFFFF != 0) {
		return 0, nil, errNonCanonicalFloat
	}
	return math.Float32frombits(u), src[4:], nil
}

// DecodeKeyDecimal decodes a decimal value (after its marker).
func DecodeKeyDecimal(src []byte, desc bool) (decimal128.Num, []byte, error) {
	if len(src) < 16 {
		return decimal128.Num{}, nil, ErrKeyTruncated
	}
	m := descMask64(desc)
	hi := binary.BigEndian.Uint64(src) ^ m ^ (1 << 63)
	lo := binary.BigEndian.Uint64(src[8:]) ^ m
	return decimal128.New(int64(hi), lo), src[16:], nil
}

// DecodeKeyBytes decodes a varchar or bytea value (after its marker), appending it to
// dst (which may be nil) and returning the result and the rest of the key.
func DecodeKeyBytes(dst, src []byte, desc bool) ([]byte, []byte, error) {
	var inv byte
	if desc {
		inv = 0xFF
	}
	for {
		if len(src) < 9 {
			return nil, nil, ErrKeyTruncated
		}
		marker := src[8] ^ inv
		if marker == 0xFF {
			for _, b := range src[:8] {
				dst = append(dst, b^inv)
			}
			src = src[9:]
			continue
		}
		if marker < 0xF7 {
			return nil, nil, fmt.Errorf("bad string key group marker 0x%02x", src[8])
		}
		pad := int(0xFF - marker)
		for _, b := range src[:8-pad] {
			dst = append(dst, b^inv)
		}
		for _, b := range src[8-pad : 8] {
			if b^inv != 0 {
				return nil, nil, fmt.Errorf("bad string key padding")
			}
		}
		return dst, src[9:], nil
	}
}

// CompareFloat64 orders floats as their keys do: NaN above +Inf and equal to NaN, -0
// equal to +0.
func CompareFloat64(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	case a == b:
		return 0
	}
	an, bn := a != a, b != b
	switch {
	case an && bn:
		return 0
	case an:
		return 1
	}
	return -1
}

// CompareFloat32 is CompareFloat64 for float32.
func CompareFloat32(a, b float32) int { return CompareFloat64(float64(a), float64(b)) }

// CompareBool orders false before true.
func CompareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
