package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/remote"
	"github.com/spf13/cobra"
)

// clusterBenchOptions are weir bench cluster's flags.
type clusterBenchOptions struct {
	rows, nodes, parallelism, reps int
	meta, dir                      string
	quiet                          bool
	profile                        string        // a directory for the processes' CPU profiles of the first cluster build
	profileFor                     time.Duration // how long each profile runs
}

// clusterBenchResult is what weir bench cluster --json prints.
type clusterBenchResult struct {
	Rows        int `json:"rows"`
	Nodes       int `json:"nodes"`
	Parallelism int `json:"parallelism"`
	// ClusterSeconds and EmbeddedSeconds are each build's seconds (CreateMV of a
	// pass-through view over bid to its return: the backfill done and committed),
	// in rep order; Ratio is cluster ÷ embedded, paired by rep.
	ClusterSeconds  []float64          `json:"cluster_seconds"`
	EmbeddedSeconds []float64          `json:"embedded_seconds"`
	Ratio           *bench.RatioStats  `json:"cluster_over_embedded"`
	LoadSeconds     map[string]float64 `json:"load_seconds"`
	// RecoverySeconds is, per rep, the time from a compute process's SIGKILL to the
	// first checkpoint committed after it (the process restarted at once).
	RecoverySeconds []float64 `json:"recovery_seconds"`
}

