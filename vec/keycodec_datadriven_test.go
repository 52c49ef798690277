package vec_test

// TestKeyDataDriven runs the scripts under testdata/keys: memcomparable key encodings
// worked out once and pinned, since keys are persisted. Commands:
//
//	encode type=T order=O nulls=N
//	    a key of one column of type T (as schema.ParseType reads it), order asc or
//	    desc, NULLs first or last; for a key of several columns, lists:
//	    type=(T1,T2) order=(O1,O2) nulls=(N1,N2). Each input line is a key, its
//	    column values separated by spaces: NULL, true/false, an integer, a float
//	    (NaN, +Inf, -Inf, -0 spelled so), a decimal written with its column's scale,
//	    or a Go-quoted string. Prints each key in hex, one group per column, each line
//	    after the first prefixed by how its key compares with the previous line's
//	    (< or =). The lines must be in ascending key order, the keys must compare as
//	    the values do (vectest.ComparePK, written without the codec), the kernels'
//	    key must be the concatenation of the columns' encodings, and each key must
//	    decode to its values (-0 and NaN canonicalised); a violation is printed and
//	    fails the test.
//	decode type=T order=O nulls=N
//	    each input line is a key in hex (spaces ignored); prints its values, or the
//	    error that decoding it gives.
//
// With -rewrite the test refuses to change the hex of a key that the file already
// lists: the files pin the key format. It also checks that the single-column cases
// cover every type in both orders and both nulls orders, each with a NULL and at
// least two other values.

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/datadriven"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// TestMain reads -rewrite, which datadriven registers (it rewrites datadriven test
// files), for the package's other golden files and seed corpora.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("rewrite"); f != nil {
		*rewrite = f.Value.String() == "true"
	}
	os.Exit(m.Run())
}

// keyGroup is a single-column encode's type, order and nulls order.
type keyGroup struct{ typ, order, nulls string }

func TestKeyDataDriven(t *testing.T) {
	coverage := map[keyGroup][2]int{} // NULLs, other values
	t.Run("files", func(t *testing.T) {
		datadriven.Walk(t, "testdata/keys", func(t *testing.T, path string) {
			var violations []string
			t.Cleanup(func() {
				for _, v := range violations {
					t.Error(v)
				}
			})
			datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
				mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
				defer mem.AssertSize(t, 0)
				tab := keyTable(t, td)
				var out strings.Builder
				fail := func(format string, args ...any) {
					msg := fmt.Sprintf(format, args...)
					fmt.Fprintf(&out, "error: %s\n", msg)
					violations = append(violations, td.Pos+": "+msg)
				}
				switch td.Cmd {
				case "encode":
					encodeKeys(t, td, mem, tab, &out, fail)
					if len(tab.Columns) == 1 {
						k := tab.PK[0]
						g := keyGroup{tab.Columns[0].Type.String(), map[bool]string{false: "asc", true: "desc"}[k.Desc],
							map[bool]string{false: "last", true: "first"}[k.NullsFirst]}
						cov := coverage[g]
						for _, line := range strings.Split(td.Input, "\n") {
							if strings.TrimSpace(line) == "NULL" {
								cov[0]++
							} else {
								cov[1]++
							}
						}
						coverage[g] = cov
					}
				case "decode":
					decodeKeysCmd(t, td, mem, tab, &out)
				default:
					td.Fatalf(t, "unknown command %s", td.Cmd)
				}
				return out.String()
			})
		})
	})
	if t.Failed() {
		return
	}
	for _, k := range schema.Kinds {
		for _, order := range []string{"asc", "desc"} {
			for _, nulls := range []string{"first", "last"} {
				found := false
				for g, cov := range coverage {
					if strings.HasPrefix(g.typ, k.String()) && g.order == order && g.nulls == nulls {
						found = true
						if cov[0] < 1 || cov[1] < 2 {
							t.Errorf("testdata/keys: %s %s nulls %s has %d NULL and %d other values; want at least 1 and 2", g.typ, order, nulls, cov[0], cov[1])
						}
					}
				}
				if !found {
					t.Errorf("testdata/keys: no single-column case of %s %s nulls %s", k, order, nulls)
				}
			}
		}
	}
}

