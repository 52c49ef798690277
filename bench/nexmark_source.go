package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/gen"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
)

// NexmarkSourceConfig configures a NexmarkSource.
type NexmarkSourceConfig struct {
	Gen   *gen.Generator    // the run's generator (required)
	Kind  gen.Kind          // the table the source emits: its rows and its schema
	Actor executors.ActorID // the source actor's id: a Stop (or Update) naming it ends the source
	Split int               // this source generates the events Split, Split+Of, Split+2*Of, ...
	Of    int               // the number of splits (default 1)
	From  uint64            // the first event number (a restart passes the committed Position)
	To    uint64            // the end of the event range [From, To); 0: unbounded
	Rate  float64           // events/s of this split, all kinds counted; 0: unthrottled
	// ChunkRows is the most rows a chunk holds (default 1024).
	ChunkRows int
	// MaxDelay is the longest a rate-limited source holds rows back to fill a chunk
	// (default 50ms): below ChunkRows rows' worth of rate, it emits what the rate allows
	// at most every MaxDelay.
	MaxDelay time.Duration
	Mem      memory.Allocator // chunks' allocator (default memory.DefaultAllocator)
	Now      func() time.Time // the clock the rate follows (default time.Now; tests fake it)
}

// nexmarkPoll is the longest the source sleeps before looking at its clock again while
// it waits for its rate (the clock may be fake, so no timer can be trusted to match it).
const nexmarkPoll = 10 * time.Millisecond

// NexmarkSource is a source executor of one Nexmark table (person, auction or bid): it
// emits Insert chunks of the generated rows of its kind for the events of its split, in
// event order, and passes on the barriers of its barrier input.
//
// The rows of splits 0..Of-1 of [From, To) together are exactly the rows of that kind
// that gen.Generator.Chunks(From, To) yields: each chunk is one Generator.Fill of a
// range of this split's events with only this kind's builder (reserved by Fill).
//
// Barriers stay prompt: a goroutine, started by the first Next (with its context's values
// but not its cancellation) and stopped by Close, reads the barrier input
// into a one-message channel. Next looks at that channel (without blocking) before
// every chunk it generates and returns a waiting barrier first, so a barrier waits at
// most for the generation of the chunk in progress (ChunkRows rows). When the source
// has nothing to emit (paused, rate-limited or past To) Next blocks on that channel and
// ctx only, waking up every nexmarkPoll to re-read the clock while rate-limited.
//
// Rate limits the events of the split (of all kinds, so that the person, auction and
// bid sources of a split advance together in event time): by Now() - start, at most
// Rate × elapsed events past the starting position have been emitted, where start is
// the first Next (and, after a Pause, the Resume: a paused source does not catch up).
// Rows are emitted in full chunks when the rate allows ChunkRows rows, else what the
// rate allows at most every MaxDelay.
//
// Mutations: the engine's Pause (one without Fragments) stops the rows until the
// engine's Resume (barriers keep flowing); a view's own pause (Pause with Fragments)
// concerns backfills, not sources; an Add naming
// the actor with PauseOnBootstrap pauses it too; a Stop or an Update naming the actor
// (executors.Stops) passes the barrier on, then Next returns io.EOF. Throttle does not
// concern sources. The barrier input ending (io.EOF) ends the source.
//
// Position is the next event number of the split to generate: every event of the split
// below it has been emitted. The source does not persist it: the caller stores it with
// its checkpoint (the position at the checkpoint barrier) and, after a crash, restarts
// the source with From set to the committed position.
type NexmarkSource struct {
	cfg    NexmarkSourceConfig
	input  executors.Executor
	schema *arrow.Schema
	now    func() time.Time

	of, split uint64
	// The split's events are numbered by index j: event split + j*of. j is the next
	// index to generate, end the index past the last (To), limitBase and limitStart
	// the index and time the rate budget counts from.
	j, end     uint64
	limitBase  uint64
	limitStart time.Time
	lastEmit   time.Time
	// cnt[i] is the number of rows of the kind among indexes [0, i) (mod period): the
	// kinds of the split's events repeat every period = 50 / gcd(of, 50) indexes.
	cnt    []uint64
	period uint64

	person  *tables.PersonBuilder
	auction *tables.AuctionBuilder
	bid     *tables.BidBuilder

	started  bool
	paused   bool
	finished bool // stopped or input ended: Next returns io.EOF
	barriers chan barrierOrErr
	cancel   context.CancelFunc
	pumpDone chan struct{}
	timer    *time.Timer
}

