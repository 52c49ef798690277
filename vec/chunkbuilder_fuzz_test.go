package vec_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// fuzzInput hands out the fuzzer's bytes as choices; an exhausted input reads as zeros.
type fuzzInput struct{ b []byte }

func (in *fuzzInput) empty() bool { return len(in.b) == 0 }

func (in *fuzzInput) byte() byte {
	if len(in.b) == 0 {
		return 0
	}
	x := in.b[0]
	in.b = in.b[1:]
	return x
}

// intn returns a choice in [0, n), n <= 256.
func (in *fuzzInput) intn(n int) int { return int(in.byte()) % n }

func (in *fuzzInput) u64() uint64 {
	var buf [8]byte
	n := copy(buf[:], in.b)
	in.b = in.b[n:]
	return binary.LittleEndian.Uint64(buf[:])
}

func (in *fuzzInput) u32() uint32 { return uint32(in.u64()) }

// bytes returns a byte string of a chosen length (up to 40, favouring the 8-byte group
// boundaries of the key codec), from the input.
func (in *fuzzInput) bytes() []byte {
	n := [...]int{0, 1, 7, 8, 9, 15, 16, 17, 3, 24, 40, 2}[in.intn(12)]
	out := make([]byte, n)
	k := copy(out, in.b)
	in.b = in.b[k:]
	if k < n && k > 0 { // input ran out: repeat what was there
		for i := k; i < n; i++ {
			out[i] = out[i-k]
		}
	}
	return out
}

func (in *fuzzInput) float64() float64 {
	switch in.intn(12) {
	case 0:
		return math.NaN()
	case 1:
		return math.Float64frombits(0xFFF8000000000000) // negative quiet NaN
	case 2:
		return math.Float64frombits(0x7FF0000000000001) // signalling NaN
	case 3:
		return math.Copysign(0, -1)
	case 4:
		return math.Inf(1)
	case 5:
		return math.Inf(-1)
	case 6:
		return 0
	case 7:
		return math.SmallestNonzeroFloat64
	case 8:
		return -math.MaxFloat64
	}
	return math.Float64frombits(in.u64())
}

func (in *fuzzInput) float32() float32 {
	switch in.intn(12) {
	case 0:
		return float32(math.NaN())
	case 1:
		return math.Float32frombits(0xFFC00000)
	case 2:
		return math.Float32frombits(0x7F800001)
	case 3:
		return float32(math.Copysign(0, -1))
	case 4:
		return float32(math.Inf(1))
	case 5:
		return float32(math.Inf(-1))
	case 6:
		return 0
	case 7:
		return math.SmallestNonzeroFloat32
	case 8:
		return math.MaxFloat32
	}
	return math.Float32frombits(in.u32())
}

// decimal returns a decimal of precision prec, or one outside it (the builder does not
// check precision; the codecs carry all 128 bits).
func (in *fuzzInput) decimal(prec int32) decimal128.Num {
	switch in.intn(8) {
	case 0:
		return decimal128.GetMaxValue(prec)
	case 1:
		return decimal128.GetMaxValue(prec).Negate()
	case 2:
		return decimal128.GetMaxValue(prec).Add(decimal128.FromI64(1)) // one past the precision
	case 3:
		return decimal128.New(math.MinInt64, 0)
	case 4:
		return decimal128.New(math.MaxInt64, math.MaxUint64)
	case 5:
		return decimal128.FromI64(int64(in.u64()))
	}
	return decimal128.New(int64(in.u64()), in.u64())
}

func (in *fuzzInput) time() time.Time {
	switch in.intn(4) {
	case 0:
		return time.Time{}
	case 1:
		return time.Unix(int64(in.u64())>>20, int64(in.u32()%1e9))
	case 2:
		return time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("x", int(in.u32()%100000)))
	}
	return time.UnixMicro(int64(in.u64()))
}

// The Go types of the values FuzzChunkBuilder appends: every one AppendRow accepts for
// some column, and some it accepts for none.
const (
	goNil = iota
	goBool
	goInt16
	goInt32
	goInt64
	goInt
	goFloat32
	goFloat64
	goDecimal
	goString
	goBytes
	goDate32
	goTimestamp
	goTime
	goNilBytes
	goStruct
	goUint8
	goInt8
	goUint64
	goDate64
	goNilPointer
	goNullable
	numGoTypes
)

