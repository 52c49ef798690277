package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/internal/invariants"
	"github.com/seed04fbb902/weir/vec"
)

// TestWritesRacingClose: writers insert while Close (or Crash) runs. Every write
// returns nil or an error that is engine.ErrClosed; once Close or Crash has returned,
// every write is refused; after a reopen, for Close every acknowledged row is there
// and no refused one, and for Crash no row that was not acknowledged. The seed of
// each round is printed on failure.
func TestWritesRacingClose(t *testing.T) {
	rounds := 24
	if testing.Short() || invariants.RaceEnabled {
		rounds = 8
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for r := range rounds {
		crash := r%2 == 1
		name := "close"
		if crash {
			name = "crash"
		}
		t.Run(fmt.Sprintf("%s-%d", name, r), func(t *testing.T) {
			writesRacingClose(t, seed+uint64(r), crash)
		})
	}
}

func writesRacingClose(t *testing.T, seed uint64, crash bool) {
	rng := rand.New(rand.NewPCG(seed, 0))
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	fs := vfs.NewMem()
	// A barrier every millisecond, so that writes also race the ticker's rounds, and
	// a small channel, so that writers block on a full one.
	open := func() *engine.Engine {
		e, err := engine.Open(ctx, "db", engine.Options{
			FS: fs, Mem: mem, BarrierInterval: time.Millisecond, ChannelCapacity: 2,
			CacheSize: 4 << 20, MemTableSize: 1 << 20, Logger: quietLogger(),
		})
		if err != nil {
			t.Fatalf("seed %d: open: %v", seed, err)
		}
		return e
	}
	e := open()
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 2}); err != nil {
		t.Fatal(err)
	}

	const writers = 4
	var (
		mu      sync.Mutex
		acked   = map[int64]bool{}
		refused = map[int64]bool{}
		wrong   []error
		stopped = make(chan struct{}) // Close or Crash has returned
		wg      sync.WaitGroup
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			after := 0 // writes begun after Close or Crash returned
			for i := int64(0); ; i++ {
				k := int64(w)<<32 | i
				select {
				case <-stopped:
					after++
				default:
				}
				rec := kvRecord(mem, []kvRow{{k: k, v: i}})
				err := e.Insert(ctx, "t", rec)
				rec.Release()
				mu.Lock()
				switch {
				case err == nil && after > 0:
					wrong = append(wrong, fmt.Errorf("row %d: acknowledged after Close or Crash returned", k))
				case err == nil:
					acked[k] = true
				case errors.Is(err, engine.ErrClosed):
					refused[k] = true
				default:
					wrong = append(wrong, fmt.Errorf("row %d: %v, want nil or ErrClosed", k, err))
				}
				mu.Unlock()
				if after >= 3 || (err != nil && !errors.Is(err, engine.ErrClosed)) {
					return
				}
			}
		}()
	}
	time.Sleep(time.Duration(rng.IntN(20_000)) * time.Microsecond)
	var err error
	if crash {
		err = e.Crash()
	} else {
		err = e.Close()
	}
	close(stopped)
	if err != nil {
		t.Fatalf("seed %d: close: %v", seed, err)
	}
	wg.Wait()
	for _, err := range wrong {
		t.Errorf("seed %d: %v", seed, err)
	}
	if err := e.Insert(ctx, "t", nil); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("seed %d: an insert after close: %v, want ErrClosed", seed, err)
	}
	if _, err := e.WaitCheckpoint(ctx); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("seed %d: WaitCheckpoint after close: %v, want ErrClosed", seed, err)
	}

	e = open()
	defer e.Close()
	have := map[int64]bool{}
	for k := range readRowsNow(t, e, "t") {
		have[k] = true
	}
	for k := range have {
		if !acked[k] {
			t.Errorf("seed %d: row %d is in the table but its write was not acknowledged (refused: %v)", seed, k, refused[k])
		}
	}
	if !crash {
		for k := range acked {
			if !have[k] {
				t.Errorf("seed %d: row %d was acknowledged before or during Close, and is not in the table", seed, k)
			}
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("seed %d: %d acknowledged, %d refused, %d after reopen", seed, len(acked), len(refused), len(have))
}

// TestCloseOverFailedActor: an actor has failed and no barrier round has run since,
// so nothing has recovered; the table's input is full (the failed view no longer
// reads), and a writer waits for room in it. Close neither hangs on that writer nor
// commits the writes since the last checkpoint, which the failure lost: it returns
// an error saying so and naming the failure, the writer gets ErrClosed, and a reopen
// holds exactly the last checkpoint.
func TestCloseOverFailedActor(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	fs := vfs.NewMem()
	open := func() *engine.Engine {
		e, err := engine.Open(ctx, "db", engine.Options{
			FS: fs, Mem: mem, BarrierInterval: -1, ChannelCapacity: 2,
			CacheSize: 4 << 20, MemTableSize: 1 << 20, Logger: quietLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	if err := e.CreateTable(ctx, kvT(), engine.TableOptions{Parallelism: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateMV(ctx, "mv1", mv1Plan(), engine.MVOptions{Parallelism: 1}); err != nil {
		t.Fatal(err)
	}
	insert := func(rows ...kvRow) error {
		rec := kvRecord(mem, rows)
		defer rec.Release()
		return e.Insert(ctx, "t", rec)
	}
	if err := insert(kvRow{k: 1, v: 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if err := insert(kvRow{k: 2, v: 1 << 62}); err != nil { // v * 2 overflows in mv1
		t.Fatal(err)
	}
	var (
		acked    atomic.Int64
		writeErr = make(chan error, 1)
	)
	go func() {
		for i := int64(3); ; i++ {
			if err := insert(kvRow{k: i, v: 30}); err != nil {
				writeErr <- err
				return
			}
			acked.Add(1)
		}
	}()
	// Wait until the writer is held: no write has returned for 200ms.
	for last := int64(-1); ; {
		time.Sleep(200 * time.Millisecond)
		n := acked.Load()
		if n == last {
			break
		}
		last = n
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		if err == nil || !strings.Contains(err.Error(), "no final checkpoint") || !strings.Contains(err.Error(), "overflow") {
			t.Errorf("close over a failed actor: %v, want an error saying there is no final checkpoint, naming the overflow", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close hangs over a failed actor and a writer waiting for room")
	}
	if err := <-writeErr; !errors.Is(err, engine.ErrClosed) {
		t.Errorf("the waiting writer: %v, want ErrClosed", err)
	}
	e = open()
	defer e.Close()
	if got := readRowsNow(t, e, "t"); len(got) != 1 {
		t.Errorf("t holds %d rows after a reopen, want the 1 of the last checkpoint (%d writes were acknowledged after it and lost)", len(got), acked.Load())
	}
}