type barrierOrErr struct {
	m   executors.Message
	err error
}

// NewNexmarkSource returns the source of cfg, whose barriers come from barriers (which
// should deliver barriers only; a chunk from it is an error). The source owns barriers
// and closes it.
func NewNexmarkSource(barriers executors.Executor, cfg NexmarkSourceConfig) (*NexmarkSource, error) {
	if cfg.Of == 0 {
		cfg.Of = 1
	}
	switch {
	case cfg.Gen == nil:
		return nil, errors.New("nexmark source: no generator")
	case barriers == nil:
		return nil, errors.New("nexmark source: no barrier input")
	case cfg.Of < 1 || cfg.Split < 0 || cfg.Split >= cfg.Of:
		return nil, fmt.Errorf("nexmark source %s: split %d of %d", cfg.Kind, cfg.Split, cfg.Of)
	case cfg.To != 0 && cfg.To < cfg.From:
		return nil, fmt.Errorf("nexmark source %s: event range [%d, %d)", cfg.Kind, cfg.From, cfg.To)
	case cfg.Rate < 0 || math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0):
		return nil, fmt.Errorf("nexmark source %s: rate %v events/s", cfg.Kind, cfg.Rate)
	case cfg.ChunkRows < 0:
		return nil, fmt.Errorf("nexmark source %s: %d rows per chunk", cfg.Kind, cfg.ChunkRows)
	}
	if cfg.ChunkRows == 0 {
		cfg.ChunkRows = 1024
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = 50 * time.Millisecond
	}
	if cfg.Mem == nil {
		cfg.Mem = memory.DefaultAllocator
	}
	s := &NexmarkSource{cfg: cfg, input: barriers, now: cfg.Now, of: uint64(cfg.Of), split: uint64(cfg.Split)}
	if s.now == nil {
		s.now = time.Now
	}
	switch cfg.Kind {
	case gen.KindPerson:
		s.schema = tables.PersonTable().ArrowSchema()
		s.person = tables.NewPersonBuilder(cfg.Mem)
	case gen.KindAuction:
		s.schema = tables.AuctionTable().ArrowSchema()
		s.auction = tables.NewAuctionBuilder(cfg.Mem)
	case gen.KindBid:
		s.schema = tables.BidTable().ArrowSchema()
		s.bid = tables.NewBidBuilder(cfg.Mem)
	default:
		return nil, fmt.Errorf("nexmark source: unknown kind %s", cfg.Kind)
	}
	s.j = s.indexAtOrAfter(cfg.From)
	s.end = (math.MaxUint64 - s.split) / s.of // unbounded: as far as event numbers go
	if cfg.To != 0 {
		s.end = s.indexAtOrAfter(cfg.To)
	}
	s.period = gen.TotalProportion / gcd(s.of, gen.TotalProportion)
	s.cnt = make([]uint64, s.period+1)
	for i := range s.period {
		s.cnt[i+1] = s.cnt[i]
		if gen.KindOf(s.split+i*s.of) == cfg.Kind {
			s.cnt[i+1]++
		}
	}
	return s, nil
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// indexAtOrAfter is the index of the split's first event at or after event n.
func (s *NexmarkSource) indexAtOrAfter(n uint64) uint64 {
	if n <= s.split {
		return 0
	}
	return (n-s.split-1)/s.of + 1
}

