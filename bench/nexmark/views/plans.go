package views

import (
	"fmt"
	"time"

	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/schema"
)

// Queries are the Nexmark queries Weir builds as materialized views, in the order of
// the Nexmark suite.
var Queries = []string{"q0", "q4", "q7", "q8", "q16"}

// Tables are the schemas of the tables person, auction and bid.
func Tables() []*schema.Table {
	return []*schema.Table{tables.PersonTable(), tables.AuctionTable(), tables.BidTable()}
}

// Window is the tumbling window of q7 and q8.
const Window = 10 * time.Second

// Plan is query q's plan over the tables person, auction and bid. Its view's first
// columns are those of the query (queries.ByName(q).Columns, in that order); the pk
// columns that the plan carries follow them.
func Plan(q string) (engine.Plan, error) {
	col, as := engine.Column, engine.As
	keep := func(names ...string) []engine.NamedExpr {
		out := make([]engine.NamedExpr, len(names))
		for i, n := range names {
			out[i] = as(col(n), n)
		}
		return out
	}
	switch q {
	case "q0":
		// SELECT auction, bidder, price, date_time FROM bid
		return engine.Project(engine.Scan("bid"), keep("auction", "bidder", "price", "date_time")...), nil

	case "q4":
		// Per auction, the highest bid within its lifetime; per category, their mean.
		a := engine.Project(engine.Scan("auction"), as(col("id"), "id"), as(col("category"), "category"),
			as(col("date_time"), "a_date_time"), as(col("expires"), "expires"))
		b := engine.Project(engine.Scan("bid"), keep("auction", "price", "date_time")...)
		within := engine.Between(col("date_time"), col("a_date_time"), col("expires"))
		j := engine.Join(a, b, []string{"id"}, []string{"auction"}, &within)
		final := engine.Aggregate(j, []string{"id", "category"}, engine.Agg("max", "price", "final"))
		return engine.Aggregate(final, []string{"category"}, engine.Agg("avg", "final", "avg_final")), nil

	case "q7":
		// The bids at the highest price of each 10-second window (BETWEEN takes both
		// bounds, so a bid on a boundary can match two windows).
		w := engine.Aggregate(engine.Project(engine.Scan("bid"),
			as(engine.TumbleStart(col("date_time"), Window), "window_start"),
			as(engine.TumbleEnd(col("date_time"), Window), "window_end"),
			as(col("price"), "price")),
			[]string{"window_start", "window_end"}, engine.Agg("max", "price", "maxprice"))
		b := engine.Project(engine.Scan("bid"), keep("auction", "price", "bidder", "date_time")...)
		in := engine.Between(col("date_time"), col("window_start"), col("window_end"))
		j := engine.Join(b, w, []string{"price"}, []string{"maxprice"}, &in)
		return engine.Project(j, keep("auction", "price", "bidder", "date_time")...), nil

	case "q8":
		// People who registered and opened an auction in the same 10-second window.
		p := engine.Aggregate(engine.Project(engine.Scan("person"), as(col("id"), "id"), as(col("name"), "name"),
			as(engine.TumbleStart(col("date_time"), Window), "starttime"),
			as(engine.TumbleEnd(col("date_time"), Window), "endtime")),
			[]string{"id", "name", "starttime", "endtime"})
		a := engine.Aggregate(engine.Project(engine.Scan("auction"), as(col("seller"), "seller"),
			as(engine.TumbleStart(col("date_time"), Window), "a_starttime"),
			as(engine.TumbleEnd(col("date_time"), Window), "a_endtime")),
			[]string{"seller", "a_starttime", "a_endtime"})
		j := engine.Join(p, a, []string{"id", "starttime", "endtime"}, []string{"seller", "a_starttime", "a_endtime"}, nil)
		return engine.Project(j, keep("id", "name", "starttime")...), nil

	case "q16":
		// Channel statistics per day, by price bucket.
		price := col("price")
		lt := func(v int64) engine.Expr { return engine.Call("less", price, engine.Int(v)) }
		ge := func(v int64) engine.Expr { return engine.Call("greater_equal", price, engine.Int(v)) }
		b := engine.Project(engine.Scan("bid"),
			as(col("channel"), "channel"),
			as(engine.Day(col("date_time")), "day"),
			as(engine.TimeOfDayHHMM(col("date_time")), "hhmm"),
			as(col("bidder"), "bidder"), as(col("auction"), "auction"),
			as(lt(10_000), "r1"),
			as(engine.Call("and_kleene", ge(10_000), lt(1_000_000)), "r2"),
			as(ge(1_000_000), "r3"))
		aggs := []engine.AggExpr{engine.Agg("max", "hhmm", "minute"), engine.Agg("count_star", "", "total_bids")}
		for i, r := range []string{"r1", "r2", "r3"} {
			aggs = append(aggs, engine.Agg("count_star", "", fmt.Sprintf("rank%d_bids", i+1)).Where(r))
		}
		for _, c := range []string{"bidder", "auction"} {
			aggs = append(aggs, engine.Agg("count_distinct", c, "total_"+c+"s"))
			for i, r := range []string{"r1", "r2", "r3"} {
				aggs = append(aggs, engine.Agg("count_distinct", c, fmt.Sprintf("rank%d_%ss", i+1, c)).Where(r))
			}
		}
		return engine.Aggregate(b, []string{"channel", "day"}, aggs...), nil
	}
	return nil, fmt.Errorf("no Nexmark query %q (want one of %v)", q, Queries)
}
