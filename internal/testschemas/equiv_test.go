package testschemas_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	_ "github.com/seed04fbb902/weir/bench/nexmark/tables" // registers the Nexmark kernels
	_ "github.com/seed04fbb902/weir/internal/testschemas" // registers the generated kernels
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// tables parses the checked-in schema file; every table must have generated kernels
// registered under its current fingerprint (a stale generated file fails here).
func tables(t *testing.T) []*schema.Table {
	t.Helper()
	var out []*schema.Table
	for _, path := range []string{"testschemas.yaml", "../../bench/nexmark/tables/nexmark.yaml"} {
		f, err := schema.ParseFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f.Tables...)
	}
	return out
}

func kernelsOf(t *testing.T, tbl *schema.Table) (gen, generic vec.Kernels) {
	t.Helper()
	k, ok := vec.Lookup(tbl)
	if !ok {
		t.Fatalf("table %s: no generated kernels registered for fingerprint %s (run go generate)", tbl.Name, tbl.Fingerprint())
	}
	if !k.Generated() {
		t.Fatalf("table %s: registered kernels are not generated", tbl.Name)
	}
	return k, vec.NewGeneric(tbl)
}

// batchSizes are the sizes each seed tries: the edges 1 and 4096 and random ones.
func batchSizes(rng *rand.Rand) []int {
	return []int{1, 4096, 1 + rng.IntN(64), 1 + rng.IntN(4096)}
}

// TestGeneratedMatchesGeneric runs the generated and the generic kernels of every test
// table on the same seeded random chunks and demands identical keys, values, decodes,
// vnodes, marks and splits.
func TestGeneratedMatchesGeneric(t *testing.T) {
	seed := vectest.Seed(t)
	for ti, tbl := range tables(t) {
		t.Run(tbl.Name, func(t *testing.T) {
			gk, rk := kernelsOf(t, tbl)
			rng := vectest.NewRand(seed + uint64(ti))
			rounds := 3
			if testing.Short() {
				rounds = 1
			}
			for round := 0; round < rounds; round++ {
				for _, n := range batchSizes(rng) {
					nullFrac := []float64{0, 0.1, 0.5, 1}[rng.IntN(4)]
					if err := checkEquivalent(rng, tbl, gk, rk, n, nullFrac); err != nil {
						t.Fatalf("seed=%d table %s rows %d nulls %.1f: %v", seed, tbl.Name, n, nullFrac, err)
					}
				}
			}
		})
	}
}