// keyTable is the table of a command's key: columns c0, c1, ... (nullable), every one
// a pk column, in order.
func keyTable(t *testing.T, td *datadriven.TestData) *schema.Table {
	var types, orders, nulls []string
	for _, a := range td.CmdArgs {
		switch a.Key {
		case "type":
			types = a.Vals
		case "order":
			orders = a.Vals
		case "nulls":
			nulls = a.Vals
		default:
			td.Fatalf(t, "unknown argument %s", a.Key)
		}
	}
	if len(types) == 0 || len(orders) != len(types) || len(nulls) != len(types) {
		td.Fatalf(t, "want type=, order= and nulls= of as many columns each")
	}
	tab := &schema.Table{Name: "key"}
	for i, s := range types {
		typ, err := schema.ParseType(s)
		if err != nil {
			td.Fatalf(t, "type %s: %v", s, err)
		}
		if (orders[i] != "asc" && orders[i] != "desc") || (nulls[i] != "first" && nulls[i] != "last") {
			td.Fatalf(t, "bad order %q or nulls %q", orders[i], nulls[i])
		}
		tab.Columns = append(tab.Columns, schema.Column{Name: fmt.Sprintf("c%d", i), Type: typ, Nullable: true})
		tab.PK = append(tab.PK, schema.KeyColumn{Column: i, Desc: orders[i] == "desc", NullsFirst: nulls[i] == "first"})
	}
	if err := tab.Validate(); err != nil {
		td.Fatalf(t, "%v", err)
	}
	return tab
}

// splitValues splits a line into values: Go-quoted strings or words.
func splitValues(line string) ([]string, error) {
	var vals []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		if line[0] == '"' {
			q, err := strconv.QuotedPrefix(line)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", line, err)
			}
			vals = append(vals, q)
			line = line[len(q):]
			continue
		}
		w, rest, _ := strings.Cut(line, " ")
		vals = append(vals, w)
		line = rest
	}
	return vals, nil
}

func encodeKeys(t *testing.T, td *datadriven.TestData, mem memory.Allocator, tab *schema.Table, out *strings.Builder, fail func(string, ...any)) {
	cols := tab.PKColumns()
	lines := strings.Split(td.Input, "\n")
	texts := make([]string, len(lines))
	bs := vectest.BuildersFor(mem, tab, cols)
	for i, line := range lines {
		vals, err := splitValues(line)
		if err == nil && len(vals) != len(cols) {
			err = fmt.Errorf("%d values for %d columns", len(vals), len(cols))
		}
		for c := 0; err == nil && c < len(vals); c++ {
			err = appendText(bs[c], tab.Columns[c].Type, vals[c])
		}
		if err != nil {
			vectest.ReleaseBuilders(bs)
			td.Fatalf(t, "%q: %v", line, err)
		}
		texts[i] = strings.Join(vals, " ")
	}
	rec := vectest.FinishRecord(tab, cols, bs, len(lines))
	defer rec.Release()
	c := vectest.ChunkOf(mem, rec, make([]vec.Op, len(lines)), nil)
	var keys vec.Bytes
	keys.Reset()
	g := vec.NewGeneric(tab)
	g.EncodeKeys(c, &keys)
	c.Release()

	pinned := map[string]string{} // value text -> hex, from the expected output
	for _, l := range strings.Split(td.Expected, "\n") {
		if text, hx, ok := strings.Cut(strings.TrimLeft(l, "<=> "), " => "); ok {
			pinned[text] = hx
		}
	}
	pk := vectest.PKArrays(tab, rec)
	for i := range lines {
		var whole []byte
		parts := make([]string, len(tab.PK))
		for j, k := range tab.PK {
			part := vec.AppendKeyColumn(nil, rec.Column(k.Column), i, tab.Columns[k.Column].Type, k.Desc, k.NullsFirst)
			parts[j] = hex.EncodeToString(part)
			whole = append(whole, part...)
		}
		hx := strings.Join(parts, " ")
		rel := " "
		if i > 0 {
			got := sign(bytes.Compare(keys.At(i-1), keys.At(i)))
			rel = map[int]string{-1: "<", 0: "=", 1: ">"}[got]
			if got > 0 {
				fail("%s is listed after %s, whose key is greater", texts[i], texts[i-1])
			}
			if want := vectest.ComparePK(tab, pk, i-1, pk, i); got != want {
				fail("the keys of %s and %s compare %d, the values %d", texts[i-1], texts[i], got, want)
			}
		}
		fmt.Fprintf(out, "%s %s => %s\n", rel, texts[i], hx)
		if !bytes.Equal(whole, keys.At(i)) {
			fail("the kernels encode %s as %x, its columns as %x", texts[i], keys.At(i), whole)
		}
		if old, ok := pinned[texts[i]]; ok && td.Rewrite && old != hx {
			fail("%s encodes as %s, the file says %s: the key format must never change", texts[i], hx, old)
		}
	}
	dec, err := decodeKeys(mem, g, &keys)
	if err != nil {
		fail("decode: %v", err)
		return
	}
	defer dec.Release()
	want := canonicalPK(mem, tab, rec)
	defer want.Release()
	if err := vectest.RecordsEqual(want, dec); err != nil {
		fail("decode(encode(key)) differs: %v", err)
	}
}

