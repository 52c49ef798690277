package vec_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// parseOps reads ops written as "+ - U- U+" and visibility as a trailing "!" on a row
// that is invisible (e.g. "+ U-! U+!").
func parseOps(t *testing.T, s string) (ops []vec.Op, vis []bool) {
	t.Helper()
	hidden := false
	for _, w := range strings.Fields(s) {
		v := !strings.HasSuffix(w, "!")
		hidden = hidden || !v
		vis = append(vis, v)
		switch strings.TrimSuffix(w, "!") {
		case "+":
			ops = append(ops, vec.Insert)
		case "-":
			ops = append(ops, vec.Delete)
		case "U-":
			ops = append(ops, vec.UpdateDelete)
		case "U+":
			ops = append(ops, vec.UpdateInsert)
		default:
			t.Fatalf("bad op %q", w)
		}
	}
	if !hidden {
		vis = nil
	}
	return ops, vis
}

// opsChunk is a chunk of one int64 column (row i holds i) with the given ops.
func opsChunk(t *testing.T, mem memory.Allocator, s string) *vec.Chunk {
	ops, vis := parseOps(t, s)
	tab := table(t, "ops", []schema.Column{col("k", schema.Int64, false)}, schema.KeyColumn{Column: 0})
	bs := vectest.BuildersFor(mem, tab, []int{0})
	for i := range ops {
		bs[0].(*array.Int64Builder).Append(int64(i))
	}
	rec := vectest.FinishRecord(tab, []int{0}, bs, len(ops))
	defer rec.Release()
	return vectest.ChunkOf(mem, rec, ops, vis)
}

// describeOutput renders the rows of an output as "row:op" with the ops it carries.
func describeOutput(c *vec.Chunk, o *vec.SplitOutput) string {
	ops := c.Ops()
	if o.OwnOps {
		ops = o.Ops
	}
	var parts []string
	for i := 0; i < c.NumRows(); i++ {
		if bitutil.BitIsSet(o.Vis, i) {
			parts = append(parts, fmt.Sprintf("%d:%v", i, ops[i]))
		}
	}
	return strings.Join(parts, " ")
}

func TestSplitByDestCases(t *testing.T) {
	mem := checkedMem(t)
	for _, tc := range []struct {
		name string
		ops  string
		dest []uint16 // output of each row (the mapping is the identity)
		want []string // rows of each output
	}{
		{"empty", "", nil, []string{"", ""}},
		{"inserts and deletes", "+ - + -", []uint16{0, 1, 1, 0}, []string{"0:+ 3:-", "1:- 2:+"}},
		{"pair kept together", "+ U- U+ -", []uint16{1, 0, 0, 1}, []string{"1:U- 2:U+", "0:+ 3:-"}},
		{"pair split", "U- U+", []uint16{0, 1}, []string{"0:-", "1:+"}},
		{"pair split the other way", "U- U+", []uint16{1, 0}, []string{"1:+", "0:-"}},
		{"invisible rows go nowhere", "+! U-! U+! -", []uint16{0, 0, 1, 1}, []string{"", "3:-"}},
		{"invisible row between the halves", "U- +! U+ +", []uint16{0, 1, 1, 0}, []string{"0:- 3:+", "2:+"}},
		{"two pairs, one split", "U- U+ U- U+", []uint16{0, 0, 1, 2}, []string{"0:U- 1:U+", "2:-", "3:+"}},
		{"split pair next to a kept one", "U- U+ U- U+", []uint16{0, 1, 1, 1}, []string{"0:-", "1:+ 2:U- 3:U+"}},
		{"one output", "U- U+ + -", []uint16{0, 0, 0, 0}, []string{"0:U- 1:U+ 2:+ 3:-"}},
	} {
		c := opsChunk(t, mem, tc.ops)
		mapping := make([]uint16, 3)
		for i := range mapping {
			mapping[i] = uint16(i)
		}
		outs := make([]vec.SplitOutput, len(tc.want))
		// Outputs reused from an earlier split must not leak into this one.
		for i := range outs {
			outs[i].Vis = []byte{0xff, 0xff}
			outs[i].Ops = []vec.Op{vec.Delete, vec.Delete, vec.Delete, vec.Delete}
			outs[i].OwnOps = true
			outs[i].Rows = 99
		}
		vec.SplitByDest(c, tc.dest, mapping, outs)
		for o, want := range tc.want {
			got := describeOutput(c, &outs[o])
			rows := 0
			if want != "" {
				rows = len(strings.Fields(want))
			}
			if got != want || outs[o].Rows != rows {
				t.Errorf("%s: output %d: %q (%d rows), want %q", tc.name, o, got, outs[o].Rows, want)
			}
		}
		c.Release()
	}
}