func checkEquivalent(rng *rand.Rand, tbl *schema.Table, gk, rk vec.Kernels, n int, nullFrac float64) error {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer func() {
		if mem.CurrentAlloc() != 0 {
			panic(fmt.Sprintf("table %s: %d bytes leaked", tbl.Name, mem.CurrentAlloc()))
		}
	}()
	c := vectest.RandomChunk(rng, mem, tbl, n, nullFrac)
	defer c.Release()

	// Keys and values: byte-identical encodings.
	var gkeys, rkeys, gvals, rvals vec.Bytes
	gkeys.Reset()
	rkeys.Reset()
	gvals.Reset()
	rvals.Reset()
	gk.EncodeKeys(c, &gkeys)
	rk.EncodeKeys(c, &rkeys)
	if err := sameBytes("key", &gkeys, &rkeys); err != nil {
		return err
	}
	gk.EncodeValues(c, &gvals)
	rk.EncodeValues(c, &rvals)
	if err := sameBytes("value", &gvals, &rvals); err != nil {
		return err
	}

	// Projected decode: a random projection (possibly empty, possibly all columns,
	// in random order) decodes to the same arrays as the generic path and as the chunk.
	proj := randomProjection(rng, len(tbl.Columns))
	if err := decodeBoth(mem, tbl, proj, c, false, vectest.ValueBuildersFor, func(k vec.Kernels, bs []vec.Builder) error {
		return k.DecodeValues(&gvals, proj, bs)
	}, gk, rk); err != nil {
		return fmt.Errorf("projection %v: %w", proj, err)
	}
	if err := rowDecodeMatches(mem, tbl, gk, proj, &gvals, c, rng); err != nil {
		return fmt.Errorf("row decoder, projection %v: %w", proj, err)
	}
	if err := decodeBoth(mem, tbl, tbl.PKColumns(), c, true, vectest.BuildersFor, func(k vec.Kernels, bs []array.Builder) error {
		return k.DecodeKeys(&gkeys, bs)
	}, gk, rk); err != nil {
		return fmt.Errorf("decode keys: %w", err)
	}

	// Vnodes.
	gv := make([]uint16, n)
	rv := make([]uint16, n)
	gk.Vnodes(c, gv)
	rk.Vnodes(c, rv)
	for i := range gv {
		if gv[i] != rv[i] {
			return fmt.Errorf("row %d: vnode %d (generated) != %d (generic)", i, gv[i], rv[i])
		}
		if int(gv[i]) >= tbl.VnodeCount {
			return fmt.Errorf("row %d: vnode %d out of range %d", i, gv[i], tbl.VnodeCount)
		}
	}

	// Marks against random positions taken from the chunk's own keys (so that equal
	// keys happen) and from another random chunk; every state.
	other := vectest.RandomChunk(rng, mem, tbl, 1+rng.IntN(16), nullFrac)
	defer other.Release()
	var okeys vec.Bytes
	okeys.Reset()
	rk.EncodeKeys(other, &okeys)
	pos := vec.NewPositions(tbl.VnodeCount)
	for v := range pos.State {
		pos.State[v] = vec.BackfillState(rng.IntN(3))
		if pos.State[v] == vec.NotStarted {
			continue
		}
		if rng.IntN(2) == 0 {
			pos.Pos[v] = gkeys.At(rng.IntN(gkeys.Len()))
		} else {
			pos.Pos[v] = okeys.At(rng.IntN(okeys.Len()))
		}
	}
	gm, err := gk.NewMarker(pos)
	if err != nil {
		return err
	}
	rm, err := rk.NewMarker(pos)
	if err != nil {
		return err
	}
	gout := make([]byte, (n+7)/8)
	rout := make([]byte, (n+7)/8)
	gm.Mark(c, gv, gout)
	rm.Mark(c, rv, rout)
	if !bytes.Equal(gout, rout) {
		for i := 0; i < n; i++ {
			if (gout[i>>3]^rout[i>>3])&(1<<(i&7)) != 0 {
				return fmt.Errorf("row %d (vnode %d, state %v): generated mark %v, generic %v", i, gv[i], pos.State[gv[i]], gout[i>>3]&(1<<(i&7)) != 0, rout[i>>3]&(1<<(i&7)) != 0)
			}
		}
	}
	// The mark must also agree with the memcomparable order directly.
	for i := 0; i < n; i++ {
		want := false
		if c.Visible(i) {
			switch pos.State[gv[i]] {
			case vec.Completed:
				want = true
			case vec.InProgress:
				want = bytes.Compare(gkeys.At(i), pos.Pos[gv[i]]) <= 0
			}
		}
		if got := gout[i>>3]&(1<<(i&7)) != 0; got != want {
			return fmt.Errorf("row %d: mark %v, key order says %v", i, got, want)
		}
	}

	// Split to 1..5 outputs.
	nout := 1 + rng.IntN(5)
	mapping := make([]uint16, tbl.VnodeCount)
	for v := range mapping {
		mapping[v] = uint16(rng.IntN(nout))
	}
	gouts := make([]vec.SplitOutput, nout)
	routs := make([]vec.SplitOutput, nout)
	gk.Split(c, mapping, gv, gouts)
	rk.Split(c, mapping, rv, routs)
	for o := range gouts {
		g, r := gouts[o], routs[o]
		if !bytes.Equal(g.Vis, r.Vis) || g.Rows != r.Rows || g.OwnOps != r.OwnOps || (g.OwnOps && !equalOps(g.Ops, r.Ops)) {
			return fmt.Errorf("split output %d differs", o)
		}
	}
	return nil
}

func equalOps(a, b []vec.Op) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// decodeBoth decodes into generated and generic builders of cols, and demands that
// both give the same record and that it equals the chunk's columns cols (for keys,
// equal in key order: -0 and NaN payloads are canonicalised by the key codec).
func decodeBoth[B vec.Builder](mem memory.Allocator, tbl *schema.Table, cols []int, c *vec.Chunk, keys bool,
	newBuilders func(memory.Allocator, *schema.Table, []int) []B, decode func(vec.Kernels, []B) error, gk, rk vec.Kernels) error {
	grec, err := decodeSame(mem, tbl, cols, c.NumRows(), newBuilders, decode, gk, rk)
	if err != nil {
		return err
	}
	defer grec.Release()
	if keys {
		want := vectest.PKArrays(tbl, c.Record())
		got := grec.Columns()
		for i := 0; i < c.NumRows(); i++ {
			if vectest.ComparePK(tbl, got, i, want, i) != 0 {
				return fmt.Errorf("row %d: decoded key %s != chunk's %s", i, vectest.FormatRow(grec, i), vectest.FormatRow(c.Record(), i))
			}
		}
		return nil
	}
	want := vectest.Project(tbl, c.Record(), cols)
	defer want.Release()
	if err := vectest.RecordsEqual(grec, want); err != nil {
		return fmt.Errorf("decoded != chunk: %w", err)
	}
	return nil
}

