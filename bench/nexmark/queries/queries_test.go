package queries

import (
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestAllAndByName(t *testing.T) {
	names := []string{}
	for _, q := range All() {
		names = append(names, q.Name)
		got, ok := ByName(q.Name)
		if !ok || got.Name != q.Name {
			t.Fatalf("ByName(%q) = %v, %v", q.Name, got.Name, ok)
		}
		if q.Postgres == "" || q.DuckDB == "" || len(q.Columns) == 0 {
			t.Errorf("%s: incomplete definition", q.Name)
		}
		if (q.Name == "q4") != (q.RelTol > 0) {
			t.Errorf("%s: RelTol %g", q.Name, q.RelTol)
		}
		// Every output column is named in both SQL texts.
		for _, c := range q.Columns {
			if !strings.Contains(q.Postgres, c) || !strings.Contains(q.DuckDB, c) {
				t.Errorf("%s: column %q absent from the SQL", q.Name, c)
			}
		}
	}
	if want := []string{"q0", "q4", "q7", "q8", "q16"}; !slices.Equal(names, want) {
		t.Fatalf("All() = %v, want %v", names, want)
	}
	if _, ok := ByName("q5"); ok {
		t.Fatal("ByName(q5) found")
	}
	if _, err := Eval("q5", Tables{}); err == nil {
		t.Fatal("Eval(q5) succeeded")
	}
	// All returns a copy.
	All()[0].Name = "changed"
	if All()[0].Name != "q0" {
		t.Fatal("All() shares its slice")
	}
}

// evalCase is one hand-made input and the rows expected of a query over it.
type evalCase struct {
	name  string
	query string
	in    func(t *testing.T, mem memory.Allocator) Tables
	want  []Row
}

func TestEval(t *testing.T) {
	cases := []evalCase{
		{
			name:  "q0 projects every bid, NULLs kept",
			query: "q0",
			in: func(t *testing.T, mem memory.Allocator) Tables {
				return Tables{Bid: bids(t, mem,
					row{"auction": 1, "bidder": 2, "price": 3, "date_time": t0, "channel": "x"},
					row{"auction": 1, "bidder": nil, "price": 3, "date_time": t0},
					row{"auction": 1, "bidder": 2, "price": 3, "date_time": t0}, // duplicate kept
				)}
			},
			want: []Row{{int64(1), int64(2), int64(3), t0}, {int64(1), nil, int64(3), t0}, {int64(1), int64(2), int64(3), t0}},
		},
		{
			name:  "q0 empty",
			query: "q0",
			in:    func(t *testing.T, mem memory.Allocator) Tables { return Tables{} },
		},
		{
			name:  "q4 winning prices within [date_time, expires], averaged per category",
			query: "q4",
			in: func(t *testing.T, mem memory.Allocator) Tables {
				return Tables{
					Auction: auctions(t, mem,
						row{"id": 1, "category": 10, "date_time": t0, "expires": t0 + sec(100)},
						row{"id": 2, "category": 10, "date_time": t0, "expires": t0 + sec(100)},
						row{"id": 6, "category": 10, "date_time": t0, "expires": t0 + sec(100)},
						row{"id": 3, "category": 11, "date_time": t0, "expires": t0 + sec(50)},
						row{"id": 4, "category": 12, "date_time": t0, "expires": t0 + sec(50)}, // no bids
						row{"id": 5, "category": 13, "date_time": t0, "expires": t0 + sec(50)}, // bids out of range
						row{"id": nil, "category": 14, "date_time": t0, "expires": t0 + sec(50)},
						row{"id": 7, "category": 14, "date_time": nil, "expires": t0 + sec(50)},
					),
					Bid: bids(t, mem,
						row{"auction": 1, "price": 100, "date_time": t0},            // at the start: in
						row{"auction": 1, "price": 300, "date_time": t0 + sec(100)}, // at expires: in
						row{"auction": 1, "price": 999, "date_time": t0 + sec(100) + 1},
						row{"auction": 1, "price": 5000, "date_time": t0 - 1},
						row{"auction": 1, "price": nil, "date_time": t0 + sec(1)},
						row{"auction": 2, "price": 500, "date_time": t0 + sec(10)},
						row{"auction": 6, "price": 201, "date_time": t0 + sec(10)},
						row{"auction": 3, "price": 7, "date_time": t0 + sec(50)},
						row{"auction": 5, "price": 7, "date_time": t0 + sec(51)},
						row{"auction": 5, "price": 7, "date_time": nil},
						row{"auction": 99, "price": 1, "date_time": t0},
						row{"auction": nil, "price": 1, "date_time": t0},
						row{"auction": 7, "price": 1, "date_time": t0},
					),
				}
			},
			want: []Row{{int64(10), 1001.0 / 3}, {int64(11), 7.0}},
		},
		{
			name:  "q4 a group whose joined prices are all NULL averages to NULL",
			query: "q4",
			in: func(t *testing.T, mem memory.Allocator) Tables {
				return Tables{
					Auction: auctions(t, mem, row{"id": 1, "category": 10, "date_time": t0, "expires": t0 + sec(1)}),
					Bid:     bids(t, mem, row{"auction": 1, "price": nil, "date_time": t0}),
				}
			},
			want: []Row{{int64(10), nil}},
		},
		{
			name:  "q7 the max bid of each window, twice when on a boundary",
			query: "q7",
			in: func(t *testing.T, mem memory.Allocator) Tables {
				return Tables{Bid: bids(t, mem,
					row{"auction": 1, "bidder": 1, "price": 50, "date_time": t0 + sec(1)},
					row{"auction": 2, "bidder": 2, "price": 80, "date_time": t0 + sec(3)},   // max of W0
					row{"auction": 3, "bidder": 3, "price": 80, "date_time": t0 + sec(10)},  // max of W1, also in W0's closed bounds
					row{"auction": 1, "bidder": 4, "price": 60, "date_time": t0 + sec(15)},  // W1
					row{"auction": 1, "bidder": 5, "price": 80, "date_time": t0 + sec(20)},  // W2, but equals W1's max on W1's end
					row{"auction": 1, "bidder": 6, "price": 90, "date_time": t0 + sec(25)},  // max of W2
					row{"auction": 1, "bidder": 7, "price": nil, "date_time": t0 + sec(5)},  // ignored
					row{"auction": 1, "bidder": 8, "price": 1000, "date_time": nil},         // no window
					row{"auction": 1, "bidder": 9, "price": 90, "date_time": t0 + sec(100)}, // alone in W10
				)}
			},
			want: []Row{
				{int64(2), int64(80), int64(2), t0 + sec(3)},
				{int64(3), int64(80), int64(3), t0 + sec(10)},
				{int64(3), int64(80), int64(3), t0 + sec(10)},
				{int64(1), int64(80), int64(5), t0 + sec(20)},
				{int64(1), int64(90), int64(6), t0 + sec(25)},
				{int64(1), int64(90), int64(9), t0 + sec(100)},
			},
		},
		{
			name:  "q8 people who opened an auction in the window they registered in",
			query: "q8",
			in: func(t *testing.T, mem memory.Allocator) Tables {
				return Tables{
					Person: persons(t, mem,
						row{"id": 1, "name": "Alice", "date_time": t0 + sec(1)},
						row{"id": 2, "name": "Bob", "date_time": t0 + sec(5)},
						row{"id": 3, "name": "Carol", "date_time": t0 + sec(10) - 1},
						row{"id": 4, "name": "Dan", "date_time": t0 + sec(2)},
						row{"id": 1, "name": "Alice", "date_time": t0 + sec(21)},
						row{"id": 1, "name": "Alice", "date_time": t0 + sec(22)}, // same group
						row{"id": 5, "name": nil, "date_time": t0},
						row{"id": nil, "name": "Nobody", "date_time": t0},
					),
					Auction: auctions(t, mem,
						row{"seller": 1, "date_time": t0 + sec(8)},
						row{"seller": 1, "date_time": t0 + sec(9)}, // same group
						row{"seller": 2, "date_time": t0 + sec(12)},
						row{"seller": 3, "date_time": t0 + sec(10)}, // the next window
						row{"seller": 1, "date_time": t0 + sec(25)},
						row{"seller": 5, "date_time": t0 + sec(9)},
						row{"seller": nil, "date_time": t0},
						row{"seller": 4, "date_time": nil},
					),
				}
			},
			want: []Row{
				{int64(1), "Alice", t0},
				{int64(1), "Alice", t0 + sec(20)},
				{int64(5), nil, t0},
			},
		},
		{
			name:  "q16 channel statistics per day",
			query: "q16",
			in: func(t *testing.T, mem memory.Allocator) Tables {
				return Tables{Bid: bids(t, mem,
					row{"channel": "Google", "price": 9999, "bidder": 1, "auction": 10, "date_time": at(0, 1, 0, 0)},
					row{"channel": "Google", "price": 10000, "bidder": 1, "auction": 11, "date_time": at(0, 23, 59, 59)},
					row{"channel": "Google", "price": 999999, "bidder": 2, "auction": 11, "date_time": at(0, 9, 30, 0)},
					row{"channel": "Google", "price": 1000000, "bidder": 3, "auction": 10, "date_time": at(0, 12, 0, 0)},
					row{"channel": "Google", "price": 500000, "bidder": 2, "auction": 11, "date_time": at(0, 5, 0, 0)},
					row{"channel": "Google", "price": 100, "bidder": 7, "auction": 12, "date_time": at(1, 0, 0, 30)},
					row{"channel": "Apple", "price": 5, "bidder": 1, "auction": 10, "date_time": at(0, 9, 5, 0)},
					row{"channel": "Apple", "price": nil, "bidder": 8, "auction": 13, "date_time": at(0, 9, 4, 0)},
					row{"channel": nil, "price": 5, "bidder": nil, "auction": nil, "date_time": nil},
				)}
			},
			want: []Row{
				{"Google", "2025-01-02", "23:59", int64(5), int64(1), int64(3), int64(1),
					int64(3), int64(1), int64(2), int64(1), int64(2), int64(1), int64(1), int64(1)},
				{"Google", "2025-01-03", "00:00", int64(1), int64(1), int64(0), int64(0),
					int64(1), int64(1), int64(0), int64(0), int64(1), int64(1), int64(0), int64(0)},
				{"Apple", "2025-01-02", "09:05", int64(2), int64(1), int64(0), int64(0),
					int64(2), int64(1), int64(0), int64(0), int64(2), int64(1), int64(0), int64(0)},
				{nil, nil, nil, int64(1), int64(1), int64(0), int64(0),
					int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0)},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mem := checkedMem(t)
			q, ok := ByName(c.query)
			if !ok {
				t.Fatalf("no query %s", c.query)
			}
			got, err := Eval(c.query, c.in(t, mem))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range got {
				if len(r) != len(q.Columns) {
					t.Fatalf("row %v has %d values, want %d", r, len(r), len(q.Columns))
				}
			}
			requireRows(t, c.want, got, q.RelTol)
		})
	}
}

