package views

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/seed04fbb902/weir/bench/nexmark/queries"
	"github.com/seed04fbb902/weir/engine"
)

// Rows are the rows of the tables person, auction and bid as committed at one epoch:
// what the oracle evaluates the queries over. Release frees them.
type Rows struct {
	Tables queries.Tables
	recs   map[string][]arrow.RecordBatch
}

// Release releases the rows' record batches.
func (r *Rows) Release() {
	for _, rs := range r.recs {
		for _, rec := range rs {
			rec.Release()
		}
	}
}

// ReadRows takes a checkpoint and reads the committed rows of person, auction and bid.
// An engine of another process (an engine.DB that is not an *engine.Engine) is read
// table by table: no one may write to it meanwhile.
func ReadRows(ctx context.Context, e engine.DB) (*Rows, error) {
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		return nil, err
	}
	recs, err := scanAll(ctx, e, "person", "auction", "bid")
	if err != nil {
		releaseAll(recs)
		return nil, err
	}
	return &Rows{recs: recs, Tables: queries.Tables{Person: recs["person"], Auction: recs["auction"], Bid: recs["bid"]}}, nil
}

// scanAll reads the committed rows of the named tables and views: at one epoch from
// an *engine.Engine (a snapshot), one by one from another engine.DB. On an error it
// returns what it read so far, for the caller to release.
func scanAll(ctx context.Context, db engine.DB, names ...string) (map[string][]arrow.RecordBatch, error) {
	var s interface {
		Scan(context.Context, string) (array.RecordReader, error)
	} = db
	if e, ok := db.(*engine.Engine); ok {
		snap, err := e.Snapshot()
		if err != nil {
			return nil, err
		}
		defer snap.Release()
		s = snap
	}
	out := map[string][]arrow.RecordBatch{}
	for _, n := range names {
		r, err := s.Scan(ctx, n)
		if err != nil {
			return out, err
		}
		for r.Next() {
			rec := r.RecordBatch()
			rec.Retain()
			out[n] = append(out[n], rec)
		}
		err = r.Err()
		r.Release()
		if err != nil {
			return out, fmt.Errorf("scan %s: %w", n, err)
		}
	}
	return out, nil
}

func releaseAll(m map[string][]arrow.RecordBatch) {
	for _, rs := range m {
		for _, r := range rs {
			r.Release()
		}
	}
}

// Check is one view checked against its query's oracle.
type Check struct {
	Query      string
	Rows       int
	Verified   bool
	Mismatches int
	Detail     string // the first differences, when not verified
}

// Compare checks view q (named as the query) against its oracle over rows, which must
// be the tables as committed at the view's epoch: the caller takes the checkpoint
// that makes them so.
func Compare(ctx context.Context, e engine.DB, q string, rows *Rows) (Check, error) {
	c := Check{Query: q}
	spec, ok := queries.ByName(q)
	if !ok {
		return c, fmt.Errorf("views: no query %q", q)
	}
	recs, err := scanAll(ctx, e, q)
	defer releaseAll(recs)
	if err != nil {
		return c, err
	}
	got, err := queries.Canon(recs[q], spec.Columns)
	if err != nil {
		return c, fmt.Errorf("views: %s: %w", q, err)
	}
	want, err := queries.Eval(q, rows.Tables)
	if err != nil {
		return c, fmt.Errorf("views: %s oracle: %w", q, err)
	}
	d := queries.Diff(want, got, spec.RelTol)
	c.Rows, c.Verified, c.Mismatches = len(got), d.OK(), d.Mismatches()
	if !d.OK() {
		c.Detail = d.String()
	}
	return c, nil
}

// Verify takes a checkpoint, then checks each query's view (named as the query)
// against queries.Eval over the tables person, auction and bid as committed (see
// ReadRows for an engine of another process).
func Verify(ctx context.Context, e engine.DB, qs []string) ([]Check, error) {
	rows, err := ReadRows(ctx, e)
	if err != nil {
		return nil, err
	}
	defer rows.Release()
	var out []Check
	for _, q := range qs {
		c, err := Compare(ctx, e, q, rows)
		if err != nil {
			return out, fmt.Errorf("views: verify %s: %w", q, err)
		}
		out = append(out, c)
	}
	return out, nil
}