func decodeKeysCmd(t *testing.T, td *datadriven.TestData, mem memory.Allocator, tab *schema.Table, out *strings.Builder) {
	g := vec.NewGeneric(tab)
	for _, line := range strings.Split(td.Input, "\n") {
		key, err := hex.DecodeString(strings.ReplaceAll(line, " ", ""))
		if err != nil {
			td.Fatalf(t, "%q: %v", line, err)
		}
		var keys vec.Bytes
		keys.Reset()
		keys.Append(key)
		rec, err := decodeKeys(mem, g, &keys)
		if err != nil {
			fmt.Fprintf(out, "%s => error: %v\n", line, err)
			continue
		}
		vals := make([]string, rec.NumCols())
		for c := range vals {
			vals[c] = vectest.FormatValue(rec.Column(c), 0)
		}
		rec.Release()
		fmt.Fprintf(out, "%s => %s\n", line, strings.Join(vals, " "))
	}
}

// appendText appends a value written as in testdata/keys to b, a builder of typ's
// Arrow type.
func appendText(b array.Builder, typ schema.Type, s string) error {
	if s == "NULL" {
		b.AppendNull()
		return nil
	}
	var err error
	switch typ.Kind {
	case schema.Boolean:
		var v bool
		if v, err = strconv.ParseBool(s); err == nil {
			b.(*array.BooleanBuilder).Append(v)
		}
	case schema.Int16, schema.Int32, schema.Int64, schema.Date, schema.Timestamp, schema.Timestamptz:
		var v int64
		if v, err = strconv.ParseInt(s, 10, typ.Width()*8); err == nil {
			switch bb := b.(type) {
			case *array.Int16Builder:
				bb.Append(int16(v))
			case *array.Int32Builder:
				bb.Append(int32(v))
			case *array.Int64Builder:
				bb.Append(v)
			case *array.Date32Builder:
				bb.Append(arrow.Date32(v))
			case *array.TimestampBuilder:
				bb.Append(arrow.Timestamp(v))
			}
		}
	case schema.Float32, schema.Float64:
		var v float64
		switch s {
		case "NaN":
			v = math.NaN()
		case "-0":
			v = negZero
		default:
			v, err = strconv.ParseFloat(s, typ.Width()*8)
		}
		if err == nil {
			if bb, ok := b.(*array.Float32Builder); ok {
				bb.Append(float32(v))
			} else {
				b.(*array.Float64Builder).Append(v)
			}
		}
	case schema.Decimal:
		var v decimal128.Num
		if v, err = decimal128.FromString(s, typ.Precision, typ.Scale); err == nil {
			if v.ToString(typ.Scale) != s {
				return fmt.Errorf("decimal %q is not written as %q", s, v.ToString(typ.Scale))
			}
			b.(*array.Decimal128Builder).Append(v)
		}
	case schema.Varchar:
		var v string
		if v, err = strconv.Unquote(s); err == nil {
			b.(*array.StringBuilder).Append(v)
		}
	case schema.Bytea:
		var v string
		if v, err = strconv.Unquote(s); err == nil {
			b.(*array.BinaryBuilder).Append([]byte(v))
		}
	}
	return err
}
