package vnode

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/internal/invariants"
)

func TestEvenSplit(t *testing.T) {
	for _, tc := range []struct {
		count, n int
		want     Mapping
	}{
		{1, 1, Mapping{0}},
		{8, 1, Mapping{0, 0, 0, 0, 0, 0, 0, 0}},
		{8, 3, Mapping{0, 0, 0, 1, 1, 1, 2, 2}},
		{8, 8, Mapping{0, 1, 2, 3, 4, 5, 6, 7}},
		{10, 4, Mapping{0, 0, 0, 1, 1, 1, 2, 2, 3, 3}},
	} {
		got, err := EvenSplit(tc.count, tc.n)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("EvenSplit(%d, %d) = %v, %v; want %v", tc.count, tc.n, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		count, n int
		want     string
	}{
		{0, 1, "vnode count 0 out of range"},
		{MaxCount + 1, 1, "vnode count 32769 out of range"},
		{8, 0, "0 actors for 8 vnodes"},
		{8, 9, "9 actors for 8 vnodes"},
	} {
		if m, err := EvenSplit(tc.count, tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("EvenSplit(%d, %d) = %v, %v; want an error containing %q", tc.count, tc.n, m, err, tc.want)
		}
	}
}

func TestEvenSplitProperties(t *testing.T) {
	for _, count := range goldenCounts {
		for n := 1; n <= min(count, 64); n++ {
			m, err := EvenSplit(count, n)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Validate(count, n); err != nil || m.Actors() != n {
				t.Fatalf("EvenSplit(%d, %d): Validate %v, Actors %d", count, n, err, m.Actors())
			}
			if !slices.IsSorted(m) {
				t.Fatalf("EvenSplit(%d, %d): ranges not contiguous", count, n)
			}
			sizes := m.sizes(n)
			for a := 1; a < n; a++ {
				if sizes[a] > sizes[a-1] || sizes[0]-sizes[a] > 1 {
					t.Fatalf("EvenSplit(%d, %d): sizes %v, want non-increasing within 1", count, n, sizes)
				}
			}
		}
	}
}

func TestMappingValidate(t *testing.T) {
	m := Mapping{0, 1, 3, 1, 7}
	for _, tc := range []struct {
		count, n int
		want     string
	}{
		{5, 4, "vnode 4 maps to actor 7, want an actor in 0..3"},
		{5, 3, "vnode 2 maps to actor 3, want an actor in 0..2"},
		{4, 8, "maps 5 vnodes, want 4"},
		{5, 0, "0 actors"},
		{0, 8, "vnode count 0 out of range"},
	} {
		if err := m.Validate(tc.count, tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%d, %d) = %v, want an error containing %q", tc.count, tc.n, err, tc.want)
		}
	}
	if err := m.Validate(5, 8); err != nil {
		t.Errorf("Validate(5, 8) = %v", err)
	}
	if m.Actors() != 8 || (Mapping{}).Actors() != 0 {
		t.Errorf("Actors() = %d, %d; want 8, 0", m.Actors(), (Mapping{}).Actors())
	}
}

func TestMappingBitmaps(t *testing.T) {
	m := Mapping{0, 0, 2, 2, 0, 3, 3, 3}
	bms := m.Bitmaps(5)
	want := []string{"[0-1,4]", "[]", "[2-3]", "[5-7]", "[]"}
	for a, b := range bms {
		if b.String() != want[a] || b.Count() != len(m) {
			t.Errorf("actor %d: %s over %d vnodes, want %s over %d", a, b, b.Count(), want[a], len(m))
		}
	}
}

// checkOwnership checks that bitmaps are disjoint, cover count vnodes and agree with m:
// every member of actor a's bitmap maps to a (so no vnode is in two bitmaps), and the
// sizes add up to the vnode count (so every vnode is in one).
func checkOwnership(t *testing.T, seed uint64, what string, m Mapping, bms []*Bitmap) {
	t.Helper()
	total := 0
	for a, b := range bms {
		if b.Count() != len(m) {
			t.Fatalf("seed %d: %s: actor %d's bitmap is over %d vnodes, want %d", seed, what, a, b.Count(), len(m))
		}
		b.Iterate(func(v Vnode) bool {
			if int(m[v]) != a {
				t.Fatalf("seed %d: %s: vnode %d in actor %d's bitmap, mapped to %d", seed, what, v, a, m[v])
			}
			return true
		})
		total += b.Len()
	}
	if total != len(m) {
		t.Fatalf("seed %d: %s: bitmaps hold %d vnodes, want %d", seed, what, total, len(m))
	}
}

