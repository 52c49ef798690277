// Package peers runs the Nexmark queries on other SQL engines, PostgreSQL and DuckDB, over
// the same rows Weir holds, so that their results can be checked against the oracle of
// package queries and their build times set beside Weir's backfills.
//
// Each peer loads the three tables (person, auction, bid) in bulk, then creates each
// query's result the way that engine materialises a query (a materialized view in
// PostgreSQL, CREATE TABLE AS in DuckDB), timing only that statement, and reads the
// result back as canonical rows (queries.Row).
package peers

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/seed04fbb902/weir/bench/nexmark/queries"
)

// Peer is a SQL engine evaluating the Nexmark queries over the same rows.
type Peer interface {
	// Name is the engine's name: "postgres" or "duckdb".
	Name() string
	// Load (re)creates the three tables, bulk-loads them and refreshes the planner's
	// statistics.
	Load(ctx context.Context, t queries.Tables) error
	// Run creates the query's result (PostgreSQL: CREATE MATERIALIZED VIEW <name>_mv AS
	// <query>; DuckDB: CREATE TABLE <name>_ctas AS <query>), timing only that
	// statement, then reads it back as canonical rows in q.Columns order and drops it.
	Run(ctx context.Context, q queries.Query) (time.Duration, []queries.Row, error)
	// Close releases the connection (and, for DuckDB, the database).
	Close() error
}

// column is one column of a table: its name and SQL type (spelt so that both PostgreSQL
// and DuckDB accept it).
type column struct {
	name, sqlType string
}

// table is one of the Nexmark tables as the peers create it.
type table struct {
	name string
	cols []column
	pk   []string
}

// nexmarkTables are the tables of bench/nexmark/tables/nexmark.yaml. Timestamps are
// timestamp without time zone, holding UTC wall-clock times.
var nexmarkTables = []table{
	{
		name: "person",
		cols: []column{
			{"id", "bigint"}, {"name", "varchar"}, {"email_address", "varchar"},
			{"credit_card", "varchar"}, {"city", "varchar"}, {"state", "varchar"},
			{"date_time", "timestamp"}, {"extra", "varchar"},
		},
		pk: []string{"id"},
	},
	{
		name: "auction",
		cols: []column{
			{"id", "bigint"}, {"item_name", "varchar"}, {"description", "varchar"},
			{"initial_bid", "bigint"}, {"reserve", "bigint"}, {"date_time", "timestamp"},
			{"expires", "timestamp"}, {"seller", "bigint"}, {"category", "bigint"},
			{"extra", "varchar"},
		},
		pk: []string{"id"},
	},
	{
		name: "bid",
		cols: []column{
			{"auction", "bigint"}, {"bidder", "bigint"}, {"price", "bigint"},
			{"channel", "varchar"}, {"url", "varchar"}, {"date_time", "timestamp"},
			{"extra", "varchar"},
		},
		pk: []string{"auction", "bidder", "date_time"},
	},
}

// records is the table's records in t.
func (tb table) records(t queries.Tables) []arrow.RecordBatch {
	switch tb.name {
	case "person":
		return t.Person
	case "auction":
		return t.Auction
	case "bid":
		return t.Bid
	}
	panic("peers: unknown table " + tb.name)
}

// colNames is the table's column names in order.
func (tb table) colNames() []string {
	names := make([]string, len(tb.cols))
	for i, c := range tb.cols {
		names[i] = c.name
	}
	return names
}

// createSQL is the table's CREATE TABLE statement, with its primary key when withPK.
func (tb table) createSQL(withPK bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (", tb.name)
	for i, c := range tb.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s NOT NULL", c.name, c.sqlType)
	}
	if withPK {
		fmt.Fprintf(&b, ", PRIMARY KEY (%s)", strings.Join(tb.pk, ", "))
	}
	b.WriteString(")")
	return b.String()
}

// rowReader walks the rows of a table's records, converting the values of its columns (in
// the table's order) to the Go values the drivers bind: int64, string, time.Time in UTC,
// float64, bool, nil.
type rowReader struct {
	tb   table
	recs []arrow.RecordBatch
	ri   int   // current record
	row  int   // current row in it; -1 before the first
	idx  []int // column positions in the current record
	vals []any
	err  error
}

func newRowReader(tb table, recs []arrow.RecordBatch) *rowReader {
	return &rowReader{tb: tb, recs: recs, ri: -1, vals: make([]any, len(tb.cols))}
}