func TestRepairUpdatePairsCases(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ops    string // "!" marks rows invisible before the filter
		keep   string // "1" kept by the filter, "0" dropped
		want   string // ops of the kept rows after repair, as "row:op"
		copied bool   // a repair was needed (result is not ops itself)
	}{
		{"insert half kept among others", "+ U- U+ -", "1011", "0:+ 2:+ 3:-", true},
		{"no pairs", "+ - +", "101", "0:+ 2:+", false},
		{"pair kept", "U- U+", "11", "0:U- 1:U+", false},
		{"pair dropped", "+ U- U+", "100", "0:+", false},
		{"delete half kept", "U- U+", "10", "0:-", true},
		{"insert half kept", "U- U+", "01", "1:+", true},
		{"both ways in one chunk", "U- U+ U- U+ U- U+", "100111", "0:- 3:+ 4:U- 5:U+", true},
		{"invisible row between the halves", "U- -! U+", "001", "2:+", true},
		{"invisible pair ignored", "U-! U+! U- U+", "0011", "2:U- 3:U+", false},
	} {
		ops, orig := parseOps(t, tc.ops)
		var origBits []byte
		if orig != nil {
			origBits = make([]byte, (len(ops)+7)/8)
			for i, v := range orig {
				if v {
					bitutil.SetBit(origBits, i)
				}
			}
		}
		vis := make([]byte, (len(ops)+7)/8)
		for i, ch := range tc.keep {
			if ch == '1' {
				bitutil.SetBit(vis, i)
			}
		}
		before := append([]vec.Op(nil), ops...)
		scratch := make([]vec.Op, 0, 16)
		got := vec.RepairUpdatePairs(ops, origBits, vis, scratch)
		var parts []string
		for i := range got {
			if bitutil.BitIsSet(vis, i) {
				parts = append(parts, fmt.Sprintf("%d:%v", i, got[i]))
			}
		}
		if s := strings.Join(parts, " "); s != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, s, tc.want)
		}
		same := len(got) > 0 && &got[0] == &ops[0]
		if tc.copied == same {
			t.Errorf("%s: result is the input slice: %v, want %v", tc.name, same, !tc.copied)
		}
		if tc.copied && !same && &got[0] != &scratch[:1][0] {
			t.Errorf("%s: a repair did not reuse scratch", tc.name)
		}
		for i := range ops {
			if ops[i] != before[i] {
				t.Errorf("%s: input ops modified at row %d", tc.name, i)
			}
		}
	}
}

// checkChangelog reports a dangling half of an update pair among the rows set in vis,
// read with ops.
func checkChangelog(ops []vec.Op, vis []byte, n int) error {
	prev := -1
	for i := 0; i < n; i++ {
		if vis != nil && !bitutil.BitIsSet(vis, i) {
			continue
		}
		if prev >= 0 && ops[prev] == vec.UpdateDelete && ops[i] != vec.UpdateInsert {
			return fmt.Errorf("row %d: UpdateDelete followed by %v (row %d)", prev, ops[i], i)
		}
		if ops[i] == vec.UpdateInsert && (prev < 0 || ops[prev] != vec.UpdateDelete) {
			return fmt.Errorf("row %d: UpdateInsert without an UpdateDelete before it", i)
		}
		prev = i
	}
	if prev >= 0 && ops[prev] == vec.UpdateDelete {
		return fmt.Errorf("row %d: UpdateDelete at the end", prev)
	}
	return nil
}

// visibleHalves pairs up the visible update halves of c: partner[i] is the other half
// of row i's pair, or -1.
func visiblePartners(c *vec.Chunk) []int {
	partner := make([]int, c.NumRows())
	pending := -1
	for i, op := range c.Ops() {
		partner[i] = -1
		if !c.Visible(i) {
			continue
		}
		switch op {
		case vec.UpdateDelete:
			pending = i
		case vec.UpdateInsert:
			partner[i], partner[pending] = pending, i
			pending = -1
		}
	}
	return partner
}