// rowDecodeMatches decodes vals (c's encoded values) with the generated row decoder in
// two batches split at a random row (the second is reserved from the first's bytes
// per value) and demands each equal to c's rows, projected. The generic kernels have
// no row decoder, so the generated one is checked against the chunk itself, as the
// batch decode is.
func rowDecodeMatches(mem memory.Allocator, tbl *schema.Table, k vec.Kernels, proj vec.Projection, vals *vec.Bytes, c *vec.Chunk, rng *rand.Rand) error {
	rk, ok := k.(vec.RowDecoders)
	if !ok {
		return fmt.Errorf("generated kernels of %s have no row decoder", tbl.Name)
	}
	bs := vectest.ValueBuildersFor(mem, tbl, proj)
	defer vectest.ReleaseBuilders(bs)
	rd, err := rk.NewRowDecoder(proj, bs)
	if err != nil {
		return err
	}
	want := vectest.Project(tbl, c.Record(), proj)
	defer want.Release()
	n := vals.Len()
	cut := rng.IntN(n + 1)
	for _, part := range [][2]int{{0, cut}, {cut, n}} {
		rd.Begin(part[1] - part[0])
		for i := part[0]; i < part[1]; i++ {
			if err := rd.Append(vals.At(i)); err != nil {
				return fmt.Errorf("row %d: %w", i, err)
			}
		}
		if err := rd.Flush(); err != nil {
			return fmt.Errorf("rows %d to %d: flush: %w", part[0], part[1], err)
		}
		cols := make([]arrow.Array, len(bs))
		for j, b := range bs {
			cols[j] = b.NewArray()
		}
		got := array.NewRecordBatch(want.Schema(), cols, int64(part[1]-part[0]))
		for _, a := range cols {
			a.Release()
		}
		w := want.NewSlice(int64(part[0]), int64(part[1]))
		err := vectest.RecordsEqual(got, w)
		got.Release()
		w.Release()
		if err != nil {
			return fmt.Errorf("rows %d to %d: %w", part[0], part[1], err)
		}
	}
	return nil
}

// errBothFailed is decodeSame's error when both kernels refuse the input.
var errBothFailed = errors.New("both kernels failed")

// decodeSame decodes nrows encoded rows with the generated (gk) and the generic (rk)
// kernels into builders from newBuilders. Both must fail (errBothFailed) or both give
// the same record, which it returns (the caller releases it).
func decodeSame[B vec.Builder](mem memory.Allocator, tbl *schema.Table, cols []int, nrows int,
	newBuilders func(memory.Allocator, *schema.Table, []int) []B, decode func(vec.Kernels, []B) error, gk, rk vec.Kernels) (arrow.RecordBatch, error) {
	gb, rb := newBuilders(mem, tbl, cols), newBuilders(mem, tbl, cols)
	gerr, rerr := decode(gk, gb), decode(rk, rb)
	if gerr != nil || rerr != nil {
		vectest.ReleaseBuilders(gb)
		vectest.ReleaseBuilders(rb)
		if (gerr == nil) != (rerr == nil) {
			return nil, fmt.Errorf("generated error %v, generic error %v", gerr, rerr)
		}
		return nil, fmt.Errorf("%w: %v", errBothFailed, gerr)
	}
	grec := vectest.FinishRecord(tbl, cols, gb, nrows)
	rrec := vectest.FinishRecord(tbl, cols, rb, nrows)
	defer rrec.Release()
	if err := vectest.RecordsEqual(grec, rrec); err != nil {
		grec.Release()
		return nil, fmt.Errorf("generated != generic: %w", err)
	}
	return grec, nil
}

func sameBytes(what string, a, b *vec.Bytes) error {
	if a.Len() != b.Len() {
		return fmt.Errorf("%d %ss generated, %d generic", a.Len(), what, b.Len())
	}
	for i := 0; i < a.Len(); i++ {
		if !bytes.Equal(a.At(i), b.At(i)) {
			return fmt.Errorf("row %d: %s %x (generated) != %x (generic)", i, what, a.At(i), b.At(i))
		}
	}
	return nil
}

