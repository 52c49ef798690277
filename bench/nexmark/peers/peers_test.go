package peers

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/seed04fbb902/weir/bench/nexmark/gen"
	"github.com/seed04fbb902/weir/bench/nexmark/queries"
)

// testEvents is the number of generated events the peer tests load (about 400 persons,
// 1,200 auctions and 18,400 bids).
const testEvents = 20_000

// testTables generates the first testEvents events of seed 1 as Arrow records. The
// records are released when the test ends.
func testTables(t testing.TB) queries.Tables {
	t.Helper()
	var tabs queries.Tables
	g := gen.New(gen.Config{Seed: 1})
	for kind, c := range g.Chunks(0, testEvents, 1024, memory.DefaultAllocator) {
		rec := c.Record()
		rec.Retain()
		c.Release()
		t.Cleanup(rec.Release)
		switch kind {
		case gen.KindPerson:
			tabs.Person = append(tabs.Person, rec)
		case gen.KindAuction:
			tabs.Auction = append(tabs.Auction, rec)
		case gen.KindBid:
			tabs.Bid = append(tabs.Bid, rec)
		default:
			t.Fatalf("unexpected kind %v", kind)
		}
	}
	return tabs
}

// checkPeer loads the tables into p and compares every query's result with the oracle.
func checkPeer(t *testing.T, p Peer) {
	ctx := context.Background()
	tabs := testTables(t)
	start := time.Now()
	if err := p.Load(ctx, tabs); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: loaded %d persons, %d auctions, %d bids in %v", p.Name(),
		rows(tabs.Person), rows(tabs.Auction), rows(tabs.Bid), time.Since(start).Round(time.Millisecond))
	all := queries.All()
	if len(all) == 0 {
		t.Fatal("queries.All() is empty")
	}
	for _, q := range all {
		t.Run(q.Name, func(t *testing.T) {
			took, got, err := p.Run(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			want, err := queries.Eval(q.Name, tabs)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %s: %d rows, built in %v", p.Name(), q.Name, len(got), took.Round(time.Microsecond))
			if len(want) == 0 {
				t.Errorf("%s: the oracle's result is empty; the test data does not exercise it", q.Name)
			}
			if d := queries.Diff(want, got, q.RelTol); !d.OK() {
				t.Errorf("%s on %s differs from the oracle (want: oracle, got: %s): %s", q.Name, p.Name(), p.Name(), d)
			}
		})
	}
	// A second Run of the same query must succeed (the view or table was dropped).
	if _, _, err := p.Run(ctx, all[0]); err != nil {
		t.Errorf("second run of %s: %v", all[0].Name, err)
	}
}

func rows(recs []arrow.RecordBatch) int64 {
	var n int64
	for _, r := range recs {
		n += r.NumRows()
	}
	return n
}

