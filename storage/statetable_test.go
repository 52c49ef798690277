package storage_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
	"github.com/seed04fbb902/weir/vnode"
)

// stWriter is one actor's state table and the writes it has not sealed.
type stWriter struct {
	st       *storage.StateTable
	ts       *tableSpec
	node     int
	unsealed rows
}

// sealedRun is the model of a run sealed on a node.
type sealedRun struct {
	epoch uint64
	table uint32
	rows  rows
}

// stModel is the reference of what every reader must see.
type stModel struct {
	committed map[uint32]rows
	epoch     uint64
	runs      [][]sealedRun // per node, in seal order
}

// layers are the layers a reader sees: committed, then (node >= 0) the node's sealed
// runs of the table, then the reader's own unsealed writes (may be nil).
func (m *stModel) layers(table uint32, node int, own rows) []rows {
	ls := []rows{m.committed[table]}
	if node >= 0 {
		for _, r := range m.runs[node] {
			if r.table == table {
				ls = append(ls, r.rows)
			}
		}
	}
	if own != nil {
		ls = append(ls, own)
	}
	return ls
}

func (m *stModel) checkpoint(epoch uint64) {
	for n, rs := range m.runs {
		var keep []sealedRun
		for _, r := range rs {
			if r.epoch <= epoch {
				r.rows.applyTo(m.committed[r.table])
			} else {
				keep = append(keep, r)
			}
		}
		m.runs[n] = keep
	}
	m.epoch = epoch
}

// randomBitmaps splits count vnodes among n owners, leaving some vnodes unowned: by
// contiguous ranges or vnode by vnode.
func randomBitmaps(rng *rand.Rand, count, n int) []*vnode.Bitmap {
	out := make([]*vnode.Bitmap, n)
	if rng.IntN(2) == 0 {
		cuts := []int{0, count}
		for i := 0; i < n; i++ {
			cuts = append(cuts, rng.IntN(count+1))
		}
		sortInts(cuts)
		// Pieces 0..n-1 go to the owners; the last piece stays unowned.
		for i := 0; i < n; i++ {
			out[i] = vnode.FromRange(count, cuts[i], cuts[i+1])
		}
		return out
	}
	lists := make([][]vnode.Vnode, n)
	for v := 0; v < count; v++ {
		if o := rng.IntN(n + 1); o < n {
			lists[o] = append(lists[o], vnode.Vnode(v))
		}
	}
	for i := range out {
		out[i] = vnode.NewBitmap(count, lists[i]...)
	}
	return out
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// TestStateTableRandomized drives state tables of two tables (random schemas or the
// Nexmark bid table) on two nodes through random epochs, writes (fresh rows and
// replays of old rows with new ops: deletes, updates, pk-changing updates,
// re-inserts), seals (sometimes skipped) and checkpoints (not every epoch, at random
// epochs), and checks every kind of reader against the reference: the writers (their
// own unsealed writes), a reader on each node (the node's sealed epochs only, never
// another node's), and the store's committed view; Get and Iter with random bounds;
// values decoded with random projections; exact row counts; and finally a reopen.
func TestStateTableRandomized(t *testing.T) {
	base := vectest.Seed(t)
	stats := map[string]int{}
	for i := 0; i < scale(10, 100); i++ {
		seed := base + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed=%d", seed)
			runStateTableRandomized(t, seed, scale(25, 80), stats)
		})
	}
	t.Logf("%v", stats)
	for _, k := range []string{"ingested checkpoints", "rows compared", "bounded iterations", "batched gets of live keys", "batched gets of missing keys", "reused iterations", "gets of live keys", "gets of deleted keys", "gets of absent keys", "checkpoints", "refused chunks"} {
		if stats[k] == 0 && !t.Failed() {
			t.Errorf("no %s across the seeds", k)
		}
	}
}

