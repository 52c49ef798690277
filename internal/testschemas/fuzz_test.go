package testschemas_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

var (
	fuzzTablesOnce sync.Once
	fuzzTables     []*schema.Table
)

func loadFuzzTables() []*schema.Table {
	fuzzTablesOnce.Do(func() {
		f, err := schema.ParseFile("testschemas.yaml")
		if err != nil {
			panic(err)
		}
		fuzzTables = f.Tables
	})
	return fuzzTables
}

// FuzzGeneratedDecode feeds arbitrary bytes, as a row value or as a pk, to a test
// table's generated decoder and to the generic one. Neither may panic; both must
// accept or both reject, and what they accept they must decode identically.
func FuzzGeneratedDecode(f *testing.F) {
	tbls := loadFuzzTables()
	mem := memory.NewGoAllocator()
	for ti, tbl := range tbls {
		if ti%5 != 0 {
			continue
		}
		rng := vectest.NewRand(uint64(ti))
		c := vectest.RandomChunk(rng, mem, tbl, 3, 0.3)
		var keys, vals vec.Bytes
		keys.Reset()
		vals.Reset()
		vec.NewGeneric(tbl).EncodeKeys(c, &keys)
		vec.NewGeneric(tbl).EncodeValues(c, &vals)
		for i := 0; i < keys.Len(); i++ {
			f.Add(byte(ti), true, append([]byte(nil), keys.At(i)...))
			f.Add(byte(ti), false, append([]byte(nil), vals.At(i)...))
		}
		c.Release()
	}
	f.Fuzz(func(t *testing.T, which byte, asKey bool, data []byte) {
		tbl := tbls[int(which)%len(tbls)]
		gk, ok := vec.Lookup(tbl)
		if !ok {
			t.Fatalf("table %s not registered", tbl.Name)
		}
		rk := vec.NewGeneric(tbl)
		var in vec.Bytes
		in.Reset()
		in.Append(data)
		cols := tbl.PKColumns()
		if !asKey {
			cols = vectest.AllColumns(tbl)
		}
		var rec arrow.RecordBatch
		var err error
		if asKey {
			rec, err = decodeSame(mem, tbl, cols, 1, vectest.BuildersFor, func(k vec.Kernels, bs []array.Builder) error {
				return k.DecodeKeys(&in, bs)
			}, gk, rk)
		} else {
			rec, err = decodeSame(mem, tbl, cols, 1, vectest.ValueBuildersFor, func(k vec.Kernels, bs []vec.Builder) error {
				return k.DecodeValues(&in, vec.Projection(cols), bs)
			}, gk, rk)
		}
		if err != nil && !errors.Is(err, errBothFailed) {
			t.Fatalf("table %s key=%v: %v", tbl.Name, asKey, err)
		}
		if !asKey {
			// The row decoder accepts what DecodeValues accepts, and decodes it alike.
			if rerr := rowDecodeSame(mem, tbl, gk, cols, data, rec); rerr != nil {
				t.Fatalf("table %s: row decoder: %v", tbl.Name, rerr)
			}
		}
		if rec != nil {
			rec.Release()
		}
	})
}

// rowDecodeSame decodes data as one row value with k's row decoder: an error when
// want is nil (the batch decode refused it), else the same row as want.
func rowDecodeSame(mem memory.Allocator, tbl *schema.Table, k vec.Kernels, cols []int, data []byte, want arrow.RecordBatch) error {
	bs := vectest.ValueBuildersFor(mem, tbl, cols)
	rd, err := k.(vec.RowDecoders).NewRowDecoder(vec.Projection(cols), bs)
	if err != nil {
		vectest.ReleaseBuilders(bs)
		return err
	}
	rd.Begin(1)
	err = rd.Append(data)
	switch {
	case want == nil && err == nil:
		err = fmt.Errorf("accepted a value DecodeValues refuses")
	case want == nil && !strings.Contains(err.Error(), "table "+tbl.Name):
		err = fmt.Errorf("error %q does not name the table", err)
	case want == nil:
		err = nil
	case err != nil:
		err = fmt.Errorf("refused a value DecodeValues accepts: %w", err)
	default:
		if err = rd.Flush(); err == nil {
			got := vectest.FinishRecord(tbl, cols, bs, 1)
			defer got.Release()
			return vectest.RecordsEqual(got, want)
		}
	}
	vectest.ReleaseBuilders(bs)
	return err
}

// TestFuzzCorpusPresent keeps the seed corpus directory from vanishing unnoticed.
func TestFuzzCorpusPresent(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzGeneratedDecode")
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("no seed corpus in %s: %v", dir, errors.Join(err, fmt.Errorf("empty")))
	}
}