// rowsBelow is the number of rows of the kind among the split's indexes [0, j).
func (s *NexmarkSource) rowsBelow(j uint64) uint64 {
	return j/s.period*s.cnt[s.period] + s.cnt[j%s.period]
}

// indexAfterRows is the index just past the rows-th row of the kind at or after index
// j (end when the split has no rows of the kind).
func (s *NexmarkSource) indexAfterRows(j, rows uint64) uint64 {
	per := s.cnt[s.period]
	if per == 0 {
		return s.end
	}
	t := s.rowsBelow(j) + rows
	q := (t - 1) / per
	r := t - q*per
	i := uint64(1)
	for s.cnt[i] < r {
		i++
	}
	return q*s.period + i
}

// Position is the next event number of the split to generate: every event of the split
// below it has been emitted (it may exceed To once the range is done). Restarting with
// From = Position resumes exactly after the rows emitted.
func (s *NexmarkSource) Position() uint64 {
	return s.split + s.j*s.of
}

// Schema implements executors.Executor: the Arrow schema of the source's table.
func (s *NexmarkSource) Schema() *arrow.Schema { return s.schema }

// Next implements executors.Executor.
func (s *NexmarkSource) Next(ctx context.Context) (executors.Message, error) {
	if s.finished {
		return executors.Message{}, io.EOF
	}
	if err := ctx.Err(); err != nil {
		return executors.Message{}, err
	}
	if !s.started {
		s.start(ctx)
	}
	for {
		select {
		case b := <-s.barriers:
			return s.onBarrier(b)
		default:
		}
		c, wait := s.produce()
		if c != nil {
			return executors.ChunkMessage(c), nil
		}
		var wake <-chan time.Time
		if wait > 0 {
			s.timer.Reset(wait)
			wake = s.timer.C
		}
		select {
		case b := <-s.barriers:
			s.timer.Stop()
			return s.onBarrier(b)
		case <-ctx.Done():
			s.timer.Stop()
			return executors.Message{}, ctx.Err()
		case <-wake:
		}
	}
}

func (s *NexmarkSource) start(ctx context.Context) {
	s.started = true
	now := s.now()
	s.limitBase, s.limitStart, s.lastEmit = s.j, now, now
	s.timer = time.NewTimer(time.Hour)
	s.timer.Stop()
	s.barriers = make(chan barrierOrErr, 1)
	s.pumpDone = make(chan struct{})
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	go s.pump(pctx)
}

// pump reads the barrier input into s.barriers until an error (io.EOF included).
func (s *NexmarkSource) pump(ctx context.Context) {
	defer close(s.pumpDone)
	for {
		m, err := s.input.Next(ctx)
		select {
		case s.barriers <- barrierOrErr{m, err}:
		case <-ctx.Done():
			m.Release()
			return
		}
		if err != nil {
			return
		}
	}
}

func (s *NexmarkSource) onBarrier(b barrierOrErr) (executors.Message, error) {
	if b.err != nil {
		s.finished = true
		if b.err == io.EOF {
			return executors.Message{}, io.EOF
		}
		return executors.Message{}, fmt.Errorf("nexmark source %s split %d of %d: barrier input: %w", s.cfg.Kind, s.split, s.of, b.err)
	}
	if b.m.Chunk != nil {
		b.m.Release()
		s.finished = true
		return executors.Message{}, fmt.Errorf("nexmark source %s split %d of %d: the barrier input sent a chunk", s.cfg.Kind, s.split, s.of)
	}
	bar := b.m.Barrier
	if bar == nil {
		return b.m, nil // a watermark passes through
	}
	switch m := bar.Mutation.(type) {
	case executors.Pause:
		s.paused = s.paused || m.Engine()
	case executors.Resume:
		if s.paused && m.Engine() {
			s.paused = false
			s.limitBase, s.limitStart = s.j, s.now()
		}
	case executors.Add:
		if m.PauseOnBootstrap && slices.Contains(m.Actors, s.cfg.Actor) {
			s.paused = true
		}
	}
	if bar.Mutation != nil && executors.Stops(bar.Mutation, s.cfg.Actor) {
		s.finished = true
	}
	return b.m, nil
}

