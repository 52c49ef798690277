package queries

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
)

// row is a hand-made table row by column name; absent columns are zero ("" for
// strings, the epoch for timestamps). nil is NULL, timestamps are µs.
type row map[string]any

// record builds a record of schema from rows, releasing it at the end of the test.
func record(t testing.TB, mem memory.Allocator, schema *arrow.Schema, rows ...row) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	for _, r := range rows {
		for name := range r {
			if len(schema.FieldIndices(name)) == 0 {
				t.Fatalf("record: schema has no column %q", name)
			}
		}
		for fi, f := range schema.Fields() {
			v, ok := r[f.Name]
			fb := b.Field(fi)
			if ok && v == nil {
				fb.AppendNull()
				continue
			}
			switch fb := fb.(type) {
			case *array.Int64Builder:
				x, _ := v.(int64)
				if i, isInt := v.(int); isInt {
					x = int64(i)
				}
				fb.Append(x)
			case *array.StringBuilder:
				x, _ := v.(string)
				fb.Append(x)
			case *array.TimestampBuilder:
				x, _ := v.(int64)
				fb.Append(arrow.Timestamp(x))
			default:
				t.Fatalf("record: column %q has builder %T", f.Name, fb)
			}
		}
	}
	rec := b.NewRecordBatch()
	t.Cleanup(rec.Release)
	return rec
}

func bids(t testing.TB, mem memory.Allocator, rows ...row) []arrow.RecordBatch {
	return []arrow.RecordBatch{record(t, mem, tables.BidTable().ArrowSchema(), rows...)}
}

func auctions(t testing.TB, mem memory.Allocator, rows ...row) []arrow.RecordBatch {
	return []arrow.RecordBatch{record(t, mem, tables.AuctionTable().ArrowSchema(), rows...)}
}

func persons(t testing.TB, mem memory.Allocator, rows ...row) []arrow.RecordBatch {
	return []arrow.RecordBatch{record(t, mem, tables.PersonTable().ArrowSchema(), rows...)}
}

// checkedMem is an allocator that fails the test if a buffer is still allocated when
// the test ends (registered first, so it runs after every record's release).
func checkedMem(t testing.TB) memory.Allocator {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}

// t0 is 2025-01-02 03:04:00 UTC in µs: a 10 s window boundary.
var t0 = time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC).UnixMicro()

// sec is s seconds in µs.
func sec(s float64) int64 { return int64(s * 1e6) }

// at is 2025-01-02 plus day days, at h:m:s UTC, in µs.
func at(day, h, m, s int) int64 {
	return time.Date(2025, 1, 2+day, h, m, s, 0, time.UTC).UnixMicro()
}

// requireRows fails the test unless got equals want as a multiset.
func requireRows(t testing.TB, want, got []Row, relTol float64) {
	t.Helper()
	if d := Diff(want, got, relTol); !d.OK() {
		t.Fatalf("rows differ: %s\nwant %v\ngot  %v", d, fmtRows(want), fmtRows(got))
	}
}

func fmtRows(rs []Row) string {
	s := ""
	for _, r := range rs {
		s += "\n  " + formatRow(r)
	}
	return fmt.Sprint(s)
}
