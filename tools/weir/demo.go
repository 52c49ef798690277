package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/gen"
	"github.com/seed04fbb902/weir/bench/nexmark/views"
	"github.com/seed04fbb902/weir/engine"
	"github.com/spf13/cobra"
)

// demoOptions are the flags of weir demo.
type demoOptions struct {
	dir         string
	events      uint64
	rate        float64
	parallelism int
	seed        uint64
	asJSON      bool
	progress    string // auto, bars, lines, none
	metricsAddr string
	meta        string // a PostgreSQL DSN: commit through a commit log (with bucket)
	bucket      string
	nodeStores  bool   // engine.Options.NodeStores (with meta and bucket)
	exchange    string // channel or flight: how edges between nodes travel
	control     string // channel or grpc: how the actors' reports travel
	cluster     int    // compute processes of a local cluster (0: the embedded engine)
}

// demoMV is one view of the demo's summary.
type demoMV struct {
	Name            string  `json:"name"`
	Rows            int     `json:"rows"`
	BackfillSeconds float64 `json:"backfill_seconds"`
	Verified        bool    `json:"verified"`
	Mismatches      int     `json:"mismatches"`
}

// demoResult is what weir demo --json prints.
type demoResult struct {
	MVs        []demoMV `json:"mvs"`
	Rescales   int      `json:"rescales"`
	Throttles  int      `json:"throttles"`
	Pauses     int      `json:"pauses"`
	Recoveries int      `json:"recoveries"`
	// ControlsMidway counts the controls (rescales, throttles, pause, resume, crash)
	// made while at least one backfill was running.
	ControlsMidway int `json:"controls_midway"`
	// Events is the events loaded before the views, EventsDuring those written while
	// they were built (some lost to the crash: only committed ones count).
	Events       uint64  `json:"events"`
	EventsDuring uint64  `json:"events_during"`
	Seconds      float64 `json:"seconds"`
	Dir          string  `json:"dir,omitempty"`
	// LogSequence is the commit log's committed sequence at the end (--meta and
	// --bucket; 0 without a commit log).
	LogSequence uint64 `json:"log_sequence,omitempty"`
	// Exchange is how edges between nodes traveled (--exchange); ExchangeEdges the
	// Arrow Flight streams opened (flight only).
	Exchange      string `json:"exchange"`
	ExchangeEdges int64  `json:"exchange_edges,omitempty"`
	// Control is how the actors' reports traveled (--control).
	Control string `json:"control"`
	// Cluster is the compute processes of --cluster; NodeKills counts those killed
	// (SIGKILL) and restarted, LeaderChanges the meta leaders that took over (the
	// demo runs one). Both are set with --cluster only.
	Cluster       int  `json:"cluster,omitempty"`
	NodeKills     *int `json:"node_kills,omitempty"`
	LeaderChanges *int `json:"leader_changes,omitempty"`
}