// TestPostgres checks PostgreSQL's results against the oracle. It needs a server:
// `make pg-start` and WEIR_PG_DSN set to the DSN it prints.
func TestPostgres(t *testing.T) {
	dsn := os.Getenv("WEIR_PG_DSN")
	if dsn == "" {
		t.Skip("WEIR_PG_DSN is not set: run `make pg-start` and set WEIR_PG_DSN to the DSN it prints (or `make peers-test`)")
	}
	p, err := OpenPostgres(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	if p.Name() != "postgres" {
		t.Errorf("Name() = %q", p.Name())
	}
	checkPeer(t, p)
}

func TestRowReader(t *testing.T) {
	tabs := testTables(t)
	for _, tb := range nexmarkTables {
		r := newRowReader(tb, tb.records(tabs))
		n := int64(0)
		for r.Next() {
			vals, _ := r.Values()
			if len(vals) != len(tb.cols) {
				t.Fatalf("%s: %d values", tb.name, len(vals))
			}
			for i, c := range tb.cols {
				switch v := vals[i].(type) {
				case int64:
					if c.sqlType != "bigint" {
						t.Fatalf("%s.%s: int64 for %s", tb.name, c.name, c.sqlType)
					}
				case string:
					if c.sqlType != "varchar" {
						t.Fatalf("%s.%s: string for %s", tb.name, c.name, c.sqlType)
					}
				case time.Time:
					if c.sqlType != "timestamp" || v.Location() != time.UTC || v.Year() < 2000 {
						t.Fatalf("%s.%s: time %v for %s", tb.name, c.name, v, c.sqlType)
					}
				default:
					t.Fatalf("%s.%s: %T", tb.name, c.name, v)
				}
			}
			n++
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		if want := rows(tb.records(tabs)); n != want || n == 0 {
			t.Errorf("%s: read %d rows, want %d (> 0)", tb.name, n, want)
		}
	}
	// Round trip of a timestamp through the canonical form.
	ts := time.Date(2026, 1, 1, 0, 0, 1, 500, time.UTC)
	if got := canonTime(ts.In(time.FixedZone("x", 3600))); got != ts.UnixMicro() {
		t.Errorf("canonTime = %d", got)
	}
	if got := canonDate(ts); got != "2026-01-01" {
		t.Errorf("canonDate = %q", got)
	}
	if !strings.Contains(tabs.Bid[0].Schema().String(), "date_time") {
		t.Errorf("bid schema %s", tabs.Bid[0].Schema())
	}
}

// canonValue converts the types both drivers return and leaves the others to the peer;
// canonRow names the column whose value fails.
func TestCanonValue(t *testing.T) {
	ts := time.Date(2026, 1, 1, 12, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    any
		date bool
		want any
	}{
		{nil, false, nil},
		{int64(-5), false, int64(-5)},
		{int32(-5), false, int64(-5)},
		{int16(7), false, int64(7)},
		{int8(-8), false, int64(-8)},
		{uint64(9), false, int64(9)},
		{uint32(9), false, int64(9)},
		{uint16(9), false, int64(9)},
		{uint8(9), false, int64(9)},
		{1.5, false, 1.5},
		{float32(2.5), false, 2.5},
		{"s", false, "s"},
		{true, false, true},
		{ts, false, ts.UnixMicro()},
		{ts, true, "2026-01-01"},
		{big.NewInt(-42), false, int64(-42)},
	} {
		got, ok, err := canonValue(tc.v, tc.date)
		if !ok || err != nil || got != tc.want {
			t.Errorf("canonValue(%T %v, date %v) = %v (%T), %v, %v; want %v (%T)", tc.v, tc.v, tc.date, got, got, ok, err, tc.want, tc.want)
		}
	}
	for _, v := range []any{uint64(math.MaxInt64 + 1), new(big.Int).Lsh(big.NewInt(1), 64)} {
		if _, ok, err := canonValue(v, false); !ok || err == nil || !strings.Contains(err.Error(), "overflows int64") {
			t.Errorf("canonValue(%v): ok %v, error %v; want an overflow", v, ok, err)
		}
	}
	if _, ok, err := canonValue([]byte("x"), false); ok || err != nil {
		t.Errorf("canonValue([]byte): ok %v, error %v; want it left to the peer", ok, err)
	}

	names := []string{"a", "b"}
	canon := func(i int, v any) (any, error) {
		c, ok, err := canonValue(v, false)
		if !ok {
			return nil, fmt.Errorf("unsupported %T", v)
		}
		return c, err
	}
	row, err := canonRow([]any{int32(1), "x"}, canon, func(i int) string { return names[i] })
	if err != nil || len(row) != 2 || row[0] != int64(1) || row[1] != "x" {
		t.Errorf("canonRow = %v, %v; want [1 x]", row, err)
	}
	if _, err := canonRow([]any{int32(1), []byte("x")}, canon, func(i int) string { return names[i] }); err == nil || !strings.Contains(err.Error(), "column b") {
		t.Errorf("canonRow of a bad value: %v, want an error naming column b", err)
	}
}
