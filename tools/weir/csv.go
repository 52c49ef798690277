package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// csvWriter writes records as CSV in PostgreSQL's convention (see the csv format of
// export's help): an unquoted empty field is NULL and every non-NULL value is a
// non-empty field (the empty string is ""), so that COPY ... (FORMAT csv) reads back
// the values written. (Arrow's CSV writer writes through encoding/csv, which never
// quotes an empty field: NULL and "" come out the same.)
//
// Each record is formatted a column at a time, by a loop over the column's typed
// array into the column's buffer (no value boxed), then written row by row.
type csvWriter struct {
	w    *bufio.Writer
	sc   *arrow.Schema
	cols []csvCells
}

// csvCells are the fields of one column of a record, back to back in buf: field i
// ends at ends[i].
type csvCells struct {
	buf  []byte
	ends []int
}

// newCSVWriter checks that every column of sc has a CSV form and writes the header.
func newCSVWriter(w io.Writer, sc *arrow.Schema) (*csvWriter, error) {
	for _, f := range sc.Fields() {
		switch t := f.Type.(type) {
		case *arrow.BooleanType, *arrow.Int16Type, *arrow.Int32Type, *arrow.Int64Type, *arrow.Float32Type,
			*arrow.Float64Type, *arrow.Decimal128Type, *arrow.StringType, *arrow.BinaryType, *arrow.Date32Type:
		case *arrow.TimestampType:
			if _, err := t.GetToTimeFunc(); err != nil {
				return nil, fmt.Errorf("column %s: %w", f.Name, err)
			}
		default:
			return nil, fmt.Errorf("column %s: type %s has no CSV form here", f.Name, f.Type)
		}
	}
	cw := &csvWriter{w: bufio.NewWriterSize(w, 64<<10), sc: sc, cols: make([]csvCells, sc.NumFields())}
	var line []byte
	for i, f := range sc.Fields() {
		if i > 0 {
			line = append(line, ',')
		}
		line = appendCSVString(line, f.Name)
	}
	line = append(line, '\n')
	if _, err := cw.w.Write(line); err != nil {
		return nil, err
	}
	return cw, nil
}

// write writes the rows of rec.
func (cw *csvWriter) write(rec arrow.RecordBatch) error {
	if !rec.Schema().Equal(cw.sc) {
		return fmt.Errorf("record of schema %s, want %s", rec.Schema(), cw.sc)
	}
	for j := range cw.cols {
		if err := cw.cols[j].format(rec.Column(j)); err != nil {
			return fmt.Errorf("column %s: %w", cw.sc.Field(j).Name, err)
		}
	}
	last := len(cw.cols) - 1
	for i := range int(rec.NumRows()) {
		for j := range cw.cols {
			c := &cw.cols[j]
			start := 0
			if i > 0 {
				start = c.ends[i-1]
			}
			if _, err := cw.w.Write(c.buf[start:c.ends[i]]); err != nil {
				return err
			}
			sep := byte(',')
			if j == last {
				sep = '\n'
			}
			if err := cw.w.WriteByte(sep); err != nil {
				return err
			}
		}
	}
	return nil
}

func (cw *csvWriter) flush() error { return cw.w.Flush() }

// fill sets c to the fields of the n rows of a column: append(dst, i) appends the
// field of valid row i; a NULL row's field is empty.
func (c *csvCells) fill(a arrow.Array, appendField func(dst []byte, i int) []byte) {
	c.buf, c.ends = c.buf[:0], c.ends[:0]
	nulls := a.NullN() > 0
	for i := range a.Len() {
		if !nulls || a.IsValid(i) {
			c.buf = appendField(c.buf, i)
		}
		c.ends = append(c.ends, len(c.buf))
	}
}

