package storage_test

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// ingestWriter writes rows with exact ops through a state table, and keeps the
// reference: storage key -> value of every row written.
type ingestWriter struct {
	st        *storage.StateTable
	ref       map[string]string
	next      map[uint16]uint64 // per vnode, the next pk of its ascending writes
	valueSize int               // of the values written (0: 100 bytes)
}

func ingestPK(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }

// write writes one row per (vnode, pk): an Insert of a value when put, a Delete
// otherwise.
func (w *ingestWriter) write(t *testing.T, put bool, rows ...[2]uint64) {
	t.Helper()
	var keys, vals vec.Bytes
	var ops []vec.Op
	var vn []uint16
	for _, r := range rows {
		v, pk := uint16(r[0]), ingestPK(r[1])
		key := string(storage.AppendKey(nil, tableOf(w.st), v, pk))
		_, existed := w.ref[key]
		op := vec.Insert
		val := []byte(fmt.Sprintf("%0*d", cmp.Or(w.valueSize, 100), r[1]))
		switch {
		case put && existed:
			op = vec.UpdateInsert
		case !put:
			op = vec.Delete
			val = nil
		}
		keys.Append(pk)
		vals.Append(val)
		ops = append(ops, op)
		vn = append(vn, v)
		if put {
			w.ref[key] = string(val)
		} else {
			delete(w.ref, key)
		}
	}
	if err := w.st.WriteEncoded(ops, nil, vn, &keys, &vals); err != nil {
		t.Fatal(err)
	}
}

func tableOf(st *storage.StateTable) uint32 { return st.ID() }

// ascend writes the next n rows of the writer's vnodes in (vnode, pk) order, perVnode
// rows a vnode, as a view's backfill does.
func (w *ingestWriter) ascend(t *testing.T, n, perVnode int) {
	t.Helper()
	var rows [][2]uint64
	w.st.Vnodes().Iterate(func(v vnode.Vnode) bool {
		for w.next[uint16(v)] < uint64(perVnode) && len(rows) < n {
			rows = append(rows, [2]uint64{uint64(v), w.next[uint16(v)]})
			w.next[uint16(v)]++
		}
		return len(rows) < n
	})
	w.write(t, true, rows...)
}

// checkIngestStore compares the table's committed rows and row counts with ref.
func checkIngestStore(t *testing.T, s *storage.Store, table uint32, ref map[string]string, what string) {
	t.Helper()
	lo := binary.BigEndian.AppendUint32(nil, table)
	hi := binary.BigEndian.AppendUint32(nil, table+1)
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release()
	it, err := s.DB().NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	got := map[string]string{}
	for ok := it.SeekGE(lo); ok && bytes.Compare(it.Key(), hi) < 0; ok = it.Next() {
		got[string(it.Key())] = string(it.Value())
	}
	if !maps.Equal(got, ref) {
		t.Fatalf("%s: %d committed rows, want %d (or their values differ)", what, len(got), len(ref))
	}
	n, err := s.TableRowCount(table)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(ref)) {
		t.Fatalf("%s: row count %d, want %d", what, n, len(ref))
	}
	perVnode := map[uint16]int64{}
	for k := range ref {
		_, vn, _, _ := storage.SplitKey([]byte(k))
		perVnode[vn]++
	}
	for _, vn := range slices.Sorted(maps.Keys(perVnode)) {
		c, err := s.RowCount(table, vn)
		if err != nil {
			t.Fatal(err)
		}
		if c != perVnode[vn] {
			t.Fatalf("%s: vnode %d row count %d, want %d", what, vn, c, perVnode[vn])
		}
	}
}

