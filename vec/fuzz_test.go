package vec_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// fuzzTables are the fixed tables the decoders are fuzzed against; together they cover
// every type, nullable and NOT NULL, in key columns of every order.
func fuzzTables(t testing.TB) []*schema.Table {
	dec := schema.Type{Kind: schema.Decimal, Precision: 20, Scale: 3}
	all := []schema.Column{
		col("b", schema.Boolean, true),
		col("i16", schema.Int16, false),
		col("i32", schema.Int32, true),
		col("i64", schema.Int64, false),
		col("f32", schema.Float32, true),
		col("f64", schema.Float64, false),
		{Name: "dec", Type: dec, Nullable: true},
		col("s", schema.Varchar, false),
		col("by", schema.Bytea, true),
		col("d", schema.Date, false),
		col("ts", schema.Timestamp, true),
		col("tz", schema.Timestamptz, false),
	}
	pkAll := make([]schema.KeyColumn, len(all))
	for i := range all {
		pkAll[i] = schema.KeyColumn{Column: len(all) - 1 - i, Desc: i%2 == 1, NullsFirst: i%3 == 0}
	}
	return []*schema.Table{
		table(t, "small", []schema.Column{col("id", schema.Int64, false), col("name", schema.Varchar, true)},
			schema.KeyColumn{Column: 0}),
		table(t, "floats", []schema.Column{col("x", schema.Float32, true), col("y", schema.Float64, false)},
			schema.KeyColumn{Column: 0, Desc: true}, schema.KeyColumn{Column: 1}),
		table(t, "strs", []schema.Column{col("s", schema.Varchar, true), col("b", schema.Bytea, true), col("n", schema.Int16, false)},
			schema.KeyColumn{Column: 0, NullsFirst: true}, schema.KeyColumn{Column: 1, Desc: true}),
		table(t, "all", all, schema.KeyColumn{Column: 7, Desc: true}, schema.KeyColumn{Column: 6}, schema.KeyColumn{Column: 4, NullsFirst: true}),
		table(t, "allkey", all, pkAll...),
	}
}

// fuzzSeeds returns valid values (what == "value") or keys of random rows of every fuzz
// table, from a fixed seed.
func fuzzSeeds(t testing.TB, what string, perTable int) [][]byte {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(20240601)
	var out [][]byte
	for _, tab := range fuzzTables(t) {
		c := vectest.RandomChunk(rng, mem, tab, perTable, 0.3)
		var b vec.Bytes
		if what == "value" {
			vec.NewGeneric(tab).EncodeValues(c, &b)
		} else {
			vec.NewGeneric(tab).EncodeKeys(c, &b)
		}
		c.Release()
		for i := 0; i < b.Len(); i++ {
			out = append(out, append([]byte(nil), b.At(i)...))
		}
	}
	return out
}

