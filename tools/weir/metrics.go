package main

import (
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/seed04fbb902/weir/engine"
)

// demoMetrics serves Prometheus metrics of the engine's jobs and barriers, and pprof.
type demoMetrics struct {
	addr string
	srv  *http.Server
	reg  *prometheus.Registry

	snapshotRows   *prometheus.GaugeVec
	upstreamRows   *prometheus.GaugeVec
	vnodes         *prometheus.GaugeVec
	rowsPerSecond  *prometheus.GaugeVec
	done           *prometheus.GaugeVec
	replicated     *prometheus.GaugeVec
	actorRows      *prometheus.GaugeVec
	actorVnodes    *prometheus.GaugeVec
	actorUpstream  *prometheus.GaugeVec
	forwarded      *prometheus.GaugeVec
	actorForwarded *prometheus.GaugeVec
	recoveries     prometheus.Gauge
	committedEpoch prometheus.Gauge
	barrierLatency prometheus.Histogram
	checkpointDur  prometheus.Histogram
}

// serveMetrics listens on addr and serves /metrics (every metric with labels) and
// /debug/pprof/.
func serveMetrics(addr string, labels prometheus.Labels) (*demoMetrics, error) {
	m := &demoMetrics{reg: prometheus.NewRegistry()}
	job := []string{"job"}
	m.snapshotRows = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_backfill_snapshot_rows", Help: "Snapshot rows the job's backfill has read."}, job)
	m.upstreamRows = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_backfill_upstream_rows", Help: "The upstreams' committed rows: the backfill's estimate."}, job)
	m.vnodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_backfill_vnodes", Help: "Upstream vnodes of the job by backfill state (completed, remaining)."}, []string{"job", "state"})
	m.rowsPerSecond = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_backfill_rows_per_second", Help: "Snapshot rows read per second, between two samples."}, job)
	m.done = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_backfill_done", Help: "1 once every actor of the job finished its backfill."}, job)
	m.replicated = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_backfill_replicated_bytes", Help: "Memory the job's replicated epochs hold."}, job)
	actor := []string{"job", "actor", "upstream"}
	m.actorRows = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_backfill_actor_snapshot_rows", Help: "Snapshot rows a backfill actor has read."}, actor)
	m.actorVnodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_backfill_actor_vnodes", Help: "A backfill actor's upstream vnodes by state (completed, remaining)."}, append(actor, "state"))
	m.actorUpstream = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_backfill_actor_upstream_messages", Help: "Upstream messages (chunks and barriers) a backfill actor took while backfilling."}, actor)
	m.forwarded = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_backfill_upstream_rows_forwarded", Help: "Upstream rows the job's backfill actors passed downstream since they started."}, job)
	m.actorForwarded = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_backfill_actor_upstream_rows_forwarded", Help: "Upstream rows a backfill actor passed downstream since it started (at once, or marked at a barrier)."}, actor)
	m.recoveries = prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_recoveries", Help: "Recoveries of the running engine (its open included)."})
	m.committedEpoch = prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_committed_epoch", Help: "The epoch of the last checkpoint."})
	m.barrierLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "weir_barrier_latency_seconds", Help: "From injecting a barrier until every actor passed it on.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	m.checkpointDur = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "weir_checkpoint_duration_seconds", Help: "The commit of a checkpoint.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	prometheus.WrapRegistererWith(labels, m.reg).MustRegister(m.actorRows, m.actorVnodes, m.actorUpstream, m.forwarded, m.actorForwarded, m.snapshotRows, m.upstreamRows, m.vnodes, m.rowsPerSecond, m.done, m.replicated, m.recoveries, m.committedEpoch,
		m.barrierLatency, m.checkpointDur, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	m.addr = ln.Addr().String()
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the demo goes on without its metrics
		}
	}()
	return m, nil
}

// onBarrier records a barrier round (engine.Options.OnBarrier).
func (m *demoMetrics) onBarrier(s engine.BarrierStats) {
	m.barrierLatency.Observe(s.Latency.Seconds())
	if s.Checkpoint {
		m.checkpointDur.Observe(s.CheckpointDuration.Seconds())
	}
}

// observe records the jobs' progress.
func (m *demoMetrics) observe(e *engine.Engine, ps []engine.JobProgress) {
	for _, p := range ps {
		m.snapshotRows.WithLabelValues(p.Name).Set(float64(p.RowsConsumed))
		m.upstreamRows.WithLabelValues(p.Name).Set(float64(p.UpstreamRows))
		m.vnodes.WithLabelValues(p.Name, "completed").Set(float64(p.VnodesCompleted))
		m.vnodes.WithLabelValues(p.Name, "remaining").Set(float64(p.VnodesTotal - p.VnodesCompleted))
		m.rowsPerSecond.WithLabelValues(p.Name).Set(p.RowsPerSecond)
		m.replicated.WithLabelValues(p.Name).Set(float64(p.ReplicatedBytes))
		done := 0.0
		if p.Done {
			done = 1
		}
		m.done.WithLabelValues(p.Name).Set(done)
		var forwarded int64
		for _, a := range p.Actors {
			id := strconv.FormatUint(uint64(a.Actor), 10)
			m.actorRows.WithLabelValues(p.Name, id, a.Upstream).Set(float64(a.Rows))
			m.actorVnodes.WithLabelValues(p.Name, id, a.Upstream, "completed").Set(float64(a.Completed))
			m.actorVnodes.WithLabelValues(p.Name, id, a.Upstream, "remaining").Set(float64(a.Owned - a.Completed))
			m.actorUpstream.WithLabelValues(p.Name, id, a.Upstream).Set(float64(a.UpstreamMessages))
			m.actorForwarded.WithLabelValues(p.Name, id, a.Upstream).Set(float64(a.UpstreamRowsForwarded))
			forwarded += a.UpstreamRowsForwarded
		}
		m.forwarded.WithLabelValues(p.Name).Set(float64(forwarded))
	}
	m.recoveries.Set(float64(e.Recoveries()))
	m.committedEpoch.Set(float64(e.CommittedEpoch()))
}

func (m *demoMetrics) close() { m.srv.Close() }
