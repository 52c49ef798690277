package wire

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// everyKind is a table with a nullable column of every kind.
func everyKind() *schema.Table {
	t := &schema.Table{Name: "every_kind", VnodeCount: 8}
	for i, k := range schema.Kinds {
		typ := schema.Type{Kind: k}
		if k == schema.Decimal {
			typ.Precision, typ.Scale = schema.MaxDecimalPrecision, 6
		}
		t.Columns = append(t.Columns, schema.Column{Name: fmt.Sprintf("c%d", i), Type: typ, Nullable: i > 0})
	}
	t.PK = []schema.KeyColumn{{Column: 0}}
	t.DistKey = []int{0}
	if err := t.Validate(); err != nil {
		panic(err)
	}
	return t
}

// ipcRoundTrip sends rec through an Arrow IPC stream, as Flight carries it, and
// returns the record read back; the caller releases it.
func ipcRoundTrip(t *testing.T, mem memory.Allocator, rec arrow.RecordBatch) arrow.RecordBatch {
	t.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(rec.Schema()), ipc.WithAllocator(mem))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := ipc.NewReader(&buf, ipc.WithAllocator(mem), ipc.WithSchema(rec.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if !r.Next() {
		t.Fatalf("IPC stream has no record: %v", r.Err())
	}
	got := r.RecordBatch()
	got.Retain()
	return got
}

func checkChunkRoundTrip(t *testing.T, mem memory.Allocator, c *vec.Chunk) {
	t.Helper()
	md, err := AppendMessage(nil, executors.ChunkMessage(c))
	if err != nil {
		t.Fatal(err)
	}
	rec := ipcRoundTrip(t, mem, c.Record())
	defer rec.Release()
	m, err := DecodeMessage(mem, md, rec)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if m.Chunk == nil {
		t.Fatalf("decoded %v, want a chunk", m)
	}
	if err := vectest.ChunksEqual(c, m.Chunk); err != nil {
		t.Fatal(err)
	}
	if (c.Visibility() == nil) != (m.Chunk.Visibility() == nil) {
		t.Fatalf("visibility bitmap present %v, decoded %v", c.Visibility() != nil, m.Chunk.Visibility() != nil)
	}
	for n := range len(md) {
		if _, err := DecodeChunkMeta(md[:n]); err == nil {
			t.Fatalf("prefix of %d of %d bytes decoded", n, len(md))
		}
	}
}

func TestChunkRoundTrip(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng, _ := vectest.Rand(t)
	tables := []*schema.Table{everyKind()}
	for i := range 30 {
		tables = append(tables, vectest.RandomTable(rng, fmt.Sprintf("t%d", i)))
	}
	seen := map[vec.Op]bool{}
	hidden, nulls := false, false
	for _, tab := range tables {
		for _, n := range []int{0, 1, 7, 8, 9, 64, 1000} {
			t.Run(fmt.Sprintf("%s/rows=%d", tab.Name, n), func(t *testing.T) {
				c := vectest.RandomChunk(rng, mem, tab, n, 0.3)
				defer c.Release()
				for i, op := range c.Ops() {
					seen[op] = true
					hidden = hidden || !c.Visible(i)
				}
				for _, col := range c.Record().Columns() {
					nulls = nulls || col.NullN() > 0
				}
				checkChunkRoundTrip(t, mem, c)
			})
		}
	}
	if !vectest.SeedGiven() && (len(seen) != 4 || !hidden || !nulls) {
		t.Fatalf("the cases covered ops %v, hidden rows %v, NULLs %v: want every op, both", seen, hidden, nulls)
	}
}

// TestChunkVisibilityTail checks that bits of the visibility bitmap past the last row
// (which a chunk never reads) are cleared on the wire.
func TestChunkVisibilityTail(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	tab := everyKind()
	rng, _ := vectest.Rand(t)
	c := vectest.RandomChunk(rng, mem, tab, 3, 0)
	defer c.Release()
	vis := vec.NewBitmap(mem, 16)
	defer vis.Release()
	vis.Bytes()[0], vis.Bytes()[1] = 0xfd, 0xff // rows 0 and 2 visible, junk past row 2
	d := c.WithVisibility(vis)
	defer d.Release()
	md := AppendChunkMeta(nil, d)
	meta, err := DecodeChunkMeta(md)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(meta.Visibility, []byte{0x05}) {
		t.Fatalf("visibility on the wire %x, want 05", meta.Visibility)
	}
	md[len(md)-1] |= 0x80
	if _, err := DecodeChunkMeta(md); err == nil || !strings.Contains(err.Error(), "past row 2") {
		t.Fatalf("junk past the last row: %v", err)
	}
}

func TestDecodeChunkRefuses(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rng, _ := vectest.Rand(t)
	c := vectest.RandomChunk(rng, mem, everyKind(), 4, 0)
	defer c.Release()
	good := AppendChunkMeta(nil, c)
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		md   []byte
		rec  arrow.RecordBatch
		want string
	}{
		{"no record", good, nil, "without a record"},
		{"rows", edit(func(b []byte) []byte { b[HeaderLen] = 3; return b }), c.Record(), "wire: chunk: "},
		{"op", edit(func(b []byte) []byte { b[HeaderLen+1] = 4; return b }), c.Record(), "row 0: unknown op 4"},
		{"flag", edit(func(b []byte) []byte { b[HeaderLen+5] = 2; return b }), c.Record(), "flag byte 2"},
		{"huge rows", []byte{Version, byte(KindChunk), 0xff, 0xff, 0xff, 0xff, 0x07}, c.Record(), "ops: 2147483647 bytes"},
		{"too many rows", []byte{Version, byte(KindChunk), 0xff, 0xff, 0xff, 0xff, 0x0f}, c.Record(), "out of range"},
		{"record rows", []byte{Version, byte(KindChunk), 1, 0, 0}, c.Record(), "1 rows, its record 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch, err := DecodeChunk(mem, tc.md, tc.rec)
			if err == nil {
				ch.Release()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestWatermarkRoundTrip(t *testing.T) {
	for _, w := range []executors.Watermark{{}, {Column: 3, Value: -5}, {Column: 1 << 30, Value: 1<<63 - 1}, {Column: 0, Value: -1 << 63}} {
		md, err := AppendMessage(nil, executors.Message{Watermark: &w})
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeMessage(nil, md, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.Watermark == nil || *m.Watermark != w {
			t.Fatalf("%v decoded as %v", w, m)
		}
		for n := range len(md) {
			if _, err := DecodeWatermark(md[:n]); err == nil {
				t.Fatalf("%v: prefix of %d bytes decoded", w, n)
			}
		}
	}
	if _, err := AppendWatermark(nil, &executors.Watermark{Column: -1}); err == nil || !strings.Contains(err.Error(), "column -1") {
		t.Fatalf("negative column: %v", err)
	}
}

func TestControlMessages(t *testing.T) {
	end := AppendEnd(nil)
	if err := DecodeEnd(end); err != nil {
		t.Fatal(err)
	}
	if err := DecodeEnd(append(end, 0)); err == nil {
		t.Fatal("end with a trailing byte decoded")
	}
	ack := AppendAck(nil, 1<<64-1)
	if e, err := DecodeAck(ack); err != nil || e != 1<<64-1 {
		t.Fatalf("ack: %d, %v", e, err)
	}
	if _, err := DecodeAck(ack[:len(ack)-1]); err == nil {
		t.Fatal("truncated ack decoded")
	}
	if _, err := DecodeMessage(nil, end, nil); err == nil || !strings.Contains(err.Error(), "control message") {
		t.Fatalf("DecodeMessage of an end: %v", err)
	}
}

func TestMessageRefuses(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	if _, err := AppendMessage(nil, executors.Message{}); err == nil || !strings.Contains(err.Error(), "sets 0") {
		t.Fatalf("empty message: %v", err)
	}
	w := &executors.Watermark{}
	b := &executors.Barrier{Prev: 1, Curr: 2}
	if _, err := AppendMessage(nil, executors.Message{Barrier: b, Watermark: w}); err == nil || !strings.Contains(err.Error(), "sets 2") {
		t.Fatalf("two fields: %v", err)
	}
	rng, _ := vectest.Rand(t)
	c := vectest.RandomChunk(rng, mem, everyKind(), 2, 0)
	defer c.Release()
	md, err := AppendBarrier(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeMessage(mem, md, c.Record()); err == nil || !strings.Contains(err.Error(), "record of 2 rows") {
		t.Fatalf("barrier with rows: %v", err)
	}
}
