package bench_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench"
	"github.com/seed04fbb902/weir/bench/nexmark/gen"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec"
)

// chanBarriers is a barrier input fed by a channel; a closed channel is io.EOF.
type chanBarriers struct {
	ch     chan executors.Message
	closed atomic.Bool
}

func newChanBarriers() *chanBarriers {
	return &chanBarriers{ch: make(chan executors.Message, 64)}
}

func (c *chanBarriers) Next(ctx context.Context) (executors.Message, error) {
	select {
	case m, ok := <-c.ch:
		if !ok {
			return executors.Message{}, io.EOF
		}
		return m, nil
	case <-ctx.Done():
		return executors.Message{}, ctx.Err()
	}
}

func (c *chanBarriers) Schema() *arrow.Schema { return arrow.NewSchema(nil, nil) }

func (c *chanBarriers) Close() error {
	c.closed.Store(true)
	return nil
}

// send feeds the barrier epoch-1 -> epoch with mutation m.
func (c *chanBarriers) send(epoch uint64, m executors.Mutation) {
	kind := executors.Plain
	if executors.ForcesCheckpoint(m) {
		kind = executors.Checkpoint
	}
	c.ch <- executors.BarrierMessage(&executors.Barrier{Prev: executors.Epoch(epoch - 1), Curr: executors.Epoch(epoch), Kind: kind, Mutation: m})
}

// rowsOf renders a chunk's rows of kind k (all inserts, all visible) as strings.
func rowsOf(t *testing.T, k gen.Kind, c *vec.Chunk) []string {
	t.Helper()
	var out []string
	for i, op := range c.Ops() {
		if op != vec.Insert || !c.Visible(i) {
			t.Fatalf("row %d: op %v visible %v, want a visible insert", i, op, c.Visible(i))
		}
	}
	switch k {
	case gen.KindPerson:
		v, err := tables.NewPersonView(c)
		if err != nil {
			t.Fatal(err)
		}
		for i := range v.NumRows() {
			out = append(out, fmt.Sprintf("%+v", v.Row(i)))
		}
	case gen.KindAuction:
		v, err := tables.NewAuctionView(c)
		if err != nil {
			t.Fatal(err)
		}
		for i := range v.NumRows() {
			out = append(out, fmt.Sprintf("%+v", v.Row(i)))
		}
	default:
		v, err := tables.NewBidView(c)
		if err != nil {
			t.Fatal(err)
		}
		for i := range v.NumRows() {
			out = append(out, fmt.Sprintf("%+v", v.Row(i)))
		}
	}
	return out
}

func checkedMem(t *testing.T) *memory.CheckedAllocator {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}

