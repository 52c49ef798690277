package bench

import (
	"sync"
	"time"

	"github.com/seed04fbb902/weir/engine"
)

// NexmarkRound is one barrier round that ended during a build: when it ended (seconds
// since the build started), whether it was a checkpoint, its time from the barrier's
// injection until every actor passed it, and its checkpoint's commit.
type NexmarkRound struct {
	EndSeconds     float64 `json:"end_seconds"`
	Checkpoint     bool    `json:"checkpoint"`
	CollectSeconds float64 `json:"collect_seconds"`
	CommitSeconds  float64 `json:"commit_seconds"`
}

// roundLog records an engine's barrier rounds (its Options.OnBarrier) as they end.
type roundLog struct {
	mu     sync.Mutex
	rounds []loggedRound
}

type loggedRound struct {
	end time.Time
	s   engine.BarrierStats
}

func (l *roundLog) onBarrier(s engine.BarrierStats) {
	end := time.Now()
	l.mu.Lock()
	l.rounds = append(l.rounds, loggedRound{end: end, s: s})
	l.mu.Unlock()
}

// reset forgets the rounds logged so far.
func (l *roundLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rounds = l.rounds[:0]
}

// since returns the rounds logged since the last reset, their ends in seconds after
// t0.
func (l *roundLog) since(t0 time.Time) []NexmarkRound {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]NexmarkRound, 0, len(l.rounds))
	for _, r := range l.rounds {
		nr := NexmarkRound{EndSeconds: r.end.Sub(t0).Seconds(), Checkpoint: r.s.Checkpoint, CollectSeconds: r.s.Latency.Seconds()}
		if r.s.Checkpoint {
			nr.CommitSeconds = r.s.CheckpointDuration.Seconds()
		}
		out = append(out, nr)
	}
	return out
}
