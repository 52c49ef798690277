package vectest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// VnodeCounts are the vnode counts RandomTable picks from: the smallest, a few, the
// default and the largest.
var VnodeCounts = []int{1, 8, 256, schema.MaxVnodeCount}

// decimalPrecisions favours the precisions where the unscaled value changes width or
// sign handling (1, 9/10, 18/19, 38) over the rest.
var decimalPrecisions = []int32{1, 2, 5, 9, 10, 18, 19, 20, 37, 38}

// RandomType returns a random column type; decimals get a random precision and a scale
// from 0 to the precision.
func RandomType(rng *rand.Rand) schema.Type {
	k := schema.Kinds[rng.IntN(len(schema.Kinds))]
	if k != schema.Decimal {
		return schema.Type{Kind: k}
	}
	p := decimalPrecisions[rng.IntN(len(decimalPrecisions))]
	if rng.IntN(4) == 0 {
		p = 1 + rng.Int32N(schema.MaxDecimalPrecision)
	}
	return schema.Type{Kind: schema.Decimal, Precision: p, Scale: rng.Int32N(p + 1)}
}

// RandomTable returns a random valid table named name: 1 to 8 columns (named c0, c1,
// ...) of random types and nullability; a pk of 1 to 4 distinct columns in random
// order, each with a random direction and nulls order; a distribution key that is a
// random non-empty subset of the pk in random order; and a vnode count from
// VnodeCounts. It panics if the table does not validate (a bug in this package).
func RandomTable(rng *rand.Rand, name string) *schema.Table {
	ncols := 1 + rng.IntN(8)
	t := &schema.Table{Name: name, VnodeCount: VnodeCounts[rng.IntN(len(VnodeCounts))]}
	for i := 0; i < ncols; i++ {
		t.Columns = append(t.Columns, schema.Column{
			Name:     fmt.Sprintf("c%d", i),
			Type:     RandomType(rng),
			Nullable: rng.IntN(2) == 0,
		})
	}
	npk := 1 + rng.IntN(min(4, ncols))
	for _, c := range rng.Perm(ncols)[:npk] {
		t.PK = append(t.PK, schema.KeyColumn{Column: c, Desc: rng.IntN(2) == 0, NullsFirst: rng.IntN(2) == 0})
	}
	for _, j := range rng.Perm(npk)[:1+rng.IntN(npk)] {
		t.DistKey = append(t.DistKey, t.PK[j].Column)
	}
	if err := t.Validate(); err != nil {
		panic(fmt.Sprintf("vectest: RandomTable built an invalid table: %v\n%s", err, t.Canonical()))
	}
	return t
}

// RandomChunk returns a chunk of n rows of table t with random values, ops and
// visibility, built with mem. The caller releases it.
//
// Values: every column gets values of its Arrow type (see schema.Type.ArrowType). With
// probability about 1/3 a value comes from a small domain (a handful of values per
// type, so that duplicates and equal keys are common), otherwise from the full domain:
// floats include ±Inf, NaN (with payloads), -0 and subnormals; decimals stay within the
// column's precision; varchar is valid UTF-8 of 0 to 40 bytes (lengths that are
// multiples of 8 are favoured); bytea is arbitrary bytes of the same lengths.
// A nullable column is NULL with probability nullFrac; a NOT NULL one never.
//
// Ops: Insert, Delete and UpdateDelete+UpdateInsert pairs on adjacent rows. Half of the
// pairs keep their pk (the same stream key); the others change it. Visibility is nil
// (all visible) for about a quarter of chunks; otherwise each single row or whole pair
// is visible with a per-chunk probability, so that among visible rows an UpdateDelete
// is always immediately followed by its UpdateInsert.
func RandomChunk(rng *rand.Rand, mem memory.Allocator, t *schema.Table, n int, nullFrac float64) *vec.Chunk {
	ops := RandomOps(rng, n)
	samePK := make([]bool, n)
	for i, op := range ops {
		samePK[i] = op == vec.UpdateInsert && rng.IntN(2) == 0
	}
	cols := make([]arrow.Array, len(t.Columns))
	for c, col := range t.Columns {
		var copyPrev []bool
		if t.IsPK(c) {
			copyPrev = samePK
		}
		frac := nullFrac
		if !col.Nullable {
			frac = 0
		}
		cols[c] = RandomArray(rng, mem, col.Type, n, frac, copyPrev)
	}
	rec := array.NewRecordBatch(t.ArrowSchema(), cols, int64(n))
	for _, a := range cols {
		a.Release()
	}
	defer rec.Release()
	return ChunkOf(mem, rec, ops, RandomVisibility(rng, ops))
}

