package objstore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/internal/s3test"
	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/storage/storetest"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
	"gocloud.dev/blob"
)

const vnodes = 8

// testBucket opens a new bucket on the S3-protocol server TestMain started (make
// test-s3), or a fileblob bucket in a temporary directory.
func testBucket(t *testing.T) *blob.Bucket {
	t.Helper()
	if s3 == nil {
		b, _ := fileBucket(t)
		return b
	}
	b, err := objstore.OpenBucket(context.Background(), s3test.BucketURL(t, s3, "objstore"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// fileBucket opens a fileblob bucket in a new temporary directory, returning it and
// the directory.
func fileBucket(t *testing.T) (*blob.Bucket, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := objstore.OpenBucket(context.Background(), "file://"+filepath.ToSlash(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, dir
}

func openStore(t *testing.T, fs vfs.FS, dir string) *storage.Store {
	t.Helper()
	s, err := storage.Open(dir, storage.Options{FS: fs, CacheSize: 8 << 20, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// kvSchema is a table whose rows the tests write as raw pk and value bytes.
func kvSchema() *schema.Table {
	t := &schema.Table{
		Name:       "kv",
		Columns:    []schema.Column{{Name: "k", Type: schema.Type{Kind: schema.Int64}}},
		PK:         []schema.KeyColumn{{Column: 0}},
		DistKey:    []int{0},
		VnodeCount: vnodes,
	}
	if err := t.Validate(); err != nil {
		panic(err)
	}
	return t
}

type write struct {
	table uint32
	vnode uint16
	pk    []byte
	op    vec.Op
	value []byte
}

// writer generates seeded epochs of writes with exact ops (Insert for a new key,
// UpdateInsert or Delete for a stored one), point deletes of earlier epochs' keys
// among them.
type writer struct {
	rng    *rand.Rand
	tables []uint32
	live   map[string]bool
}

func (w *writer) epoch(e int) []write {
	n := w.rng.IntN(250)
	if w.rng.IntN(6) == 0 {
		n = 0
	}
	seen := map[string]bool{}
	var out []write
	for range n {
		o := write{table: w.tables[w.rng.IntN(len(w.tables))], vnode: uint16(w.rng.IntN(vnodes))}
		o.pk = fmt.Appendf(nil, "k%04d", w.rng.IntN(300))
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
		out = append(out, o)
	}
	return out
}

// node is a store's state tables over the vnodes lo..hi-1, by table id.
type node struct {
	store  *storage.Store
	tables map[uint32]*storage.StateTable
	lo, hi int
}

func newNode(t *testing.T, s *storage.Store, ids []uint32, lo, hi int) *node {
	t.Helper()
	n := &node{store: s, tables: map[uint32]*storage.StateTable{}, lo: lo, hi: hi}
	sn := s.AddNode()
	for _, id := range ids {
		st, err := storage.NewStateTable(sn, id, kvSchema(), vnode.FromRange(vnodes, lo, hi))
		if err != nil {
			t.Fatal(err)
		}
		n.tables[id] = st
	}
	return n
}

func (n *node) owns(v uint16) bool { return int(v) >= n.lo && int(v) < n.hi }

// write writes the ops of n's vnodes and seals them at e.
func (n *node) write(t *testing.T, ops []write, e uint64) {
	t.Helper()
	for id, st := range n.tables {
		var kinds []vec.Op
		var vns []uint16
		var keys, vals vec.Bytes
		for _, o := range ops {
			if o.table == id && n.owns(o.vnode) {
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

// scan is every key and value of s's pebble, metadata included, for which keep holds.
func scan(t *testing.T, s *storage.Store, keep func(key []byte) bool) []string {
	t.Helper()
	var out []string
	for _, e := range storetest.RawScan(t, s) {
		hexKey, _, _ := strings.Cut(e, "=")
		key, err := hex.DecodeString(hexKey)
		if err != nil {
			t.Fatal(err)
		}
		if keep == nil || keep(key) {
			out = append(out, e)
		}
	}
	return out
}

// vnodeOf is the vnode a key concerns: its own, or for a row count (table 0, vnode 0,
// 'r', table, vnode) the counted one; ok is false for other metadata.
func vnodeOf(key []byte) (uint16, bool) {
	table, v, rest, err := storage.SplitKey(key)
	if err != nil {
		return 0, false
	}
	if table != storage.MetaTable {
		return v, true
	}
	if len(rest) == 1+storage.KeyPrefixLen && rest[0] == 'r' {
		return binary.BigEndian.Uint16(rest[5:]), true
	}
	return 0, false
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

func names(objs []objstore.Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Name)
	}
	return out
}

// Seeded epochs, committed locally in store A, and uploaded to a fileblob bucket by
// two nodes X1 and X2 (own stores, vnodes 0-3 and 4-7) as the cluster's versions: B,
// which applies every object of each version as it commits, and C, an empty store
// rebuilt from every version at the end, equal A (every key and value, the row counts
// and the committed epoch); X1 and X2, which apply their own objects, equal A on
// their vnodes.
func TestUploadApplyEquivalence(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			ctx := context.Background()
			bucket := testBucket(t)
			fs := vfs.NewMem()
			ids := []uint32{7, 9}
			a := newNode(t, openStore(t, fs, "a"), ids, 0, vnodes)
			x1 := newNode(t, openStore(t, fs, "x1"), ids, 0, 4)
			x2 := newNode(t, openStore(t, fs, "x2"), ids, 4, vnodes)
			b := openStore(t, fs, "b")
			w := &writer{rng: rand.New(rand.NewPCG(seed, 0x0b5)), tables: ids, live: map[string]bool{}}
			type version struct {
				epoch   uint64
				objects []string
			}
			var log []version
			tableBytes := 1 + int(seed%2)*4000
			for i := 1; i <= 10; i++ {
				e := uint64(1_700_000_000_000+i) << 16
				ops := w.epoch(i)
				for _, n := range []*node{a, x1, x2} {
					n.write(t, ops, e)
				}
				if _, err := a.store.Checkpoint(e); err != nil {
					t.Fatal(err)
				}
				o1, err := objstore.Upload(ctx, bucket, x1.store, e, 1, 1, storage.ExportOptions{TableBytes: tableBytes})
				if err != nil {
					t.Fatal(err)
				}
				o2, err := objstore.Upload(ctx, bucket, x2.store, e, 2, 1, storage.ExportOptions{TableBytes: tableBytes})
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range append(slices.Clone(o1), o2...) {
					attrs, err := bucket.Attributes(ctx, o.Name)
					if err != nil {
						t.Fatal(err)
					}
					if attrs.Size != o.Size || bytes.Compare(o.Smallest, o.Largest) > 0 {
						t.Fatalf("object %s: %d bytes in the bucket, %d reported; bounds %x..%x", o.Name, attrs.Size, o.Size, o.Smallest, o.Largest)
					}
				}
				all := append(names(o1), names(o2)...)
				log = append(log, version{e, all})
				if err := objstore.Apply(ctx, bucket, b, e, all, storage.Changes{}); err != nil {
					t.Fatal(err)
				}
				if err := objstore.Apply(ctx, bucket, x1.store, e, names(o1), storage.Changes{}); err != nil {
					t.Fatal(err)
				}
				if err := objstore.Apply(ctx, bucket, x2.store, e, names(o2), storage.Changes{}); err != nil {
					t.Fatal(err)
				}
				want := scan(t, a.store, nil)
				sameScan(t, fmt.Sprintf("epoch %d: B", e), want, scan(t, b, nil))
				for _, x := range []*node{x1, x2} {
					keep := func(key []byte) bool {
						v, ok := vnodeOf(key)
						return !ok || x.owns(v)
					}
					sameScan(t, fmt.Sprintf("epoch %d: node of vnodes %d-%d", e, x.lo, x.hi-1), scan(t, a.store, keep), scan(t, x.store, keep))
					if got := x.store.CommittedEpoch(); got != e {
						t.Fatalf("epoch %d: node of vnodes %d-%d committed %d", e, x.lo, x.hi-1, got)
					}
				}
			}
			c := openStore(t, fs, "c")
			for _, v := range log {
				if err := objstore.Apply(ctx, bucket, c, v.epoch, v.objects, storage.Changes{}); err != nil {
					t.Fatal(err)
				}
			}
			sameScan(t, "rebuilt", scan(t, a.store, nil), scan(t, c, nil))
			if c.CommittedEpoch() != a.store.CommittedEpoch() {
				t.Fatalf("rebuilt store committed %d, want %d", c.CommittedEpoch(), a.store.CommittedEpoch())
			}
			// Applying the log again from the start is a no-op: every version is at or
			// below the committed epoch.
			for _, v := range log {
				if err := objstore.Apply(ctx, bucket, c, v.epoch, v.objects, storage.Changes{}); err != nil {
					t.Fatal(err)
				}
			}
			sameScan(t, "rebuilt, the log applied twice", scan(t, a.store, nil), scan(t, c, nil))
		})
	}
}

// A mem:// bucket works as a file:// one does.
func TestMemBucket(t *testing.T) {
	ctx := context.Background()
	bucket, err := objstore.OpenBucket(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	fs := vfs.NewMem()
	x := newNode(t, openStore(t, fs, "x"), []uint32{7}, 0, vnodes)
	b := openStore(t, fs, "b")
	x.write(t, []write{{table: 7, vnode: 3, pk: []byte("a"), op: vec.Insert, value: []byte("1")}}, 5<<16)
	objs, err := objstore.Upload(ctx, bucket, x.store, 5<<16, 1, 1, storage.ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := objstore.Apply(ctx, bucket, b, 5<<16, names(objs), storage.Changes{}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.RowCount(7, 3); err != nil || n != 1 {
		t.Fatalf("row count %d, %v; want 1", n, err)
	}
	// UploadKeep's copies commit what the bucket's objects commit.
	k := newNode(t, openStore(t, fs, "k"), []uint32{7}, 0, vnodes)
	c := openStore(t, fs, "c")
	k.write(t, []write{{table: 7, vnode: 4, pk: []byte("b"), op: vec.Insert, value: []byte("2")}}, 6<<16)
	u, err := objstore.UploadKeep(ctx, bucket, k.store, 6<<16, 2, 1, storage.ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kobjs, paths := u.Objects, u.Paths
	if len(paths) != len(kobjs) || len(kobjs) == 0 {
		t.Fatalf("UploadKeep: %d objects, %d copies", len(kobjs), len(paths))
	}
	if want := []storage.RowDelta{{Table: 7, Vnode: 4, Delta: 1}}; !slices.Equal(u.RowDeltas, want) {
		t.Fatalf("UploadKeep counted row changes %v, want %v", u.RowDeltas, want)
	}
	// The exporting store applies with the counted changes, c counts them itself.
	if err := objstore.ApplyLocal(k.store, 6<<16, paths, storage.Changes{Counted: true, RowDeltas: u.RowDeltas}); err != nil {
		t.Fatal(err)
	}
	if err := objstore.Apply(ctx, bucket, c, 6<<16, names(kobjs), storage.Changes{}); err != nil {
		t.Fatal(err)
	}
	all := func([]byte) bool { return true }
	sameScan(t, "kept copies", scan(t, c, all), scan(t, k.store, all))
	if _, err := objstore.OpenBucket(ctx, "nosuch://x"); err == nil || !strings.Contains(err.Error(), "nosuch://x") {
		t.Fatalf("OpenBucket of an unknown scheme = %v, want an error naming it", err)
	}
}

// putSSTable writes an sstable with the given keys (values "v") to the bucket as name.
func putSSTable(t *testing.T, bucket *blob.Bucket, s *storage.Store, name string, keys ...[]byte) {
	t.Helper()
	fs := vfs.NewMem()
	f, err := fs.Create("t.sst", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{TableFormat: s.DB().TableFormat()})
	for _, k := range keys {
		if err := w.Set(k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := fs.Open("t.sst")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	st, err := g.Stat()
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, st.Size())
	if _, err := g.ReadAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := bucket.WriteAll(context.Background(), name, data, nil); err != nil {
		t.Fatal(err)
	}
}

// Apply refuses a malformed name, an object of another epoch, a missing object and
// one with a metadata (table 0) key, naming it; nothing is committed and no download
// is left in the store's directory. Upload never overwrites an object.
func TestApplyRefuses(t *testing.T) {
	ctx := context.Background()
	bucket := testBucket(t)
	fs := vfs.NewMem()
	s := openStore(t, fs, "s")
	const e = 9 << 16
	good := objstore.Name{Epoch: e, Node: 1, Incarnation: 1}.String()
	putSSTable(t, bucket, s, good, storage.AppendKey(nil, 7, 1, []byte("a")))
	meta := objstore.Name{Epoch: e, Node: 2, Incarnation: 1}.String()
	putSSTable(t, bucket, s, meta, storage.AppendKey(nil, storage.MetaTable, 0, []byte("e")))
	other := objstore.Name{Epoch: e + 1, Node: 1, Incarnation: 1}.String()
	missing := objstore.Name{Epoch: e, Node: 3, Incarnation: 1}.String()
	for _, c := range []struct {
		objects []string
		want    string
	}{
		{[]string{good, "e9-n1.sst"}, `object "e9-n1.sst" is not named`},
		{[]string{good, other}, "object " + other + " is of epoch"},
		{[]string{good, missing}, "download object " + missing},
		{[]string{good, meta}, "download-" + meta + " holds key 00000000000065 of table 0"},
	} {
		err := objstore.Apply(ctx, bucket, s, e, c.objects, storage.Changes{})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), fmt.Sprint(e)) {
			t.Fatalf("Apply(%v) = %v, want an error with %q and the epoch", c.objects, err, c.want)
		}
		if s.CommittedEpoch() != 0 {
			t.Fatalf("a refused Apply committed epoch %d", s.CommittedEpoch())
		}
		left, err := fs.List(fs.PathJoin("s", storage.IngestDirName))
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Fatalf("Apply(%v) left %v in the ingest directory", c.objects, left)
		}
	}
	if err := objstore.Apply(ctx, bucket, s, e, []string{good}, storage.Changes{}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.RowCount(7, 1); err != nil || n != 1 {
		t.Fatalf("row count %d, %v; want 1", n, err)
	}

	x := newNode(t, openStore(t, fs, "x"), []uint32{7}, 0, vnodes)
	x.write(t, []write{{table: 7, vnode: 2, pk: []byte("b"), op: vec.Insert, value: []byte("2")}}, e)
	first, err := objstore.Upload(ctx, bucket, x.store, e, 1, 1, storage.ExportOptions{})
	if err == nil || !strings.Contains(err.Error(), good) {
		t.Fatalf("Upload over object %s = %v, %v; want an error naming it", good, first, err)
	}
	data, err := bucket.ReadAll(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	if attrs, err := bucket.Attributes(ctx, good); err != nil || attrs.Size != int64(len(data)) {
		t.Fatalf("object %s after a refused overwrite: %v", good, err)
	}
	objs, err := objstore.Upload(ctx, bucket, x.store, e, 1, 2, storage.ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Name != (objstore.Name{Epoch: e, Node: 1, Incarnation: 2}).String() {
		t.Fatalf("Upload as incarnation 2 = %+v", objs)
	}
}

// Collect deletes exactly the objects that no version references and that were
// modified more than the grace period before now, and leaves other names alone.
func TestCollect(t *testing.T) {
	ctx := context.Background()
	bucket, dir := fileBucket(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const grace = 10 * time.Minute
	objects := []struct {
		name       string
		age        time.Duration
		referenced bool
		deleted    bool
	}{
		{"e1-n1-i1-0.sst", time.Hour, true, false},
		{"e1-n1-i1-1.sst", time.Hour, false, true},
		{"e2-n2-i1-0.sst", grace + time.Second, false, true},
		{"e2-n2-i1-1.sst", grace, false, false}, // exactly the grace period: kept
		{"e3-n1-i2-0.sst", time.Minute, false, false},
		{"e3-n1-i2-1.sst", 0, true, false},
		{"notes.txt", time.Hour, false, false},
		{"e4-n1-i1-0.sst.tmp", time.Hour, false, false},
	}
	refs := map[string]bool{}
	var want []string
	for _, o := range objects {
		if err := bucket.WriteAll(ctx, o.name, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		mt := now.Add(-o.age)
		if err := os.Chtimes(filepath.Join(dir, o.name), mt, mt); err != nil {
			t.Fatal(err)
		}
		if o.referenced {
			refs[o.name] = true
		}
		if o.deleted {
			want = append(want, o.name)
		}
	}
	got, err := objstore.Collect(ctx, bucket, func(name string) bool { return refs[name] }, grace, now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Collect deleted %v, want %v", got, want)
	}
	for _, o := range objects {
		ok, err := bucket.Exists(ctx, o.name)
		if err != nil {
			t.Fatal(err)
		}
		if ok == o.deleted {
			t.Fatalf("object %s: exists %v after Collect, want %v", o.name, ok, !o.deleted)
		}
	}
	if _, err := objstore.Collect(ctx, bucket, func(string) bool { return false }, -time.Second, now); err == nil {
		t.Fatal("Collect with a negative grace period was accepted")
	}
}
