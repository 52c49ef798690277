package executors_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// dmlBids returns a record of n bids (the caller releases it).
func dmlBids(mem memory.Allocator, n int) arrow.RecordBatch {
	b := tables.NewBidBuilder(mem)
	defer b.Release()
	for i := 0; i < n; i++ {
		b.Append(vec.Insert, &tables.Bid{
			Auction: int64(i % 3), Bidder: int64(i), Price: int64(100 * i), Channel: "web",
			URL: "https://weir.test/" + string(rune('a'+i)), DateTime: arrow.Timestamp(1_000 + i), Extra: "",
		})
	}
	c := b.Build()
	defer c.Release()
	rec := c.Record()
	rec.Retain()
	return rec
}

// dmlReplace returns rec with column i replaced by a (named name), sharing the other
// arrays; a nil a drops the column. The caller releases it.
func dmlReplace(rec arrow.RecordBatch, i int, name string, a arrow.Array) arrow.RecordBatch {
	var fields []arrow.Field
	var cols []arrow.Array
	for c := 0; c < int(rec.NumCols()); c++ {
		f, col := rec.Schema().Field(c), rec.Column(c)
		if c == i {
			if a == nil {
				continue
			}
			f, col = arrow.Field{Name: name, Type: a.DataType(), Nullable: true}, a
		}
		fields = append(fields, f)
		cols = append(cols, col)
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
}

func TestDMLChunk(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	bid := tables.BidTable()
	for _, n := range []int{0, 1, 5} {
		rec := dmlBids(mem, n)
		for _, c := range []struct {
			kind executors.DMLKind
			ops  []vec.Op // repeated per input row
		}{
			{executors.DMLInsert, []vec.Op{vec.Insert}},
			{executors.DMLUpsert, []vec.Op{vec.Insert}},
			{executors.DMLDelete, []vec.Op{vec.Delete}},
			{executors.DMLUpdate, []vec.Op{vec.UpdateDelete, vec.UpdateInsert}},
		} {
			out, err := executors.DMLChunk(bid, c.kind, rec, mem)
			if err != nil {
				t.Fatalf("%v of %d rows: %v", c.kind, n, err)
			}
			if !out.Record().Schema().Equal(bid.ArrowSchema()) {
				t.Fatalf("%v: schema %v", c.kind, out.Record().Schema())
			}
			if got, want := out.NumRows(), n*len(c.ops); got != want || out.CountVisible() != want {
				t.Fatalf("%v of %d rows: %d rows (%d visible), want %d", c.kind, n, got, out.CountVisible(), want)
			}
			checkChangelog(t, out)
			for i, op := range out.Ops() {
				if want := c.ops[i%len(c.ops)]; op != want {
					t.Fatalf("%v: row %d: op %v, want %v", c.kind, i, op, want)
				}
				for col := 0; col < len(bid.Columns); col++ {
					if !vectest.ValuesEqual(out.Record().Column(col), i, rec.Column(col), i/len(c.ops)) {
						t.Fatalf("%v: row %d column %s differs from input row %d", c.kind, i, bid.Columns[col].Name, i/len(c.ops))
					}
				}
			}
			out.Release()
		}
		rec.Release()
	}
}

// TestDMLChunkUpdateAllTypes duplicates random rows of random tables (every type,
// NULLs included) for updates.
func TestDMLChunkUpdateAllTypes(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(vectest.Seed(t))
	for i := 0; i < 50; i++ {
		tab := vectest.RandomTable(rng, "r")
		in := vectest.RandomChunk(rng, mem, tab, rng.IntN(20), 0.3)
		out, err := executors.DMLChunk(tab, executors.DMLUpdate, in.Record(), mem)
		if err != nil {
			t.Fatalf("table %d: %v", i, err)
		}
		checkChangelog(t, out)
		for r := 0; r < out.NumRows(); r++ {
			for c := range tab.Columns {
				if !vectest.ValuesEqual(out.Record().Column(c), r, in.Record().Column(c), r/2) {
					t.Fatalf("table %d: row %d column %s: %s, want %s", i, r, tab.Columns[c].Name,
						vectest.FormatValue(out.Record().Column(c), r), vectest.FormatValue(in.Record().Column(c), r/2))
				}
			}
		}
		out.Release()
		in.Release()
	}
}

func TestDMLChunkBadRecords(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	bid := tables.BidTable()
	good := dmlBids(mem, 3)
	defer good.Release()

	sb := array.NewStringBuilder(mem)
	sb.AppendValues([]string{"1", "2", "3"}, nil)
	strs := sb.NewArray()
	sb.Release()
	defer strs.Release()
	ib := array.NewInt64Builder(mem)
	ib.AppendValues([]int64{1, 0, 3}, []bool{true, false, true})
	withNull := ib.NewArray()
	ib.Release()
	defer withNull.Release()
	tzb := array.NewTimestampBuilder(mem, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"})
	tzb.AppendValues([]arrow.Timestamp{1, 2, 3}, nil)
	tz := tzb.NewArray()
	tzb.Release()
	defer tz.Release()
	withTZ := dmlReplace(good, 5, "date_time", tz)
	defer withTZ.Release()

	cases := []struct {
		name string
		rec  arrow.RecordBatch
		kind executors.DMLKind
		want string
	}{
		{"column count", dmlReplace(good, 6, "", nil), executors.DMLInsert,
			"table bid: column extra: missing (the record has 6 columns, the table 7)"},
		{"name", dmlReplace(good, 2, "prize", good.Column(2)), executors.DMLInsert,
			`table bid: column price: record has column "prize" in its place (position 2)`},
		{"type", dmlReplace(good, 2, "price", strs), executors.DMLUpdate,
			"table bid: column price: record has type utf8, want int64"},
		{"time zone", dmlReplace(good, 5, "date_time", tz), executors.DMLDelete,
			"table bid: column date_time: record has type timestamp[us, tz=UTC], want timestamp[us]"},
		{"NULL", dmlReplace(good, 2, "price", withNull), executors.DMLUpsert,
			"table bid: column price: record has 1 NULLs in a NOT NULL column"},
		{"NULL in a pk column", dmlReplace(good, 1, "bidder", withNull), executors.DMLDelete,
			"table bid: column bidder: record has 1 NULLs in a NOT NULL column"},
		{"kind", dmlReplace(good, -1, "", nil), executors.DMLKind(9),
			"table bid: unknown DML kind 9"},
		{"nil record", nil, executors.DMLInsert, "table bid: nil record"},
		{"nil record to delete", nil, executors.DMLDelete, "table bid: nil record"},
		{"a record that says it has more rows than its columns", lyingRecord{dmlReplace(good, -1, "", nil), 5}, executors.DMLInsert,
			"table bid: column auction: 3 values in a record of 5 rows"},
		{"a record of negative rows", lyingRecord{dmlReplace(good, -1, "", nil), -1}, executors.DMLUpdate,
			"table bid: record has -1 rows"},
		{"a delete of pk columns and another", dmlPick(good, "auction", "bidder", "price"), executors.DMLDelete,
			`table bid: column "price": a delete's record has every column of the table or only its pk columns (auction, bidder, date_time)`},
		{"a delete of a pk column twice", dmlPick(good, "auction", "bidder", "bidder"), executors.DMLDelete,
			"table bid: column bidder: twice in the record"},
		{"a delete of pk columns of the wrong type", dmlPick(withTZ, "auction", "bidder", "date_time"), executors.DMLDelete,
			"table bid: column date_time: record has type timestamp[us, tz=UTC], want timestamp[us]"},
		{"an insert of the pk columns only", dmlPick(good, "auction", "bidder", "date_time"), executors.DMLInsert,
			"table bid: column price: missing (the record has 3 columns, the table 7)"},
	}
	for _, c := range cases {
		out, err := executors.DMLChunk(bid, c.kind, c.rec, mem)
		if c.rec != nil {
			c.rec.Release()
		}
		if out != nil {
			out.Release()
			t.Errorf("%s: a chunk was produced", c.name)
		}
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: got error %v, want %s", c.name, err, c.want)
		}
	}
}

// lyingRecord is a record whose NumRows is not its columns' length: a caller's own
// implementation of arrow.RecordBatch may be wrong in this way.
type lyingRecord struct {
	arrow.RecordBatch
	rows int64
}

func (r lyingRecord) NumRows() int64 { return r.rows }

// dmlPick returns the columns of rec named names, in that order (the caller releases
// it).
func dmlPick(rec arrow.RecordBatch, names ...string) arrow.RecordBatch {
	var fields []arrow.Field
	var cols []arrow.Array
	for _, name := range names {
		i := rec.Schema().FieldIndices(name)[0]
		fields = append(fields, rec.Schema().Field(i))
		cols = append(cols, rec.Column(i))
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
}

// TestDMLChunkDeleteByPK: a delete's record may hold only the pk columns, in any
// order; the chunk has the table's columns, the others empty values (never NULL: a
// NOT NULL column refuses it), and every row a Delete.
func TestDMLChunkDeleteByPK(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	bid := tables.BidTable()
	good := dmlBids(mem, 3)
	defer good.Release()
	for _, order := range [][]string{{"auction", "bidder", "date_time"}, {"date_time", "auction", "bidder"}} {
		rec := dmlPick(good, order...)
		c, err := executors.DMLChunk(bid, executors.DMLDelete, rec, mem)
		rec.Release()
		if err != nil {
			t.Fatalf("%v: %v", order, err)
		}
		if !c.Record().Schema().Equal(bid.ArrowSchema()) {
			t.Fatalf("%v: schema %v", order, c.Record().Schema())
		}
		for i, col := range bid.Columns {
			got := c.Record().Column(i)
			if bid.IsPK(i) {
				if !array.Equal(got, good.Column(i)) {
					t.Errorf("%v: pk column %s is %v, want %v", order, col.Name, got, good.Column(i))
				}
			} else if got.NullN() != 0 || got.Len() != 3 {
				t.Errorf("%v: column %s is %v, want 3 empty values", order, col.Name, got)
			}
		}
		for i, op := range c.Ops() {
			if op != vec.Delete {
				t.Errorf("%v: row %d is %v, want a Delete", order, i, op)
			}
		}
		c.Release()
	}
}

func TestDMLKind(t *testing.T) {
	for _, k := range []executors.DMLKind{executors.DMLInsert, executors.DMLDelete, executors.DMLUpdate, executors.DMLUpsert} {
		for _, s := range []string{k.String(), strings.ToUpper(k.String())} {
			got, err := executors.ParseDMLKind(s)
			if err != nil || got != k {
				t.Errorf("ParseDMLKind(%q) = %v, %v; want %v", s, got, err, k)
			}
		}
	}
	if _, err := executors.ParseDMLKind("merge"); err == nil || err.Error() != `unknown DML kind "merge" (want insert, delete, update or upsert)` {
		t.Errorf("ParseDMLKind(merge): %v", err)
	}
	if s := executors.DMLKind(9).String(); s != "DMLKind(9)" {
		t.Errorf("String of an unknown kind: %s", s)
	}
}

// TestDMLThroughMaterialize checks the table semantics of each kind end to end: DML
// chunks into the table's Materialize.
func TestDMLThroughMaterialize(t *testing.T) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	ctx := context.Background()
	store := mvOpenStore(t)
	node := store.AddNode()
	tab := mvKVTable()
	st, err := storage.NewStateTable(node, 3, tab, vnode.Full(tab.VnodeCount))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		kind    executors.DMLKind
		rows    string // as mvKVChunk reads them; the ops are ignored
		emitted string
	}{
		{executors.DMLInsert, "+1t +2f", "+1t +2f"},
		{executors.DMLInsert, "+1f", "U-1t U+1f"},            // an existing pk is replaced
		{executors.DMLUpsert, "+2f +3t", "+3t"},              // (2, f) is already there
		{executors.DMLUpdate, "+2t +4t", "U-2f U+2t"},        // 4 is missing: nothing
		{executors.DMLUpdate, "+2t", ""},                     // no change
		{executors.DMLUpdate, "+3 +3f", "U-3t U+3 U-3 U+3f"}, // rows apply in order
		{executors.DMLDelete, "+1 +5", "-1f"},                // 5 is missing; v is ignored
		{executors.DMLInsert, "+1t +1f +1t", "+1t U-1t U+1f U-1f U+1t"},
	}
	msgs := []executors.Message{mvBarrier(0, 1, executors.Checkpoint)}
	for i, s := range steps {
		in := mvKVChunk(t, mem, s.rows)
		c, err := executors.DMLChunk(tab, s.kind, in.Record(), mem)
		in.Release()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, executors.ChunkMessage(c), executors.Message{Watermark: &executors.Watermark{}}, mvBarrier(i+1, i+2, executors.Plain))
	}
	mv, err := executors.NewMaterialize(executors.NewValues(tab.ArrowSchema(), msgs), st, node, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer mv.Close()
	next := func() executors.Message {
		t.Helper()
		m, err := mv.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := next(); m.Barrier == nil {
		t.Fatalf("got %v, want the first barrier", m)
	}
	if _, err := store.Checkpoint(uint64(mvEpoch(0))); err != nil {
		t.Fatal(err)
	}
	for i, s := range steps {
		m := next()
		got := ""
		if m.Chunk != nil {
			got = mvKVFormat(m.Chunk)
			checkChangelog(t, m.Chunk)
			m.Chunk.Release()
			m = next()
		}
		if m.Watermark == nil {
			t.Fatalf("step %d: got %v, want the watermark", i, m)
		}
		if got != s.emitted {
			t.Errorf("step %d: %v %q emitted %q, want %q", i, s.kind, s.rows, got, s.emitted)
		}
		if m := next(); m.Barrier == nil {
			t.Fatalf("step %d: got %v, want a barrier", i, m)
		}
	}
	if _, err := mv.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("got %v, want EOF", err)
	}
}