// TestCheckpointIngest commits a view's backfill as two actors write it (each its
// vnode range in ascending order, on its own node) by ingesting sstables: every
// checkpoint is ingested, the sstables of the view's rows land in the last level (the
// plan cuts them where committed data lies between two actors' ranges), the rows and
// row counts are exact through updates and deletes of committed rows, and a reopened
// store holds them. Small writes scattered among committed keys share an sstable
// when a large range comes with them, and take the batch alone; large ones, which
// would need more than the plan's most sstables, take the batch.
func TestCheckpointIngest(t *testing.T) {
	const table, vnodes, perVnode, perEpoch = 9, 256, 300, 1000
	fs := vfs.NewMem()
	o := testOptions(fs)
	o.IngestBytes = 64 << 10 // runs of 2 KiB or more are large
	s, err := storage.Open("db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	kv := kvTable(vnodes)
	ref := map[string]string{}
	var ws []*ingestWriter
	for i := range 2 {
		st, err := storage.NewStateTable(s.AddNode(), table, kv, vnode.FromRange(vnodes, i*vnodes/2, (i+1)*vnodes/2))
		if err != nil {
			t.Fatal(err)
		}
		// 400-byte values: an actor's epoch, about 400 KiB, is a segment of its own.
		ws = append(ws, &ingestWriter{st: st, ref: ref, next: map[uint16]uint64{}, valueSize: 400})
	}
	seal := func(e int) {
		for _, w := range ws {
			if err := w.st.Seal(ep(e)); err != nil {
				t.Fatal(err)
			}
		}
	}
	e := 0
	for range 12 {
		e++
		for _, w := range ws {
			w.ascend(t, perEpoch, perVnode)
		}
		seal(e)
		s.SetCatalog(fmt.Sprintf("entry-%d", e), []byte("x"))
		// The first has no committed rows between the two ranges to cut at.
		if st, want := mustCheckpoint(t, s, ep(e)), min(e+1, 3); st.Ingested < want {
			t.Fatalf("checkpoint %d: %d sstables ingested, want at least %d (metadata and the actors' ranges)", e, st.Ingested, want)
		}
		checkIngestStore(t, s, table, ref, fmt.Sprintf("epoch %d", e))
	}
	m := s.DB().Metrics()
	var ingested, last uint64
	for l := range m.Levels {
		ingested += m.Levels[l].TableBytesIngested
	}
	last = m.Levels[len(m.Levels)-1].TableBytesIngested
	if last < ingested*9/10 {
		t.Fatalf("%d of %d ingested bytes reached the last level, want 90%%", last, ingested)
	}
	t.Logf("%d of %d ingested bytes in the last level", last, ingested)

	// Updates and deletes of committed rows, and new rows, in a few vnodes, with the
	// next range.
	e++
	ws[0].write(t, true, [2]uint64{0, 5}, [2]uint64{0, 6}, [2]uint64{1, 100_000})
	ws[0].write(t, false, [2]uint64{0, 7}, [2]uint64{2, 9})
	ws[1].write(t, false, [2]uint64{128, 1})
	ws[1].ascend(t, perEpoch, perVnode)
	seal(e)
	if st := mustCheckpoint(t, s, ep(e)); st.Ingested == 0 {
		t.Fatalf("checkpoint %d of updates and deletes: committed as a batch", e)
	}
	checkIngestStore(t, s, table, ref, fmt.Sprintf("epoch %d (updates and deletes)", e))

	// A row above the committed ones in each vnode holding rows (a cut at every
	// vnode): small segments, which share one sstable; and after them new rows in
	// fresh vnodes, a segment of its own.
	scattered := func(pk uint64) {
		for _, w := range ws {
			var rows [][2]uint64
			w.st.Vnodes().Iterate(func(v vnode.Vnode) bool {
				if w.next[uint16(v)] > 0 {
					rows = append(rows, [2]uint64{uint64(v), pk}) // above every pk
				}
				return true
			})
			w.write(t, true, rows...)
		}
	}
	e++
	for _, w := range ws {
		w.valueSize = 0
	}
	scattered(200_000)
	ws[1].ascend(t, 3000, perVnode) // about 350 KiB
	seal(e)
	if st := mustCheckpoint(t, s, ep(e)); st.Ingested != 3 {
		t.Fatalf("checkpoint %d of scattered rows and a new range: ingested as %d sstables, want 3 (metadata, the scattered rows, the range)", e, st.Ingested)
	}
	checkIngestStore(t, s, table, ref, fmt.Sprintf("epoch %d (scattered)", e))

	// 15 small rows in each (1.7 KiB a vnode, 125 KiB in all): small runs only, so a
	// batch.
	e++
	for i := range uint64(15) {
		scattered(210_000 + i)
	}
	seal(e)
	if st := mustCheckpoint(t, s, ep(e)); st.Ingested != 0 {
		t.Fatalf("checkpoint %d of small scattered rows: ingested as %d sstables, want a batch", e, st.Ingested)
	}
	checkIngestStore(t, s, table, ref, fmt.Sprintf("epoch %d (small scattered)", e))

	// The same with values of 300 KiB: a segment of its own each, more than an
	// ingest takes, so a batch.
	e++
	for _, w := range ws {
		w.valueSize = 300 << 10
	}
	scattered(300_000)
	seal(e)
	if st := mustCheckpoint(t, s, ep(e)); st.Ingested != 0 {
		t.Fatalf("checkpoint %d of large scattered rows: ingested as %d sstables, want a batch", e, st.Ingested)
	}
	checkIngestStore(t, s, table, ref, fmt.Sprintf("epoch %d (large scattered)", e))

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = storage.Open("db", o)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CommittedEpoch(); got != ep(e) {
		t.Fatalf("reopened at epoch %d, want %d", got, ep(e))
	}
	checkIngestStore(t, s, table, ref, "reopened")
	cat, err := s.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	if len(cat) != 12 {
		t.Fatalf("catalog holds %d entries, want 12", len(cat))
	}
}

// TestCheckpointIngestFaults fails one file operation of an ingesting checkpoint at a
// time: creating, writing or syncing one of its sstables, or pebble's link (and then
// copy) of it into its own directory. The checkpoint returns the error and commits nothing; the
// store stays usable at the last committed epoch, and the same checkpoint, retried
// once the fault is gone, commits every row.
func TestCheckpointIngestFaults(t *testing.T) {
	const table, vnodes = 9, 16
	for _, c := range []struct {
		name  string
		match func(errorfs.Op) bool
	}{
		{"create", func(op errorfs.Op) bool { return op.Kind == errorfs.OpCreate && inIngestDir(op.Path) }},
		{"write", func(op errorfs.Op) bool { return op.Kind == errorfs.OpFileWrite && inIngestDir(op.Path) }},
		{"sync", func(op errorfs.Op) bool {
			return (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) && inIngestDir(op.Path)
		}},
		// Pebble copies an sstable it cannot link.
		{"link-and-copy", func(op errorfs.Op) bool {
			return op.Kind == errorfs.OpLink || (op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst") && !inIngestDir(op.Path))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var armed atomic.Bool
			var hits atomic.Int64 // the injector runs on the sstable writers' goroutines
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if armed.Load() && c.match(op) {
					hits.Add(1)
					return syscall.EIO
				}
				return nil
			})
			o := testOptions(faultFS(vfs.NewMem(), inj))
			o.IngestBytes = 1
			s, err := storage.Open("db", o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ref := map[string]string{}
			st, err := storage.NewStateTable(s.AddNode(), table, kvTable(vnodes), vnode.Full(vnodes))
			if err != nil {
				t.Fatal(err)
			}
			w := &ingestWriter{st: st, ref: ref, next: map[uint16]uint64{}}
			w.ascend(t, 500, 100)
			if err := st.Seal(ep(1)); err != nil {
				t.Fatal(err)
			}
			mustCheckpoint(t, s, ep(1))
			committed := maps.Clone(ref)
			w.ascend(t, 500, 100)
			if err := st.Seal(ep(2)); err != nil {
				t.Fatal(err)
			}
			armed.Store(true)
			_, err = s.Checkpoint(ep(2))
			armed.Store(false)
			if hits.Load() == 0 {
				t.Fatal("no fault injected: the test tests nothing")
			}
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("checkpoint with a failed %s: %v, want an error wrapping EIO", c.name, err)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(ep(2))) {
				t.Errorf("error %q does not name the epoch", err)
			}
			if got := s.CommittedEpoch(); got != ep(1) {
				t.Fatalf("committed epoch %d after the failed checkpoint, want %d", got, ep(1))
			}
			checkIngestStore(t, s, table, committed, "after the failed checkpoint")
			if st := mustCheckpoint(t, s, ep(2)); st.Ingested == 0 {
				t.Fatal("the retried checkpoint was not ingested")
			}
			checkIngestStore(t, s, table, ref, "after the retry")
		})
	}
}