// RandomOps returns n random ops: Insert, Delete, and UpdateDelete+UpdateInsert pairs
// on adjacent rows. The mix varies from call to call (sometimes inserts only).
func RandomOps(rng *rand.Rand, n int) []vec.Op {
	ops := make([]vec.Op, n)
	var pairP, delP float64
	switch rng.IntN(4) {
	case 0: // inserts only
	case 1:
		pairP, delP = 0.5, 0.3
	default:
		pairP, delP = 0.2, 0.3
	}
	for i := 0; i < n; {
		if i+1 < n && rng.Float64() < pairP {
			ops[i], ops[i+1] = vec.UpdateDelete, vec.UpdateInsert
			i += 2
			continue
		}
		if rng.Float64() < delP {
			ops[i] = vec.Delete
		}
		i++
	}
	return ops
}

// RandomVisibility returns nil (every row visible) about a quarter of the time, and
// otherwise one flag per row, set with a per-call probability, where the two rows of an
// update pair (an UpdateDelete and the UpdateInsert right after it) are always visible
// or invisible together.
func RandomVisibility(rng *rand.Rand, ops []vec.Op) []bool {
	var p float64
	switch rng.IntN(8) {
	case 0, 1:
		return nil
	case 2:
		p = 1
	case 3:
		p = 0.05
	default:
		p = rng.Float64()
	}
	vis := make([]bool, len(ops))
	for i := 0; i < len(ops); i++ {
		v := rng.Float64() < p
		vis[i] = v
		if ops[i] == vec.UpdateDelete && i+1 < len(ops) && ops[i+1] == vec.UpdateInsert {
			vis[i+1] = v
			i++
		}
	}
	return vis
}

// ChunkOf builds a chunk over rec with the given ops (one per row) and visibility (nil:
// every row visible; otherwise one flag per row). The chunk holds its own references;
// the caller still releases rec, and releases the chunk.
func ChunkOf(mem memory.Allocator, rec arrow.RecordBatch, ops []vec.Op, visible []bool) *vec.Chunk {
	n := int(rec.NumRows())
	if len(ops) != n || (visible != nil && len(visible) != n) {
		panic(fmt.Sprintf("vectest: ChunkOf: %d rows, %d ops, %d visibility flags", n, len(ops), len(visible)))
	}
	opsBuf := vec.NewOps(mem, n, vec.Insert)
	copy(vec.OpsOf(opsBuf.Bytes()), ops)
	defer opsBuf.Release()
	if visible == nil {
		return vec.NewChunk(rec, opsBuf, nil)
	}
	visBuf := vec.NewBitmap(mem, n)
	defer visBuf.Release()
	bits := visBuf.Bytes()
	for i, v := range visible {
		if v {
			bits[i>>3] |= 1 << (i & 7)
		}
	}
	return vec.NewChunk(rec, opsBuf, visBuf)
}