// Next advances to the next row, reporting false at the end or on an error (Err).
func (r *rowReader) Next() bool {
	if r.err != nil {
		return false
	}
	for r.ri < 0 || r.row+1 >= int(r.recs[r.ri].NumRows()) {
		r.ri++
		if r.ri >= len(r.recs) {
			return false
		}
		r.row = -1
		if r.idx, r.err = columnIndices(r.tb, r.recs[r.ri]); r.err != nil {
			return false
		}
	}
	r.row++
	rec := r.recs[r.ri]
	for i, ci := range r.idx {
		v, err := goValue(rec.Column(ci), r.row)
		if err != nil {
			r.err = fmt.Errorf("peers: %s.%s: %w", r.tb.name, r.tb.cols[i].name, err)
			return false
		}
		r.vals[i] = v
	}
	return true
}

// Values is the current row's values; the slice is reused by Next.
func (r *rowReader) Values() ([]any, error) { return r.vals, nil }

// Err is the error that stopped Next, if any.
func (r *rowReader) Err() error { return r.err }

// columnIndices finds the table's columns in rec by name.
func columnIndices(tb table, rec arrow.RecordBatch) ([]int, error) {
	idx := make([]int, len(tb.cols))
	for i, c := range tb.cols {
		f := rec.Schema().FieldIndices(c.name)
		if len(f) == 0 {
			return nil, fmt.Errorf("peers: %s record has no column %q (schema %s)", tb.name, c.name, rec.Schema())
		}
		idx[i] = f[0]
	}
	return idx, nil
}

// goValue is row i of a as a driver value. Timestamps (timestamp without time zone in
// Weir) become time.Time in UTC, so that both drivers store their UTC wall-clock time.
func goValue(a arrow.Array, i int) (any, error) {
	if a.IsNull(i) {
		return nil, nil
	}
	switch a := a.(type) {
	case *array.Int64:
		return a.Value(i), nil
	case *array.Int32:
		return int64(a.Value(i)), nil
	case *array.String:
		return a.Value(i), nil
	case *array.LargeString:
		return a.Value(i), nil
	case *array.StringView:
		return a.Value(i), nil
	case *array.Float64:
		return a.Value(i), nil
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Timestamp:
		unit := a.DataType().(*arrow.TimestampType).Unit
		return a.Value(i).ToTime(unit).UTC(), nil
	}
	return nil, fmt.Errorf("unsupported Arrow type %s", a.DataType())
}

// canonTime is a timestamp read back from a peer as canonical microseconds. Both peers
// return timestamp without time zone as a time.Time whose wall clock is the stored value
// in UTC.
func canonTime(t time.Time) int64 { return t.UTC().UnixMicro() }

// canonDate is a date read back from a peer as "YYYY-MM-DD".
func canonDate(t time.Time) string { return t.Format(time.DateOnly) }

// canonValue converts a value a peer's driver returned to canonical form, for the
// types both drivers return: nil, integers (as int64), floats (as float64), strings,
// bools, times (a date when date is set, else a timestamp) and big integers. ok is
// false for any other type: the peer converts its own (its decimals).
func canonValue(v any, date bool) (c any, ok bool, err error) {
	switch v := v.(type) {
	case nil:
		return nil, true, nil
	case int64:
		return v, true, nil
	case int32:
		return int64(v), true, nil
	case int16:
		return int64(v), true, nil
	case int8:
		return int64(v), true, nil
	case uint64:
		if v > math.MaxInt64 {
			return nil, true, fmt.Errorf("%d overflows int64", v)
		}
		return int64(v), true, nil
	case uint32:
		return int64(v), true, nil
	case uint16:
		return int64(v), true, nil
	case uint8:
		return int64(v), true, nil
	case float64:
		return v, true, nil
	case float32:
		return float64(v), true, nil
	case string:
		return v, true, nil
	case bool:
		return v, true, nil
	case time.Time:
		if date {
			return canonDate(v), true, nil
		}
		return canonTime(v), true, nil
	case *big.Int: // e.g. DuckDB's HUGEINT, the sum of bigints
		if !v.IsInt64() {
			return nil, true, fmt.Errorf("integer %s overflows int64", v)
		}
		return v.Int64(), true, nil
	}
	return nil, false, nil
}

// canonRow converts a row a peer read to canonical form, value i by canon(i, v); an
// error names the column, name(i).
func canonRow(vals []any, canon func(i int, v any) (any, error), name func(i int) string) (queries.Row, error) {
	row := make(queries.Row, len(vals))
	for i, v := range vals {
		c, err := canon(i, v)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", name(i), err)
		}
		row[i] = c
	}
	return row, nil
}