// produce generates the next chunk the rate allows, or returns how long to wait before
// trying again (0: until a barrier).
func (s *NexmarkSource) produce() (*vec.Chunk, time.Duration) {
	rows := uint64(s.cfg.ChunkRows)
	for {
		if s.paused || s.j >= s.end {
			return nil, 0
		}
		full := min(s.indexAfterRows(s.j, rows), s.end)
		stop := full
		var now time.Time
		if s.cfg.Rate > 0 {
			now = s.now()
			stop = min(stop, s.limit(now))
		}
		if s.rowsBelow(stop) == s.rowsBelow(s.j) {
			// No row of the kind before stop: skip the split's other events.
			if stop > s.j {
				s.j = stop
				continue
			}
			if s.cfg.Rate == 0 {
				return nil, 0 // unreachable: stop == j only when rate-limited
			}
			return nil, s.waitFor(now, s.indexAfterRows(s.j, 1))
		}
		if stop < full && now.Sub(s.lastEmit) < s.cfg.MaxDelay {
			// Less than a chunk's worth of rate: hold back until a full chunk or MaxDelay.
			wake := s.timeOf(full)
			if d := s.lastEmit.Add(s.cfg.MaxDelay); d.Before(wake) {
				wake = d
			}
			return nil, clampWait(wake.Sub(now))
		}
		c := s.fill(stop)
		s.lastEmit = now
		return c, 0
	}
}

// limit is the index the rate allows up to at now.
func (s *NexmarkSource) limit(now time.Time) uint64 {
	el := now.Sub(s.limitStart).Seconds()
	if el <= 0 {
		return s.limitBase
	}
	budget := s.cfg.Rate * el
	if budget >= float64(s.end-s.limitBase) {
		return s.end
	}
	return s.limitBase + uint64(budget)
}

// timeOf is when the rate allows index j (exclusive) to be reached.
func (s *NexmarkSource) timeOf(j uint64) time.Time {
	sec := float64(j-s.limitBase) / s.cfg.Rate
	if sec > float64(time.Hour/time.Second) {
		return s.limitStart.Add(time.Hour)
	}
	return s.limitStart.Add(time.Duration(math.Ceil(sec * float64(time.Second))))
}

func (s *NexmarkSource) waitFor(now time.Time, j uint64) time.Duration {
	return clampWait(s.timeOf(min(j, s.end)).Sub(now))
}

// clampWait keeps a wait within (0, nexmarkPoll].
func clampWait(d time.Duration) time.Duration {
	return min(max(d, time.Microsecond), nexmarkPoll)
}

// fill generates the rows of the split's indexes [s.j, stop) as a chunk and advances.
func (s *NexmarkSource) fill(stop uint64) *vec.Chunk {
	from := s.split + s.j*s.of
	to := s.split + (stop-1)*s.of + 1
	s.j = stop
	switch {
	case s.person != nil:
		s.cfg.Gen.Fill(from, to, int(s.split), int(s.of), s.person, nil, nil)
		return s.person.Build()
	case s.auction != nil:
		s.cfg.Gen.Fill(from, to, int(s.split), int(s.of), nil, s.auction, nil)
		return s.auction.Build()
	}
	s.cfg.Gen.Fill(from, to, int(s.split), int(s.of), nil, nil, s.bid)
	return s.bid.Build()
}

// Close implements executors.Executor: it stops the barrier reader, releases what it
// holds and closes the barrier input.
func (s *NexmarkSource) Close() error {
	if s.started {
		s.cancel()
		<-s.pumpDone
		select {
		case b := <-s.barriers:
			b.m.Release()
		default:
		}
		s.timer.Stop()
	}
	s.finished = true
	switch {
	case s.person != nil:
		s.person.Release()
	case s.auction != nil:
		s.auction.Release()
	case s.bid != nil:
		s.bid.Release()
	}
	return s.input.Close()
}