func randomProjection(rng *rand.Rand, ncols int) vec.Projection {
	p := rng.Perm(ncols)
	return vec.Projection(p[:rng.IntN(ncols+1)])
}

// TestDecodeValuesBadBuilders gives both kernels of every table builders that do not
// fit DecodeValues' contract: too few, an Arrow StringBuilder where a VarBuilder is
// due, a VarBuilder for a fixed-width column, a builder of another Arrow type (utf8
// for bytea and back, a timestamp of another zone), and a projection past the last
// column.
// Each must be an error naming the table (and the column, where there is one), not a
// panic, from the generated and the generic kernels alike.
func TestDecodeValuesBadBuilders(t *testing.T) {
	mem := memory.NewGoAllocator()
	for _, tbl := range tables(t) {
		gk, rk := kernelsOf(t, tbl)
		c := vectest.RandomChunk(vectest.NewRand(1), mem, tbl, 4, 0.2)
		var vals vec.Bytes
		vals.Reset()
		gk.EncodeValues(c, &vals)
		c.Release()
		all := vectest.AllColumns(tbl)
		type bad struct {
			name   string
			proj   vec.Projection
			bs     func() []vec.Builder
			column string // the column the error must name, if any
		}
		cases := []bad{
			{"too few builders", vec.Projection(all), func() []vec.Builder {
				return vectest.ValueBuildersFor(mem, tbl, all[:len(all)-1])
			}, ""},
			{"column past the last", vec.Projection{len(all)}, func() []vec.Builder {
				return vectest.ValueBuildersFor(mem, tbl, all[:1])
			}, ""},
		}
		for i, col := range tbl.Columns {
			dt := col.Type.ArrowType()
			wrong := func() []vec.Builder {
				if id := dt.ID(); id == arrow.STRING || id == arrow.BINARY {
					return []vec.Builder{array.NewBuilder(mem, dt)} // Arrow's own, not a VarBuilder
				}
				return []vec.Builder{vec.NewVarBuilder(mem, arrow.BinaryTypes.String)}
			}
			cases = append(cases, bad{"wrong builder for column " + col.Name, vec.Projection{i}, wrong, col.Name})
			// The right kind of builder, of another Arrow type.
			var other arrow.DataType
			switch dt.ID() {
			case arrow.STRING:
				other = arrow.BinaryTypes.Binary
			case arrow.BINARY:
				other = arrow.BinaryTypes.String
			case arrow.TIMESTAMP:
				other = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "Europe/Paris"}
			}
			if other != nil {
				cases = append(cases, bad{"builder of " + other.String() + " for column " + col.Name, vec.Projection{i},
					func() []vec.Builder { return []vec.Builder{vec.NewBuilder(mem, other)} }, col.Name})
			}
		}
		cases = append(cases, bad{"a column twice (row decoder only)", vec.Projection{0, 0}, func() []vec.Builder {
			return vectest.ValueBuildersFor(mem, tbl, []int{0, 0})
		}, tbl.Columns[0].Name})
		for _, tc := range cases {
			// The row decoder refuses what DecodeValues refuses, with the same naming.
			bs := tc.bs()
			_, err := gk.(vec.RowDecoders).NewRowDecoder(tc.proj, bs)
			vectest.ReleaseBuilders(bs)
			if err == nil {
				t.Fatalf("table %s, %s: NewRowDecoder: no error", tbl.Name, tc.name)
			}
			if msg := err.Error(); !strings.Contains(msg, "table "+tbl.Name) || (tc.column != "" && !strings.Contains(msg, tc.column)) {
				t.Errorf("table %s, %s: NewRowDecoder: error %q does not name the table and column", tbl.Name, tc.name, msg)
			}
			if len(tc.proj) == 2 && tc.proj[0] == tc.proj[1] {
				continue // DecodeValues decodes a column twice
			}
			for _, k := range []vec.Kernels{gk, rk} {
				bs := tc.bs()
				err := k.DecodeValues(&vals, tc.proj, bs)
				vectest.ReleaseBuilders(bs)
				if err == nil {
					t.Fatalf("table %s, %s, generated=%v: no error", tbl.Name, tc.name, k.Generated())
				}
				msg := err.Error()
				if !strings.Contains(msg, "table "+tbl.Name) || (tc.column != "" && !strings.Contains(msg, tc.column)) {
					t.Errorf("table %s, %s, generated=%v: error %q does not name the table and column", tbl.Name, tc.name, k.Generated(), msg)
				}
			}
		}
	}
}