// value returns a value of Go type kind (see goNil...) for a column of type typ (which
// only picks the precision of decimals).
func (in *fuzzInput) value(kind int, typ schema.Type) any {
	switch kind {
	case goNil:
		return nil
	case goBool:
		return in.byte()&1 == 1
	case goInt16:
		return int16(in.u64())
	case goInt32:
		return int32(in.u64())
	case goInt64:
		return int64(in.u64())
	case goInt:
		return int(in.u64())
	case goFloat32:
		return in.float32()
	case goFloat64:
		return in.float64()
	case goDecimal:
		prec := typ.Precision
		if typ.Kind != schema.Decimal {
			prec = 38
		}
		return in.decimal(prec)
	case goString:
		return string(in.bytes())
	case goBytes:
		return in.bytes()
	case goDate32:
		return arrow.Date32(in.u32())
	case goTimestamp:
		return arrow.Timestamp(in.u64())
	case goTime:
		return in.time()
	case goNilBytes:
		return []byte(nil)
	case goStruct:
		return struct{}{}
	case goUint8:
		return uint8(in.byte())
	case goInt8:
		return int8(in.byte())
	case goUint64:
		return in.u64()
	case goDate64:
		return arrow.Date64(in.u64())
	case goNilPointer:
		return (*int64)(nil)
	case goNullable:
		return vec.Some(int64(in.u64()))
	}
	panic("unknown Go type")
}

// fittingKinds are the Go types AppendRow documents for a column type.
func fittingKinds(k schema.Kind) []int {
	switch k {
	case schema.Boolean:
		return []int{goBool}
	case schema.Int16:
		return []int{goInt16}
	case schema.Int32:
		return []int{goInt32}
	case schema.Int64:
		return []int{goInt64, goInt}
	case schema.Float32:
		return []int{goFloat32}
	case schema.Float64:
		return []int{goFloat64}
	case schema.Decimal:
		return []int{goDecimal}
	case schema.Varchar:
		return []int{goString}
	case schema.Bytea:
		return []int{goBytes, goString, goNilBytes}
	case schema.Date:
		return []int{goDate32}
	case schema.Timestamp, schema.Timestamptz:
		return []int{goTimestamp, goTime}
	}
	panic("unknown kind")
}

// fitting returns a value AppendRow accepts for column c: NULL now and then when c is
// nullable.
func (in *fuzzInput) fitting(c schema.Column) any {
	if c.Nullable && in.intn(5) == 0 {
		return nil
	}
	kinds := fittingKinds(c.Type.Kind)
	return in.value(kinds[in.intn(len(kinds))], c.Type)
}

// cell is what a column of the built chunk must hold for an appended value: the value
// as the column's Arrow array returns it, nil for NULL; ok=false when AppendRow must
// refuse the value for c.
func cell(c schema.Column, v any) (want any, ok bool) {
	if v == nil {
		return nil, c.Nullable
	}
	switch x := v.(type) {
	case bool:
		return x, c.Type.Kind == schema.Boolean
	case int16:
		return x, c.Type.Kind == schema.Int16
	case int32:
		return x, c.Type.Kind == schema.Int32
	case int64:
		return x, c.Type.Kind == schema.Int64
	case int:
		return int64(x), c.Type.Kind == schema.Int64
	case float32:
		return x, c.Type.Kind == schema.Float32
	case float64:
		return x, c.Type.Kind == schema.Float64
	case decimal128.Num:
		return x, c.Type.Kind == schema.Decimal
	case string:
		if c.Type.Kind == schema.Bytea {
			return []byte(x), true
		}
		return x, c.Type.Kind == schema.Varchar
	case []byte:
		return append([]byte{}, x...), c.Type.Kind == schema.Bytea // nil: an empty value, not NULL
	case arrow.Date32:
		return x, c.Type.Kind == schema.Date
	case arrow.Timestamp:
		return x, c.Type.Kind == schema.Timestamp || c.Type.Kind == schema.Timestamptz
	case time.Time:
		return arrow.Timestamp(x.UnixMicro()), c.Type.Kind == schema.Timestamp || c.Type.Kind == schema.Timestamptz
	}
	return nil, false
}