// TestEvalChunking checks that the split of the input into records does not matter.
func TestEvalChunking(t *testing.T) {
	mem := checkedMem(t)
	var rows []row
	for i := range 50 {
		rows = append(rows, row{"auction": i % 3, "bidder": i % 7, "price": (i * 37) % 11,
			"channel": []string{"a", "b"}[i%2], "date_time": t0 + sec(float64(i))})
	}
	whole := bids(t, mem, rows...)
	var split []arrow.RecordBatch
	for i := 0; i < len(rows); i += 7 {
		split = append(split, bids(t, mem, rows[i:min(i+7, len(rows))]...)...)
	}
	for _, q := range []string{"q0", "q7", "q16"} {
		a, err := Eval(q, Tables{Bid: whole})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Eval(q, Tables{Bid: split})
		if err != nil {
			t.Fatal(err)
		}
		if len(a) == 0 {
			t.Fatalf("%s: no rows", q)
		}
		requireRows(t, a, b, 0)
	}
}

func TestEvalSchemaErrors(t *testing.T) {
	mem := checkedMem(t)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "auction", Type: arrow.PrimitiveTypes.Int64},
		{Name: "bidder", Type: arrow.PrimitiveTypes.Int64},
		{Name: "price", Type: arrow.BinaryTypes.String},
		{Name: "date_time", Type: arrow.FixedWidthTypes.Timestamp_us},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	_, err := Eval("q0", Tables{Bid: []arrow.RecordBatch{rec}})
	if err == nil || !strings.Contains(err.Error(), "bid") || !strings.Contains(err.Error(), `"price"`) {
		t.Fatalf("wrong type: err = %v", err)
	}
	_, err = Eval("q16", Tables{Bid: []arrow.RecordBatch{rec}})
	if err == nil || !strings.Contains(err.Error(), "bid") || !strings.Contains(err.Error(), "price") {
		t.Fatalf("q16: err = %v", err)
	}
	_, err = Eval("q8", Tables{Person: []arrow.RecordBatch{rec}})
	if err == nil || !strings.Contains(err.Error(), "person") || !strings.Contains(err.Error(), `"id"`) {
		t.Fatalf("missing column: err = %v", err)
	}
}