// format sets c to the fields of column a.
func (c *csvCells) format(a arrow.Array) error {
	switch a := a.(type) {
	case *array.Boolean:
		c.fill(a, func(dst []byte, i int) []byte { return strconv.AppendBool(dst, a.Value(i)) })
	case *array.Int16:
		c.fill(a, func(dst []byte, i int) []byte { return strconv.AppendInt(dst, int64(a.Value(i)), 10) })
	case *array.Int32:
		c.fill(a, func(dst []byte, i int) []byte { return strconv.AppendInt(dst, int64(a.Value(i)), 10) })
	case *array.Int64:
		c.fill(a, func(dst []byte, i int) []byte { return strconv.AppendInt(dst, a.Value(i), 10) })
	case *array.Float32:
		c.fill(a, func(dst []byte, i int) []byte { return appendCSVFloat(dst, float64(a.Value(i)), 32) })
	case *array.Float64:
		c.fill(a, func(dst []byte, i int) []byte { return appendCSVFloat(dst, a.Value(i), 64) })
	case *array.Decimal128:
		scale := a.DataType().(*arrow.Decimal128Type).Scale
		c.fill(a, func(dst []byte, i int) []byte { return appendDecimal(dst, a.Value(i), scale) })
	case *array.String:
		c.fill(a, func(dst []byte, i int) []byte { return appendCSVString(dst, a.Value(i)) })
	case *array.Binary:
		c.fill(a, func(dst []byte, i int) []byte {
			dst = append(dst, '\\', 'x') // never empty: the empty bytea is \x
			return hex.AppendEncode(dst, a.Value(i))
		})
	case *array.Date32:
		c.fill(a, func(dst []byte, i int) []byte { return a.Value(i).ToTime().AppendFormat(dst, "2006-01-02") })
	case *array.Timestamp:
		t := a.DataType().(*arrow.TimestampType)
		toTime, err := t.GetToTimeFunc()
		if err != nil {
			return err
		}
		layout := "2006-01-02 15:04:05.999999999"
		if t.TimeZone != "" {
			layout += "Z07:00"
		}
		c.fill(a, func(dst []byte, i int) []byte {
			v := toTime(a.Value(i))
			if y := v.Year(); y < 0 || y > 9999 { // as Arrow's CSV writer: the raw ticks
				return strconv.AppendInt(dst, int64(a.Value(i)), 10)
			}
			return v.AppendFormat(dst, layout)
		})
	default:
		return fmt.Errorf("arrow array %T has no CSV form here", a)
	}
	return nil
}

// appendCSVString appends s as a CSV field, quoted when it is empty (an unquoted
// empty field is NULL), holds a comma, a double quote, CR or LF, starts with a space
// or a tab (which some readers trim), or is \. (PostgreSQL's end-of-data marker).
func appendCSVString(dst []byte, s string) []byte {
	quote := s == "" || s == `\.` || s[0] == ' ' || s[0] == '\t'
	for i := 0; i < len(s) && !quote; i++ {
		switch s[i] {
		case ',', '"', '\n', '\r':
			quote = true
		}
	}
	if !quote {
		return append(dst, s...)
	}
	dst = append(dst, '"')
	for i := range len(s) {
		if s[i] == '"' {
			dst = append(dst, '"')
		}
		dst = append(dst, s[i])
	}
	return append(dst, '"')
}

// appendCSVFloat appends the shortest decimal form of v that parses back to the same
// float of bitSize bits, with PostgreSQL's spelling of NaN and the infinities.
func appendCSVFloat(dst []byte, v float64, bitSize int) []byte {
	switch {
	case math.IsNaN(v):
		return append(dst, "NaN"...)
	case math.IsInf(v, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(v, -1):
		return append(dst, "-Infinity"...)
	}
	return strconv.AppendFloat(dst, v, 'g', -1, bitSize)
}

// appendDecimal appends v, a decimal of scale digits after the point (0..38), exactly:
// 1234 of scale 2 is 12.34, 5 is 0.05, -5 of scale 0 is -5.
func appendDecimal(dst []byte, v decimal128.Num, scale int32) []byte {
	if v.Sign() < 0 {
		dst = append(dst, '-')
		v = v.Negate()
	}
	var tmp [40]byte
	var digits []byte
	if v.HighBits() == 0 {
		digits = strconv.AppendUint(tmp[:0], v.LowBits(), 10)
	} else {
		digits = v.BigInt().Append(tmp[:0], 10)
	}
	places := int(scale)
	if places <= 0 {
		return append(dst, digits...)
	}
	if len(digits) <= places {
		dst = append(dst, '0', '.')
		for range places - len(digits) {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	at := len(digits) - places
	dst = append(dst, digits[:at]...)
	dst = append(dst, '.')
	return append(dst, digits[at:]...)
}
