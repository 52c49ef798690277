package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/seed04fbb902/weir/storage"
	"github.com/spf13/cobra"
)

func newStatus() *cobra.Command {
	var (
		dir, addr, metaAddr     string
		watch, asJSON, perVnode bool
		interval                time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the materialized views of an engine directory and their backfill progress",
		Long: `status opens the engine in --dir (it must exist and hold an engine; it is never
created) with every job paused, so opening it does not advance any backfill, and
prints each materialized view's creation job: its upstreams, backfill kind,
parallelism, rate limit, whether it is paused, the snapshot rows consumed of the
upstream rows, the upstream vnodes completed, the percent done and whether it is done.
The numbers are those of the last checkpoint. With --per-vnode it also lists, for
each view, the committed progress of every upstream vnode (scan, upstream, vnode,
owner actor, state, position as hex, rows). With --json it prints one JSON object
{"jobs": [...], "vnodes": {view: [...]}} ("vnodes" is filled with --per-vnode).

Pebble locks the directory: while another process has the engine open, status
cannot read it and reports that the directory is in use by another engine. So
--watch (reopen and reprint every --interval until interrupted) is only meaningful
while no other process holds the directory, e.g. between runs of a process that opens
the engine; while the directory is in use, each round reports that instead.

With --addr instead of --dir it asks the engine weir serve serves there, live, and
with --meta the engine of a cluster's weir meta (the address its --addr serves on,
not the meta store's DSN): the numbers are those of now, and --watch follows the running backfills (a round the
server does not answer reports that).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := servedAddr("status", dir, addr, metaAddr)
			if err != nil {
				return err
			}
			where := dir
			if addr != "" {
				where = addr
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			w := cmd.OutOrStdout()
			if !watch {
				r, err := collectStatus(ctx, dir, addr, perVnode)
				if err != nil {
					return err
				}
				return printStatus(w, where, r, asJSON)
			}
			if interval <= 0 {
				return fmt.Errorf("status: --interval %s, want > 0", interval)
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			for {
				r, err := collectStatus(ctx, dir, addr, perVnode)
				now := time.Now().Format(time.TimeOnly)
				switch {
				case errors.Is(err, storage.ErrInUse), errors.Is(err, remote.ErrUnavailable):
					if asJSON {
						if err := json.NewEncoder(w).Encode(map[string]string{"time": now, "error": err.Error()}); err != nil {
							return err
						}
					} else {
						fmt.Fprintf(w, "--- %s\n%v\n", now, err)
					}
				case err != nil && ctx.Err() != nil:
					return nil // interrupted while reading
				case err != nil:
					return err
				default:
					if !asJSON {
						fmt.Fprintf(w, "--- %s\n", now)
					}
					if err := printStatus(w, where, r, asJSON); err != nil {
						return err
					}
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "engine directory (must exist and hold an engine)")
	f.StringVar(&addr, "addr", "", "address of a served engine (weir serve), instead of --dir: its progress now")
	f.StringVar(&metaAddr, "meta", "", "address of a cluster's weir meta (its --addr), instead of --dir: the cluster's progress now")
	f.BoolVar(&watch, "watch", false, "reopen and reprint every --interval until interrupted (only while no other process holds --dir)")
	f.DurationVar(&interval, "interval", 2*time.Second, "time between reports with --watch")
	f.BoolVar(&asJSON, "json", false, `print one JSON object {"jobs": [...], "vnodes": {...}} (one per line with --watch)`)
	f.BoolVar(&perVnode, "per-vnode", false, "also list every view's committed progress per upstream vnode")
	return cmd
}

// servedAddr checks the sources of cmd's engine: exactly one of an engine
// directory, a served engine's address and a cluster's weir meta address (which
// serves its engine as weir serve does). It returns the address to dial, empty for
// the directory.
func servedAddr(cmd, dir, addr, metaAddr string) (string, error) {
	given := 0
	for _, s := range []string{dir, addr, metaAddr} {
		if s != "" {
			given++
		}
	}
	if given != 1 {
		return "", fmt.Errorf("%s: one of --dir, --addr and --meta is required", cmd)
	}
	if strings.Contains(metaAddr, "://") || strings.Contains(metaAddr, "=") {
		return "", fmt.Errorf("%s: --meta %s looks like a PostgreSQL DSN: %s reads a cluster through its weir meta's serving address (host:port, the meta's --addr), not through the meta store", cmd, metaAddr, cmd)
	}
	return addr + metaAddr, nil
}

// checkEngineDir reports a clear error unless dir exists and holds a pebble store (an
// engine's); it never creates anything.
func checkEngineDir(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("engine directory %s does not exist", dir)
	}
	if err != nil {
		return fmt.Errorf("engine directory %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("engine directory %s is not a directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("engine directory %s: %w", dir, err)
	}
	for _, e := range ents {
		n := e.Name()
		if n == "CURRENT" || strings.HasPrefix(n, "MANIFEST-") || strings.HasPrefix(n, "marker.manifest.") {
			return nil
		}
	}
	return fmt.Errorf("%s does not hold a weir engine (no store in it)", dir)
}

// openEngineDir opens the engine in dir, which must exist and hold one, with every
// job paused (opening it advances no backfill), no timed barriers and no logs.
func openEngineDir(ctx context.Context, dir string) (*engine.Engine, error) {
	if err := checkEngineDir(dir); err != nil {
		return nil, err
	}
	e, err := engine.Open(ctx, dir, engine.Options{
		PauseOnBootstrap: true,
		BarrierInterval:  -1,
		Logger:           slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

type statusJob struct {
	Name            string   `json:"name"`
	Upstreams       []string `json:"upstreams"`
	Backfill        string   `json:"backfill"`
	Parallelism     int      `json:"parallelism"`
	RateLimit       *int64   `json:"rate_limit"` // rows/s per actor; null: unlimited
	Paused          bool     `json:"paused"`
	RowsConsumed    int64    `json:"rows_consumed"`
	UpstreamRows    int64    `json:"upstream_rows"`
	VnodesCompleted int      `json:"vnodes_completed"`
	VnodesTotal     int      `json:"vnodes_total"`
	Percent         float64  `json:"percent"`
	Done            bool     `json:"done"`
	// Nodes are the nodes the view's actors run on; BackfillOn the role of those
	// nodes while the view backfills on them (MVOptions.BackfillOn), until it moves.
	Nodes      []int  `json:"nodes"`
	BackfillOn string `json:"backfill_on,omitempty"`
}

type statusVnode struct {
	Scan     int    `json:"scan"`
	Upstream string `json:"upstream"`
	Vnode    uint16 `json:"vnode"`
	Actor    uint32 `json:"actor"`
	State    string `json:"state"`
	Position string `json:"position"` // hex of the memcomparable upstream pk
	Rows     int64  `json:"rows"`
}

type statusReport struct {
	Jobs   []statusJob              `json:"jobs"`
	Vnodes map[string][]statusVnode `json:"vnodes"`
}

// collectStatus reads the jobs' progress (and per vnode) of the engine in dir (opened
// paused and closed again: the numbers of the last checkpoint) or, with addr, of the
// engine served there (the numbers now).
func collectStatus(ctx context.Context, dir, addr string, perVnode bool) (r statusReport, err error) {
	if addr != "" {
		c, err := remote.Dial(ctx, addr, nil)
		if err != nil {
			return r, err
		}
		defer c.Close()
		ps, err := c.Progress(ctx)
		if err != nil {
			return r, err
		}
		return buildStatus(ps, func(name string) ([]engine.VnodeProgress, error) { return c.VnodeProgress(ctx, name) }, perVnode)
	}
	e, err := openEngineDir(ctx, dir)
	if err != nil {
		return r, err
	}
	defer func() {
		if cerr := e.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close %s: %w", dir, cerr)
		}
	}()
	// Open's first barrier starts the actors; they publish the progress they loaded
	// as they handle it. One more (checkpoint) barrier makes sure every backfill actor
	// has published, so Progress reports the committed state rather than a partial
	// one. The jobs are paused: no backfill advances meanwhile.
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		return r, fmt.Errorf("status of %s: %w", dir, err)
	}
	return buildStatus(e.Progress(), e.VnodeProgress, perVnode)
}

// buildStatus is the report of the jobs ps, with each one's vnodes when perVnode.
func buildStatus(ps []engine.JobProgress, vnodes func(name string) ([]engine.VnodeProgress, error), perVnode bool) (r statusReport, err error) {
	r.Jobs = []statusJob{}
	r.Vnodes = map[string][]statusVnode{}
	for _, p := range ps {
		j := statusJob{
			Name: p.Name, Backfill: string(p.Backfill), Parallelism: p.Parallelism, RateLimit: p.RateLimit,
			Paused: p.Paused, RowsConsumed: p.RowsConsumed, UpstreamRows: p.UpstreamRows,
			VnodesCompleted: p.VnodesCompleted, VnodesTotal: p.VnodesTotal, Percent: p.Percent, Done: p.Done,
			Nodes: p.Nodes, BackfillOn: p.BackfillOn,
		}
		if j.Nodes == nil {
			j.Nodes = []int{}
		}
		j.Upstreams = []string{}
		if p.Upstream != "" {
			j.Upstreams = strings.Split(p.Upstream, ",")
		}
		r.Jobs = append(r.Jobs, j)
		if !perVnode {
			continue
		}
		vs, err := vnodes(p.Name)
		if err != nil {
			return r, err
		}
		out := make([]statusVnode, 0, len(vs))
		for _, v := range vs {
			out = append(out, statusVnode{
				Scan: v.Scan, Upstream: v.Upstream, Vnode: v.Vnode, Actor: uint32(v.Actor),
				State: v.State.String(), Position: hex.EncodeToString(v.Position), Rows: v.Rows,
			})
		}
		r.Vnodes[p.Name] = out
	}
	return r, nil
}

func printStatus(w io.Writer, dir string, r statusReport, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(r)
	}
	if len(r.Jobs) == 0 {
		_, err := fmt.Fprintf(w, "%s: no materialized views\n", dir)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "view\tupstreams\tbackfill\tparallelism\trate limit\tpaused\trows\tvnodes\tnodes\tpercent\tdone")
	for _, j := range r.Jobs {
		limit := "unlimited"
		if j.RateLimit != nil {
			limit = fmt.Sprintf("%d rows/s", *j.RateLimit)
		}
		nodes := make([]string, len(j.Nodes))
		for i, n := range j.Nodes {
			nodes[i] = strconv.Itoa(n)
		}
		on := strings.Join(nodes, ",")
		if on == "" {
			on = "-"
		}
		if j.BackfillOn != "" {
			on += " (" + j.BackfillOn + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d/%d\t%d/%d\t%s\t%.1f%%\t%s\n",
			j.Name, strings.Join(j.Upstreams, ","), j.Backfill, j.Parallelism, limit, yesNo(j.Paused),
			j.RowsConsumed, j.UpstreamRows, j.VnodesCompleted, j.VnodesTotal, on, j.Percent, yesNo(j.Done))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, j := range r.Jobs {
		vs, ok := r.Vnodes[j.Name]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "\n%s: per upstream vnode\n", j.Name)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "scan\tupstream\tvnode\tactor\tstate\tposition\trows")
		for _, v := range vs {
			pos := v.Position
			if pos == "" {
				pos = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%d\n", v.Scan, v.Upstream, v.Vnode, v.Actor, v.State, pos, v.Rows)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
