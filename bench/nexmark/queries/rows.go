package queries

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Row is one result row in canonical Go values: int64 (every integer type), float64,
// string, bool, nil (NULL); timestamps as int64 microseconds since the Unix epoch (UTC);
// dates as a "YYYY-MM-DD" string.
//
// Canonical rows are what every engine's result is reduced to before comparison, so that
// Weir's MVs, PostgreSQL, DuckDB and the oracle of this package compare value by value.
type Row []any

// Canon reads the named columns of recs (in that order) into canonical rows. Errors name
// the missing column or the unsupported type.
//
// Integers of every width become int64 (a uint64 above math.MaxInt64 is an error),
// floats float64, string, large string and string view string, timestamps of any unit
// int64 microseconds (a time zone, if any, is ignored: Arrow stores UTC instants),
// date32 and date64 "YYYY-MM-DD", decimals float64. NULL is nil. Strings are copied:
// the rows stay valid after recs are released.
func Canon(recs []arrow.RecordBatch, cols []string) ([]Row, error) {
	n := 0
	for _, r := range recs {
		n += int(r.NumRows())
	}
	out := make([]Row, 0, n)
	vals := make([]any, 0, n*len(cols))
	for ri, r := range recs {
		rows := int(r.NumRows())
		if rows == 0 {
			continue
		}
		base := len(vals)
		vals = vals[:base+rows*len(cols)]
		for ci, name := range cols {
			idx := r.Schema().FieldIndices(name)
			if len(idx) == 0 {
				return nil, fmt.Errorf("queries: Canon: record %d has no column %q (schema %s)", ri, name, r.Schema())
			}
			col := r.Column(idx[0])
			for i := 0; i < rows; i++ {
				v, err := canonValue(col, i)
				if err != nil {
					return nil, fmt.Errorf("queries: Canon: column %q: %w", name, err)
				}
				vals[base+i*len(cols)+ci] = v
			}
		}
		for i := 0; i < rows; i++ {
			lo := base + i*len(cols)
			out = append(out, Row(vals[lo:lo+len(cols):lo+len(cols)]))
		}
	}
	return out, nil
}

// canonValue is the canonical value of row i of a.
func canonValue(a arrow.Array, i int) (any, error) {
	if a.IsNull(i) {
		return nil, nil
	}
	switch a := a.(type) {
	case *array.Int64:
		return a.Value(i), nil
	case *array.Int32:
		return int64(a.Value(i)), nil
	case *array.Int16:
		return int64(a.Value(i)), nil
	case *array.Int8:
		return int64(a.Value(i)), nil
	case *array.Uint64:
		v := a.Value(i)
		if v > math.MaxInt64 {
			return nil, fmt.Errorf("uint64 value %d overflows int64", v)
		}
		return int64(v), nil
	case *array.Uint32:
		return int64(a.Value(i)), nil
	case *array.Uint16:
		return int64(a.Value(i)), nil
	case *array.Uint8:
		return int64(a.Value(i)), nil
	case *array.Float64:
		return a.Value(i), nil
	case *array.Float32:
		return float64(a.Value(i)), nil
	case *array.String:
		return strings.Clone(a.Value(i)), nil
	case *array.LargeString:
		return strings.Clone(a.Value(i)), nil
	case *array.StringView:
		return strings.Clone(a.Value(i)), nil
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Timestamp:
		return toMicros(int64(a.Value(i)), a.DataType().(*arrow.TimestampType).Unit), nil
	case *array.Date32:
		return formatDay(int64(a.Value(i))), nil
	case *array.Date64:
		return formatDay(floorDiv(int64(a.Value(i)), 86_400_000)), nil
	case *array.Decimal128:
		return a.Value(i).ToFloat64(a.DataType().(*arrow.Decimal128Type).Scale), nil
	case *array.Decimal256:
		return a.Value(i).ToFloat64(a.DataType().(*arrow.Decimal256Type).Scale), nil
	}
	return nil, fmt.Errorf("unsupported type %s", a.DataType())
}

// toMicros converts a timestamp of unit u to microseconds, flooring nanoseconds.
func toMicros(v int64, u arrow.TimeUnit) int64 {
	switch u {
	case arrow.Second:
		return v * 1_000_000
	case arrow.Millisecond:
		return v * 1_000
	case arrow.Nanosecond:
		return floorDiv(v, 1_000)
	}
	return v
}

// floorDiv is a / b rounded towards negative infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// formatDay formats days since the Unix epoch as "YYYY-MM-DD".
func formatDay(days int64) string {
	return time.Unix(days*86_400, 0).UTC().Format(time.DateOnly)
}

// DiffResult is the outcome of Diff: the rows of want absent from got (Missing) and the
// rows of got absent from want (Extra), each counted with multiplicity.
type DiffResult struct {
	Missing, Extra   []Row // up to 10 examples each, in sorted order
	MissingN, ExtraN int
}

// maxExamples bounds DiffResult.Missing and DiffResult.Extra.
const maxExamples = 10

// OK reports whether the two multisets were equal.
func (d DiffResult) OK() bool { return d.MissingN == 0 && d.ExtraN == 0 }

