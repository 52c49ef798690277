package vectest_test

import (
	"flag"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

func TestRandomTable(t *testing.T) {
	rng, seed := vectest.Rand(t)
	kinds := map[schema.Kind]bool{}
	counts := map[int]bool{}
	for it := 0; it < 500; it++ {
		tab := vectest.RandomTable(rng, "t")
		if len(tab.Columns) < 1 || len(tab.Columns) > 8 || len(tab.PK) < 1 || len(tab.PK) > 4 || len(tab.DistKey) < 1 {
			t.Fatalf("seed=%d iteration %d: bad shape\n%s", seed, it, tab.Canonical())
		}
		if err := tab.Validate(); err != nil {
			t.Fatalf("seed=%d iteration %d: %v", seed, it, err)
		}
		for _, c := range tab.Columns {
			kinds[c.Type.Kind] = true
		}
		counts[tab.VnodeCount] = true
	}
	if len(kinds) != len(schema.Kinds) || len(counts) != len(vectest.VnodeCounts) {
		t.Fatalf("seed=%d: 500 tables cover %d kinds and %d vnode counts", seed, len(kinds), len(counts))
	}
}

func TestRandomChunk(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng, seed := vectest.Rand(t)
	var sawNaN, sawNegZero, sawInf, sawEmpty, saw8, sawNilVis, sawPair, sawDup bool
	for it := 0; it < 200; it++ {
		tab := vectest.RandomTable(rng, "t")
		n := rng.IntN(300)
		c := vectest.RandomChunk(rng, mem, tab, n, 0.2)
		fail := func(format string, args ...any) {
			t.Helper()
			c.Release()
			t.Fatalf("seed=%d iteration %d: "+format, append([]any{seed, it}, args...)...)
		}
		if c.NumRows() != n {
			fail("%d rows, want %d", c.NumRows(), n)
		}
		if c.Visibility() == nil {
			sawNilVis = true
		}
		ops := c.Ops()
		for i, op := range ops {
			switch op {
			case vec.UpdateDelete:
				if i+1 >= n || ops[i+1] != vec.UpdateInsert || c.Visible(i) != c.Visible(i+1) {
					fail("row %d: UpdateDelete without its UpdateInsert", i)
				}
				sawPair = true
			case vec.UpdateInsert:
				if i == 0 || ops[i-1] != vec.UpdateDelete {
					fail("row %d: UpdateInsert without its UpdateDelete", i)
				}
			}
		}
		rec := c.Record()
		for ci, col := range tab.Columns {
			arr := rec.Column(ci)
			if !col.Nullable && arr.NullN() != 0 {
				fail("NOT NULL column %s has %d NULLs", col.Name, arr.NullN())
			}
			seen := map[string]bool{}
			for i := 0; i < n; i++ {
				if arr.IsNull(i) {
					continue
				}
				s := vectest.FormatValue(arr, i)
				sawDup = sawDup || seen[s]
				seen[s] = true
				switch a := arr.(type) {
				case *array.Float64:
					v := a.Value(i)
					sawNaN = sawNaN || math.IsNaN(v)
					sawInf = sawInf || math.IsInf(v, 0)
					sawNegZero = sawNegZero || (v == 0 && math.Signbit(v))
				case *array.Decimal128:
					if !a.Value(i).FitsInPrecision(col.Type.Precision) {
						fail("column %s row %d: %s does not fit %s", col.Name, i, s, col.Type)
					}
				case *array.String:
					v := a.Value(i)
					if !utf8.ValidString(v) || len(v) > 40 {
						fail("column %s row %d: bad varchar %q", col.Name, i, v)
					}
					sawEmpty = sawEmpty || v == ""
					saw8 = saw8 || (len(v) > 0 && len(v)%8 == 0)
				}
			}
		}
		// Pairs that keep their pk must repeat every pk column.
		c.Release()
	}
	if !sawNaN || !sawNegZero || !sawInf || !sawEmpty || !saw8 || !sawNilVis || !sawPair || !sawDup {
		t.Fatalf("seed=%d: not every case came up: NaN %v -0 %v Inf %v empty %v len8 %v nilvis %v pair %v dup %v",
			seed, sawNaN, sawNegZero, sawInf, sawEmpty, saw8, sawNilVis, sawPair, sawDup)
	}
}

func TestRandomChunkSameKeyPairs(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng, seed := vectest.Rand(t)
	same, changed := 0, 0
	for it := 0; it < 100; it++ {
		tab := vectest.RandomTable(rng, "t")
		c := vectest.RandomChunk(rng, mem, tab, 200, 0.3)
		pk := vectest.PKArrays(tab, c.Record())
		for i, op := range c.Ops() {
			if op != vec.UpdateInsert {
				continue
			}
			eq := true
			for _, a := range pk {
				eq = eq && vectest.ValuesEqual(a, i-1, a, i)
			}
			if eq {
				same++
			} else {
				changed++
			}
		}
		c.Release()
	}
	if same == 0 || changed == 0 {
		t.Fatalf("seed=%d: %d pairs keep their pk, %d change it; want both", seed, same, changed)
	}
}

func TestChunksEqual(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	tab := &schema.Table{Name: "t", Columns: []schema.Column{
		{Name: "a", Type: schema.Type{Kind: schema.Int64}},
		{Name: "f", Type: schema.Type{Kind: schema.Float64}, Nullable: true},
	}, PK: []schema.KeyColumn{{Column: 0}}}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	build := func(f []float64, null []bool, ops []vec.Op, vis []bool) *vec.Chunk {
		bs := vectest.BuildersFor(mem, tab, vectest.AllColumns(tab))
		for i := range f {
			bs[0].(*array.Int64Builder).Append(int64(i))
			if null[i] {
				bs[1].AppendNull()
			} else {
				bs[1].(*array.Float64Builder).Append(f[i])
			}
		}
		rec := vectest.FinishRecord(tab, vectest.AllColumns(tab), bs, len(f))
		defer rec.Release()
		return vectest.ChunkOf(mem, rec, ops, vis)
	}
	nan, negZero := math.NaN(), math.Copysign(0, -1)
	ins := []vec.Op{vec.Insert, vec.Insert, vec.Insert}
	base := build([]float64{1, nan, 0}, []bool{false, false, true}, ins, nil)
	defer base.Release()
	for _, tc := range []struct {
		name string
		c    *vec.Chunk
		want string // "" = equal
	}{
		{"same, other NaN payload, all-set bitmap", build([]float64{1, math.Float64frombits(0x7FF0000000000123), 5}, []bool{false, false, true}, ins, []bool{true, true, true}), ""},
		{"value", build([]float64{2, nan, 0}, []bool{false, false, true}, ins, nil), "column 1 (f) row 0: 1 != 2"},
		{"NaN vs number", build([]float64{1, 0, 0}, []bool{false, false, true}, ins, nil), "column 1 (f) row 1"},
		{"null", build([]float64{1, nan, 0}, []bool{false, false, false}, ins, nil), "column 1 (f) row 2: NULL != 0"},
		{"op", build([]float64{1, nan, 0}, []bool{false, false, true}, []vec.Op{vec.Insert, vec.Delete, vec.Insert}, nil), "row 1: op + != -"},
		{"visibility", build([]float64{1, nan, 0}, []bool{false, false, true}, ins, []bool{true, false, true}), "row 1: visible true != false"},
	} {
		err := vectest.ChunksEqual(base, tc.c)
		tc.c.Release()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	zero := build([]float64{0}, []bool{false}, []vec.Op{vec.Insert}, nil)
	neg := build([]float64{negZero}, []bool{false}, []vec.Op{vec.Insert}, nil)
	if err := vectest.ChunksEqual(zero, neg); err == nil || !strings.Contains(err.Error(), "0 != -0") {
		t.Errorf("+0 vs -0: %v", err)
	}
	zero.Release()
	neg.Release()
}

func TestComparePK(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	for _, tc := range []struct {
		desc, nullsFirst bool
		want             []int // compare(row0, row1), (row1, row2), ... for 1, NULL, NaN, -0, 0
	}{
		{false, false, []int{-1, 1, 1, 0}},
		{false, true, []int{1, -1, 1, 0}},
		{true, false, []int{-1, 1, -1, 0}},
		{true, true, []int{1, -1, -1, 0}},
	} {
		tab := &schema.Table{Name: "t", Columns: []schema.Column{{Name: "f", Type: schema.Type{Kind: schema.Float64}, Nullable: true}},
			PK: []schema.KeyColumn{{Column: 0, Desc: tc.desc, NullsFirst: tc.nullsFirst}}}
		if err := tab.Validate(); err != nil {
			t.Fatal(err)
		}
		bs := vectest.BuildersFor(mem, tab, []int{0})
		fb := bs[0].(*array.Float64Builder)
		fb.Append(1)
		fb.AppendNull()
		fb.Append(math.NaN())
		fb.Append(math.Copysign(0, -1))
		fb.Append(0)
		rec := vectest.FinishRecord(tab, []int{0}, bs, 5)
		pk := vectest.PKArrays(tab, rec)
		for i, w := range tc.want {
			if got := vectest.ComparePK(tab, pk, i, pk, i+1); got != w {
				t.Errorf("desc=%v nullsFirst=%v: compare(%s, %s) = %d, want %d", tc.desc, tc.nullsFirst,
					vectest.FormatValue(pk[0], i), vectest.FormatValue(pk[0], i+1), got, w)
			}
		}
		rec.Release()
	}
}

func TestSeedStable(t *testing.T) {
	a := vectest.Seed(t)
	b := vectest.Seed(t)
	if a != b {
		t.Fatalf("Seed changed within a test: %d then %d", a, b)
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "seed" })
	if given {
		if want := flag.Lookup("seed").Value.String(); strconv.FormatUint(a, 10) != want {
			t.Fatalf("Seed() = %d, -seed=%s", a, want)
		}
		return
	}
	var other uint64
	t.Run("sub", func(t *testing.T) { other = vectest.Seed(t) })
	if other == a {
		t.Fatalf("two tests share seed %d", a)
	}
}

func TestProjection(t *testing.T) {
	rng, seed := vectest.Rand(t)
	empty, all := false, false
	for it := 0; it < 200; it++ {
		p := vectest.RandomProjection(rng, 5)
		seen := map[int]bool{}
		for _, c := range p {
			if c < 0 || c >= 5 || seen[c] {
				t.Fatalf("seed=%d: bad projection %v", seed, p)
			}
			seen[c] = true
		}
		empty = empty || len(p) == 0
		all = all || len(p) == 5
	}
	if !empty || !all {
		t.Fatalf("seed=%d: empty %v all %v", seed, empty, all)
	}
}