// TestCheckpointIngestOverMemtable ingests a checkpoint that updates and deletes rows
// a batch checkpoint left in pebble's memtable: pebble takes it as a "flushable"
// ingest above the memtable, and every read (before its flush, after it, after a
// reopen) sees the ingest's writes over the batch's.
func TestCheckpointIngestOverMemtable(t *testing.T) {
	const table, vnodes = 9, 16
	o := testOptions(vfs.NewMem())
	o.MemTableSize = 64 << 20 // nothing flushed but what the ingest forces
	o.IngestBytes = 64 << 10
	s, err := storage.Open("db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	ref := map[string]string{}
	st, err := storage.NewStateTable(s.AddNode(), table, kvTable(vnodes), vnode.Full(vnodes))
	if err != nil {
		t.Fatal(err)
	}
	w := &ingestWriter{st: st, ref: ref, next: map[uint16]uint64{}}
	w.ascend(t, 160, 10) // 10 rows in each vnode, about 19 KiB: a batch
	if err := st.Seal(ep(1)); err != nil {
		t.Fatal(err)
	}
	if cs := mustCheckpoint(t, s, ep(1)); cs.Ingested != 0 {
		t.Fatalf("checkpoint 1 ingested %d sstables, want a batch", cs.Ingested)
	}
	var upd, del [][2]uint64
	for v := range uint64(vnodes) {
		upd = append(upd, [2]uint64{v, 2}, [2]uint64{v, 7})
		del = append(del, [2]uint64{v, 4})
	}
	w.write(t, true, upd...)
	w.write(t, false, del...)
	w.ascend(t, 2000, 200) // about 230 KiB more
	if err := st.Seal(ep(2)); err != nil {
		t.Fatal(err)
	}
	if cs := mustCheckpoint(t, s, ep(2)); cs.Ingested == 0 {
		t.Fatal("checkpoint 2 was committed as a batch, want an ingest")
	}
	checkIngestStore(t, s, table, ref, "after the ingest")
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if m := s.DB().Metrics(); m.Flush.AsIngestCount == 0 {
		t.Fatal("pebble flushed no ingest: it was not taken above the memtable")
	}
	checkIngestStore(t, s, table, ref, "after the flush")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = storage.Open("db", o); err != nil {
		t.Fatal(err)
	}
	checkIngestStore(t, s, table, ref, "reopened")
}

func inIngestDir(path string) bool { return strings.Contains(path, storage.IngestDirName) }

// BenchmarkCheckpointBackfill commits the epochs of a view being backfilled, as an
// idle build of weir bench backfill writes them: two actors on two nodes, each
// writing the next 100,000 rows (170-byte values) of its half of 256 vnodes in
// ascending order with exact ops (the vnodes sized to hold every row of the run), so that each checkpoint of 200,000 rows is
// ingested (the write and the seal are not timed):
//
//	go test ./storage -run XXX -bench CheckpointBackfill -benchtime 20x
func BenchmarkCheckpointBackfill(b *testing.B) {
	const vnodes, perEpoch = 256, 100_000
	perVnode := uint64(b.N*perEpoch+vnodes/2-1) / (vnodes / 2) // each actor's rows fit its vnodes
	s, err := storage.Open(b.TempDir(), storage.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	kv := kvTable(vnodes)
	type writer struct {
		st   *storage.StateTable
		v    uint16
		next uint64
	}
	var ws []*writer
	for i := range 2 {
		st, err := storage.NewStateTable(s.AddNode(), 9, kv, vnode.FromRange(vnodes, i*vnodes/2, (i+1)*vnodes/2))
		if err != nil {
			b.Fatal(err)
		}
		ws = append(ws, &writer{st: st, v: uint16(i * vnodes / 2)})
	}
	value := bytes.Repeat([]byte{'v'}, 170)
	var keys, vals vec.Bytes
	ops := make([]vec.Op, perEpoch)
	vn := make([]uint16, perEpoch)
	rows := 0
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		for _, w := range ws {
			keys.Reset()
			vals.Reset()
			for r := range perEpoch {
				if w.next == perVnode {
					w.v, w.next = w.v+1, 0
				}
				ops[r], vn[r] = vec.Insert, w.v
				keys.Append(ingestPK(w.next))
				vals.Append(value)
				w.next++
			}
			if err := w.st.WriteEncoded(ops, nil, vn, &keys, &vals); err != nil {
				b.Fatal(err)
			}
			if err := w.st.Seal(ep(i + 1)); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		st, err := s.Checkpoint(ep(i + 1))
		if err != nil {
			b.Fatal(err)
		}
		if st.Ingested == 0 {
			b.Fatal("the checkpoint was not ingested")
		}
		rows += st.Keys
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "keys/s")
}