func newSource(t *testing.T, cfg bench.NexmarkSourceConfig) (*bench.NexmarkSource, *chanBarriers) {
	t.Helper()
	in := newChanBarriers()
	s, err := bench.NewNexmarkSource(in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, in
}

// splitRows counts the events n in [from, to) of kind k with n % of == split.
func splitRows(from, to uint64, k gen.Kind, split, of int) int {
	n := 0
	for e := from; e < to; e++ {
		if e%uint64(of) == uint64(split) && gen.KindOf(e) == k {
			n++
		}
	}
	return n
}

// TestNexmarkSourceSplits: splits 0..2 of [0, 5000), with barriers between chunks,
// together emit exactly gen.Chunks' rows of each kind, each split in event order; once
// To is reached only barriers flow; every chunk is released (checked allocator).
func TestNexmarkSourceSplits(t *testing.T) {
	ctx := context.Background()
	g := gen.New(gen.Config{Seed: 7})
	const from, to, of = 0, 5000, 3
	for _, k := range []gen.Kind{gen.KindPerson, gen.KindAuction, gen.KindBid} {
		t.Run(k.String(), func(t *testing.T) {
			mem := checkedMem(t)
			var want []string
			for kind, c := range g.Chunks(from, to, 1000, mem) {
				if kind == k {
					want = append(want, rowsOf(t, k, c)...)
				}
				c.Release()
			}
			var got []string
			for split := range of {
				s, in := newSource(t, bench.NexmarkSourceConfig{Gen: g, Kind: k, Split: split, Of: of, From: from, To: to, ChunkRows: 17, Mem: mem})
				wantSchema := map[gen.Kind]*arrow.Schema{gen.KindPerson: tables.PersonTable().ArrowSchema(), gen.KindAuction: tables.AuctionTable().ArrowSchema(), gen.KindBid: tables.BidTable().ArrowSchema()}[k]
				if !s.Schema().Equal(wantSchema) {
					t.Fatalf("schema %s, want %s", s.Schema(), wantSchema)
				}
				expect := splitRows(from, to, k, split, of)
				var rows []string
				epoch, chunks := uint64(1), 0
				var sent, seen uint64
				for len(rows) < expect {
					m, err := s.Next(ctx)
					if err != nil {
						t.Fatal(err)
					}
					switch {
					case m.Chunk != nil:
						if n := m.Chunk.NumRows(); n == 0 || n > 17 {
							t.Fatalf("chunk of %d rows", n)
						}
						rows = append(rows, rowsOf(t, k, m.Chunk)...)
						m.Release()
						if chunks++; chunks%3 == 0 {
							epoch++
							in.send(epoch, nil)
							sent = epoch
						}
					case m.Barrier != nil:
						seen++
						if m.Barrier.Curr != executors.Epoch(seen+1) {
							t.Fatalf("barrier %s, want epoch %d", m.Barrier, seen+1)
						}
					}
				}
				if len(rows) != expect {
					t.Fatalf("split %d: %d rows, want %d", split, len(rows), expect)
				}
				// Bounded: the barriers still pending, then three more, and no row.
				for range 3 {
					epoch++
					in.send(epoch, nil)
					sent = epoch
				}
				for seen+1 < sent {
					m, err := s.Next(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if m.Barrier == nil {
						m.Release()
						t.Fatalf("split %d past To: %s, want only barriers", split, m)
					}
					seen++
				}
				if p := s.Position(); p < to || p >= to+of || p%of != uint64(split) {
					t.Fatalf("split %d: position %d after [%d, %d)", split, p, from, to)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if !in.closed.Load() {
					t.Fatal("the barrier input was not closed")
				}
				got = append(got, rows...)
			}
			slices.Sort(got)
			slices.Sort(want)
			if len(got) != len(want) {
				t.Fatalf("%d rows, want %d", len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("row %d: got %s, want %s", i, got[i], want[i])
				}
			}
		})
	}
}

// TestNexmarkSourceResume: a source restarted at its position emits what follows.
func TestNexmarkSourceResume(t *testing.T) {
	ctx := context.Background()
	mem := checkedMem(t)
	g := gen.New(gen.Config{Seed: 3})
	var whole []string
	s, _ := newSource(t, bench.NexmarkSourceConfig{Gen: g, Kind: gen.KindBid, Split: 1, Of: 2, From: 10, To: 700, ChunkRows: 50, Mem: mem})
	for len(whole) < splitRows(10, 700, gen.KindBid, 1, 2) {
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		whole = append(whole, rowsOf(t, gen.KindBid, m.Chunk)...)
		m.Release()
	}
	s.Close()

	s, _ = newSource(t, bench.NexmarkSourceConfig{Gen: g, Kind: gen.KindBid, Split: 1, Of: 2, From: 10, To: 700, ChunkRows: 50, Mem: mem})
	m, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := rowsOf(t, gen.KindBid, m.Chunk)
	m.Release()
	pos := s.Position()
	s.Close()
	s, _ = newSource(t, bench.NexmarkSourceConfig{Gen: g, Kind: gen.KindBid, Split: 1, Of: 2, From: pos, To: 700, ChunkRows: 50, Mem: mem})
	for len(got) < len(whole) {
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rowsOf(t, gen.KindBid, m.Chunk)...)
		m.Release()
	}
	s.Close()
	if !slices.Equal(got, whole) {
		t.Fatalf("restart at %d: rows differ", pos)
	}
}

// TestNexmarkSourceRate: with a fake clock that another goroutine advances while it
// feeds barriers, the rows emitted before each barrier never exceed Rate × elapsed + one
// chunk, and the source keeps up with the rate.
func TestNexmarkSourceRate(t *testing.T) {
	ctx := context.Background()
	mem := checkedMem(t)
	g := gen.New(gen.Config{Seed: 11})
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock atomic.Int64 // ns since base
	now := func() time.Time { return base.Add(time.Duration(clock.Load())) }
	const rate, chunkRows = 20_000.0, 64
	s, in := newSource(t, bench.NexmarkSourceConfig{Gen: g, Kind: gen.KindBid, Rate: rate, ChunkRows: chunkRows, Mem: mem, Now: now, MaxDelay: 5 * time.Millisecond})
	defer s.Close()
	const steps = 100
	go func() {
		for i := range steps {
			time.Sleep(200 * time.Microsecond)
			clock.Add(int64(time.Millisecond))
			in.send(uint64(i+2), nil)
		}
	}()
	rows, barriers := 0, 0
	for barriers < steps {
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Chunk != nil {
			if m.Chunk.NumRows() > chunkRows {
				t.Fatalf("chunk of %d rows", m.Chunk.NumRows())
			}
			rows += m.Chunk.NumRows()
			m.Release()
			continue
		}
		barriers++
		elapsed := time.Duration(clock.Load()).Seconds()
		if limit := rate*elapsed + chunkRows; float64(rows) > limit {
			t.Fatalf("barrier %d at %.3fs: %d rows, more than %.0f", barriers, elapsed, rows, limit)
		}
	}
	// The clock stands at steps ms: the source catches up with the rate (a bid is 46 of
	// every 50 events) and then holds.
	_, _, bids := gen.Counts(0, uint64(rate*steps/1000))
	target := int(bids) - chunkRows
	deadline := time.Now().Add(10 * time.Second)
	for rows < target {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows after the clock's %d ms, want %d", rows, steps, target)
		}
		in.send(uint64(steps+2+barriers), nil)
		for {
			m, err := s.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m.Barrier != nil {
				barriers++
				break
			}
			rows += m.Chunk.NumRows()
			m.Release()
		}
		time.Sleep(time.Millisecond)
	}
	if max := rate*steps/1000 + chunkRows; float64(rows) > max {
		t.Fatalf("%d rows after %d ms at %.0f events/s", rows, steps, rate)
	}
	t.Logf("%d bid rows in %d fake ms at %.0f events/s", rows, steps, rate)
}

// nextBarrier reads messages until a barrier, releasing chunks; it returns the barrier
// and the rows skipped.
func nextBarrier(t *testing.T, s *bench.NexmarkSource) (*executors.Barrier, int) {
	t.Helper()
	rows := 0
	for {
		m, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if m.Barrier != nil {
			return m.Barrier, rows
		}
		rows += m.Chunk.NumRows()
		m.Release()
	}
}

// TestNexmarkSourcePause: between a Pause and a Resume barrier no row flows but
// barriers do; an unthrottled source passes a barrier on within a few chunks.
func TestNexmarkSourcePause(t *testing.T) {
	ctx := context.Background()
	mem := checkedMem(t)
	g := gen.New(gen.Config{Seed: 5})
	s, in := newSource(t, bench.NexmarkSourceConfig{Gen: g, Kind: gen.KindAuction, ChunkRows: 100, Mem: mem})
	defer s.Close()
	for range 5 {
		m, err := s.Next(ctx)
		if err != nil || m.Chunk == nil {
			t.Fatalf("unpaused source: %s, %v", m, err)
		}
		m.Release()
	}
	in.send(2, executors.Pause{})
	b, rows := nextBarrier(t, s)
	if _, ok := b.Mutation.(executors.Pause); !ok || b.Curr != 2 {
		t.Fatalf("got %s, want the pause barrier", b)
	}
	t.Logf("%d rows before the pause barrier was passed on", rows)
	pos := s.Position()
	for e := uint64(3); e < 8; e++ {
		in.send(e, nil)
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Barrier == nil || m.Barrier.Curr != executors.Epoch(e) {
			m.Release()
			t.Fatalf("paused: got %s, want barrier %d", m, e)
		}
	}
	if s.Position() != pos {
		t.Fatalf("paused source moved from %d to %d", pos, s.Position())
	}
	in.send(8, executors.Resume{})
	m, err := s.Next(ctx)
	if err != nil || m.Barrier == nil {
		t.Fatalf("got %s, %v, want the resume barrier", m, err)
	}
	m, err = s.Next(ctx)
	if err != nil || m.Chunk == nil {
		t.Fatalf("resumed: got %s, %v, want a chunk", m, err)
	}
	m.Release()
	if s.Position() <= pos {
		t.Fatalf("resumed source stays at %d", pos)
	}

	// Pause on bootstrap for this actor.
	in.send(9, executors.Add{Actors: []executors.ActorID{0}, PauseOnBootstrap: true})
	nextBarrier(t, s)
	in.send(10, nil)
	if m, err := s.Next(ctx); err != nil || m.Barrier == nil {
		t.Fatalf("paused on bootstrap: got %s, %v", m, err)
	}
}

// TestNexmarkSourceStop: a Stop naming another actor changes nothing; one naming the
// source's actor is passed on, then Next returns io.EOF. The input ending is io.EOF too.
func TestNexmarkSourceStop(t *testing.T) {
	ctx := context.Background()
	mem := checkedMem(t)
	g := gen.New(gen.Config{Seed: 9})
	s, in := newSource(t, bench.NexmarkSourceConfig{Gen: g, Kind: gen.KindPerson, Actor: 4, ChunkRows: 10, Mem: mem})
	in.send(2, executors.Stop{Actors: []executors.ActorID{3}})
	nextBarrier(t, s)
	if m, err := s.Next(ctx); err != nil || m.Chunk == nil {
		t.Fatalf("stop of another actor: got %s, %v", m, err)
	} else {
		m.Release()
	}
	in.send(3, executors.Stop{Actors: []executors.ActorID{3, 4}})
	b, _ := nextBarrier(t, s)
	if b.Curr != 3 || !executors.Stops(b.Mutation, 4) {
		t.Fatalf("got %s, want the stop barrier", b)
	}
	for range 2 {
		if m, err := s.Next(ctx); !errors.Is(err, io.EOF) {
			m.Release()
			t.Fatalf("after stop: %s, %v, want io.EOF", m, err)
		}
	}
	in.send(4, nil) // left in the input: Close releases it
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, in = newSource(t, bench.NexmarkSourceConfig{Gen: g, Kind: gen.KindPerson, From: 0, To: 60, Mem: mem})
	defer s.Close()
	close(in.ch)
	for {
		m, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		m.Release()
	}
}

// TestNexmarkSourceConfig: bad configurations are errors; a split with no row of its
// kind moves straight to To.
func TestNexmarkSourceConfig(t *testing.T) {
	g := gen.New(gen.Config{})
	for _, cfg := range []bench.NexmarkSourceConfig{
		{},
		{Gen: g, Split: 2, Of: 2},
		{Gen: g, From: 10, To: 5},
		{Gen: g, Rate: -1},
		{Gen: g, Kind: 7},
	} {
		if _, err := bench.NewNexmarkSource(newChanBarriers(), cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
	mem := checkedMem(t)
	// Split 1 of 50 holds auctions only.
	s, in := newSource(t, bench.NexmarkSourceConfig{Gen: g, Kind: gen.KindBid, Split: 1, Of: 50, To: 1_000_000, Mem: mem})
	defer s.Close()
	go func() {
		time.Sleep(20 * time.Millisecond) // after the source has looked for rows
		in.send(2, nil)
	}()
	if m, err := s.Next(context.Background()); err != nil || m.Barrier == nil {
		t.Fatalf("got %s, %v, want a barrier", m, err)
	}
	if p := s.Position(); p != 1_000_001 {
		t.Fatalf("position %d, want 1000001", p)
	}
}
