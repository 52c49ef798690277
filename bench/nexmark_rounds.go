package bench

import (
	"sync"
	"time"

	"github.com/seed04fbb902/weir/engine"
)

// NexmarkRound is one barrier round that ended during a build: when it ended (seconds
// since the build started), whether it was a checkpoint, its time from the barrier's
// injection until every actor passed it, its checkpoint's commit, and the cores the
// process used from the end of the round before (or the build's start) to its end:
// near 1 on a 2-core machine where one goroutine (a commit) works alone.
type NexmarkRound struct {
	EndSeconds     float64 `json:"end_seconds"`
	Checkpoint     bool    `json:"checkpoint"`
	CollectSeconds float64 `json:"collect_seconds"`
	CommitSeconds  float64 `json:"commit_seconds"`
	Cores          float64 `json:"cores"`
}

// roundLog records an engine's barrier rounds (its Options.OnBarrier) as they end.
type roundLog struct {
	mu     sync.Mutex
	rounds []loggedRound
}

type loggedRound struct {
	end time.Time
	cpu time.Duration // the process's CPU time at end
	s   engine.BarrierStats
}

func (l *roundLog) onBarrier(s engine.BarrierStats) {
	end, cpu := time.Now(), processCPU()
	l.mu.Lock()
	l.rounds = append(l.rounds, loggedRound{end: end, cpu: cpu, s: s})
	l.mu.Unlock()
}

// reset forgets the rounds logged so far, and returns the time and the process's CPU
// time from which the next rounds are measured.
func (l *roundLog) reset() (time.Time, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rounds = l.rounds[:0]
	return time.Now(), processCPU()
}

// within returns the rounds logged since the reset that returned t0 and cpu0 that
// ended from t0 to t1, their ends in seconds after t0: a round the barrier ticker
// ended just before the reset, or after the build, is not the build's.
func (l *roundLog) within(t0, t1 time.Time, cpu0 time.Duration) []NexmarkRound {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]NexmarkRound, 0, len(l.rounds))
	prev, prevCPU := t0, cpu0
	for _, r := range l.rounds {
		if r.end.Before(t0) || r.end.After(t1) {
			continue
		}
		nr := NexmarkRound{EndSeconds: r.end.Sub(t0).Seconds(), Checkpoint: r.s.Checkpoint, CollectSeconds: r.s.Latency.Seconds()}
		if d := r.end.Sub(prev); d > 0 {
			nr.Cores = float64(r.cpu-prevCPU) / float64(d)
		}
		prev, prevCPU = r.end, r.cpu
		if r.s.Checkpoint {
			nr.CommitSeconds = r.s.CheckpointDuration.Seconds()
		}
		out = append(out, nr)
	}
	return out
}