func runStateTableRandomized(t *testing.T, seed uint64, epochs int, stats map[string]int) {
	mem := memory.NewCheckedAllocator(&vec.PoolAllocator{Poison: true})
	defer mem.AssertSize(t, 0)
	rng := vectest.NewRand(seed)
	rc := &recorder{mem: mem}
	defer rc.release()
	fs := vfs.NewMem()
	s, err := storage.Open("db", seedOptions(fs, seed))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	nodes := []*storage.Node{s.AddNode(), s.AddNode()}
	specs := []*tableSpec{newTableSpec(rng, 11), newTableSpec(rng, 12)}
	m := &stModel{committed: map[uint32]rows{}, runs: make([][]sealedRun, len(nodes))}
	var writers []*stWriter
	readers := map[[2]int]*storage.StateTable{} // (node, spec) -> reader over every vnode
	for si, ts := range specs {
		m.committed[ts.id] = rows{}
		nw := 1 + rng.IntN(3)
		if si == 0 {
			nw = 2 + rng.IntN(2) // the first two share node 0 and the table id
		}
		for wi, b := range randomBitmaps(rng, ts.t.VnodeCount, nw) {
			node := rng.IntN(len(nodes))
			if si == 0 && wi < 2 {
				node = 0
			}
			st, err := storage.NewStateTable(nodes[node], ts.id, ts.t, b)
			if err != nil {
				t.Fatal(err)
			}
			st.SoleWriter() // its GetMany knows the keys above its vnodes' largest absent
			writers = append(writers, &stWriter{st: st, ts: ts, node: node, unsealed: rows{}})
		}
		for n := range nodes {
			r, err := storage.NewStateTable(nodes[n], ts.id, ts.t, vnode.Full(ts.t.VnodeCount))
			if err != nil {
				t.Fatal(err)
			}
			readers[[2]int{n, si}] = r
		}
		t.Logf("table %d: %d columns, %d vnodes, generated kernels %v, %d writers", ts.id, len(ts.t.Columns), ts.t.VnodeCount, ts.k.Generated(), nw)
	}

	phase := ""
	// check runs a few random reads by random readers.
	check := func(nchecks int) {
		for c := 0; c < nchecks; c++ {
			si := rng.IntN(len(specs))
			ts := specs[si]
			var st *storage.StateTable
			var layers []rows
			var view *storage.View
			var err error
			var who string
			switch k := rng.IntN(3); k {
			case 0: // a writer of the table
				var ws []*stWriter
				for _, w := range writers {
					if w.ts == ts {
						ws = append(ws, w)
					}
				}
				w := ws[rng.IntN(len(ws))]
				st, layers = w.st, m.layers(ts.id, w.node, w.unsealed)
				view, err = nodes[w.node].View()
				who = fmt.Sprintf("writer %v on node %d", w.st.Vnodes(), w.node)
			case 1: // a node's reader
				n := rng.IntN(len(nodes))
				st, layers = readers[[2]int{n, si}], m.layers(ts.id, n, nil)
				view, err = nodes[n].View()
				who = fmt.Sprintf("reader on node %d", n)
			default: // the committed view
				st, layers = readers[[2]int{rng.IntN(len(nodes)), si}], m.layers(ts.id, -1, nil)
				view, err = s.View()
				who = "store view"
			}
			if err != nil {
				t.Fatal(err)
			}
			if view.Epoch != m.epoch {
				t.Fatalf("%s: view epoch %d, want %d", phase, view.Epoch, m.epoch)
			}
			v, ok := pickVnode(rng, layers, st.Vnodes())
			if !ok {
				view.Release()
				continue
			}
			live := visible(layers, v)
			if rng.IntN(2) == 0 {
				b := randomBounds(rng, ts, live, v)
				var want []liveKV
				for _, kv := range live {
					if inBounds(kv.pk, b) {
						want = append(want, kv)
					}
				}
				it, err := st.Iter(view, v, b)
				if err != nil {
					t.Fatal(err)
				}
				stats["rows compared"] += len(want)
				if b.After != nil || b.Before != nil {
					stats["bounded iterations"]++
				}
				checkIter(t, rng, mem, ts, it, want, func() string {
					return fmt.Sprintf("%s: %s: table %d vnode %d iter %s", phase, who, ts.id, v, describeBounds(b))
				})
				// ReuseIter over a few more ranges, one pebble iterator for all.
				var reused storage.Iter
				for r := 0; r < 3; r++ {
					v, ok := pickVnode(rng, layers, st.Vnodes())
					if !ok {
						break
					}
					live := visible(layers, v)
					b := randomBounds(rng, ts, live, v)
					var want []liveKV
					for _, kv := range live {
						if inBounds(kv.pk, b) {
							want = append(want, kv)
						}
					}
					if err := st.ReuseIter(view, v, b, &reused); err != nil {
						t.Fatal(err)
					}
					stats["reused iterations"]++
					checkIterRows(t, rng, mem, ts, &reused, want, func() string {
						return fmt.Sprintf("%s: %s: table %d vnode %d reused iter %d %s", phase, who, ts.id, v, r, describeBounds(b))
					})
				}
				if err := reused.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				for g := 0; g < 4; g++ {
					pk := probeKey(rng, ts, live, v)
					row, wantOK := lookup(layers, v, string(pk))
					switch {
					case wantOK:
						stats["gets of live keys"]++
					case deleted(layers, v, string(pk)):
						stats["gets of deleted keys"]++
					default:
						stats["gets of absent keys"]++
					}
					val, gotOK, err := st.Get(view, v, pk)
					what := func() string {
						return fmt.Sprintf("%s: %s: table %d vnode %d get %x", phase, who, ts.id, v, pk)
					}
					if err != nil {
						t.Fatalf("%s: %v", what(), err)
					}
					if gotOK != wantOK {
						t.Fatalf("%s: found %v, want %v", what(), gotOK, wantOK)
					}
					if gotOK {
						var vals = bytesOf(val)
						checkValues(t, rng, mem, ts, vals, []*rowRef{row}, what)
					}
				}
			}
			checkGetMany(t, rng, st, view, layers, ts, stats, func() string {
				return fmt.Sprintf("%s: %s: table %d get many", phase, who, ts.id)
			})
			// A vnode the reader does not own is an error naming it.
			if st.Vnodes().Len() < ts.t.VnodeCount {
				for u := 0; u < ts.t.VnodeCount; u++ {
					if !st.Vnodes().Contains(uint16(u)) {
						if _, _, err := st.Get(view, uint16(u), nil); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("vnode %d", u)) {
							t.Fatalf("%s: get of unowned vnode %d: %v", phase, u, err)
						}
						if _, err := st.Iter(view, uint16(u), storage.IterBounds{}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("vnode %d", u)) {
							t.Fatalf("%s: iter of unowned vnode %d: %v", phase, u, err)
						}
						break
					}
				}
			}
			view.Release()
		}
	}
	checkCounts := func() {
		for _, ts := range specs {
			var total int64
			for v, mm := range m.committed[ts.id] {
				got, err := s.RowCount(ts.id, v)
				if err != nil {
					t.Fatal(err)
				}
				if got != int64(len(mm)) {
					t.Fatalf("%s: row count of table %d vnode %d = %d, want %d", phase, ts.id, v, got, len(mm))
				}
				total += got
			}
			got, err := s.TableRowCount(ts.id)
			if err != nil || got != total {
				t.Fatalf("%s: table %d row count %d (%v), want %d", phase, ts.id, got, err, total)
			}
		}
		for n, node := range nodes {
			if b := node.UncommittedBytes(); (b == 0) != (len(m.runs[n]) == 0) {
				t.Fatalf("%s: node %d holds %d uncommitted bytes with %d sealed runs in the model", phase, n, b, len(m.runs[n]))
			}
		}
	}

	lastCkpt := 0
	for i := 1; i <= epochs; i++ {
		phase = fmt.Sprintf("epoch %d writes", i)
		for _, w := range writers {
			if rng.IntN(8) == 0 {
				// A chunk that may stray outside the writer's vnodes: refused whole.
				c := vectest.RandomChunk(rng, mem, w.ts.t, 1+rng.IntN(8), 0.2)
				before := w.st.UnsealedBytes()
				err := w.st.Write(c)
				if v, stray := anyUnowned(w.ts, c, w.st.Vnodes()); stray {
					if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("vnode %d,", v)) || !strings.Contains(err.Error(), w.ts.t.Name) {
						t.Fatalf("%s: chunk with a row in unowned vnode %d: %v", phase, v, err)
					}
					if w.st.UnsealedBytes() != before {
						t.Fatalf("%s: a refused chunk changed the unsealed bytes", phase)
					}
					stats["refused chunks"]++
				} else if err != nil {
					t.Fatalf("%s: %v", phase, err)
				} else {
					rc.keep(c.Record())
					applyChunk(w.ts, w.unsealed, c, nil)
				}
				c.Release()
			}
			for j := rng.IntN(3); j > 0; j-- {
				c := randomChunk(rng, rc, w.ts, w.st.Vnodes())
				if err := w.st.Write(c); err != nil {
					c.Release()
					t.Fatalf("%s: %v", phase, err)
				}
				applyChunk(w.ts, w.unsealed, c, nil)
				c.Release()
			}
		}
		check(3)
		phase = fmt.Sprintf("epoch %d sealed", i)
		for _, w := range writers {
			if rng.IntN(10) == 0 {
				continue // sealed with a later epoch
			}
			w.st.Seal(ep(i))
			if !w.unsealed.empty() {
				m.runs[w.node] = append(m.runs[w.node], sealedRun{epoch: ep(i), table: w.ts.id, rows: w.unsealed})
			}
			w.unsealed = rows{}
		}
		check(3)
		if rng.IntN(2) == 0 {
			j := lastCkpt + 1 + rng.IntN(i-lastCkpt)
			phase = fmt.Sprintf("epoch %d after checkpoint %d", i, j)
			if mustCheckpoint(t, s, ep(j)).Ingested > 0 {
				stats["ingested checkpoints"]++
			}
			m.checkpoint(ep(j))
			lastCkpt = j
			stats["checkpoints"]++
			check(3)
			checkCounts()
		}
	}

	// Seal everything, commit, and compare every vnode with data; then reopen.
	for _, w := range writers {
		w.st.Seal(ep(epochs + 1))
		if !w.unsealed.empty() {
			m.runs[w.node] = append(m.runs[w.node], sealedRun{epoch: ep(epochs + 1), table: w.ts.id, rows: w.unsealed})
		}
		w.unsealed = rows{}
	}
	mustCheckpoint(t, s, ep(epochs+1))
	m.checkpoint(ep(epochs + 1))
	phase = "final"
	checkCounts()
	full := func(s *storage.Store) {
		view, err := s.View()
		if err != nil {
			t.Fatal(err)
		}
		defer view.Release()
		n := s.AddNode()
		for _, ts := range specs {
			r, err := storage.NewStateTable(n, ts.id, ts.t, vnode.Full(ts.t.VnodeCount))
			if err != nil {
				t.Fatal(err)
			}
			layers := []rows{m.committed[ts.id]}
			for _, v := range vnodesOf(layers, r.Vnodes()) {
				it, err := r.Iter(view, v, storage.IterBounds{})
				if err != nil {
					t.Fatal(err)
				}
				checkIter(t, rng, mem, ts, it, visible(layers, v), func() string {
					return fmt.Sprintf("%s: table %d vnode %d", phase, ts.id, v)
				})
			}
		}
	}
	full(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = storage.Open("db", seedOptions(fs, seed))
	if err != nil {
		t.Fatal(err)
	}
	phase = "reopened"
	if s.CommittedEpoch() != ep(epochs+1) {
		t.Fatalf("reopened at %d", s.CommittedEpoch())
	}
	full(s)
	checkCounts()
}

