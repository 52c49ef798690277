package storage_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/storage/storetest"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// remoteObjects is an in-memory bucket of exported sstables, by name.
type remoteObjects map[string][]byte

// objectWriter collects one object's bytes, stored under its name when closed; aborted
// is set instead when the export aborts it.
type objectWriter struct {
	objs    remoteObjects
	name    string
	buf     bytes.Buffer
	aborted bool
}

func (w *objectWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }
func (w *objectWriter) Close() error {
	w.objs[w.name] = slices.Clone(w.buf.Bytes())
	return nil
}
func (w *objectWriter) Abort() { w.aborted = true }

// export exports epoch e of s into objs and returns the names of its sstables.
func export(t *testing.T, s *storage.Store, e uint64, tableBytes int, objs remoteObjects) []string {
	t.Helper()
	return exportWith(t, s, e, storage.ExportOptions{TableBytes: tableBytes}, objs)
}

func exportWith(t *testing.T, s *storage.Store, e uint64, o storage.ExportOptions, objs remoteObjects) []string {
	t.Helper()
	names, _ := exportCounted(t, s, e, o, objs)
	return names
}

// exportCounted is exportWith that also returns the row count changes the export
// counted.
func exportCounted(t *testing.T, s *storage.Store, e uint64, o storage.ExportOptions, objs remoteObjects) ([]string, []storage.RowDelta) {
	t.Helper()
	tabs, deltas, err := s.ExportCheckpoint(e, o, func(k int) (string, io.WriteCloser, error) {
		name := fmt.Sprintf("e%d-%d.sst", e, k)
		return name, &objectWriter{objs: objs, name: name}, nil
	})
	if err != nil {
		t.Fatalf("export epoch %d: %v", e, err)
	}
	var names []string
	for i, tab := range tabs {
		if len(objs[tab.Name]) != int(tab.Size) {
			t.Fatalf("sstable %s: %d bytes stored, %d reported", tab.Name, len(objs[tab.Name]), tab.Size)
		}
		if bytes.Compare(tab.Smallest, tab.Largest) > 0 || tab.Keys == 0 {
			t.Fatalf("sstable %s: bounds %x..%x, %d keys", tab.Name, tab.Smallest, tab.Largest, tab.Keys)
		}
		if i > 0 && bytes.Compare(tabs[i-1].Largest, tab.Smallest) >= 0 {
			t.Fatalf("sstables %s and %s overlap", tabs[i-1].Name, tab.Name)
		}
		names = append(names, tab.Name)
	}
	return names, deltas
}

// apply writes the named objects into s's ingest directory and ingests them as epoch e.
func apply(t *testing.T, s *storage.Store, e uint64, objs remoteObjects, names []string) {
	t.Helper()
	applyChanges(t, s, e, objs, names, storage.Changes{})
}

// applyChanges is apply with the changes ch committed too.
func applyChanges(t *testing.T, s *storage.Store, e uint64, objs remoteObjects, names []string, ch storage.Changes) {
	t.Helper()
	if err := s.IngestFiles(download(t, s, objs, names), e, ch); err != nil {
		t.Fatalf("ingest epoch %d: %v", e, err)
	}
	if got := s.CommittedEpoch(); got != e {
		t.Fatalf("committed epoch %d after ingesting %d", got, e)
	}
}

func download(t *testing.T, s *storage.Store, objs remoteObjects, names []string) []string {
	t.Helper()
	var paths []string
	for _, name := range names {
		w, p, err := s.NewIngestFile(name)
		if err != nil {
			t.Fatal(err)
		}
		// A copy: pebble's MemFS, under its invariants (-race), changes what it is
		// given to write.
		if _, err := w.Write(slices.Clone(objs[name])); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// rawScan is every key and value of s's pebble, metadata included, as text.
func rawScan(t *testing.T, s *storage.Store) []string {
	t.Helper()
	return storetest.RawScan(t, s)
}

func sameScan(t *testing.T, what string, want, got []string) {
	t.Helper()
	if slices.Equal(want, got) {
		return
	}
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			t.Fatalf("%s: entry %d is %s, want %s (%d and %d entries)", what, i, got[i], want[i], len(got), len(want))
		}
	}
	t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
}

// remoteWriter writes the same seeded epochs into several stores' state tables, with
// exact ops (Insert for a new key, UpdateInsert or Delete for a stored one).
type remoteWriter struct {
	rng    *rand.Rand
	tables []uint32
	live   map[string]bool // table | vnode | pk of the keys that exist
}