// appendTyped appends v (a cell, nil for NULL) to column c's builder as its concrete
// Arrow builder, the way a caller of ChunkBuilder.Column does.
func appendTyped(b array.Builder, v any) {
	if v == nil {
		b.AppendNull()
		return
	}
	switch b := b.(type) {
	case *array.BooleanBuilder:
		b.Append(v.(bool))
	case *array.Int16Builder:
		b.Append(v.(int16))
	case *array.Int32Builder:
		b.Append(v.(int32))
	case *array.Int64Builder:
		b.Append(v.(int64))
	case *array.Float32Builder:
		b.Append(v.(float32))
	case *array.Float64Builder:
		b.Append(v.(float64))
	case *array.Decimal128Builder:
		b.Append(v.(decimal128.Num))
	case *array.StringBuilder:
		b.Append(v.(string))
	case *array.BinaryBuilder:
		b.Append(v.([]byte))
	case *array.Date32Builder:
		b.Append(v.(arrow.Date32))
	case *array.TimestampBuilder:
		b.Append(v.(arrow.Timestamp))
	default:
		panic(fmt.Sprintf("column builder %T", b))
	}
}

// cellOf is row i of arr as a cell (see cell).
func cellOf(arr arrow.Array, i int) any {
	if arr.IsNull(i) {
		return nil
	}
	switch a := arr.(type) {
	case *array.Boolean:
		return a.Value(i)
	case *array.Int16:
		return a.Value(i)
	case *array.Int32:
		return a.Value(i)
	case *array.Int64:
		return a.Value(i)
	case *array.Float32:
		return a.Value(i)
	case *array.Float64:
		return a.Value(i)
	case *array.Decimal128:
		return a.Value(i)
	case *array.String:
		return a.Value(i)
	case *array.Binary:
		return append([]byte{}, a.Value(i)...)
	case *array.Date32:
		return a.Value(i)
	case *array.Timestamp:
		return a.Value(i)
	}
	panic(fmt.Sprintf("array %T", arr))
}

// sameCell compares two cells exactly: floats by their bits (NaN payloads and -0 too).
func sameCell(a, b any) bool {
	switch x := a.(type) {
	case float32:
		y, ok := b.(float32)
		return ok && math.Float32bits(x) == math.Float32bits(y)
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	}
	return a == b
}

// recordsIdentical is vectest.RecordsEqual with floats compared by their bits.
func recordsIdentical(a, b arrow.RecordBatch) error {
	if err := vectest.RecordsEqual(a, b); err != nil {
		return err
	}
	for c := 0; c < int(a.NumCols()); c++ {
		for i := 0; i < int(a.NumRows()); i++ {
			if x, y := cellOf(a.Column(c), i), cellOf(b.Column(c), i); !sameCell(x, y) {
				return fmt.Errorf("column %d (%s) row %d: %#v != %#v", c, a.ColumnName(c), i, x, y)
			}
		}
	}
	return nil
}

// builderModel is what a ChunkBuilder must hold: the cells appended to each column and
// the ops, since the last Build.
type builderModel struct {
	cols [][]any
	ops  []vec.Op
}

func (in *fuzzInput) op() vec.Op {
	if x := in.byte(); x < 224 {
		return vec.Op(x & 3)
	} else {
		return vec.Op(x) // not an op
	}
}

// fuzzBuild calls b.Build and checks the chunk, or the error, against the model.
func fuzzBuild(t *testing.T, mem memory.Allocator, in *fuzzInput, tab *schema.Table, b *vec.ChunkBuilder, m *builderModel) {
	n := len(m.ops)
	// The column Build must name: the first whose length is not the rows', else the
	// first NOT NULL one holding a NULL.
	bad := ""
	for i, c := range tab.Columns {
		if len(m.cols[i]) != n {
			bad = c.Name + " has "
			break
		}
	}
	if bad == "" {
		for i, c := range tab.Columns {
			if !c.Nullable && containsNil(m.cols[i]) {
				bad = c.Name + ": "
				break
			}
		}
	}
	want := *m
	m.cols, m.ops = make([][]any, len(m.cols)), nil

	c, err := b.Build()
	if b.Len() != 0 {
		t.Fatalf("Build left %d rows in the builder (err %v)", b.Len(), err)
	}
	if bad != "" {
		if err == nil {
			c.Release()
			t.Fatalf("Build of a chunk with column %s... succeeded", bad)
		}
		if prefix := "table " + tab.Name + ": column " + bad; !strings.HasPrefix(err.Error(), prefix) {
			t.Fatalf("Build error %q, want it to start %q", err, prefix)
		}
		return
	}
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	defer c.Release()
	if err := vec.CheckChunk(tab, c); err != nil {
		t.Fatalf("Build returned a chunk CheckChunk refuses: %v", err)
	}
	if c.NumRows() != n || c.CountVisible() != n {
		t.Fatalf("chunk has %d rows (%d visible), want %d", c.NumRows(), c.CountVisible(), n)
	}
	for i, op := range c.Ops() {
		if op != want.ops[i] {
			t.Fatalf("row %d: op %v, want %v", i, op, want.ops[i])
		}
	}
	rec := c.Record()
	for col := range tab.Columns {
		for i := 0; i < n; i++ {
			if got := cellOf(rec.Column(col), i); !sameCell(got, want.cols[col][i]) {
				t.Fatalf("column %s row %d: %#v, appended %#v", tab.Columns[col].Name, i, got, want.cols[col][i])
			}
		}
	}
	checkKernels(t, mem, in, tab, c)
}