// RandomArray returns n random values of type typ (see RandomChunk), NULL with
// probability nullFrac. Where copyPrev[i] is set (copyPrev may be nil), row i repeats
// row i-1 exactly, NULL included.
func RandomArray(rng *rand.Rand, mem memory.Allocator, typ schema.Type, n int, nullFrac float64, copyPrev []bool) arrow.Array {
	b := array.NewBuilder(mem, typ.ArrowType())
	defer b.Release()
	b.Reserve(n)
	g := gen{rng: rng, n: n, nullFrac: nullFrac, copyPrev: copyPrev, appendNull: b.AppendNull}
	switch typ.Kind {
	case schema.Boolean:
		fill(g, func() bool { return rng.IntN(2) == 0 }, b.(*array.BooleanBuilder).Append)
	case schema.Int16:
		fill(g, func() int16 { return int16(randInt(rng, math.MinInt16, math.MaxInt16)) }, b.(*array.Int16Builder).Append)
	case schema.Int32:
		fill(g, func() int32 { return int32(randInt(rng, math.MinInt32, math.MaxInt32)) }, b.(*array.Int32Builder).Append)
	case schema.Int64:
		fill(g, func() int64 { return randInt(rng, math.MinInt64, math.MaxInt64) }, b.(*array.Int64Builder).Append)
	case schema.Date:
		fill(g, func() arrow.Date32 { return arrow.Date32(randInt(rng, math.MinInt32, math.MaxInt32)) }, b.(*array.Date32Builder).Append)
	case schema.Timestamp, schema.Timestamptz:
		fill(g, func() arrow.Timestamp { return arrow.Timestamp(randInt(rng, math.MinInt64, math.MaxInt64)) }, b.(*array.TimestampBuilder).Append)
	case schema.Float32:
		fill(g, func() float32 { return RandomFloat32(rng) }, b.(*array.Float32Builder).Append)
	case schema.Float64:
		fill(g, func() float64 { return RandomFloat64(rng) }, b.(*array.Float64Builder).Append)
	case schema.Decimal:
		fill(g, func() decimal128.Num { return RandomDecimal(rng, typ.Precision) }, b.(*array.Decimal128Builder).Append)
	case schema.Varchar:
		fill(g, func() string { return RandomString(rng) }, b.(*array.StringBuilder).Append)
	case schema.Bytea:
		fill(g, func() []byte { return RandomBytes(rng) }, b.(*array.BinaryBuilder).Append)
	default:
		panic(fmt.Sprintf("vectest: RandomArray of unsupported type %s", typ))
	}
	return b.NewArray()
}

type gen struct {
	rng        *rand.Rand
	n          int
	nullFrac   float64
	copyPrev   []bool
	appendNull func()
}

func fill[T any](g gen, value func() T, app func(T)) {
	var prev T
	prevNull := false
	for i := 0; i < g.n; i++ {
		if g.copyPrev != nil && g.copyPrev[i] && i > 0 {
			if prevNull {
				g.appendNull()
			} else {
				app(prev)
			}
			continue
		}
		if g.nullFrac > 0 && g.rng.Float64() < g.nullFrac {
			g.appendNull()
			prevNull = true
			continue
		}
		prev, prevNull = value(), false
		app(prev)
	}
}

// small reports whether the next value should come from the small domain.
func small(rng *rand.Rand) bool { return rng.IntN(3) == 0 }

// randInt returns a value in [lo, hi]: from the small domain {-1, 0, 1, 2} a third of
// the time, an extreme (lo, lo+1, hi-1, hi) sometimes, and uniform otherwise.
func randInt(rng *rand.Rand, lo, hi int64) int64 {
	if small(rng) {
		return rng.Int64N(4) - 1
	}
	if rng.IntN(8) == 0 {
		return [...]int64{lo, lo + 1, hi - 1, hi}[rng.IntN(4)]
	}
	// Uniform over [lo, hi] by masking random bits to the width of the type.
	span := uint64(hi) - uint64(lo)
	return lo + int64(rng.Uint64()&span)
}

var smallFloats = []float64{-1, -0.5, 0, math.Copysign(0, -1), 0.5, 1, math.Inf(1), math.Inf(-1), math.NaN()}

// RandomFloat64 returns a float64 from the small domain (±1, ±0.5, ±0, ±Inf, NaN) a
// third of the time, otherwise random bits (NaN payloads, subnormals, anything), a
// special value, or a normally distributed value of random magnitude.
func RandomFloat64(rng *rand.Rand) float64 {
	if small(rng) {
		return smallFloats[rng.IntN(len(smallFloats))]
	}
	switch rng.IntN(4) {
	case 0:
		return math.Float64frombits(rng.Uint64())
	case 1:
		return [...]float64{math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64,
			-math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1), math.Copysign(0, -1),
			math.Float64frombits(0xFFF8000000000000), math.Float64frombits(0x7FF0000000000001)}[rng.IntN(9)]
	}
	return rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
}

