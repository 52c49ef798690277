package queries

import (
	"flag"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/seed04fbb902/weir/bench/nexmark/gen"
)

var seedFlag = flag.Uint64("seed", 0, "run seed of the generator tests (0: a new one each run)")

// testSeed is the run seed of the randomised tests, logged so that a failure replays
// with -seed.
func testSeed(t testing.TB) uint64 {
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed=%d)", s, s)
	return s
}

// generate returns the tables of events [0, n) of a generator, in records of at most
// chunkRows rows, released at the end of the test.
func generate(t testing.TB, cfg gen.Config, n uint64, chunkRows int) Tables {
	mem := checkedMem(t)
	var tb Tables
	for kind, c := range gen.New(cfg).Chunks(0, n, chunkRows, mem) {
		rec := c.Record()
		rec.Retain()
		c.Release()
		t.Cleanup(rec.Release)
		switch kind {
		case gen.KindPerson:
			tb.Person = append(tb.Person, rec)
		case gen.KindAuction:
			tb.Auction = append(tb.Auction, rec)
		case gen.KindBid:
			tb.Bid = append(tb.Bid, rec)
		}
	}
	return tb
}

func numRows(recs []arrow.RecordBatch) int {
	n := 0
	for _, r := range recs {
		n += int(r.NumRows())
	}
	return n
}

// TestEvalGenerated checks properties of each query over generated events: at the
// default rate (20,000 events span 2 s), at 100 events/s (20 windows of 10 s, bids on
// window boundaries) and at 1 event/s (several hours).
func TestEvalGenerated(t *testing.T) {
	seed := testSeed(t)
	for _, rate := range []int{gen.DefaultRate, 100, 1} {
		const events = 20_000
		tb := generate(t, gen.Config{Seed: seed, Rate: rate}, events, 1000)
		_, _, nbids := gen.Counts(0, events)
		if numRows(tb.Bid) != int(nbids) {
			t.Fatalf("rate %d: %d bids generated, want %d", rate, numRows(tb.Bid), nbids)
		}
		eval := func(q string) []Row {
			t.Helper()
			rows, err := Eval(q, tb)
			if err != nil {
				t.Fatalf("rate %d: %s: %v", rate, q, err)
			}
			return rows
		}

		// q0 is every bid.
		q0 := eval("q0")
		if len(q0) != int(nbids) {
			t.Errorf("rate %d: q0 has %d rows, want %d", rate, len(q0), nbids)
		}
		bidRows, err := Canon(tb.Bid, []string{"auction", "bidder", "price", "date_time"})
		if err != nil {
			t.Fatal(err)
		}
		if d := Diff(bidRows, q0, 0); !d.OK() {
			t.Errorf("rate %d: q0 differs from Canon: %s", rate, d)
		}

		// q16 counts every bid once.
		var total int64
		for _, r := range eval("q16") {
			total += r[3].(int64)
			if r[3].(int64) != r[4].(int64)+r[5].(int64)+r[6].(int64) {
				t.Errorf("rate %d: q16 buckets do not add up: %v", rate, r)
			}
		}
		if total != int64(nbids) {
			t.Errorf("rate %d: q16 total_bids sum %d, want %d", rate, total, nbids)
		}

		// q4's categories are the generator's.
		q4 := eval("q4")
		if len(q4) == 0 {
			t.Errorf("rate %d: q4 is empty", rate)
		}
		for _, r := range q4 {
			if c := r[0].(int64); c < 10 || c > 14 {
				t.Errorf("rate %d: q4 category %d", rate, c)
			}
			if f := r[1].(float64); f < 100 || f > 1e8 {
				t.Errorf("rate %d: q4 average %g outside the price range", rate, f)
			}
		}

		// q7: every output price is the max of a window holding the bid.
		maxOf := map[int64]int64{}
		for _, r := range bidRows {
			w := windowStart(r[3].(int64))
			maxOf[w] = max(maxOf[w], r[2].(int64))
		}
		q7 := eval("q7")
		if len(q7) < len(maxOf) {
			t.Errorf("rate %d: q7 has %d rows for %d windows", rate, len(q7), len(maxOf))
		}
		for _, r := range q7 {
			ts, price := r[3].(int64), r[1].(int64)
			w := windowStart(ts)
			if maxOf[w] != price && (ts != w || maxOf[w-WindowMicros] != price) {
				t.Errorf("rate %d: q7 row %v is not a window's max (%d)", rate, r, maxOf[w])
			}
		}

		// q8: every row is a person with an auction of theirs in the same window.
		people, err := Canon(tb.Person, []string{"id", "name", "date_time"})
		if err != nil {
			t.Fatal(err)
		}
		sells, err := Canon(tb.Auction, []string{"seller", "date_time"})
		if err != nil {
			t.Fatal(err)
		}
		type key struct{ id, start int64 }
		sold := map[key]bool{}
		for _, a := range sells {
			sold[key{a[0].(int64), windowStart(a[1].(int64))}] = true
		}
		var want []Row
		for _, p := range people {
			if k := (key{p[0].(int64), windowStart(p[2].(int64))}); sold[k] {
				want = append(want, Row{k.id, p[1], k.start})
			}
		}
		requireRows(t, want, eval("q8"), 0) // person ids are unique: no duplicate groups
		t.Logf("rate %d: %d bids, q4 %d rows, q7 %d rows, q8 %d rows", rate, nbids, len(q4), len(q7), len(want))
	}
}

// BenchmarkEval measures the oracle over 1M events (about 920k bids).
func BenchmarkEval(b *testing.B) {
	tb := generate(b, gen.Config{Seed: 1}, 1_000_000, 4096)
	for _, q := range All() {
		b.Run(q.Name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Eval(q.Name, tb); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
