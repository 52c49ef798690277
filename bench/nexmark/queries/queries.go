package queries

// Query is one Nexmark query: the columns of its result and its text for the SQL peers.
// The Weir MV of the query has exactly Columns; Eval computes the same rows in Go.
type Query struct {
	Name     string   // "q0", "q4", "q7", "q8", "q16"
	Columns  []string // the visible output columns, in order (the MV in Weir has these names)
	Postgres string   // SQL for PostgreSQL 15 over tables person, auction, bid (timestamp without time zone)
	DuckDB   string   // SQL for DuckDB over the same tables
	RelTol   float64  // tolerance for float columns (1e-9 for q4, 0 otherwise)
}

// WindowMicros is the width of the tumbling windows of q7 and q8: 10 s, aligned on the
// Unix epoch (window_start = floor(ts / 10 s) * 10 s, window_end = window_start + 10 s).
const WindowMicros = 10_000_000

// The window start of a row's date_time in each engine's SQL.
const (
	pgWindowStart   = "date_bin('10 seconds', date_time, TIMESTAMP '1970-01-01')"
	duckWindowStart = "time_bucket(INTERVAL '10 seconds', date_time, TIMESTAMP '1970-01-01')"
)

var all = []Query{
	{
		Name:     "q0",
		Columns:  []string{"auction", "bidder", "price", "date_time"},
		Postgres: q0SQL,
		DuckDB:   q0SQL,
	},
	{
		Name:     "q4",
		Columns:  []string{"category", "avg_final"},
		Postgres: q4SQL("::float8"),
		DuckDB:   q4SQL("::DOUBLE"),
		RelTol:   1e-9,
	},
	{
		Name:     "q7",
		Columns:  []string{"auction", "price", "bidder", "date_time"},
		Postgres: q7SQL(pgWindowStart),
		DuckDB:   q7SQL(duckWindowStart),
	},
	{
		Name:     "q8",
		Columns:  []string{"id", "name", "starttime"},
		Postgres: q8SQL(pgWindowStart),
		DuckDB:   q8SQL(duckWindowStart),
	},
	{
		Name: "q16",
		Columns: []string{"channel", "day", "minute",
			"total_bids", "rank1_bids", "rank2_bids", "rank3_bids",
			"total_bidders", "rank1_bidders", "rank2_bidders", "rank3_bidders",
			"total_auctions", "rank1_auctions", "rank2_auctions", "rank3_auctions"},
		Postgres: q16SQL("to_char(date_time, 'HH24:MI')"),
		DuckDB:   q16SQL("strftime(date_time, '%H:%M')"),
	},
}

// All returns the five queries in the order q0, q4, q7, q8, q16. The slice is a fresh
// copy; the Columns slices are shared and must not be modified.
func All() []Query {
	out := make([]Query, len(all))
	copy(out, all)
	return out
}

// ByName returns the query called name ("q0", "q4", "q7", "q8", "q16").
func ByName(name string) (Query, bool) {
	for _, q := range all {
		if q.Name == name {
			return q, true
		}
	}
	return Query{}, false
}

const q0SQL = `SELECT auction, bidder, price, date_time FROM bid`

// q4SQL is q4 with cast applied to AVG's result to a float8 (PostgreSQL's AVG of bigint
// is numeric; DuckDB's is already double, the cast only states it).
func q4SQL(cast string) string {
	return `SELECT Q.category, AVG(Q.final)` + cast + ` AS avg_final
FROM (
    SELECT MAX(B.price) AS final, A.category
    FROM auction A, bid B
    WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
    GROUP BY A.id, A.category
) Q
GROUP BY Q.category`
}

// q7SQL is q7 with windowStart the engine's expression for a bid's window start.
func q7SQL(windowStart string) string {
	return `SELECT B.auction, B.price, B.bidder, B.date_time
FROM bid B
JOIN (
    SELECT MAX(price) AS maxprice, window_start, window_end
    FROM (
        SELECT price,
               ` + windowStart + ` AS window_start,
               ` + windowStart + ` + INTERVAL '10 seconds' AS window_end
        FROM bid
    ) T
    GROUP BY window_start, window_end
) W ON B.price = W.maxprice
WHERE B.date_time BETWEEN W.window_start AND W.window_end`
}

// q8SQL is q8 with windowStart the engine's expression for a row's window start.
func q8SQL(windowStart string) string {
	return `SELECT P.id, P.name, P.starttime
FROM (
    SELECT id, name, window_start AS starttime, window_end AS endtime
    FROM (
        SELECT id, name,
               ` + windowStart + ` AS window_start,
               ` + windowStart + ` + INTERVAL '10 seconds' AS window_end
        FROM person
    ) T
    GROUP BY id, name, window_start, window_end
) P
JOIN (
    SELECT seller, window_start AS starttime, window_end AS endtime
    FROM (
        SELECT seller,
               ` + windowStart + ` AS window_start,
               ` + windowStart + ` + INTERVAL '10 seconds' AS window_end
        FROM auction
    ) T
    GROUP BY seller, window_start, window_end
) A ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime`
}

// q16SQL is q16 with minute the engine's expression for "HH:MM" of date_time.
func q16SQL(minute string) string {
	const (
		r1 = `price < 10000`
		r2 = `price >= 10000 AND price < 1000000`
		r3 = `price >= 1000000`
	)
	return `SELECT channel,
       CAST(date_time AS DATE) AS day,
       MAX(` + minute + `) AS minute,
       COUNT(*) AS total_bids,
       COUNT(*) FILTER (WHERE ` + r1 + `) AS rank1_bids,
       COUNT(*) FILTER (WHERE ` + r2 + `) AS rank2_bids,
       COUNT(*) FILTER (WHERE ` + r3 + `) AS rank3_bids,
       COUNT(DISTINCT bidder) AS total_bidders,
       COUNT(DISTINCT bidder) FILTER (WHERE ` + r1 + `) AS rank1_bidders,
       COUNT(DISTINCT bidder) FILTER (WHERE ` + r2 + `) AS rank2_bidders,
       COUNT(DISTINCT bidder) FILTER (WHERE ` + r3 + `) AS rank3_bidders,
       COUNT(DISTINCT auction) AS total_auctions,
       COUNT(DISTINCT auction) FILTER (WHERE ` + r1 + `) AS rank1_auctions,
       COUNT(DISTINCT auction) FILTER (WHERE ` + r2 + `) AS rank2_auctions,
       COUNT(DISTINCT auction) FILTER (WHERE ` + r3 + `) AS rank3_auctions
FROM bid
GROUP BY channel, CAST(date_time AS DATE)`
}
