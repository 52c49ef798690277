package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench"
	"github.com/seed04fbb902/weir/bench/nexmark/peers"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/exchange"
	"github.com/spf13/cobra"
)

func newBenchNexmark() *cobra.Command {
	var (
		o            bench.NexmarkBenchOptions
		asJSON       bool
		quiet        bool
		pgDSN        string
		duck         bool
		querySet     string
		exchangeKind string
	)
	cmd := &cobra.Command{
		Use:   "nexmark",
		Short: "Build the Nexmark query views by arrangement and by no-shuffle backfill, idle and busy, and compare with SQL peers",
		Long: `nexmark loads --events generated Nexmark events into the tables person, auction and
bid of an engine on disk (a temporary directory under --dir), each with --parallelism
actors. Then, with the upstream idle and again with the generator writing at
--busy-rate events/s, it creates each query's view (q0 q4 q7 q8 q16) by arrangement
backfill and by no-shuffle backfill at the same parallelism, timing CreateMV (which
returns once the backfill is done), checks the view against the query's oracle over
the committed tables, and drops it. ratio is arrangement seconds ÷ no-shuffle seconds.

With --postgres DSN (see make pg-start) and --duckdb (a binary built with -tags
duckdb), each peer loads the idle tables and creates the same query's result
(CREATE MATERIALIZED VIEW / CREATE TABLE AS) after each rep of Weir's idle builds,
timed; Weir's arrangement seconds ÷ the peer's (medians) is reported, with the
ratios paired by rep (geomean and 95% interval), and every run's rows are checked
against the oracle too. The Go batch oracle itself (go-oracle: the query evaluated
over the rows in memory) is timed the same way, with or without peers.

Progress lines go to stderr (see --quiet).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if !quiet {
				o.Log = cmd.ErrOrStderr()
			}
			if querySet != "" {
				o.Queries = strings.Split(querySet, ",")
			}
			if pgDSN != "" {
				p, err := peers.OpenPostgres(ctx, pgDSN)
				if err != nil {
					return err
				}
				defer p.Close()
				o.Peers = append(o.Peers, p)
			}
			if duck {
				p, err := peers.OpenDuckDB(ctx, "")
				if err != nil {
					return err
				}
				defer p.Close()
				o.Peers = append(o.Peers, p)
			}
			switch exchangeKind {
			case "channel":
			case "flight":
				o.NewExchange = func(nodes int) (engine.Exchange, func() error, error) {
					m, err := exchange.NewMesh(nodes, 0, memory.NewGoAllocator())
					if err != nil {
						return nil, nil, err
					}
					return m, m.Close, nil
				}
			default:
				return fmt.Errorf("bench nexmark: --exchange %q, want channel or flight", exchangeKind)
			}
			res, err := bench.RunNexmarkBench(ctx, o)
			if err != nil {
				return err
			}
			return printNexmark(cmd.OutOrStdout(), res, asJSON)
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&o.Events, "events", 1_000_000, "events to load before the builds")
	f.IntVar(&o.Parallelism, "parallelism", 2, "actors of each table and each view")
	f.Uint64Var(&o.Seed, "seed", 1, "the generator's run seed")
	f.Float64Var(&o.BusyRate, "busy-rate", 10_000, "events/s the generator writes during the busy builds")
	f.StringVar(&o.Dir, "dir", "", "directory for the temporary engine (default: the system temp directory)")
	f.StringVar(&querySet, "queries", "", "comma-separated queries (default: q0,q4,q7,q8,q16)")
	f.IntVar(&o.Reps, "reps", 1, "builds of each view per kind and mode; the median is reported (kinds alternate first by rep)")
	f.IntVar(&o.Workers, "workers", 0, "snapshot read goroutines per arrangement backfill actor (0: the engine's default, half of GOMAXPROCS, between 1 and 2)")
	f.Int64Var(&o.StateCacheBytes, "state-cache-bytes", 0, "memory per node for the joins' cached state (0: the engine's default, 256 MiB; negative: no cache)")
	f.DurationVar(&o.BackfillCheckpointInterval, "backfill-checkpoint-interval", 0, "least time between checkpoints while a backfill runs (0: the engine's default, 1s; negative: a checkpoint at every barrier)")
	f.Int64Var(&o.BackfillCheckpointBytes, "backfill-checkpoint-bytes", 0, "a node's uncommitted bytes from which a backfill's barrier is a checkpoint anyway (0: the engine's default, 64 MiB)")
	f.StringVar(&pgDSN, "postgres", "", "PostgreSQL DSN of a peer (make pg-start prints one)")
	f.BoolVar(&duck, "duckdb", false, "DuckDB as a peer (needs a binary built with -tags duckdb)")
	f.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	f.BoolVar(&asJSON, "json", false, "print a JSON list, one object per query and upstream mode")
	f.StringVar(&exchangeKind, "exchange", "channel", "how edges between the builds' nodes travel: channel (Go channels) or flight (Arrow Flight streams on loopback)")
	return cmd
}

func printNexmark(w io.Writer, res []bench.NexmarkResult, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(res)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "query\tupstream\tarrangement s\tno-shuffle s\tratio\tpaired ratios: geomean [95%% CI]\tverified\tsnapshot rows/s\tupstream rows/s\tpeak heap MB\tpeers s (Weir ÷ peer, paired)\n")
	for _, r := range res {
		ns, ratio := "-", "-"
		if r.NoShuffleSeconds != nil {
			ns, ratio = fmt.Sprintf("%.2f", *r.NoShuffleSeconds), fmt.Sprintf("%.3f", *r.Ratio)
		}
		var ps []string
		for _, name := range slices.Sorted(maps.Keys(r.PeerSeconds)) {
			ps = append(ps, fmt.Sprintf("%s %.3f (%s)", name, r.PeerSeconds[name], pairedText(r.WeirOverPeerStats[name])))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%s\t%s\t%v\t%.0f\t%.0f\t%.1f\t%s\n", r.Query, r.Upstream, r.ArrangementSeconds, ns, ratio, pairedText(r.RatioStats), r.Verified,
			r.Arrangement.SnapshotRowsPerSec, r.Arrangement.UpstreamRowsPerSec, r.Arrangement.PeakHeapMB, strings.Join(ps, ", "))
	}
	return tw.Flush()
}