// Mismatches is the number of rows unmatched on either side.
func (d DiffResult) Mismatches() int { return d.MissingN + d.ExtraN }

// String is a short human summary with examples.
func (d DiffResult) String() string {
	if d.OK() {
		return "equal"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d missing, %d extra", d.MissingN, d.ExtraN)
	for _, r := range d.Missing {
		fmt.Fprintf(&b, "\n  missing %s", formatRow(r))
	}
	if d.MissingN > len(d.Missing) {
		fmt.Fprintf(&b, "\n  ... %d more missing", d.MissingN-len(d.Missing))
	}
	for _, r := range d.Extra {
		fmt.Fprintf(&b, "\n  extra   %s", formatRow(r))
	}
	if d.ExtraN > len(d.Extra) {
		fmt.Fprintf(&b, "\n  ... %d more extra", d.ExtraN-len(d.Extra))
	}
	return b.String()
}

// formatRow prints a row with strings quoted and NULL as NULL.
func formatRow(r Row) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, v := range r {
		if i > 0 {
			b.WriteString(", ")
		}
		switch v := v.(type) {
		case nil:
			b.WriteString("NULL")
		case string:
			fmt.Fprintf(&b, "%q", v)
		default:
			fmt.Fprint(&b, v)
		}
	}
	b.WriteByte(')')
	return b.String()
}

// Diff compares two multisets of rows: float64 values equal within relTol relative
// (|a-b| <= relTol*max(|a|,|b|), and exactly for 0), everything else exactly. It sorts
// copies (deterministic total order over canonical values), so row order does not
// matter; want and got are not modified.
//
// The order compares the non-float columns first and the float columns last, so rows
// that differ only by a tolerated float error sit next to each other and a merge walk
// pairs them. (Tolerance is not transitive: with many rows equal but for floats spread
// wider than relTol, pairing is greedy in sorted order, which is exact enough for
// results whose float columns are functions of the other columns.)
func Diff(want, got []Row, relTol float64) DiffResult {
	w := slices.Clone(want)
	g := slices.Clone(got)
	slices.SortFunc(w, compareRows)
	slices.SortFunc(g, compareRows)
	var d DiffResult
	missing := func(r Row) {
		d.MissingN++
		if len(d.Missing) < maxExamples {
			d.Missing = append(d.Missing, r)
		}
	}
	extra := func(r Row) {
		d.ExtraN++
		if len(d.Extra) < maxExamples {
			d.Extra = append(d.Extra, r)
		}
	}
	i, j := 0, 0
	for i < len(w) && j < len(g) {
		if rowsEqual(w[i], g[j], relTol) {
			i++
			j++
			continue
		}
		if compareRows(w[i], g[j]) < 0 {
			missing(w[i])
			i++
		} else {
			extra(g[j])
			j++
		}
	}
	for ; i < len(w); i++ {
		missing(w[i])
	}
	for ; j < len(g); j++ {
		extra(g[j])
	}
	return d
}

// rank orders values of different canonical types: NULL first.
func rank(v any) int {
	switch v.(type) {
	case nil:
		return 0
	case bool:
		return 1
	case int64:
		return 2
	case float64:
		return 3
	case string:
		return 4
	}
	return 5
}

// compareValues is a total order over canonical values. NaN sorts after every other
// float and equals itself. Values of a non-canonical type compare by their printed
// form.
func compareValues(a, b any) int {
	if ra, rb := rank(a), rank(b); ra != rb {
		return cmp.Compare(ra, rb)
	}
	switch a := a.(type) {
	case nil:
		return 0
	case bool:
		b := b.(bool)
		switch {
		case a == b:
			return 0
		case !a:
			return -1
		}
		return 1
	case int64:
		return cmp.Compare(a, b.(int64))
	case float64:
		return cmp.Compare(a, b.(float64))
	case string:
		return strings.Compare(a, b.(string))
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

// compareRows orders rows by their non-float columns, then their float columns, then
// their length.
func compareRows(a, b Row) int {
	n := min(len(a), len(b))
	for pass := 0; pass < 2; pass++ {
		for k := 0; k < n; k++ {
			_, fa := a[k].(float64)
			_, fb := b[k].(float64)
			if (pass == 0) == (fa && fb) {
				continue
			}
			if c := compareValues(a[k], b[k]); c != 0 {
				return c
			}
		}
	}
	return cmp.Compare(len(a), len(b))
}

// rowsEqual compares two rows with float tolerance relTol.
func rowsEqual(a, b Row, relTol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		fa, oka := a[k].(float64)
		fb, okb := b[k].(float64)
		if oka && okb {
			if !floatsEqual(fa, fb, relTol) {
				return false
			}
			continue
		}
		if compareValues(a[k], b[k]) != 0 {
			return false
		}
	}
	return true
}

// floatsEqual is |a-b| <= relTol*max(|a|,|b|); NaN equals NaN, infinities themselves.
func floatsEqual(a, b, relTol float64) bool {
	if a == b || (math.IsNaN(a) && math.IsNaN(b)) {
		return true
	}
	if math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return false
	}
	return math.Abs(a-b) <= relTol*max(math.Abs(a), math.Abs(b))
}