// checkGetMany reads a random batch of pks (live, deleted and absent ones, in random
// vnodes and order, some twice, some rows not selected) with one GetMany and checks
// every row against Get, the point read the randomized test checks against the model.
func checkGetMany(t *testing.T, rng *rand.Rand, st *storage.StateTable, view *storage.View, layers []rows, ts *tableSpec, stats map[string]int, what func() string) {
	t.Helper()
	var vns []uint16
	var pks vec.Bytes
	pks.Reset()
	for n := 1 + rng.IntN(40); len(vns) < n; {
		if len(vns) > 0 && rng.IntN(5) == 0 {
			i := rng.IntN(len(vns))
			vns = append(vns, vns[i])
			pks.Append(pks.At(i))
			continue
		}
		v, ok := pickVnode(rng, layers, st.Vnodes())
		if !ok {
			return
		}
		vns = append(vns, v)
		pks.Append(probeKey(rng, ts, visible(layers, v), v))
	}
	var sel []int32
	for i := range vns {
		if rng.IntN(5) > 0 {
			sel = append(sel, int32(i))
		}
	}
	rng.Shuffle(len(sel), func(i, j int) { sel[i], sel[j] = sel[j], sel[i] })
	var got storage.Lookup
	if err := st.GetMany(view, vns, &pks, sel, &got); err != nil {
		t.Fatalf("%s: %v", what(), err)
	}
	asked := map[int32]bool{}
	for _, i := range sel {
		asked[i] = true
	}
	for i := range vns {
		val, ok := got.Value(i)
		wantVal, wantOK, err := st.Get(view, vns[i], pks.At(i))
		if err != nil {
			t.Fatalf("%s: row %d: get: %v", what(), i, err)
		}
		if !asked[int32(i)] {
			wantVal, wantOK = nil, false
		}
		if ok != wantOK || !bytes.Equal(val, wantVal) {
			t.Fatalf("%s: row %d (vnode %d pk %x, asked %v): GetMany %v %x, Get %v %x", what(), i, vns[i], pks.At(i), asked[int32(i)], ok, val, wantOK, wantVal)
		}
		if wantOK {
			stats["batched gets of live keys"]++
		} else if asked[int32(i)] {
			stats["batched gets of missing keys"]++
		}
	}
	stats["batched gets settled absent without a read"] += got.Absent()
}