type remoteOp struct {
	table uint32
	vnode uint16
	pk    []byte
	op    vec.Op
	value []byte
}

// epoch returns one epoch's writes: distinct keys, about a third of them deletes of
// existing keys, the rest puts, new or over existing keys.
func (w *remoteWriter) epoch(e int) []remoteOp {
	n := w.rng.IntN(300)
	if w.rng.IntN(5) == 0 {
		n = 0 // an epoch with no writes
	}
	seen := map[string]bool{}
	var ops []remoteOp
	for range n {
		o := remoteOp{table: w.tables[w.rng.IntN(len(w.tables))], vnode: uint16(w.rng.IntN(8))}
		o.pk = fmt.Appendf(nil, "k%05d", w.rng.IntN(400))
		id := string(storage.AppendKey(nil, o.table, o.vnode, o.pk))
		if seen[id] {
			continue
		}
		seen[id] = true
		switch {
		case w.live[id] && w.rng.IntN(2) == 0:
			o.op = vec.Delete
			delete(w.live, id)
		case w.live[id]:
			o.op = vec.UpdateInsert
		default:
			o.op = vec.Insert
			w.live[id] = true
		}
		if o.op != vec.Delete {
			o.value = fmt.Appendf(nil, "v%d-%d", e, w.rng.IntN(1000))
		}
		ops = append(ops, o)
	}
	return ops
}

