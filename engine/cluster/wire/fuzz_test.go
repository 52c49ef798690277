package wire

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// The fuzz targets feed the decoders arbitrary metadata: they must return an error or
// a value that encodes back to metadata that decodes to the same value, never panic.

func FuzzDecodeBarrier(f *testing.F) {
	for _, tc := range barrierCases() {
		md, err := AppendBarrier(nil, &tc.b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(md)
	}
	f.Fuzz(func(t *testing.T, md []byte) {
		b, err := DecodeBarrier(md)
		if err != nil {
			return
		}
		again, err := AppendBarrier(nil, b)
		if err != nil {
			t.Fatalf("decoded barrier %v does not encode: %v", b, err)
		}
		c, err := DecodeBarrier(again)
		if err != nil {
			t.Fatalf("re-encoded barrier %v does not decode: %v", b, err)
		}
		if err := barriersEqual(b, c); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzDecodeChunkMeta(f *testing.F) {
	mem := memory.NewGoAllocator()
	rng := vectest.NewRand(1)
	tab := everyKind()
	for _, n := range []int{0, 1, 9, 100} {
		c := vectest.RandomChunk(rng, mem, tab, n, 0.5)
		f.Add(AppendChunkMeta(nil, c))
		c.Release()
	}
	f.Fuzz(func(t *testing.T, md []byte) {
		meta, err := DecodeChunkMeta(md)
		if err != nil {
			return
		}
		checked := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer checked.AssertSize(t, 0)
		rec := emptyColumns(int64(len(meta.Ops)))
		c, err := DecodeChunk(checked, md, rec)
		rec.Release()
		if err != nil {
			t.Fatalf("metadata decodes alone but not with a record of %d rows: %v", len(meta.Ops), err)
		}
		defer c.Release()
		if again := AppendChunkMeta(nil, c); !bytes.Equal(again, md) {
			t.Fatalf("re-encoded %x, decoded from %x", again, md)
		}
	})
}

// emptyColumns is a record of n rows and no columns.
func emptyColumns(n int64) arrow.RecordBatch {
	return array.NewRecordBatch(arrow.NewSchema(nil, nil), nil, n)
}

func FuzzDecodeWatermark(f *testing.F) {
	for _, w := range []executors.Watermark{{}, {Column: 7, Value: -3}, {Column: 1 << 20, Value: 1 << 62}} {
		md, err := AppendWatermark(nil, &w)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(md)
	}
	f.Fuzz(func(t *testing.T, md []byte) {
		w, err := DecodeWatermark(md)
		if err != nil {
			return
		}
		again, err := AppendWatermark(nil, w)
		if err != nil {
			t.Fatalf("decoded watermark %v does not encode: %v", w, err)
		}
		v, err := DecodeWatermark(again)
		if err != nil || *v != *w {
			t.Fatalf("watermark %v re-decoded as %v, %v", w, v, err)
		}
	})
}

// FuzzDecodeMessage covers the header and the dispatch on kind, control messages
// included.
func FuzzDecodeMessage(f *testing.F) {
	for _, tc := range barrierCases()[:3] {
		md, err := AppendBarrier(nil, &tc.b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(md, uint8(0))
	}
	f.Add(AppendEnd(nil), uint8(0))
	f.Add(AppendAck(nil, 5), uint8(0))
	f.Add([]byte{Version, byte(KindChunk), 2, 0, 3, 1, 0x02}, uint8(2))
	f.Fuzz(func(t *testing.T, md []byte, rows uint8) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		rec := emptyColumns(int64(rows))
		defer rec.Release()
		m, err := DecodeMessage(mem, md, rec)
		if err != nil {
			_ = DecodeEnd(md)
			_, _ = DecodeAck(md)
			return
		}
		defer m.Release()
		if _, err := AppendMessage(nil, m); err != nil {
			t.Fatalf("decoded %v does not encode: %v", m, err)
		}
	})
}