func newBenchCluster() *cobra.Command {
	var o clusterBenchOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "A local cluster's pass-through backfill ÷ the embedded engine's, and its recovery from a compute process's SIGKILL",
		Long: `cluster starts a local cluster (weir cluster up --nodes N: a private PostgreSQL
from scripts/pg.sh, or --meta, a bucket, N compute processes and a weir meta leader)
and an embedded engine of N nodes in this process, loads --rows Nexmark bid rows into
both through their writes, then builds a pass-through view over bid at --parallelism
in each, --reps times, alternating which goes first, and reports each build's
seconds and the paired ratio cluster ÷ embedded (geomean and 95% interval). Then,
--reps times, it kills the last compute process with SIGKILL, restarts it, and
reports the seconds from the kill to the first checkpoint committed after it.

With --profile DIR every process of the cluster serves pprof (weir cluster up
--metrics), and when the first cluster build starts the bench takes a CPU profile of
each one for --profile-for, into DIR/<role>.pprof (leader, compute-1, ...), with
one of its own process (the clients' side) as bench.pprof.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logw := cmd.ErrOrStderr()
			if o.quiet {
				logw = io.Discard
			}
			r, err := runClusterBench(cmd.Context(), o, logw)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(r)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "pass-through backfill of %d bid rows at parallelism %d, %d compute processes ÷ the embedded engine of %d nodes\n", r.Rows, r.Parallelism, r.Nodes, r.Nodes)
			fmt.Fprintf(w, "cluster seconds  %v (median %s)\nembedded seconds %v (median %s)\nratio: %s\n",
				r.ClusterSeconds, medianText(r.ClusterSeconds, 2), r.EmbeddedSeconds, medianText(r.EmbeddedSeconds, 2), pairedText(r.Ratio))
			fmt.Fprintf(w, "recovery from a compute process's SIGKILL to the next commit, seconds: %v (median %s)\n", r.RecoverySeconds, medianText(r.RecoverySeconds, 2))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.rows, "rows", 2_000_000, "bid rows to load")
	f.IntVar(&o.nodes, "nodes", 3, "compute processes (and the embedded engine's nodes)")
	f.IntVar(&o.parallelism, "parallelism", 3, "actors of bid and of each view")
	f.IntVar(&o.reps, "reps", 5, "paired builds, and kills (at least 5 for an interval worth reading)")
	f.StringVar(&o.meta, "meta", "", "PostgreSQL DSN of an empty database (default: a private server from scripts/pg.sh)")
	f.StringVar(&o.dir, "dir", "", "directory for the cluster and the engine (default: a temporary directory, removed)")
	f.BoolVar(&o.quiet, "quiet", false, "no progress lines on stderr")
	f.StringVar(&o.profile, "profile", "", "directory for CPU profiles of every process during the first cluster build")
	f.DurationVar(&o.profileFor, "profile-for", 10*time.Second, "how long each --profile profile runs")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func runClusterBench(ctx context.Context, o clusterBenchOptions, logw io.Writer) (r clusterBenchResult, err error) {
	if o.rows < 1 || o.nodes < 1 || o.parallelism < 1 || o.reps < 1 {
		return r, fmt.Errorf("bench cluster: --rows %d --nodes %d --parallelism %d --reps %d: each must be positive", o.rows, o.nodes, o.parallelism, o.reps)
	}
	r = clusterBenchResult{Rows: o.rows, Nodes: o.nodes, Parallelism: o.parallelism, LoadSeconds: map[string]float64{}}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "weir-bench-cluster-"); err != nil {
			return r, err
		}
		defer os.RemoveAll(dir)
	}
	st, err := clusterUp(ctx, filepath.Join(dir, "cluster"), clusterUpOptions{meta: o.meta, exchange: "channel", control: "channel", nodes: o.nodes, metrics: o.profile != ""})
	if err != nil {
		return r, fmt.Errorf("bench cluster: %w", err)
	}
	defer func() {
		if serr := stopCluster(st, io.Discard); err == nil && serr != nil {
			err = fmt.Errorf("bench cluster: stop the cluster: %w", serr)
		}
	}()
	leader := len(st.Processes) - 1
	c, err := remote.Dial(ctx, st.Processes[leader].Addr, nil)
	if err != nil {
		return r, err
	}
	defer c.Close()
	e, err := engine.Open(ctx, filepath.Join(dir, "embedded"), engine.Options{Nodes: o.nodes})
	if err != nil {
		return r, err
	}
	defer func() {
		if cerr := e.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	dbs := []struct {
		name string
		db   engine.DB
		secs *[]float64
	}{{"cluster", c, &r.ClusterSeconds}, {"embedded", e, &r.EmbeddedSeconds}}
	for _, d := range dbs {
		t0 := time.Now()
		if err := loadBids(ctx, d.db, o.rows, o.parallelism); err != nil {
			return r, fmt.Errorf("bench cluster: load %s: %w", d.name, err)
		}
		r.LoadSeconds[d.name] = time.Since(t0).Seconds()
		fmt.Fprintf(logw, "bench cluster: loaded %d bid rows into the %s engine in %.1fs\n", o.rows, d.name, r.LoadSeconds[d.name])
	}
	for rep := range o.reps {
		order := []int{0, 1}
		if rep%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			d := dbs[i]
			name := fmt.Sprintf("pass_%d", rep)
			if d.name == "cluster" && rep == 0 && o.profile != "" {
				stop, err := profileCluster(ctx, &st, o.profile, o.profileFor)
				if err != nil {
					return r, fmt.Errorf("bench cluster: %w", err)
				}
				defer func() {
					if perr := stop(); err == nil && perr != nil {
						err = fmt.Errorf("bench cluster: %w", perr)
					}
				}()
			}
			t0 := time.Now()
			if err := d.db.CreateMV(ctx, name, engine.Scan("bid"), engine.MVOptions{Parallelism: o.parallelism}); err != nil {
				return r, fmt.Errorf("bench cluster: build %s in the %s engine: %w", name, d.name, err)
			}
			*d.secs = append(*d.secs, time.Since(t0).Seconds())
			if err := d.db.DropMV(ctx, name); err != nil {
				return r, err
			}
			fmt.Fprintf(logw, "bench cluster: rep %d: %s built in %.2fs\n", rep, d.name, (*d.secs)[len(*d.secs)-1])
		}
	}
	r.Ratio = bench.PairedRatios(r.ClusterSeconds, r.EmbeddedSeconds)
	victim := leader - 1
	for rep := range o.reps {
		t0 := time.Now()
		if err := syscall.Kill(st.Processes[victim].PID, syscall.SIGKILL); err != nil {
			return r, err
		}
		if err := awaitExit(st.Processes[victim].PID); err != nil {
			return r, fmt.Errorf("bench cluster: %w", err)
		}
		if st.Processes[victim], err = st.Processes[victim].restart(); err != nil {
			return r, fmt.Errorf("bench cluster: %w", err)
		}
		for {
			if _, err := c.WaitCheckpoint(ctx); err == nil {
				break
			} else if ctx.Err() != nil || time.Since(t0) > 2*time.Minute {
				return r, fmt.Errorf("bench cluster: no checkpoint within 2 minutes of a SIGKILL: %w", err)
			}
		}
		r.RecoverySeconds = append(r.RecoverySeconds, time.Since(t0).Seconds())
		fmt.Fprintf(logw, "bench cluster: kill %d: a checkpoint committed %.2fs after the SIGKILL\n", rep, r.RecoverySeconds[rep])
	}
	if err := writeClusterState(filepath.Join(dir, "cluster"), st); err != nil {
		return r, err
	}
	return r, nil
}

// loadBids creates bid at parallelism and inserts rows of it through db, 65,536 at a
// time, then takes a checkpoint.
func loadBids(ctx context.Context, db engine.DB, rows, parallelism int) error {
	if err := db.CreateTable(ctx, tables.BidTable(), engine.TableOptions{Parallelism: parallelism}); err != nil {
		return err
	}
	mem := memory.NewGoAllocator()
	for start := 0; start < rows; start += bench.LoadChunkRows {
		ch := bench.BidChunk(mem, start, min(bench.LoadChunkRows, rows-start), 1)
		err := db.Insert(ctx, "bid", ch.Record())
		ch.Release()
		if err != nil {
			return err
		}
	}
	_, err := db.WaitCheckpoint(ctx)
	return err
}

// profileCluster starts a CPU profile of every process of st (served on its
// metrics address) and of this process, each running for d, into dir/<role>.pprof
// and dir/bench.pprof. The returned func waits for them and says which failed.
func profileCluster(ctx context.Context, st *clusterState, dir string, d time.Duration) (func() error, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "bench.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("profile this process: %w", err)
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	errs := make([]error, len(st.Processes))
	var wg sync.WaitGroup
	for i, p := range st.Processes {
		if p.Metrics == "" {
			errs[i] = fmt.Errorf("%s serves no pprof", p.Role)
			continue
		}
		wg.Go(func() {
			errs[i] = fetchProfile(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.Metrics, secs), filepath.Join(dir, p.Role+".pprof"))
			if errs[i] != nil {
				errs[i] = fmt.Errorf("profile %s: %w", p.Role, errs[i])
			}
		})
	}
	var ferr error
	wg.Go(func() {
		select {
		case <-time.After(time.Duration(secs) * time.Second):
		case <-ctx.Done():
		}
		pprof.StopCPUProfile()
		ferr = f.Close()
	})
	return func() error {
		wg.Wait()
		return errors.Join(append(errs, ferr)...)
	}, nil
}

// fetchProfile writes what url answers into path.
func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