// RandomFloat32 is RandomFloat64 for float32.
func RandomFloat32(rng *rand.Rand) float32 {
	if small(rng) {
		return float32(smallFloats[rng.IntN(len(smallFloats))])
	}
	switch rng.IntN(4) {
	case 0:
		return math.Float32frombits(rng.Uint32())
	case 1:
		return [...]float32{math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32,
			-math.SmallestNonzeroFloat32, float32(math.Inf(1)), float32(math.Inf(-1)),
			float32(math.Copysign(0, -1)), math.Float32frombits(0xFFC00000), math.Float32frombits(0x7F800001)}[rng.IntN(9)]
	}
	return float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10)))
}

// RandomDecimal returns an unscaled decimal value that fits precision prec: from the
// small domain {-1, 0, 1, 2} a third of the time, ±(10^prec - 1) sometimes, and
// otherwise a value with a random number of digits (1 to prec) and a random sign.
func RandomDecimal(rng *rand.Rand, prec int32) decimal128.Num {
	if small(rng) {
		return decimal128.FromI64(rng.Int64N(4) - 1)
	}
	if rng.IntN(8) == 0 {
		m := decimal128.GetMaxValue(prec)
		if rng.IntN(2) == 0 {
			return m.Negate()
		}
		return m
	}
	digits := 1 + rng.Int32N(prec)
	v := decimal128.New(int64(rng.Uint64()>>1), rng.Uint64())
	_, rem := v.Div(decimal128.GetScaleMultiplier(int(digits)))
	if rng.IntN(2) == 0 {
		rem = rem.Negate()
	}
	return rem
}

var smallStrings = []string{"", "a", "a\x00", "ab", "abcdefgh", "abcdefgh\x00", "abcdefghi", "b", "é"}

var smallBytes = []string{"", "\x00", "\x00\x00", "\xff", "a", "abcdefgh", "abcdefgh\xff", "\xff\xff\xff\xff\xff\xff\xff\xff", "b"}

// randomLen returns 0 to 40, favouring multiples of 8.
func randomLen(rng *rand.Rand) int {
	if rng.IntN(4) == 0 {
		return 8 * rng.IntN(6)
	}
	return rng.IntN(41)
}

var multiByte = []rune{'é', 'ß', '日', '本', '€', '😀'}

// RandomString returns valid UTF-8 (mostly printable ASCII, some multi-byte runes and
// control characters) of 0 to 40 bytes, or a value of the small domain.
func RandomString(rng *rand.Rand) string {
	if small(rng) {
		return smallStrings[rng.IntN(len(smallStrings))]
	}
	n := randomLen(rng)
	b := make([]byte, 0, n)
	for len(b) < n {
		if rng.IntN(8) == 0 {
			r := multiByte[rng.IntN(len(multiByte))]
			if len(b)+utf8.RuneLen(r) <= n {
				b = utf8.AppendRune(b, r)
				continue
			}
		}
		c := byte(0x20 + rng.IntN(0x7f-0x20))
		if rng.IntN(16) == 0 {
			c = byte(rng.IntN(0x80))
		}
		b = append(b, c)
	}
	return string(b)
}

// RandomBytes returns 0 to 40 arbitrary bytes, or a value of the small domain.
func RandomBytes(rng *rand.Rand) []byte {
	if small(rng) {
		return []byte(smallBytes[rng.IntN(len(smallBytes))])
	}
	b := make([]byte, randomLen(rng))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// RandomProjection returns a random projection of a table with ncols columns: a subset
// of the columns in random order. The empty projection and every column (in random
// order) each come up about one time in eight.
func RandomProjection(rng *rand.Rand, ncols int) vec.Projection {
	perm := rng.Perm(ncols)
	switch rng.IntN(8) {
	case 0:
		return vec.Projection{}
	case 1:
		return vec.Projection(perm)
	}
	return vec.Projection(perm[:rng.IntN(ncols+1)])
}