func containsNil(cells []any) bool {
	for _, v := range cells {
		if v == nil {
			return true
		}
	}
	return false
}

// checkKernels round-trips a valid chunk through the generic kernels and compares
// them with the generated ones when a generated package registered the table's shape.
func checkKernels(t *testing.T, mem memory.Allocator, in *fuzzInput, tab *schema.Table, c *vec.Chunk) {
	g := vec.NewGeneric(tab)
	n := c.NumRows()

	var keys vec.Bytes
	g.EncodeKeys(c, &keys)
	if keys.Len() != n {
		t.Fatalf("EncodeKeys wrote %d keys for %d rows", keys.Len(), n)
	}
	got, err := decodeKeys(mem, g, &keys)
	if err != nil {
		t.Fatalf("keys the encoder wrote do not decode: %v", err)
	}
	want := canonicalPK(mem, tab, c.Record())
	err = recordsIdentical(got, want)
	got.Release()
	want.Release()
	if err != nil {
		t.Fatalf("pk round trip: %v", err)
	}

	var vals vec.Bytes
	g.EncodeValues(c, &vals)
	if vals.Len() != n {
		t.Fatalf("EncodeValues wrote %d values for %d rows", vals.Len(), n)
	}
	got, err = decodeValues(mem, g, &vals, vectest.AllColumns(tab))
	if err != nil {
		t.Fatalf("values the encoder wrote do not decode: %v", err)
	}
	err = recordsIdentical(got, c.Record())
	got.Release()
	if err != nil {
		t.Fatalf("value round trip: %v", err)
	}
	proj := vectest.RandomProjection(vectest.NewRand(uint64(in.byte())), len(tab.Columns))
	got, err = decodeValues(mem, g, &vals, proj)
	if err != nil {
		t.Fatalf("projection %v: values the encoder wrote do not decode: %v", proj, err)
	}
	want = vectest.Project(tab, c.Record(), proj)
	err = recordsIdentical(got, want)
	got.Release()
	want.Release()
	if err != nil {
		t.Fatalf("projection %v: value round trip: %v", proj, err)
	}

	k, ok := vec.Lookup(tab)
	if !ok {
		return
	}
	var gkeys, gvals vec.Bytes
	k.EncodeKeys(c, &gkeys)
	k.EncodeValues(c, &gvals)
	for i := 0; i < n; i++ {
		if !bytes.Equal(gkeys.At(i), keys.At(i)) {
			t.Fatalf("row %d: generated key %x, generic %x", i, gkeys.At(i), keys.At(i))
		}
		if !bytes.Equal(gvals.At(i), vals.At(i)) {
			t.Fatalf("row %d: generated value %x, generic %x", i, gvals.At(i), vals.At(i))
		}
	}
	gv, kv := make([]uint16, n), make([]uint16, n)
	g.Vnodes(c, gv)
	k.Vnodes(c, kv)
	for i := range gv {
		if gv[i] != kv[i] {
			t.Fatalf("row %d: generated vnode %d, generic %d", i, kv[i], gv[i])
		}
	}
}