var fuzzGarbage = [][]byte{
	nil, {0}, {1}, {2}, {0xff}, bytes.Repeat([]byte{0xff}, 40), bytes.Repeat([]byte{0}, 40),
	[]byte("\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
	[]byte("\x01hello, world\x00\x00\x00\x00\xf9"),
}

// fuzzKeyExtras are keys of the "floats" fuzz table that the encoder never writes: a
// -0 and a NaN other than the canonical one. They must not decode.
func fuzzKeyExtras() [][]byte {
	x := vec.AppendKeyFloat32(nil, 1.5, true)
	return [][]byte{
		append(append([]byte(nil), x...), vec.KeyValue, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
		append(append([]byte(nil), x...), vec.KeyValue, 0xff, 0xf8, 0, 0, 0, 0, 0, 0),
		append([]byte{vec.KeyValue, 0x7f, 0xff, 0xff, 0xff}, vec.AppendKeyFloat64(nil, 2, false)...),
	}
}

// FuzzDecodeValue feeds arbitrary bytes as one row value to every fuzz table's generic
// decoder with the full projection: it returns an error naming the table or a row, never
// panics, and a row it returns re-encodes to a value that decodes to the same row.
func FuzzDecodeValue(f *testing.F) {
	for _, s := range fuzzSeeds(f, "value", 3) {
		f.Add(s)
	}
	for _, s := range fuzzGarbage {
		f.Add(s)
	}
	tables := fuzzTables(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		for _, tab := range tables {
			var one vec.Bytes
			one.Append(data)
			if _, err := decodeReencode(mem, vec.NewGeneric(tab), &one); err != nil {
				t.Fatalf("table %s: value %x: %v", tab.Name, data, err)
			}
			// A projected decode agrees with the full one on whether the value is valid.
			g := vec.NewGeneric(tab)
			_, errAll := decodeValuesDiscard(mem, g, &one, vectest.AllColumns(tab))
			_, errNone := decodeValuesDiscard(mem, g, &one, vec.Projection{})
			if (errAll == nil) != (errNone == nil) {
				t.Fatalf("table %s: value %x: full projection %v, empty projection %v", tab.Name, data, errAll, errNone)
			}
		}
	})
}

func decodeValuesDiscard(mem memory.Allocator, g *vec.Generic, vals *vec.Bytes, proj vec.Projection) (int, error) {
	rec, err := decodeValues(mem, g, vals, proj)
	if err != nil {
		return 0, err
	}
	n := int(rec.NumRows())
	rec.Release()
	return n, nil
}

// FuzzDecodeKey feeds arbitrary bytes as one key to every fuzz table's generic key
// decoder: it returns an error naming the table or a pk, never panics; a pk it returns
// re-encodes to exactly the input; and NewMarker accepts the bytes as a position
// exactly when they decode.
func FuzzDecodeKey(f *testing.F) {
	for _, s := range fuzzSeeds(f, "key", 3) {
		f.Add(s)
	}
	for _, s := range append(fuzzKeyExtras(), fuzzGarbage...) {
		f.Add(s)
	}
	tables := fuzzTables(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		for _, tab := range tables {
			g := vec.NewGeneric(tab)
			var one vec.Bytes
			one.Append(data)
			rec, err := decodeKeys(mem, g, &one)
			p := vec.NewPositions(tab.VnodeCount)
			p.State[1], p.Pos[1] = vec.InProgress, data
			_, merr := g.NewMarker(p)
			if (err == nil) != (merr == nil) {
				if rec != nil {
					rec.Release()
				}
				t.Fatalf("table %s: key %x: DecodeKeys says %v, NewMarker says %v", tab.Name, data, err, merr)
			}
			if err != nil {
				if !strings.HasPrefix(err.Error(), "table "+tab.Name+": key 0: ") {
					t.Fatalf("table %s: error %q does not name the table", tab.Name, err)
				}
				continue
			}
			var again []byte
			for k, kc := range tab.PK {
				again = vec.AppendKeyColumn(again, rec.Column(k), 0, tab.Columns[kc.Column].Type, kc.Desc, kc.NullsFirst)
			}
			rec.Release()
			if !bytes.Equal(again, data) {
				t.Fatalf("table %s: key %x decodes, but re-encodes to %x", tab.Name, data, again)
			}
		}
	})
}

// TestFuzzSeedCorpus keeps the checked-in seed corpora in testdata/fuzz: with -rewrite
// it writes the encoder's output for the fuzz tables and some garbage there; otherwise
// it checks that the files are there and well-formed (go test runs them as tests).
func TestFuzzSeedCorpus(t *testing.T) {
	for _, fz := range []struct {
		name, what string
	}{{"FuzzDecodeValue", "value"}, {"FuzzDecodeKey", "key"}} {
		dir := filepath.Join("testdata", "fuzz", fz.name)
		if *rewrite {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			write := func(name string, b []byte) {
				text := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for i, s := range fuzzSeeds(t, fz.what, 2) {
				write(fmt.Sprintf("encoder-%02d", i), s)
			}
			for i, s := range fuzzGarbage {
				write(fmt.Sprintf("garbage-%02d", i), s)
			}
			if fz.what == "key" {
				for i, s := range fuzzKeyExtras() {
					write(fmt.Sprintf("noncanonical-%02d", i), s)
				}
			}
			continue
		}
		files, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		encoder := 0
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(data), "go test fuzz v1\n[]byte(") {
				t.Errorf("%s: not a []byte fuzz corpus file", file)
			}
			if strings.HasPrefix(filepath.Base(file), "encoder-") {
				encoder++
			}
		}
		if encoder == 0 {
			t.Errorf("%s: no encoder-* seeds; run go test ./vec -run TestFuzzSeedCorpus -rewrite", dir)
		}
	}
}
