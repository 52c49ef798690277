package vec_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/internal/invariants"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

func TestNewMarkerErrors(t *testing.T) {
	tab := table(t, "orders", []schema.Column{col("id", schema.Int64, false), col("name", schema.Varchar, true)},
		schema.KeyColumn{Column: 0}, schema.KeyColumn{Column: 1, Desc: true})
	tab.VnodeCount = 8
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	g := vec.NewGeneric(tab)
	good := vec.AppendKeyString(vec.AppendKeyInt64(nil, 5, false), "x", true)
	for _, tc := range []struct {
		name string
		p    func(p *vec.Positions) *vec.Positions
		want string // "" = no error
	}{
		{"all NotStarted", func(p *vec.Positions) *vec.Positions { return p }, ""},
		{"mixed", func(p *vec.Positions) *vec.Positions {
			p.State[1], p.Pos[1] = vec.InProgress, good
			p.State[2] = vec.Completed // empty vnode: nil position
			p.State[3], p.Pos[3] = vec.Completed, good
			return p
		}, ""},
		{"too few vnodes", func(*vec.Positions) *vec.Positions { return vec.NewPositions(7) }, "table orders: positions for 7 vnodes, table has 8"},
		{"too many vnodes", func(*vec.Positions) *vec.Positions { return vec.NewPositions(256) }, "table orders: positions for 256 vnodes, table has 8"},
		{"short Pos", func(p *vec.Positions) *vec.Positions { p.Pos = p.Pos[:4]; return p }, "table orders: positions for"},
		{"bad state", func(p *vec.Positions) *vec.Positions { p.State[6] = 9; return p }, "table orders vnode 6: bad backfill state 9"},
		{"InProgress without position", func(p *vec.Positions) *vec.Positions { p.State[5] = vec.InProgress; return p },
			"table orders vnode 5: position: column id: key truncated"},
		{"truncated position", func(p *vec.Positions) *vec.Positions {
			p.State[4], p.Pos[4] = vec.InProgress, good[:len(good)-1]
			return p
		}, "table orders vnode 4: position: column name: key truncated"},
		{"trailing bytes", func(p *vec.Positions) *vec.Positions {
			p.State[7], p.Pos[7] = vec.InProgress, append(append([]byte{}, good...), 1)
			return p
		}, "table orders vnode 7: position: 1 bytes left after the last pk column"},
		{"NULL in NOT NULL", func(p *vec.Positions) *vec.Positions {
			p.State[0], p.Pos[0] = vec.InProgress, append([]byte{vec.KeyNullLast}, good[9:]...)
			return p
		}, "table orders vnode 0: position: column id: NULL in a NOT NULL column"},
		{"bad string group", func(p *vec.Positions) *vec.Positions {
			k := append([]byte{}, good...)
			k[len(k)-1] = 0x55
			p.State[2], p.Pos[2] = vec.InProgress, k
			return p
		}, "table orders vnode 2: position: column name: bad string key group marker"},
	} {
		m, err := g.NewMarker(tc.p(vec.NewPositions(8)))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "" && m == nil:
			t.Errorf("%s: nil marker", tc.name)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	// The float rule: a position the encoder cannot produce is refused.
	ft := table(t, "floats", []schema.Column{col("f", schema.Float64, false)}, schema.KeyColumn{Column: 0})
	p := vec.NewPositions(ft.VnodeCount)
	p.State[3], p.Pos[3] = vec.InProgress, []byte{vec.KeyValue, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff} // -0
	if _, err := vec.NewGeneric(ft).NewMarker(p); err == nil || !strings.Contains(err.Error(), "table floats vnode 3: position: column f: non-canonical") {
		t.Errorf("-0 position: %v", err)
	}
}

// randomPositions gives each vnode a random state; InProgress and some Completed vnodes
// get the key of a random row of pool (whose keys are in keys) as their position.
func randomPositions(rng *rand.Rand, count int, keys *vec.Bytes) *vec.Positions {
	p := vec.NewPositions(count)
	for v := range p.State {
		p.State[v] = vec.BackfillState(rng.IntN(3))
		if p.State[v] == vec.NotStarted || (p.State[v] == vec.Completed && rng.IntN(2) == 0) || keys.Len() == 0 {
			if p.State[v] == vec.InProgress {
				p.State[v] = vec.Completed
			}
			continue
		}
		p.Pos[v] = append([]byte(nil), keys.At(rng.IntN(keys.Len()))...)
	}
	return p
}

// TestMark checks Generic's marker against a brute-force rule applied row by row with
// typed comparisons: a visible row is kept when its vnode is Completed, or InProgress
// and its pk <= the decoded position; never when NotStarted; invisible rows never.
func TestMark(t *testing.T) {
	mem := checkedMem(t)
	rng, seed := vectest.Rand(t)
	var poolKeys vec.Bytes
	kept, dropped, atPos := 0, 0, 0
	for it := 0; it < 150; it++ {
		tab := vectest.RandomTable(rng, "t")
		if tab.VnodeCount > 256 && rng.IntN(2) == 0 {
			// Fewer vnodes means more rows per vnode and more ties with positions.
			tab.VnodeCount = 1 + rng.IntN(8)
		}
		g := vec.NewGeneric(tab)
		// Positions come from a second chunk of the same table, so that (through the
		// small value domains) some rows equal their vnode's position.
		pool := vectest.RandomChunk(rng, mem, tab, 50, 0.2)
		poolKeys.Reset()
		g.EncodeKeys(pool, &poolKeys)
		pool.Release()
		p := randomPositions(rng, tab.VnodeCount, &poolKeys)
		m, err := g.NewMarker(p)
		if err != nil {
			t.Fatalf("seed=%d iteration %d: %v", seed, it, err)
		}
		// Decode the positions that rows meet, once each, for the typed comparison.
		posRecs := map[uint16]arrow.RecordBatch{}
		position := func(v uint16) []arrow.Array {
			if rec, ok := posRecs[v]; ok {
				return rec.Columns()
			}
			var one vec.Bytes
			one.Append(p.Pos[v])
			rec, err := decodeKeys(mem, g, &one)
			if err != nil {
				t.Fatalf("seed=%d iteration %d vnode %d: %v", seed, it, v, err)
			}
			posRecs[v] = rec
			return rec.Columns()
		}
		for round := 0; round < 3; round++ { // one marker, many chunks
			c := vectest.RandomChunk(rng, mem, tab, rng.IntN(300), 0.2)
			n := c.NumRows()
			vnodes := make([]uint16, n)
			g.Vnodes(c, vnodes)
			out := make([]byte, (n+7)/8+1)
			for i := range out {
				out[i] = 0xff // Mark must clear what it does not set
			}
			m.Mark(c, vnodes, out)
			pk := vectest.PKArrays(tab, c.Record())
			for i := 0; i < n; i++ {
				v := vnodes[i]
				want := false
				if c.Visible(i) {
					switch p.State[v] {
					case vec.Completed:
						want = true
					case vec.InProgress:
						cmp := vectest.ComparePK(tab, pk, i, position(v), 0)
						want = cmp <= 0
						if cmp == 0 {
							atPos++
						}
					}
				}
				if got := out[i>>3]&(1<<(i&7)) != 0; got != want {
					t.Fatalf("seed=%d iteration %d round %d: row %d %s (vnode %d, %v, position %x, visible %v): marked %v, want %v\n%s",
						seed, it, round, i, vectest.FormatRow(c.Record(), i), v, p.State[v], p.Pos[v], c.Visible(i), got, want, tab.Canonical())
				}
				if want {
					kept++
				} else {
					dropped++
				}
			}
			for i := n; i < ((n+7)/8)*8; i++ {
				if out[i>>3]&(1<<(i&7)) != 0 {
					t.Fatalf("seed=%d iteration %d: bit %d past the %d rows is set", seed, it, i, n)
				}
			}
			c.Release()
		}
		for _, r := range posRecs {
			r.Release()
		}
	}
	if kept == 0 || dropped == 0 || atPos == 0 {
		t.Fatalf("seed=%d: kept %d, dropped %d, rows equal to their position %d: want all > 0", seed, kept, dropped, atPos)
	}
}

// TestVnodes checks that a row's vnode is the hash of its distribution key encoded ASC
// NULLS FIRST, whatever the pk's order, and within range.
func TestVnodes(t *testing.T) {
	mem := checkedMem(t)
	rng, seed := vectest.Rand(t)
	for it := 0; it < 100; it++ {
		tab := vectest.RandomTable(rng, "t")
		c := vectest.RandomChunk(rng, mem, tab, 100, 0.3)
		g := vec.NewGeneric(tab)
		got := make([]uint16, c.NumRows())
		g.Vnodes(c, got)
		// The same table with every pk column ASC NULLS LAST must agree.
		flipped := *tab
		flipped.PK = append([]schema.KeyColumn(nil), tab.PK...)
		for i := range flipped.PK {
			flipped.PK[i].Desc, flipped.PK[i].NullsFirst = !flipped.PK[i].Desc, !flipped.PK[i].NullsFirst
		}
		other := make([]uint16, c.NumRows())
		vec.NewGeneric(&flipped).Vnodes(c, other)
		for i := range got {
			var key []byte
			for _, d := range tab.DistKey {
				key = vec.AppendKeyColumn(key, c.Record().Column(d), i, tab.Columns[d].Type, false, true)
			}
			want := vec.VnodeOf(key, tab.VnodeCount)
			if got[i] != want || other[i] != want || int(want) >= tab.VnodeCount {
				t.Fatalf("seed=%d iteration %d row %d: vnode %d (flipped order %d), want %d of %d", seed, it, i, got[i], other[i], want, tab.VnodeCount)
			}
		}
		c.Release()
	}
}

// TestGenericSplit checks that Split is Vnodes followed by SplitByDest.
func TestGenericSplit(t *testing.T) {
	mem := checkedMem(t)
	rng, seed := vectest.Rand(t)
	for it := 0; it < 50; it++ {
		tab := vectest.RandomTable(rng, "t")
		g := vec.NewGeneric(tab)
		c := vectest.RandomChunk(rng, mem, tab, 200, 0.2)
		nout := 1 + rng.IntN(4)
		mapping := make([]uint16, tab.VnodeCount)
		for v := range mapping {
			mapping[v] = uint16(rng.IntN(nout))
		}
		vnodes := make([]uint16, c.NumRows())
		outs := make([]vec.SplitOutput, nout)
		g.Split(c, mapping, vnodes, outs)
		want := make([]uint16, c.NumRows())
		g.Vnodes(c, want)
		wantOuts := make([]vec.SplitOutput, nout)
		vec.SplitByDest(c, want, mapping, wantOuts)
		for i := range want {
			if vnodes[i] != want[i] {
				t.Fatalf("seed=%d iteration %d: row %d: vnode %d, want %d", seed, it, i, vnodes[i], want[i])
			}
		}
		for o := range outs {
			if !bytes.Equal(outs[o].Vis, wantOuts[o].Vis) || outs[o].Rows != wantOuts[o].Rows || outs[o].OwnOps != wantOuts[o].OwnOps {
				t.Fatalf("seed=%d iteration %d: output %d differs", seed, it, o)
			}
		}
		c.Release()
	}
}

type fakeKernels struct{ *vec.Generic }

func (fakeKernels) Generated() bool { return true }

func TestRegistry(t *testing.T) {
	tab := table(t, "registry_test_only", []schema.Column{col("k", schema.Int32, false), col("v", schema.Bytea, true)}, schema.KeyColumn{Column: 0})
	if k := vec.For(tab); k.Generated() {
		t.Fatal("For returned generated kernels before any were registered")
	}
	if _, ok := vec.Lookup(tab); ok {
		t.Fatal("Lookup found kernels before any were registered")
	}
	vec.Register(fakeKernels{vec.NewGeneric(tab)})
	// Another table of the same shape (same fingerprint) finds them too.
	same := table(t, "registry_test_only", []schema.Column{col("k", schema.Int32, false), col("v", schema.Bytea, true)}, schema.KeyColumn{Column: 0})
	if k := vec.For(same); !k.Generated() {
		t.Fatal("For did not return the registered kernels")
	}
	found := false
	for _, s := range vec.Registered() {
		found = found || s == "registry_test_only "+tab.Fingerprint()
	}
	if !found {
		t.Fatalf("Registered() = %v", vec.Registered())
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "registered twice") {
			t.Fatalf("second Register: recovered %v", r)
		}
	}()
	vec.Register(fakeKernels{vec.NewGeneric(same)})
}