// optimalMoves is the fewest vnodes any balanced reassignment of m (from actors) to to
// actors can move, in closed form: each actor i < to keeps at most min(c_i, t_i) with
// t_i in {q, q+1}, and the r = count%to raises from q to q+1 each gain one only where
// c_i > q. TestOptimalMovesBruteForce checks the formula against exhaustive search.
func optimalMoves(m Mapping, from, to int) int {
	count := len(m)
	c := m.sizes(max(from, to))
	q, r := count/to, count%to
	keep, above := 0, 0
	for i := range to {
		keep += min(c[i], q)
		if c[i] > q {
			above++
		}
	}
	return count - keep - min(r, above)
}

// checkRebalance checks every promise of Rebalance for one input and output.
func checkRebalance(t *testing.T, seed uint64, m Mapping, from, to int, out Mapping, moved int) {
	t.Helper()
	what := fmt.Sprintf("rebalance %d vnodes %d -> %d actors", len(m), from, to)
	count := len(m)
	if err := out.Validate(count, to); err != nil {
		t.Fatalf("seed %d: %s: %v", seed, what, err)
	}
	sizes := out.sizes(to)
	q := count / to
	for a, s := range sizes {
		if s != q && s != q+1 {
			t.Fatalf("seed %d: %s: actor %d owns %d vnodes, want %d or %d (sizes %v)", seed, what, a, s, q, q+1, sizes)
		}
	}
	diff := 0
	gave, got := make([]bool, to), make([]bool, to)
	for v := range m {
		if m[v] == out[v] {
			continue
		}
		diff++
		if int(m[v]) < to {
			gave[m[v]] = true
		}
		got[out[v]] = true
	}
	if diff != moved {
		t.Fatalf("seed %d: %s: reported %d moves, %d vnodes changed actor", seed, what, moved, diff)
	}
	if want := optimalMoves(m, from, to); moved != want {
		t.Fatalf("seed %d: %s: moved %d vnodes, the optimum is %d", seed, what, moved, want)
	}
	for a := range to {
		if gave[a] && got[a] {
			t.Fatalf("seed %d: %s: actor %d both gave and received vnodes", seed, what, a)
		}
	}
	checkOwnership(t, seed, what, out, out.Bitmaps(to))
}

func rebalance(t *testing.T, seed uint64, m Mapping, from, to int) Mapping {
	t.Helper()
	before := slices.Clone(m)
	out, moved, err := Rebalance(m, from, to)
	if err != nil {
		t.Fatalf("seed %d: Rebalance(%d vnodes, %d, %d): %v", seed, len(m), from, to, err)
	}
	if !slices.Equal(m, before) {
		t.Fatalf("seed %d: Rebalance modified its input", seed)
	}
	checkRebalance(t, seed, m, from, to, out, moved)
	return out
}

