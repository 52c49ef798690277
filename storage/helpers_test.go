package storage_test

import (
	"bytes"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/internal/faultfs"
	"github.com/seed04fbb902/weir/internal/invariants"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// long enables the heavier variants: more seeds, more epochs, more crash points.
var long = flag.Bool("storage.long", false, "run the long variants of the storage tests")

// scale returns short, or long under -storage.long.
func scale(short, long_ int) int {
	if *long {
		return long_
	}
	return short
}

// budget is scale with a smaller default under the race detector, for the tests whose
// cost is pebble and file-system cloning rather than concurrency of ours.
func budget(short, race, long_ int) int {
	if invariants.RaceEnabled && !*long {
		return race
	}
	return scale(short, long_)
}

// testOptions are small store options for tests on fs.
func testOptions(fs vfs.FS) storage.Options {
	return storage.Options{FS: fs, CacheSize: 8 << 20, MemTableSize: 1 << 20}
}

// seedOptions are testOptions for a seeded test: even seeds commit every checkpoint
// they can by ingesting sstables (IngestBytes 1), odd seeds by batches (small
// checkpoints are below the default IngestBytes), so that both commit paths meet
// every check across consecutive seeds. (Where -race runs one seed, the test name's
// hash, it is even for TestCrashDuringCheckpoints: the ingest is crash-tested there.)
func seedOptions(fs vfs.FS, seed uint64) storage.Options {
	o := testOptions(fs)
	if ingestSeed(seed) {
		o.IngestBytes = 1
	}
	return o
}

// ingestSeed reports whether seedOptions ingests for seed.
func ingestSeed(seed uint64) bool { return seed%2 == 0 }

// openStore opens a store in "db" on fs and closes it at the end of the test (unless
// the test closed it first).
func openStore(t testing.TB, fs vfs.FS) *storage.Store {
	t.Helper()
	return openStoreIn(t, "db", testOptions(fs))
}

// openStoreIn opens a store in dir with o and closes it at the end of the test
// (unless the test closed it first).
func openStoreIn(t testing.TB, dir string, o storage.Options) *storage.Store {
	t.Helper()
	s, err := storage.Open(dir, o)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ep is the i-th epoch of a test, in Weir's epoch format (milliseconds << 16).
func ep(i int) uint64 { return uint64(1_700_000_000_000+i) << 16 }

// ---- Nexmark bids keyed by one int64 id --------------------------------------------

var bidT = tables.BidTable()

const bidTableID = 7

// bidVal is the part of a bid row that tests change: price (often the epoch that wrote
// it) and channel.
type bidVal struct {
	Price   int64
	Channel string
}

// bidRow is the bid of id: its pk (auction, bidder, date_time) is a function of id, so
// ids and pks correspond one to one.
func bidRow(id int64, v bidVal) tables.Bid {
	return tables.Bid{
		Auction:  id % 13,
		Bidder:   id,
		Price:    v.Price,
		Channel:  v.Channel,
		URL:      "https://weir.test/item/" + strconv.FormatInt(id, 10),
		DateTime: arrow.Timestamp(1_000_000 + id),
		Extra:    "",
	}
}

// bidOp is one row of a bid chunk.
type bidOp struct {
	Op vec.Op
	ID int64
	V  bidVal
}

// bidChunk builds a chunk of bid rows with the generated builder.
func bidChunk(mem memory.Allocator, ops []bidOp) *vec.Chunk {
	b := tables.NewBidBuilder(mem)
	defer b.Release()
	b.Reserve(len(ops))
	for _, o := range ops {
		r := bidRow(o.ID, o.V)
		b.Append(o.Op, &r)
	}
	return b.Build()
}

// bidState is the reference state of a bid table: id -> value.
type bidState map[int64]bidVal

func (s bidState) clone() bidState {
	out := make(bidState, len(s))
	for k, v := range s {
		out[k] = v
	}
	return out
}

// apply applies ops in order the way StateTable.Write does.
func (s bidState) apply(ops []bidOp) {
	for _, o := range ops {
		if o.Op.IsInsert() {
			s[o.ID] = o.V
		} else {
			delete(s, o.ID)
		}
	}
}

// equal returns the first difference between two states, or "".
func (s bidState) diff(got bidState) string {
	var ids []int64
	for id := range s {
		ids = append(ids, id)
	}
	for id := range got {
		if _, ok := s[id]; !ok {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		w, wok := s[id]
		g, gok := got[id]
		switch {
		case wok && !gok:
			return fmt.Sprintf("id %d: missing, want %+v (%d rows, want %d)", id, w, len(got), len(s))
		case !wok && gok:
			return fmt.Sprintf("id %d: unexpected %+v (%d rows, want %d)", id, g, len(got), len(s))
		case w != g:
			return fmt.Sprintf("id %d: got %+v, want %+v", id, g, w)
		}
	}
	return ""
}

// bidPlacer knows the vnode and pk of every bid id.
type bidPlacer struct {
	vn map[int64]uint16
	pk map[int64][]byte
}

func newBidPlacer() *bidPlacer {
	return &bidPlacer{vn: map[int64]uint16{}, pk: map[int64][]byte{}}
}

func (p *bidPlacer) place(id int64) (uint16, []byte) {
	if v, ok := p.vn[id]; ok {
		return v, p.pk[id]
	}
	mem := memory.NewGoAllocator()
	c := bidChunk(mem, []bidOp{{Op: vec.Insert, ID: id}})
	defer c.Release()
	k := vec.NewGeneric(bidT)
	vn := make([]uint16, 1)
	k.Vnodes(c, vn)
	var keys vec.Bytes
	k.EncodeKeys(c, &keys)
	pk := append([]byte(nil), keys.At(0)...)
	// The generated pk codec must agree with the generic one.
	if want := tables.AppendBidPK(nil, &tables.BidPK{Auction: id % 13, Bidder: id, DateTime: arrow.Timestamp(1_000_000 + id)}); !bytes.Equal(pk, want) {
		panic(fmt.Sprintf("bid %d: generic pk %x, generated %x", id, pk, want))
	}
	p.vn[id], p.pk[id] = vn[0], pk
	return vn[0], pk
}

// counts is the number of rows per vnode of a state.
func (p *bidPlacer) counts(s bidState) map[uint16]int64 {
	out := map[uint16]int64{}
	for id := range s {
		v, _ := p.place(id)
		out[v]++
	}
	return out
}

// readBids reads every row of a bid state table through view, vnode by vnode (see
// readBidVnode).
func readBids(t testing.TB, st *storage.StateTable, view *storage.View, p *bidPlacer) bidState {
	t.Helper()
	out := bidState{}
	var err error
	st.Vnodes().Iterate(func(v vnode.Vnode) bool {
		got := bidState{}
		if err = readBidVnode(st, view, v, nil, got); err != nil {
			return false
		}
		for id, val := range got {
			if wv, _ := p.place(id); wv != v {
				err = fmt.Errorf("bid %d found in vnode %d, belongs in %d", id, v, wv)
				return false
			}
			out[id] = val
		}
		return true
	})
	if err != nil {
		t.Fatalf("read bids: %v", err)
	}
	return out
}

// readBidVnode reads the rows of one vnode into out, checking that the vnode is in
// strictly increasing pk order and that each row belongs in it (by place, id ->
// vnode, when given; otherwise place is filled in). Values are decoded with the generic
// kernels (the store wrote them with the generated ones). It is safe for concurrent use
// with distinct state tables and maps.
func readBidVnode(st *storage.StateTable, view *storage.View, v uint16, place map[int64]uint16, out bidState) error {
	var vals vec.Bytes
	vals.Reset()
	var ids []int64
	it, err := st.Iter(view, v, storage.IterBounds{})
	if err != nil {
		return err
	}
	var prev []byte
	for it.Next() {
		pk := it.PK()
		if prev != nil && bytes.Compare(prev, pk) >= 0 {
			err = fmt.Errorf("vnode %d: pk %x after %x", v, pk, prev)
			break
		}
		prev = append(prev[:0], pk...)
		dk, derr := tables.DecodeBidPK(pk)
		if derr != nil {
			err = fmt.Errorf("vnode %d: %v", v, derr)
			break
		}
		if wv, ok := place[dk.Bidder]; ok && wv != v {
			err = fmt.Errorf("bid %d found in vnode %d, belongs in %d", dk.Bidder, v, wv)
			break
		}
		ids = append(ids, dk.Bidder)
		vals.Append(it.Value())
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	mem := memory.NewGoAllocator()
	bs := []vec.Builder{array.NewInt64Builder(mem), vec.NewVarBuilder(mem, arrow.BinaryTypes.String)}
	defer bs[0].Release()
	defer bs[1].Release()
	if err := vec.NewGeneric(bidT).DecodeValues(&vals, vec.Projection{tables.BidColPrice, tables.BidColChannel}, bs); err != nil {
		return fmt.Errorf("vnode %d: %w", v, err)
	}
	prices := bs[0].NewArray().(*array.Int64)
	chans := bs[1].NewArray().(*array.String)
	defer prices.Release()
	defer chans.Release()
	for i, id := range ids {
		out[id] = bidVal{Price: prices.Value(i), Channel: chans.Value(i)}
	}
	return nil
}

// readBidsAt reads through a fresh view of the node (nil: the store's committed view).
func readBidsAt(t testing.TB, s *storage.Store, n *storage.Node, st *storage.StateTable, p *bidPlacer) (bidState, uint64) {
	t.Helper()
	var v *storage.View
	var err error
	if n == nil {
		v, err = s.View()
	} else {
		v, err = n.View()
	}
	if err != nil {
		t.Fatalf("view: %v", err)
	}
	defer v.Release()
	return readBids(t, st, v, p), v.Epoch
}

// checkRowCounts compares the store's committed row counts with the reference.
func checkRowCounts(t testing.TB, s *storage.Store, table uint32, want map[uint16]int64, vnodes int) {
	t.Helper()
	var total int64
	for v := 0; v < vnodes; v++ {
		got, err := s.RowCount(table, uint16(v))
		if err != nil {
			t.Fatalf("row count of vnode %d: %v", v, err)
		}
		if got != want[uint16(v)] {
			t.Fatalf("row count of table %d vnode %d = %d, want %d", table, v, got, want[uint16(v)])
		}
		total += got
	}
	got, err := s.TableRowCount(table)
	if err != nil {
		t.Fatalf("table row count: %v", err)
	}
	if got != total {
		t.Fatalf("table row count of table %d = %d, want %d", table, got, total)
	}
}

// fullBidTable returns a state table of the bid table over every vnode on node n.
func fullBidTable(t testing.TB, n *storage.Node) *storage.StateTable {
	t.Helper()
	st, err := storage.NewStateTable(n, bidTableID, bidT, vnode.Full(bidT.VnodeCount))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// kvTable is a small hand-built table: a two-column pk (one DESC), a nullable value.
func kvTable(vnodes int) *schema.Table {
	t := &schema.Table{
		Name: "kv",
		Columns: []schema.Column{
			{Name: "k", Type: schema.Type{Kind: schema.Int64}},
			{Name: "s", Type: schema.Type{Kind: schema.Varchar}},
			{Name: "v", Type: schema.Type{Kind: schema.Int64}, Nullable: true},
			{Name: "note", Type: schema.Type{Kind: schema.Varchar}, Nullable: true},
		},
		PK:         []schema.KeyColumn{{Column: 0}, {Column: 1, Desc: true}},
		DistKey:    []int{0},
		VnodeCount: vnodes,
	}
	if err := t.Validate(); err != nil {
		panic(err)
	}
	return t
}

// kvChunk is a chunk of kv rows (k, "x", k, NULL), all inserts.
func kvChunk(mem memory.Allocator, t *schema.Table, ks []int64) *vec.Chunk {
	kb := array.NewInt64Builder(mem)
	sb := array.NewStringBuilder(mem)
	vb := array.NewInt64Builder(mem)
	nb := array.NewStringBuilder(mem)
	for _, k := range ks {
		kb.Append(k)
		sb.Append("x")
		vb.Append(k)
		nb.AppendNull()
	}
	cols := []arrow.Array{kb.NewArray(), sb.NewArray(), vb.NewArray(), nb.NewArray()}
	for _, b := range []array.Builder{kb, sb, vb, nb} {
		b.Release()
	}
	rec := array.NewRecordBatch(t.ArrowSchema(), cols, int64(len(ks)))
	for _, a := range cols {
		a.Release()
	}
	defer rec.Release()
	ops := vec.NewOps(mem, len(ks), vec.Insert)
	defer ops.Release()
	return vec.NewChunk(rec, ops, nil)
}

// kvPK is the memcomparable pk of kv row (k, "x").
func kvPK(t *schema.Table, k int64) []byte {
	mem := memory.NewGoAllocator()
	c := kvChunk(mem, t, []int64{k})
	defer c.Release()
	var keys vec.Bytes
	vec.NewGeneric(t).EncodeKeys(c, &keys)
	return append([]byte(nil), keys.At(0)...)
}

// kvDecodeK decodes the k column of a kv pk.
func kvDecodeK(tb testing.TB, t *schema.Table, pk []byte) int64 {
	tb.Helper()
	mem := memory.NewGoAllocator()
	var keys vec.Bytes
	keys.Append(pk)
	kb, sb := array.NewInt64Builder(mem), array.NewStringBuilder(mem)
	defer kb.Release()
	defer sb.Release()
	if err := vec.NewGeneric(t).DecodeKeys(&keys, []array.Builder{kb, sb}); err != nil {
		tb.Fatalf("decode pk %x: %v", pk, err)
	}
	a := kb.NewInt64Array()
	defer a.Release()
	return a.Value(0)
}

// faultFS wraps fs with errorfs, calling inj before every operation, the WAL files
// pebble recycles included (see faultfs.Wrap).
func faultFS(fs vfs.FS, inj errorfs.Injector) vfs.FS { return faultfs.Wrap(fs, inj) }