// write applies ops to the tables sts (by table id) and seals them at e.
func writeOps(t *testing.T, sts map[uint32]*storage.StateTable, ops []remoteOp, e uint64) {
	t.Helper()
	for id, st := range sts {
		var kinds []vec.Op
		var vns []uint16
		var keys, vals vec.Bytes
		for _, o := range ops {
			if o.table == id {
				kinds = append(kinds, o.op)
				vns = append(vns, o.vnode)
				keys.Append(o.pk)
				vals.Append(o.value)
			}
		}
		if len(kinds) > 0 {
			if err := st.WriteEncoded(kinds, nil, vns, &keys, &vals); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Seal(e); err != nil {
			t.Fatal(err)
		}
	}
}

func stateTables(t *testing.T, n *storage.Node, ids []uint32) map[uint32]*storage.StateTable {
	t.Helper()
	return stateTablesOwning(t, n, ids, vnode.Full(8))
}

// stateTablesOwning is stateTables whose tables own only vnodes (of 8).
func stateTablesOwning(t *testing.T, n *storage.Node, ids []uint32, vnodes *vnode.Bitmap) map[uint32]*storage.StateTable {
	t.Helper()
	kt := kvTable(8)
	out := map[uint32]*storage.StateTable{}
	for _, id := range ids {
		st, err := storage.NewStateTable(n, id, kt, vnodes)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = st
	}
	return out
}

// The same seeded epochs, committed by local checkpoints in store A and exported from
// store X, give the same store (every key and value, row counts and epoch included)
// in X after it ingests its own exports with the row count changes the export
// counted, in B that ingests them as they come and counts the changes itself, and in
// an empty store rebuilt from every object in order at the end (one way or the other
// by seed). Tables 7 and 9 are written with exact ops, table 11 with puts whose
// writer does not know whether the key existed (the export probes for them).
func TestRemoteExportIngestEquivalence(t *testing.T) {
	for seed := uint64(1); seed <= uint64(scale(4, 24)); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			fs := vfs.NewMem()
			open := func(dir string, o storage.Options) *storage.Store { return openStoreIn(t, dir, o) }
			a := open("a", seedOptions(fs, seed))
			x := open("x", testOptions(fs))
			b := open("b", testOptions(fs))
			ids := []uint32{7, 9, 11}
			xNode := x.AddNode()
			aTabs, xTabs := stateTables(t, a.AddNode(), ids), stateTables(t, xNode, ids)
			w := &remoteWriter{rng: rand.New(rand.NewPCG(seed, 0x5eed)), tables: ids[:2], live: map[string]bool{}}
			mem := memory.NewGoAllocator()
			objs := remoteObjects{}
			type version struct {
				epoch  uint64
				names  []string
				ch     storage.Changes
				deltas []storage.RowDelta
			}
			var log []version
			tableBytes := 1 + int(seed%3)*2000 // one vnode per sstable, or a few KiB
			for i := 1; i <= 12; i++ {
				e := ep(i)
				// Puts of table 11, new keys and rewritten ones, by Write.
				var ks []int64
				for k := range int64(200) {
					if w.rng.IntN(8) == 0 {
						ks = append(ks, k)
					}
				}
				if len(ks) > 0 {
					c := kvChunk(mem, aTabs[11].Table(), ks)
					for _, tabs := range []map[uint32]*storage.StateTable{aTabs, xTabs} {
						if err := tabs[11].Write(c); err != nil {
							t.Fatal(err)
						}
					}
					c.Release()
				}
				ops := w.epoch(i)
				writeOps(t, aTabs, ops, e)
				writeOps(t, xTabs, ops, e)
				// Catalog changes and a table drop, staged on A and X alike: X's
				// commit carries them (Staged) to every store that applies it.
				for _, s := range []*storage.Store{a, x} {
					switch i {
					case 3:
						s.SetCatalog("view/q", []byte("plan 1"))
						s.SetCatalog("next", []byte("2"))
					case 6:
						s.SetCatalog("view/q", nil)
						if err := s.StageDropTable(9); err != nil {
							t.Fatal(err)
						}
					}
				}
				if i == 6 {
					w.tables = []uint32{7} // table 9's writes of epoch 6 are dropped with it
				}
				if _, err := a.Checkpoint(e); err != nil {
					t.Fatal(err)
				}
				names, deltas := exportCounted(t, x, e, storage.ExportOptions{TableBytes: tableBytes}, objs)
				ch := x.Staged()
				log = append(log, version{e, names, ch, deltas})
				applyChanges(t, b, e, objs, names, ch)
				counted := ch
				counted.Counted, counted.RowDeltas = true, deltas
				applyChanges(t, x, e, objs, names, counted)
				if st := x.Staged(); st.Catalog != nil || st.Drops != nil {
					t.Fatalf("epoch %d: X keeps staged changes %v after ingesting them", e, st)
				}
				if got := xNode.UncommittedBytes(); got != 0 {
					t.Fatalf("epoch %d: X keeps %d uncommitted bytes after ingesting", e, got)
				}
				want := rawScan(t, a)
				sameScan(t, fmt.Sprintf("epoch %d: B", e), want, rawScan(t, b))
				sameScan(t, fmt.Sprintf("epoch %d: X", e), want, rawScan(t, x))
			}
			if most := slices.MaxFunc(log, func(a, b version) int { return len(a.names) - len(b.names) }); tableBytes == 1 && len(most.names) < 2 {
				t.Fatalf("no epoch was exported as more than one sstable (the most: %d)", len(most.names))
			}
			c := open("c", testOptions(fs))
			for _, v := range log {
				ch := v.ch
				if seed%2 == 0 {
					ch.Counted, ch.RowDeltas = true, v.deltas
				}
				applyChanges(t, c, v.epoch, objs, v.names, ch)
			}
			cat, err := c.Catalog()
			if err != nil {
				t.Fatal(err)
			}
			if len(cat) != 1 || string(cat["next"]) != "2" {
				t.Fatalf("rebuilt catalog %q, want only next=2", cat)
			}
			sameScan(t, "rebuilt", rawScan(t, a), rawScan(t, c))
			for _, id := range ids {
				ra, err := a.TableRowCount(id)
				if err != nil {
					t.Fatal(err)
				}
				rc, err := c.TableRowCount(id)
				if err != nil {
					t.Fatal(err)
				}
				if ra != rc {
					t.Fatalf("table %d: %d rows rebuilt, %d committed locally", id, rc, ra)
				}
				// And the count is the table's: every path counts with the same
				// code, so agreeing is not enough.
				if n := tableKeys(t, c, id); int64(n) != rc {
					t.Fatalf("table %d: row count %d, %d keys stored", id, rc, n)
				}
			}
		})
	}
}

// tableKeys counts the keys of table id in s's pebble.
func tableKeys(t *testing.T, s *storage.Store, id uint32) int {
	t.Helper()
	lo := storage.AppendKey(nil, id, 0, nil)[:4]
	hi := storage.AppendKey(nil, id+1, 0, nil)[:4]
	it, err := s.DB().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return n
}