// TestEncodeKeysAllocs checks that encoding keys into a reused arena allocates nothing
// once the arena has grown.
func TestEncodeKeysAllocs(t *testing.T) {
	if invariants.RaceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector (sync.Pool drops items at random)")
	}
	mem := checkedMem(t)
	rng, _ := vectest.Rand(t)
	tab := table(t, "allocs", []schema.Column{
		col("a", schema.Int64, false), col("b", schema.Varchar, true), col("c", schema.Float64, true),
		col("d", schema.Bytea, false), col("e", schema.Boolean, true),
	}, schema.KeyColumn{Column: 1, Desc: true}, schema.KeyColumn{Column: 0}, schema.KeyColumn{Column: 2, NullsFirst: true},
		schema.KeyColumn{Column: 3}, schema.KeyColumn{Column: 4})
	c := vectest.RandomChunk(rng, mem, tab, 1024, 0.2)
	defer c.Release()
	g := vec.NewGeneric(tab)
	var keys vec.Bytes
	run := func() {
		keys.Reset()
		g.EncodeKeys(c, &keys)
	}
	run()
	if n := testing.AllocsPerRun(20, run); n != 0 {
		t.Errorf("EncodeKeys into a reused vec.Bytes: %v allocations per run, want 0", n)
	}
}

func BenchmarkEncodeKeys(b *testing.B) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(b, 0)
	rng := vectest.NewRand(1)
	for _, kind := range []schema.Kind{schema.Int64, schema.Varchar, schema.Float64} {
		b.Run(kind.String(), func(b *testing.B) {
			tab := table(b, "bench", []schema.Column{col("k", kind, false), col("v", schema.Int64, true)}, schema.KeyColumn{Column: 0})
			c := vectest.RandomChunk(rng, mem, tab, 1024, 0)
			defer c.Release()
			g := vec.NewGeneric(tab)
			var keys vec.Bytes
			b.ReportAllocs()
			for b.Loop() {
				keys.Reset()
				g.EncodeKeys(c, &keys)
			}
			b.SetBytes(int64(len(keys.Data)))
		})
	}
}