func newDemo() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Build the Nexmark views by arrangement backfill while events flow, through rescales, throttles, pauses and a crash",
		Long: `demo opens an embedded engine in a fresh directory (kept with --dir, removed
otherwise), creates the Nexmark tables person, auction and bid, loads --events
generated events, then keeps the generator writing at --rate events/s while it creates
the views of q0, q4, q7, q8 and q16 by arrangement backfill. During their backfill it
rescales q4 up and q8 down, throttles q7 and lifts the limit, pauses and resumes
every job, and crashes the engine once (no last checkpoint) and reopens it. When every
backfill is done it stops the writer, takes a checkpoint, checks each view against its
query's oracle (a batch evaluation over the committed tables), and prints a summary;
--json prints one JSON object.

Progress goes to stderr: a bar per job on a terminal, a line every few seconds
otherwise (--progress). With --metrics-addr it serves Prometheus metrics at /metrics
and net/http/pprof at /debug/pprof/ while it runs. With --dir, the directory stays for
weir status and weir export.

With --meta DSN and --bucket URL the engine commits its checkpoints through a commit
log (engine/cluster/commitlog): the version log in that PostgreSQL database, which
must hold none yet, and the checkpoints' sstables in that bucket (file:///dir). The
crash then also empties the engine's directory, and the reopened engine rebuilds it
from the log. --node-stores gives each of the engine's nodes a store of its own,
exported apart and committed together at every checkpoint.

With --exchange flight every edge between actors on different nodes is an Arrow
Flight stream (engine/cluster/exchange's Mesh: one exchange server per node on
loopback), carrying what a stream between processes carries; --control grpc makes
every actor's report a frame of its node's gRPC control stream (control.Local).

With --cluster N it runs on a local cluster instead (weir cluster up --nodes N in
the demo's directory: a private PostgreSQL through scripts/pg.sh, or --meta, a
bucket, N weir compute processes and a weir meta leader), through a client of the
leader: the views' actors run in the compute processes. At about 40% of the views'
snapshot rows it kills the last compute process with SIGKILL, restarts it on its
directory and lifts the views' pace; the engine recovers, every backfill resumes
from its committed progress, and every view is checked against its oracle. --json
adds node_kills and leader_changes. The cluster is stopped at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			run := runDemo
			if o.cluster > 0 {
				run = runClusterDemo
			}
			res, err := run(cmd.Context(), o, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := printDemo(cmd.OutOrStdout(), res, o.asJSON); err != nil {
				return err
			}
			for _, mv := range res.MVs {
				if !mv.Verified {
					return fmt.Errorf("demo: view %s differs from its oracle (%d mismatches)", mv.Name, mv.Mismatches)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "engine directory to create and keep (must not exist or be empty; default: a temporary directory, removed)")
	f.Uint64Var(&o.events, "events", 100_000, "events to load before creating the views")
	f.Float64Var(&o.rate, "rate", 2_000, "events/s the generator writes while the views are built")
	f.IntVar(&o.parallelism, "parallelism", 2, "actors of each table and each view")
	f.Uint64Var(&o.seed, "seed", 1, "the generator's run seed")
	f.BoolVar(&o.asJSON, "json", false, "print one JSON object")
	f.StringVar(&o.progress, "progress", "auto", "progress display on stderr: auto (bars on a terminal, lines otherwise), bars, lines or none")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics and pprof on this address (e.g. 127.0.0.1:9090)")
	f.StringVar(&o.meta, "meta", "", "PostgreSQL DSN of an empty database: commit through a commit log there (with --bucket)")
	f.StringVar(&o.bucket, "bucket", "", "bucket URL (file:///dir) for the commit log's sstables (with --meta)")
	f.BoolVar(&o.nodeStores, "node-stores", false, "give every node a store of its own, committed together through the commit log (with --meta and --bucket)")
	f.StringVar(&o.exchange, "exchange", "channel", "how edges between nodes travel: channel (Go channels) or flight (Arrow Flight streams on loopback)")
	f.StringVar(&o.control, "control", "channel", "how the actors' reports reach the coordinator: channel or grpc (a control stream per node on loopback)")
	f.IntVar(&o.cluster, "cluster", 0, "run on a local cluster of this many compute processes under a weir meta leader (PostgreSQL from scripts/pg.sh, or --meta), one of them killed and restarted mid-backfill")
	return cmd
}

// demoMaxPace caps the views' starting pace, in snapshot rows/s per actor. Faster,
// five views keep 2 cores saturated: every barrier then waits behind seconds of
// queued work in the joins and aggregations, and so does every control (each rides
// on a barrier), which would land only after the backfills.
const demoMaxPace = 2000

// demoWriter writes events at a rate into whichever engine is current.
type demoWriter struct {
	mu      sync.Mutex
	e       engine.DB
	g       *gen.Generator
	mem     memory.Allocator
	next    uint64
	written atomic.Uint64
	stop    chan struct{}
	done    chan struct{}
}

func (w *demoWriter) run(rate float64) {
	defer close(w.done)
	_ = views.PaceEvents(w.stop, w.next, rate, 20*time.Millisecond, func(lo, hi uint64) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		for kind, c := range w.g.Chunks(lo, hi, 1024, w.mem) {
			// A write that a crash or close cuts short is lost, as a client's would be.
			_ = w.e.Insert(context.Background(), kind.String(), c.Record())
			c.Release()
		}
		w.written.Add(hi - lo)
		w.next = hi
		return nil
	})
}

func runDemo(ctx context.Context, o demoOptions, logw io.Writer) (res demoResult, err error) {
	if o.parallelism < 1 {
		return res, fmt.Errorf("demo: parallelism %d, want at least 1", o.parallelism)
	}
	if o.rate < 0 {
		return res, fmt.Errorf("demo: rate %v, want >= 0", o.rate)
	}
	t0 := time.Now()
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "weir-demo-"); err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
	} else {
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			return res, fmt.Errorf("demo: directory %s is not empty (the demo creates a fresh engine; pick a new --dir)", dir)
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, fmt.Errorf("demo: directory %s: %w", dir, err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return res, fmt.Errorf("demo: %w", err)
		}
		res.Dir, _ = filepath.Abs(dir)
	}
	say := func(format string, args ...any) {
		if o.progress != "none" {
			fmt.Fprintf(logw, "demo: "+format+"\n", args...)
		}
	}
	logger := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if o.nodeStores && (o.meta == "" || o.bucket == "") {
		return res, fmt.Errorf("demo: --node-stores commits the nodes' stores together through a commit log: it takes --meta and --bucket")
	}
	opts := engine.Options{Logger: logger, NodeStores: o.nodeStores}
	var metrics *demoMetrics
	if o.metricsAddr != "" {
		if metrics, err = serveMetrics(o.metricsAddr, nil); err != nil {
			return res, fmt.Errorf("demo: metrics: %w", err)
		}
		defer metrics.close()
		opts.OnBarrier = metrics.onBarrier
		say("metrics at http://%s/metrics, pprof at http://%s/debug/pprof/", metrics.addr, metrics.addr)
	}
	mesh, err := openExchange(o.exchange, &opts)
	if err != nil {
		return res, fmt.Errorf("demo: %w", err)
	}
	if mesh != nil {
		defer func() {
			if cerr := mesh.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("demo: close the exchange: %w", cerr)
			}
		}()
		say("edges between nodes travel as Arrow Flight streams on %s and %s", mesh.Addr(0), mesh.Addr(1))
	}
	res.Exchange = o.exchange
	ctl, err := openControl(o.control, &opts)
	if err != nil {
		return res, fmt.Errorf("demo: %w", err)
	}
	if ctl != nil {
		defer ctl.Close()
		say("the actors report over control streams to %s", ctl.Addr())
	}
	res.Control = o.control
	clog, err := openDemoLog(ctx, o, logger)
	if err != nil {
		return res, err
	}
	if clog != nil {
		defer func() {
			if cerr := clog.close(); err == nil && cerr != nil {
				err = cerr
			}
		}()
		opts.CommitLog = clog.log
		say("committing through the commit log in %s and bucket %s", clog.meta, o.bucket)
	}
	e, err := engine.Open(ctx, dir, opts)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := e.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	w, created, pace, err := startDemo(ctx, e, o, &res, say)
	if err != nil {
		return res, err
	}
	stopWriter := sync.OnceFunc(func() { close(w.stop); <-w.done })
	defer stopWriter()
	say("created the views %v by arrangement backfill, paced at %d snapshot rows/s per actor; the generator writes %.0f events/s", views.Queries, pace, o.rate)

	disp := newProgressDisplay(o.progress, logw)
	finished := map[string]time.Duration{}
	watch := func() {
		ps := e.Progress()
		disp.update(ps)
		if metrics != nil {
			metrics.observe(e, ps)
		}
		for _, p := range ps {
			if _, ok := finished[p.Name]; !ok && p.Done {
				finished[p.Name] = time.Since(created[p.Name])
			}
		}
	}
	pause := func(d time.Duration) error {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			watch()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	}
	step := func(what string, f func() error) error {
		running := 0
		for _, p := range e.Progress() {
			if !p.Done {
				running++
			}
		}
		if err := f(); err != nil {
			return fmt.Errorf("demo: %s: %w", what, err)
		}
		if running > 0 {
			res.ControlsMidway++
		}
		disp.note(fmt.Sprintf("%s (%d of %d backfills running)", what, running, len(views.Queries)))
		return nil
	}
	limit := max(int64(100), pace/4)
	steps := []struct {
		what  string
		after time.Duration
		do    func() error
	}{
		{"rescale q4 from 2 to 3 actors", 500 * time.Millisecond, func() error { res.Rescales++; return e.RescheduleMV(ctx, "q4", o.parallelism+1) }},
		{"rescale q8 from 2 to 1 actor", 300 * time.Millisecond, func() error { res.Rescales++; return e.RescheduleMV(ctx, "q8", max(1, o.parallelism-1)) }},
		{fmt.Sprintf("throttle q7 to %d snapshot rows/s per actor", limit), 300 * time.Millisecond, func() error { res.Throttles++; return e.SetRateLimit(ctx, "q7", &limit) }},
		{"pause every job", time.Second, func() error { res.Pauses++; return e.Pause(ctx) }},
		{"resume every job", time.Second, func() error { return e.Resume(ctx) }},
		{"lift q7's limit", 500 * time.Millisecond, func() error { return e.SetRateLimit(ctx, "q7", nil) }},
		{"crash the engine and reopen it", 500 * time.Millisecond, func() error {
			w.mu.Lock()
			defer w.mu.Unlock()
			if err := e.Crash(); err != nil {
				return err
			}
			if clog != nil {
				if err := emptyDir(dir); err != nil {
					return err
				}
				say("emptied %s: the reopened engine rebuilds it from the commit log", dir)
			}
			ne, err := engine.Open(ctx, dir, opts)
			if err != nil {
				return err
			}
			e, w.e = ne, ne
			res.Recoveries++
			return nil
		}},
		{"lift the pace of every view", 500 * time.Millisecond, func() error {
			for _, q := range views.Queries {
				if err := e.SetRateLimit(ctx, q, nil); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, s := range steps {
		if err := pause(s.after); err != nil {
			return res, err
		}
		if err := step(s.what, s.do); err != nil {
			return res, err
		}
	}
	for {
		watch()
		if len(finished) == len(views.Queries) {
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	disp.done()
	stopWriter()
	if err := verifyDemo(ctx, e, w, finished, &res, say); err != nil {
		return res, err
	}
	res.Recoveries += e.Recoveries() - 1 // recoveries from actor failures, beyond the reopen
	if clog != nil {
		if res.LogSequence, err = clog.sequence(ctx); err != nil {
			return res, err
		}
	}
	if mesh != nil {
		res.ExchangeEdges = mesh.Opened()
	}
	res.Seconds = time.Since(t0).Seconds()
	return res, nil
}

// startDemo creates the Nexmark tables in db, loads o.events events, starts the
// writer at o.rate, and creates the views by arrangement backfill, paced (a rate
// limit per actor: demoMaxPace, or less for a small load, whose backfill it spreads
// over about 15 seconds) so that the demo's controls and faults happen while they
// backfill. It returns the writer (running: the caller stops it), when each view
// was created, and the pace.
func startDemo(ctx context.Context, db engine.DB, o demoOptions, res *demoResult, say func(string, ...any)) (w *demoWriter, created map[string]time.Time, pace int64, err error) {
	for _, t := range views.Tables() {
		if err := db.CreateTable(ctx, t, engine.TableOptions{Parallelism: o.parallelism}); err != nil {
			return nil, nil, 0, err
		}
	}
	mem := memory.NewGoAllocator()
	g := gen.New(gen.Config{Seed: o.seed})
	tl := time.Now()
	if err := views.WriteEvents(ctx, db, g, mem, 0, o.events); err != nil {
		return nil, nil, 0, err
	}
	if _, err := db.WaitCheckpoint(ctx); err != nil {
		return nil, nil, 0, err
	}
	res.Events = o.events
	say("loaded %d events into person, auction and bid in %.1fs", o.events, time.Since(tl).Seconds())
	w = &demoWriter{e: db, g: g, mem: mem, next: o.events, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run(o.rate)
	pace = min(demoMaxPace, max(int64(1000), int64(o.events)/int64(15*o.parallelism)))
	created = map[string]time.Time{}
	for _, q := range views.Queries {
		plan, err := views.Plan(q)
		if err == nil {
			err = db.CreateMV(ctx, q, plan, engine.MVOptions{Parallelism: o.parallelism, Background: true, RateLimit: &pace})
		}
		if err != nil {
			close(w.stop)
			<-w.done
			return nil, nil, 0, err
		}
		created[q] = time.Now()
	}
	return w, created, pace, nil
}

// verifyDemo records the events w wrote and checks every view of db against its
// oracle (the writer stopped), into res, with each view's backfill seconds.
func verifyDemo(ctx context.Context, db engine.DB, w *demoWriter, finished map[string]time.Duration, res *demoResult, say func(string, ...any)) error {
	res.EventsDuring = w.written.Load()
	say("every backfill is done; the generator stopped after %d more events; checking every view against its oracle", res.EventsDuring)
	checks, err := views.Verify(ctx, db, views.Queries)
	if err != nil {
		return err
	}
	for _, c := range checks {
		res.MVs = append(res.MVs, demoMV{Name: c.Query, Rows: c.Rows, BackfillSeconds: finished[c.Query].Seconds(), Verified: c.Verified, Mismatches: c.Mismatches})
		if !c.Verified {
			say("%s differs from its oracle: %s", c.Query, c.Detail)
		}
	}
	return nil
}

func printDemo(w io.Writer, r demoResult, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(r)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VIEW\tROWS\tBACKFILL S\tVERIFIED\tMISMATCHES")
	for _, mv := range r.MVs {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%v\t%d\n", mv.Name, mv.Rows, mv.BackfillSeconds, mv.Verified, mv.Mismatches)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d events loaded, %d written during the backfills; %d rescales, %d throttles, %d pauses, %d recoveries (%d controls while backfills ran); %.1fs in all\n",
		r.Events, r.EventsDuring, r.Rescales, r.Throttles, r.Pauses, r.Recoveries, r.ControlsMidway, r.Seconds)
	if r.LogSequence > 0 {
		fmt.Fprintf(w, "the commit log is at sequence %d\n", r.LogSequence)
	}
	if r.Cluster > 0 && r.NodeKills != nil && r.LeaderChanges != nil {
		fmt.Fprintf(w, "%d compute processes; %d killed with SIGKILL and restarted; %d leader changes\n", r.Cluster, *r.NodeKills, *r.LeaderChanges)
	}
	if r.ExchangeEdges > 0 {
		fmt.Fprintf(w, "%d edges between nodes were Arrow Flight streams\n", r.ExchangeEdges)
	}
	if r.Dir != "" {
		fmt.Fprintf(w, "the engine directory is %s (see weir status --dir and weir export --dir)\n", r.Dir)
	}
	return nil
}