// FuzzChunkBuilder drives a ChunkBuilder of one of the fuzz tables with the fuzzer's
// bytes: rows through AppendRow with values of every Go type (accepted or not, the
// right number of them or not) and arbitrary ops, rows through Column and AppendOp,
// values appended to one column only, Reserve, and Build. Nothing panics; AppendRow
// refuses exactly what it documents, with an error naming the table (and the column),
// and appends nothing then; Build fails, naming the table and column, exactly when a
// column has the wrong length or a NULL in a NOT NULL column, and otherwise returns the
// rows appended, bit for bit, in a chunk CheckChunk accepts, whose keys and values
// round-trip through the generic kernels (and encode the same with the generated
// kernels of the table's shape, when registered). No memory is left allocated.
func FuzzChunkBuilder(f *testing.F) {
	rng := vectest.NewRand(20240602)
	for i := 0; i < 16; i++ {
		seed := make([]byte, 8+rng.IntN(160))
		for j := range seed {
			seed[j] = byte(rng.Uint32())
		}
		seed[0] = byte(i) // every table
		f.Add(seed)
	}
	f.Add([]byte{})
	f.Add([]byte{3, 0, 0, 0})
	f.Add(bytes.Repeat([]byte{4, 1}, 100))
	f.Add(bytes.Repeat([]byte{2, 0xff}, 100))
	tables := fuzzTables(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		in := &fuzzInput{b: data}
		tab := tables[in.intn(len(tables))]
		b := vec.NewChunkBuilder(mem, tab)
		defer b.Release()
		m := &builderModel{cols: make([][]any, len(tab.Columns))}
		for step := 0; step < 200 && !in.empty(); step++ {
			switch action := in.intn(16); {
			case action < 8: // AppendRow
				appendRow(t, in, tab, b, m)
			case action < 11: // a row through the column builders
				for i, c := range tab.Columns {
					v, _ := cell(c, in.fitting(c))
					if in.intn(16) == 0 {
						v = nil // a NULL even in a NOT NULL column: Build refuses it
					}
					appendTyped(b.Column(i), v)
					m.cols[i] = append(m.cols[i], v)
				}
				op := in.op()
				b.AppendOp(op)
				m.ops = append(m.ops, op)
			case action == 11: // a value in one column only
				i := in.intn(len(tab.Columns))
				v, _ := cell(tab.Columns[i], in.fitting(tab.Columns[i]))
				appendTyped(b.Column(i), v)
				m.cols[i] = append(m.cols[i], v)
			case action == 12: // an op without values
				if in.intn(4) == 0 {
					op := in.op()
					b.AppendOp(op)
					m.ops = append(m.ops, op)
				}
			case action == 13:
				b.Reserve(in.intn(40) - 8)
			default:
				fuzzBuild(t, mem, in, tab, b, m)
			}
			if b.Len() != len(m.ops) {
				t.Fatalf("Len %d, %d rows appended", b.Len(), len(m.ops))
			}
		}
		fuzzBuild(t, mem, in, tab, b, m)
	})
}

// appendRow appends one row through AppendRow: values that fit the columns, or with
// one value of another Go type, or too many or too few values.
func appendRow(t *testing.T, in *fuzzInput, tab *schema.Table, b *vec.ChunkBuilder, m *builderModel) {
	mode := in.intn(8)
	values := make([]any, len(tab.Columns))
	for i, c := range tab.Columns {
		values[i] = in.fitting(c)
	}
	switch mode {
	case 0, 1: // one value of any Go type
		i := in.intn(len(values))
		values[i] = in.value(in.intn(numGoTypes), tab.Columns[i].Type)
	case 2: // one value too many or too few, or none
		switch in.intn(3) {
		case 0:
			values = append(values, in.fitting(tab.Columns[0]))
		case 1:
			values = values[:len(values)-1]
		default:
			values = nil
		}
	}
	op := in.op()
	before := b.Len()
	err := b.AppendRow(op, values...)

	cells := make([]any, len(values))
	wantErr := ""
	if len(values) != len(tab.Columns) {
		wantErr = "table " + tab.Name + ": row has "
	} else {
		for i, c := range tab.Columns {
			v, ok := cell(c, values[i])
			if !ok {
				wantErr = "table " + tab.Name + ": column " + c.Name + ": "
				break
			}
			cells[i] = v
		}
	}
	if wantErr != "" {
		if err == nil {
			t.Fatalf("AppendRow(%v, %#v) succeeded, want an error %q...", op, values, wantErr)
		}
		if !strings.HasPrefix(err.Error(), wantErr) {
			t.Fatalf("AppendRow(%v, %#v): error %q, want it to start %q", op, values, err, wantErr)
		}
		if b.Len() != before {
			t.Fatalf("AppendRow failed but the builder has %d rows, not %d", b.Len(), before)
		}
		return
	}
	if err != nil {
		t.Fatalf("AppendRow(%v, %#v): %v", op, values, err)
	}
	for i := range tab.Columns {
		m.cols[i] = append(m.cols[i], cells[i])
	}
	m.ops = append(m.ops, op)
}