func TestRebalanceTable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		m        Mapping
		from, to int
		want     Mapping
		moved    int
	}{
		{"one actor stays", Mapping{0, 0, 0}, 1, 1, Mapping{0, 0, 0}, 0},
		{"one vnode", Mapping{0}, 1, 1, Mapping{0}, 0},
		{"split from one", Mapping{0, 0, 0, 0, 0, 0, 0, 0}, 1, 4, Mapping{0, 0, 1, 1, 2, 2, 3, 3}, 6},
		{"merge to one", Mapping{0, 0, 1, 1, 2, 2, 3, 3}, 4, 1, Mapping{0, 0, 0, 0, 0, 0, 0, 0}, 6},
		{"actors == vnodes", Mapping{0, 1, 2, 3}, 4, 4, Mapping{0, 1, 2, 3}, 0},
		{"grow by one", Mapping{0, 0, 0, 1, 1, 1}, 2, 3, Mapping{0, 0, 2, 1, 1, 2}, 2},
		{"shrink by one", Mapping{0, 0, 1, 1, 2, 2}, 3, 2, Mapping{0, 0, 1, 1, 0, 1}, 2},
		// Actor 1 owns the most, so it takes the larger target and keeps all three.
		{"extra to the largest", Mapping{0, 1, 1, 1, 2}, 3, 2, Mapping{0, 1, 1, 1, 0}, 1},
		{"skewed to balanced", Mapping{2, 2, 2, 2, 2, 2, 0, 1}, 3, 3, Mapping{2, 2, 2, 0, 0, 1, 0, 1}, 3},
		{"ignores unused from actors", Mapping{0, 0, 0, 0}, 64, 2, Mapping{0, 0, 1, 1}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, moved, err := Rebalance(tc.m, tc.from, tc.to)
			if err != nil || !slices.Equal(got, tc.want) || moved != tc.moved {
				t.Fatalf("Rebalance(%v, %d, %d) = %v, %d, %v; want %v, %d", tc.m, tc.from, tc.to, got, moved, err, tc.want, tc.moved)
			}
			checkRebalance(t, 0, tc.m, tc.from, tc.to, got, moved)
		})
	}
}

func TestRebalanceErrors(t *testing.T) {
	for _, tc := range []struct {
		m        Mapping
		from, to int
		want     string
	}{
		{Mapping{0, 1, 2}, 2, 2, "vnode 2 maps to actor 2"},
		{Mapping{0, 1}, 0, 1, "0 actors"},
		{Mapping{0, 1}, 2, 0, "want 1..2 actors"},
		{Mapping{0, 1}, 2, 3, "want 1..2 actors"},
		{Mapping{}, 1, 1, "vnode count 0 out of range"},
	} {
		if out, _, err := Rebalance(tc.m, tc.from, tc.to); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Rebalance(%v, %d, %d) = %v, %v; want an error containing %q", tc.m, tc.from, tc.to, out, err, tc.want)
		}
	}
}

// TestOptimalMovesBruteForce checks optimalMoves, and so Rebalance, against an
// exhaustive search over every balanced mapping of small counts.
func TestOptimalMovesBruteForce(t *testing.T) {
	rng, seed := testRand(t)
	for count := 1; count <= 7; count++ {
		for to := 1; to <= min(count, 4); to++ {
			balanced := balancedMappings(count, to)
			for range 12 {
				from := 1 + rng.IntN(5)
				m := randomMapping(rng, count, from)
				best := count
				for _, b := range balanced {
					d := 0
					for v := range m {
						if m[v] != b[v] {
							d++
						}
					}
					best = min(best, d)
				}
				if got := optimalMoves(m, from, to); got != best {
					t.Fatalf("seed %d: %v from %d to %d actors: formula %d, brute force %d", seed, m, from, to, got, best)
				}
				rebalance(t, seed, m, from, to)
			}
		}
	}
}

// balancedMappings lists every mapping of count vnodes to n actors in which sizes differ
// by at most one.
func balancedMappings(count, n int) []Mapping {
	var out []Mapping
	m := make(Mapping, count)
	var rec func(v int)
	rec = func(v int) {
		if v == count {
			s := m.sizes(n)
			if slices.Max(s)-slices.Min(s) <= 1 {
				out = append(out, slices.Clone(m))
			}
			return
		}
		for a := range n {
			m[v] = uint16(a)
			rec(v + 1)
		}
	}
	rec(0)
	return out
}