// TestSplitByDestRandom splits random chunks over random mappings: every visible row
// goes to exactly the output its vnode maps to, invisible rows nowhere, every output is
// a valid changelog, and ops change only where a pair was split (U- to -, U+ to +).
func TestSplitByDestRandom(t *testing.T) {
	mem := checkedMem(t)
	rng, seed := vectest.Rand(t)
	splits := 0
	for it := 0; it < 300; it++ {
		tab := vectest.RandomTable(rng, "t")
		c := vectest.RandomChunk(rng, mem, tab, rng.IntN(300), 0.2)
		n := c.NumRows()
		nout := 1 + rng.IntN(5)
		count := tab.VnodeCount
		vnodes := make([]uint16, n)
		for i := range vnodes {
			vnodes[i] = uint16(rng.IntN(min(count, 16)))
		}
		mapping := make([]uint16, count)
		for v := range mapping {
			mapping[v] = uint16(rng.IntN(nout))
		}
		outs := make([]vec.SplitOutput, nout)
		vec.SplitByDest(c, vnodes, mapping, outs)
		partner := visiblePartners(c)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed=%d iteration %d: "+format, append([]any{seed, it}, args...)...)
		}
		for o := range outs {
			out := &outs[o]
			ops := c.Ops()
			if out.OwnOps {
				ops = out.Ops
			}
			if got := bitutil.CountSetBits(out.Vis, 0, n); got != out.Rows {
				fail("output %d: Rows %d, %d bits set", o, out.Rows, got)
			}
			if err := checkChangelog(ops, out.Vis, n); err != nil {
				fail("output %d: %v", o, err)
			}
			for i := 0; i < n; i++ {
				in := bitutil.BitIsSet(out.Vis, i)
				if want := c.Visible(i) && int(mapping[vnodes[i]]) == o; in != want {
					fail("row %d (visible %v, vnode %d -> output %d) in output %d: %v", i, c.Visible(i), vnodes[i], mapping[vnodes[i]], o, in)
				}
				if !in {
					continue
				}
				want := c.Ops()[i]
				if p := partner[i]; p >= 0 && mapping[vnodes[p]] != mapping[vnodes[i]] {
					splits++
					if want == vec.UpdateDelete {
						want = vec.Delete
					} else {
						want = vec.Insert
					}
				}
				if ops[i] != want {
					fail("row %d in output %d: op %v, want %v", i, o, ops[i], want)
				}
			}
		}
		c.Release()
	}
	if splits == 0 {
		t.Fatalf("seed=%d: no pair was split", seed)
	}
}

// TestRepairUpdatePairsRandom filters random chunks at random and checks that the
// repaired ops are a valid changelog over the kept rows, that only split pairs change,
// and that the input comes back unchanged when nothing needed repair.
func TestRepairUpdatePairsRandom(t *testing.T) {
	mem := checkedMem(t)
	rng, seed := vectest.Rand(t)
	repaired, untouched := 0, 0
	var scratch []vec.Op
	for it := 0; it < 500; it++ {
		tab := vectest.RandomTable(rng, "t")
		c := vectest.RandomChunk(rng, mem, tab, 1+rng.IntN(100), 0)
		n := c.NumRows()
		vis := make([]byte, (n+7)/8)
		keep := rng.Float64()
		for i := 0; i < n; i++ {
			if c.Visible(i) && rng.Float64() < keep {
				bitutil.SetBit(vis, i)
			}
		}
		ops := c.Ops()
		got := vec.RepairUpdatePairs(ops, c.Visibility(), vis, scratch)
		if err := checkChangelog(got, vis, n); err != nil {
			c.Release()
			t.Fatalf("seed=%d iteration %d: %v", seed, it, err)
		}
		partner := visiblePartners(c)
		changed := false
		for i := 0; i < n; i++ {
			want := ops[i]
			if p := partner[i]; p >= 0 && bitutil.BitIsSet(vis, i) && !bitutil.BitIsSet(vis, p) {
				changed = true
				if want == vec.UpdateDelete {
					want = vec.Delete
				} else {
					want = vec.Insert
				}
			}
			if bitutil.BitIsSet(vis, i) && got[i] != want {
				c.Release()
				t.Fatalf("seed=%d iteration %d: row %d: op %v, want %v", seed, it, i, got[i], want)
			}
		}
		if same := &got[0] == &ops[0]; same == changed {
			c.Release()
			t.Fatalf("seed=%d iteration %d: repair needed %v, result is the input %v", seed, it, changed, same)
		}
		if changed {
			repaired++
			scratch = got
		} else {
			untouched++
		}
		c.Release()
	}
	if repaired == 0 || untouched == 0 {
		t.Fatalf("seed=%d: %d repaired, %d untouched: want both", seed, repaired, untouched)
	}
}