// writeRawSSTable writes the sstable p on s's file system with the given puts (a nil
// value deletes) and, when rangeDel, a range deletion over them.
func writeRawSSTable(t *testing.T, fs vfs.FS, s *storage.Store, p string, keys [][]byte, values [][]byte, rangeDel bool) {
	t.Helper()
	f, err := fs.Create(p, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{TableFormat: s.DB().TableFormat()})
	for i, k := range keys {
		if values[i] == nil {
			err = w.Delete(k)
		} else {
			err = w.Set(k, values[i])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if rangeDel {
		if err := w.DeleteRange(keys[0], append(slices.Clone(keys[len(keys)-1]), 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// IngestFiles refuses a file with a metadata key, with a range deletion, with no
// keys, one that is not an sstable, and files whose key ranges overlap, naming the
// file; nothing is committed and the files are removed. It does whether it counts
// the row count changes or the commit carries them: a file from a bucket is checked
// key by key either way (a bad key in the middle included).
func TestRemoteIngestRefuses(t *testing.T) {
	for _, counted := range []bool{false, true} {
		t.Run(fmt.Sprintf("counted=%v", counted), func(t *testing.T) { testRemoteIngestRefuses(t, counted) })
	}
}

func testRemoteIngestRefuses(t *testing.T, counted bool) {
	fs := vfs.NewMem()
	s := openStore(t, fs)
	key := func(table uint32, pk string) []byte { return storage.AppendKey(nil, table, 1, []byte(pk)) }
	dir := fs.PathJoin("db", storage.IngestDirName)
	cases := []struct {
		name  string
		files map[string][][]byte // file -> keys, written with values
		del   bool
		want  string
	}{
		{"metadata key", map[string][][]byte{"meta.sst": {key(storage.MetaTable, "e")}}, false, "meta.sst holds key 00000000000165 of table 0, reserved for metadata"},
		{"range deletion", map[string][][]byte{"rd.sst": {key(7, "a"), key(7, "b")}}, true, "rd.sst holds range deletions"},
		{"no keys", map[string][][]byte{"empty.sst": nil}, false, "empty.sst holds no keys"},
		{"overlap", map[string][][]byte{"o1.sst": {key(7, "a"), key(7, "c")}, "o2.sst": {key(7, "b")}}, false, "o1.sst and db/weir-ingest/o2.sst overlap"},
		{"short key", map[string][][]byte{"short.sst": {{0, 0, 7}}}, false, "short.sst: key 000007 is shorter"},
		{"short last key", map[string][][]byte{"short2.sst": {key(7, "a"), {0, 0, 0, 8}}}, false, "short2.sst: key 00000008 is shorter"},
		{"metadata first key", map[string][][]byte{"meta2.sst": {key(storage.MetaTable, "e"), key(7, "a")}}, false, "meta2.sst holds key 00000000000165 of table 0"},
		{"short middle key", map[string][][]byte{"short3.sst": {key(7, "a"), {0, 0, 0, 8, 0}, key(9, "z")}}, false, "short3.sst: key 0000000800 is shorter"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var paths []string
			for name, keys := range c.files {
				p := fs.PathJoin(dir, name)
				vals := make([][]byte, len(keys))
				for i := range vals {
					vals[i] = []byte("v")
				}
				writeRawSSTable(t, fs, s, p, keys, vals, c.del)
				paths = append(paths, p)
			}
			slices.Sort(paths)
			err := s.IngestFiles(paths, ep(1), storage.Changes{Counted: counted})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("IngestFiles = %v, want an error with %q", err, c.want)
			}
			if s.CommittedEpoch() != 0 {
				t.Fatalf("a refused ingest committed epoch %d", s.CommittedEpoch())
			}
			for _, p := range paths {
				if _, err := fs.Stat(p); err == nil {
					t.Fatalf("%s was left after a refused ingest", p)
				}
			}
		})
	}
	p := fs.PathJoin(dir, "junk.sst")
	f, err := fs.Create(p, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("not an sstable at all, but long enough to have a footer's length"))
	f.Close()
	if err := s.IngestFiles([]string{p}, ep(1), storage.Changes{}); err == nil || !strings.Contains(err.Error(), "junk.sst") {
		t.Fatalf("IngestFiles of a non-sstable = %v, want an error naming it", err)
	}
	for _, name := range []string{"", "a/b", `a\b`, ".."} {
		if _, _, err := s.NewIngestFile(name); err == nil {
			t.Fatalf("NewIngestFile(%q) was accepted", name)
		}
	}
	if err := s.IngestFiles(nil, ep(2), storage.Changes{}); err != nil {
		t.Fatal(err)
	}
	if err := s.IngestFiles(nil, ep(2), storage.Changes{}); err == nil || !strings.Contains(err.Error(), "not above the committed epoch") {
		t.Fatalf("a second ingest of epoch %d = %v, want a refusal", ep(2), err)
	}
	if got := s.CommittedEpoch(); got != ep(2) {
		t.Fatalf("committed epoch %d, want %d", got, ep(2))
	}
}

// failingWriter fails every write.
type failingWriter struct{ closed, aborted bool }

func (w *failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
func (w *failingWriter) Close() error              { w.closed = true; return nil }
func (w *failingWriter) Abort()                    { w.aborted = true }

// ExportCheckpoint refuses an epoch at or below the committed one; a writer that fails is aborted, not closed; and a failed export leaves the runs
// sealed, for a later export or checkpoint.
func TestRemoteExportRefusesAndAborts(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs)
	n := s.AddNode()
	sts := stateTables(t, n, []uint32{7})
	writeOps(t, sts, []remoteOp{{table: 7, vnode: 1, pk: []byte("a"), op: vec.Insert, value: []byte("1")}}, ep(2))
	if err := s.IngestFiles(nil, ep(1), storage.Changes{}); err != nil {
		t.Fatal(err)
	}
	none := func(int) (string, io.WriteCloser, error) { return "", nil, errors.New("not called") }
	if _, _, err := s.ExportCheckpoint(ep(1), storage.ExportOptions{}, none); err == nil || !strings.Contains(err.Error(), "not above the committed epoch") {
		t.Fatalf("export at the committed epoch = %v, want a refusal", err)
	}
	fw := &failingWriter{}
	_, _, err := s.ExportCheckpoint(ep(2), storage.ExportOptions{}, func(int) (string, io.WriteCloser, error) { return "x.sst", fw, nil })
	if err == nil || !strings.Contains(err.Error(), "x.sst") || !strings.Contains(err.Error(), fmt.Sprint(ep(2))) {
		t.Fatalf("export through a failing writer = %v, want an error naming the sstable and epoch", err)
	}
	if !fw.aborted || fw.closed {
		t.Fatalf("failing writer: aborted %v, closed %v; want aborted only", fw.aborted, fw.closed)
	}
	if n.UncommittedBytes() == 0 {
		t.Fatal("a failed export dropped the sealed runs")
	}
	objs := remoteObjects{}
	names := export(t, s, ep(2), 0, objs)
	if len(names) != 1 {
		t.Fatalf("export wrote %d sstables, want 1", len(names))
	}
	apply(t, s, ep(2), objs, names)
	v, closer, err := s.DB().Get(storage.AppendKey(nil, 7, 1, []byte("a")))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if string(v) != "1" {
		t.Fatalf("ingested value %q, want 1", v)
	}
	if _, _, err := s.DB().Get(storage.AppendKey(nil, 7, 1, []byte("b"))); !errors.Is(err, pebble.ErrNotFound) {
		t.Fatalf("Get of an unwritten key = %v", err)
	}
	if c, err := s.RowCount(7, 1); err != nil || c != 1 {
		t.Fatalf("row count %d, %v; want 1", c, err)
	}
}

// IngestFiles keeps the sequence it applied, refuses a sequence not above it, a drop of
// the metadata table and a file holding keys of a table it drops, and commits nothing
// when it refuses.
func TestRemoteIngestChanges(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs)
	if got, err := s.AppliedSequence(); err != nil || got != 0 {
		t.Fatalf("applied sequence of a new store = %d, %v; want 0", got, err)
	}
	if err := s.IngestFiles(nil, ep(1), storage.Changes{Sequence: 5}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.AppliedSequence(); err != nil || got != 5 {
		t.Fatalf("applied sequence = %d, %v; want 5", got, err)
	}
	before := rawScan(t, s)
	p := fs.PathJoin("db", storage.IngestDirName, "t9.sst")
	writeRawSSTable(t, fs, s, p, [][]byte{storage.AppendKey(nil, 9, 1, []byte("a"))}, [][]byte{[]byte("1")}, false)
	for _, c := range []struct {
		paths []string
		ch    storage.Changes
		want  string
	}{
		{nil, storage.Changes{Sequence: 5}, "sequence 5 is not above the applied sequence 5"},
		{nil, storage.Changes{Drops: []uint32{storage.MetaTable}}, "which is reserved"},
		{[]string{p}, storage.Changes{Drops: []uint32{9}}, "holds keys of table 9, which the commit drops"},
	} {
		if err := s.IngestFiles(c.paths, ep(2), c.ch); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("IngestFiles(%v) = %v, want an error with %q", c.ch, err, c.want)
		}
	}
	sameScan(t, "after refusals", before, rawScan(t, s))
	if s.CommittedEpoch() != ep(1) {
		t.Fatalf("committed epoch %d after refusals, want %d", s.CommittedEpoch(), ep(1))
	}
}

// An export of a whole store (ExportOptions.Whole) cuts its sstables by size only:
// writes to vnodes with gaps between them that the writers do not own, in two tables,
// are one sstable instead of one per run of consecutive vnodes, and commit the same
// data.
func TestRemoteExportWhole(t *testing.T) {
	fs := vfs.NewMem()
	var ops []remoteOp
	for _, table := range []uint32{7, 9} {
		for _, v := range []uint16{1, 3, 6} {
			ops = append(ops, remoteOp{table: table, vnode: v, pk: []byte("a"), op: vec.Insert, value: []byte("1")})
		}
	}
	var scans [][]string
	for i, whole := range []bool{false, true} {
		open := func(dir string) *storage.Store { return openStoreIn(t, dir, testOptions(fs)) }
		x := open(fmt.Sprint("x", i))
		writeOps(t, stateTablesOwning(t, x.AddNode(), []uint32{7, 9}, vnode.NewBitmap(8, 1, 3, 6)), ops, ep(1))
		objs := remoteObjects{}
		names := exportWith(t, x, ep(1), storage.ExportOptions{Whole: whole}, objs)
		if want := map[bool]int{false: 6, true: 1}[whole]; len(names) != want {
			t.Fatalf("whole %v: %d sstables, want %d", whole, len(names), want)
		}
		b := open(fmt.Sprint("b", i))
		apply(t, b, ep(1), objs, names)
		scans = append(scans, rawScan(t, b))
	}
	sameScan(t, "whole export", scans[0], scans[1])
}

// A whole export ends an sstable where the table changes across a table the commit
// drops: the drop's range deletion must not fall within an sstable's bounds, which
// one ingest does not take. The store that applies it then holds what a local
// checkpoint of the same writes and drop holds.
func TestRemoteExportWholeAcrossADrop(t *testing.T) {
	fs := vfs.NewMem()
	ids := []uint32{7, 8, 9}
	put := func(tables []uint32, value string) []remoteOp {
		var ops []remoteOp
		for _, table := range tables {
			for _, v := range []uint16{1, 3} {
				ops = append(ops, remoteOp{table: table, vnode: v, pk: []byte("a" + value), op: vec.Insert, value: []byte(value)})
			}
		}
		return ops
	}
	open := func(dir string) *storage.Store { return openStoreIn(t, dir, testOptions(fs)) }
	local, x, b := open("local"), open("x"), open("b")
	localTabs, xTabs := stateTables(t, local.AddNode(), ids), stateTables(t, x.AddNode(), ids)
	objs := remoteObjects{}
	for i, ops := range [][]remoteOp{put(ids, "1"), put(ids, "2")} {
		e := ep(i + 1)
		writeOps(t, localTabs, ops, e)
		writeOps(t, xTabs, ops, e)
		if i == 1 {
			for _, s := range []*storage.Store{local, x} {
				if err := s.StageDropTable(8); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := local.Checkpoint(e); err != nil {
			t.Fatal(err)
		}
		names := exportWith(t, x, e, storage.ExportOptions{Whole: true}, objs)
		if want := i + 1; len(names) != want {
			t.Fatalf("epoch %d: %d sstables, want %d (cut at the dropped table only)", i+1, len(names), want)
		}
		ch := x.Staged()
		applyChanges(t, b, e, objs, names, ch)
		applyChanges(t, x, e, objs, names, ch)
		want := rawScan(t, local)
		sameScan(t, fmt.Sprintf("epoch %d: B", i+1), want, rawScan(t, b))
		sameScan(t, fmt.Sprintf("epoch %d: X", i+1), want, rawScan(t, x))
	}
	if n, err := b.TableRowCount(8); err != nil || n != 0 {
		t.Fatalf("the dropped table has %d rows (%v)", n, err)
	}
}

// A store's export holds in one sstable the writes of the vnodes of a table that its
// writers own, with or without writes, and cuts at a vnode they do not own: another
// store's writers may write it. The sstables of two stores owning halves of the
// vnodes (one per table each), or every other vnode (one per written vnode), do not
// overlap, and one ingest takes them all; the store that applies them holds what one
// local checkpoint of all the writes holds.
func TestRemoteExportOwnedGaps(t *testing.T) {
	evens, odds := vnode.NewBitmap(8, 0, 2, 4, 6), vnode.NewBitmap(8, 1, 3, 5, 7)
	for _, tc := range []struct {
		name    string
		owners  []*vnode.Bitmap
		written [][]uint16
		tables  []int // sstables per store
	}{
		{"halves", []*vnode.Bitmap{vnode.FromRange(8, 0, 4), vnode.FromRange(8, 4, 8)}, [][]uint16{{0, 2}, {5, 7}}, []int{2, 2}},
		{"interleaved", []*vnode.Bitmap{evens, odds}, [][]uint16{{0, 4, 6}, {1, 7}}, []int{6, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			open := func(dir string) *storage.Store { return openStoreIn(t, dir, testOptions(fs)) }
			local, b := open("local"), open("b")
			ids := []uint32{7, 9}
			objs := remoteObjects{}
			var names []string
			for i, owned := range tc.owners {
				var ops []remoteOp
				for _, table := range ids {
					for _, v := range tc.written[i] {
						ops = append(ops, remoteOp{table: table, vnode: v, pk: []byte("a"), op: vec.Insert, value: []byte("1")})
					}
				}
				writeOps(t, stateTablesOwning(t, local.AddNode(), ids, owned), ops, ep(1))
				x := open(fmt.Sprint("x", i))
				writeOps(t, stateTablesOwning(t, x.AddNode(), ids, owned), ops, ep(1))
				mine := exportWith(t, x, ep(1), storage.ExportOptions{}, objs)
				if len(mine) != tc.tables[i] {
					t.Fatalf("store %d: %d sstables, want %d", i, len(mine), tc.tables[i])
				}
				for _, n := range mine { // both stores name theirs e<epoch>-<k>.sst
					name := fmt.Sprintf("x%d-%s", i, n)
					objs[name] = objs[n]
					delete(objs, n)
					names = append(names, name)
				}
			}
			if _, err := local.Checkpoint(ep(1)); err != nil {
				t.Fatal(err)
			}
			apply(t, b, ep(1), objs, names)
			sameScan(t, tc.name, rawScan(t, local), rawScan(t, b))
		})
	}
}

// A commit's row count changes that do not fit the store's counts (a count below
// zero), or that name table 0 or a table the commit drops, are refused naming the
// table and the vnode, and nothing is committed.
func TestRemoteIngestRefusesCounts(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs)
	p := fs.PathJoin("db", storage.IngestDirName, "f.sst")
	for _, c := range []struct {
		name string
		ch   storage.Changes
		want string
	}{
		{"below zero", storage.Changes{Counted: true, RowDeltas: []storage.RowDelta{{Table: 7, Vnode: 1, Delta: 1}, {Table: 7, Vnode: 2, Delta: -5}}},
			"the row count of table 7 vnode 2 would be -5"},
		{"table 0", storage.Changes{Counted: true, RowDeltas: []storage.RowDelta{{Table: 0, Vnode: 3, Delta: 1}}},
			"a row count change of table 0 vnode 3"},
		{"a dropped table", storage.Changes{Counted: true, Drops: []uint32{9}, RowDeltas: []storage.RowDelta{{Table: 9, Vnode: 4, Delta: 1}}},
			"a row count change of table 9 vnode 4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			writeRawSSTable(t, fs, s, p, [][]byte{storage.AppendKey(nil, 7, 1, []byte("a"))}, [][]byte{[]byte("v")}, false)
			err := s.IngestFiles([]string{p}, ep(1), c.ch)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "epoch") {
				t.Fatalf("IngestFiles = %v, want an error with %q and the epoch", err, c.want)
			}
			if s.CommittedEpoch() != 0 {
				t.Fatalf("a refused ingest committed epoch %d", s.CommittedEpoch())
			}
		})
	}
}