// randomMapping maps count vnodes to actors 0..n-1, evenly, skewed or at random, so
// that some actors may own nothing.
func randomMapping(rng *rand.Rand, count, n int) Mapping {
	m := make(Mapping, count)
	switch rng.IntN(4) {
	case 0:
		if n <= count {
			even, _ := EvenSplit(count, n)
			return even
		}
		fallthrough
	case 1: // uniform
		for v := range m {
			m[v] = uint16(rng.IntN(n))
		}
	case 2: // skewed: most vnodes on a few actors
		hot := rng.IntN(n)
		for v := range m {
			if rng.IntN(4) != 0 {
				m[v] = uint16(hot)
			} else {
				m[v] = uint16(rng.IntN(n))
			}
		}
	default: // shuffled even split
		for v := range m {
			m[v] = uint16(v % n)
		}
		rng.Shuffle(count, func(i, j int) { m[i], m[j] = m[j], m[i] })
	}
	return m
}

// TestRebalancePairs rescales even splits between every pair of actor counts 1..64 (for
// the largest vnode count, and under -race, a seeded sample of pairs plus the extremes).
func TestRebalancePairs(t *testing.T) {
	rng, seed := testRand(t)
	for _, count := range goldenCounts {
		maxN := min(count, 64)
		var pairs [][2]int
		for from := 1; from <= maxN; from++ {
			for to := 1; to <= maxN; to++ {
				pairs = append(pairs, [2]int{from, to})
			}
		}
		sample := len(pairs)
		switch {
		case count > 256:
			sample = 100
		case invariants.RaceEnabled:
			sample = 400
		}
		if sample < len(pairs) {
			rng.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
			pairs = append(pairs[:sample], [2]int{1, maxN}, [2]int{maxN, 1}, [2]int{maxN, maxN}, [2]int{maxN - 1, maxN}, [2]int{maxN, maxN - 1}, [2]int{1, 1})
		}
		for _, p := range pairs {
			m, err := EvenSplit(count, p[0])
			if err != nil {
				t.Fatal(err)
			}
			out := rebalance(t, seed, m, p[0], p[1])
			if p[0] == p[1] && !slices.Equal(out, m) {
				t.Fatalf("seed %d: rebalancing a balanced mapping onto the same actors moved vnodes", seed)
			}
		}
	}
	// Actors == vnodes in both directions.
	for _, count := range []int{1, 8, 64} {
		m, _ := EvenSplit(count, count)
		rebalance(t, seed, m, count, 1)
		one, _ := EvenSplit(count, 1)
		rebalance(t, seed, one, 1, count)
	}
}

// TestRebalanceRandom rescales random (possibly unbalanced, possibly with idle actors)
// mappings, and chains of rescales, as the engine's rescale tests do.
func TestRebalanceRandom(t *testing.T) {
	rng, seed := testRand(t)
	for _, count := range goldenCounts {
		rounds := 300
		if count > 256 {
			rounds = 30
		}
		if invariants.RaceEnabled {
			rounds /= 5
		}
		for range rounds {
			from := 1 + rng.IntN(64)
			to := 1 + rng.IntN(min(count, 64))
			rebalance(t, seed, randomMapping(rng, count, from), from, to)
		}
		// A chain: start even, rescale repeatedly; ownership stays exact throughout.
		n := 1 + rng.IntN(min(count, 64))
		m, _ := EvenSplit(count, n)
		for range 10 {
			to := 1 + rng.IntN(min(count, 64))
			m = rebalance(t, seed, m, n, to)
			n = to
		}
	}
}

func BenchmarkRebalance(b *testing.B) {
	for _, count := range []int{256, 32768} {
		m, _ := EvenSplit(count, 7)
		b.Run(fmt.Sprintf("count=%d/7to11", count), func(b *testing.B) {
			for b.Loop() {
				if _, _, err := Rebalance(m, 7, 11); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBitmapIterate(b *testing.B) {
	m, _ := EvenSplit(MaxCount, 3)
	bm := m.Bitmaps(3)[1]
	b.Run("range", func(b *testing.B) {
		for b.Loop() {
			n := 0
			bm.Iterate(func(Vnode) bool { n++; return true })
		}
	})
	sparse := NewBitmap(MaxCount)
	for v := 0; v < MaxCount; v += 7 {
		sparse.Add(Vnode(v))
	}
	sparse = mustRoundTrip(sparse)
	b.Run("every7th", func(b *testing.B) {
		for b.Loop() {
			n := 0
			sparse.Iterate(func(Vnode) bool { n++; return true })
		}
	})
}
