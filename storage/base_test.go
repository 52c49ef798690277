package storage_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/seed04fbb902/weir/storage"
)

// A store rebuilt from a base of another (its committed rows and catalog, exported
// at some applied sequence) and the deltas after it holds, key for key, metadata and
// row counts included, what the store that applied every delta holds.
func TestExportCommittedRebuilds(t *testing.T) {
	for seed := uint64(1); seed <= uint64(scale(3, 12)); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			fs := vfs.NewMem()
			open := func(dir string) *storage.Store { return openStoreIn(t, dir, testOptions(fs)) }
			x := open("x")
			ids := []uint32{7, 9}
			xTabs := stateTables(t, x.AddNode(), ids)
			w := &remoteWriter{rng: rand.New(rand.NewPCG(seed, 0xba5e)), tables: ids, live: map[string]bool{}}
			objs := remoteObjects{}
			baseAt := 3 + int(seed%5)
			tableBytes := 1 + int(seed%3)*3000
			var rebuilt *storage.Store
			for i := 1; i <= 10; i++ {
				e := ep(i)
				writeOps(t, xTabs, w.epoch(i), e)
				if i == 2 {
					x.SetCatalog("view/q", []byte("plan 1"))
				}
				names := export(t, x, e, 4000, objs)
				ch := x.Staged()
				ch.Sequence = uint64(i)
				applyChanges(t, x, e, objs, names, ch)
				if rebuilt != nil {
					applyChanges(t, rebuilt, e, objs, names, ch)
					sameScan(t, fmt.Sprintf("epoch %d after the base", i), rawScan(t, x), rawScan(t, rebuilt))
				}
				if i != baseAt {
					continue
				}
				info, tabs, err := x.ExportCommitted(storage.ExportOptions{TableBytes: tableBytes}, func(k int) (string, io.WriteCloser, error) {
					name := fmt.Sprintf("b%d-%d.sst", i, k)
					return name, &objectWriter{objs: objs, name: name}, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if info.Epoch != e || info.Sequence != uint64(i) || string(info.Catalog["view/q"]) != "plan 1" {
					t.Fatalf("base at epoch %d, sequence %d, catalog %q; want %d, %d and view/q", info.Epoch, info.Sequence, info.Catalog, e, i)
				}
				var names2 []string
				for k, tab := range tabs {
					if tab.Keys == 0 || bytes.Compare(tab.Smallest, tab.Largest) > 0 || len(objs[tab.Name]) != int(tab.Size) {
						t.Fatalf("base sstable %s: %d keys, bounds %x..%x, %d bytes of %d", tab.Name, tab.Keys, tab.Smallest, tab.Largest, len(objs[tab.Name]), tab.Size)
					}
					if k > 0 && bytes.Compare(tabs[k-1].Largest, tab.Smallest) >= 0 {
						t.Fatalf("base sstables %s and %s overlap", tabs[k-1].Name, tab.Name)
					}
					names2 = append(names2, tab.Name)
				}
				if tableBytes == 1 && len(tabs) < 2 {
					t.Fatalf("a base of 1-byte sstables in %d sstables", len(tabs))
				}
				rebuilt = open("rebuilt")
				applyChanges(t, rebuilt, info.Epoch, objs, names2, storage.Changes{Catalog: info.Catalog, Sequence: info.Sequence})
				sameScan(t, "the base", rawScan(t, x), rawScan(t, rebuilt))
			}
			for _, id := range ids {
				want, _ := x.TableRowCount(id)
				got, err := rebuilt.TableRowCount(id)
				if err != nil || got != want {
					t.Fatalf("table %d: %d rows (%v) rebuilt from the base, %d applied", id, got, err, want)
				}
			}
		})
	}
}

// ExportCommitted refuses a store that applied no sequence, and aborts the sstable
// whose write fails, keeping the ones completed before it.
func TestExportCommittedRefuses(t *testing.T) {
	fs := vfs.NewMem()
	s, err := storage.Open("s", testOptions(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	never := func(int) (string, io.WriteCloser, error) { return "", nil, errors.New("not reached") }
	if _, _, err := s.ExportCommitted(storage.ExportOptions{}, never); err == nil || !strings.Contains(err.Error(), "applied no version-log sequence") {
		t.Fatalf("export of a store without a sequence: %v", err)
	}
	tabs := stateTables(t, s.AddNode(), []uint32{7})
	w := &remoteWriter{rng: rand.New(rand.NewPCG(1, 2)), tables: []uint32{7}, live: map[string]bool{}}
	objs := remoteObjects{}
	writeOps(t, tabs, w.epoch(1), ep(1))
	names := export(t, s, ep(1), 0, objs)
	applyChanges(t, s, ep(1), objs, names, storage.Changes{Sequence: 1})
	var fw *failingWriter
	_, done, err := s.ExportCommitted(storage.ExportOptions{TableBytes: 1}, func(k int) (string, io.WriteCloser, error) {
		if k == 1 {
			fw = &failingWriter{}
			return "bad", fw, nil
		}
		return fmt.Sprint(k), &objectWriter{objs: objs, name: fmt.Sprint(k)}, nil
	})
	if err == nil || fw == nil || !fw.aborted || len(done) != 1 || objs[done[0].Name] == nil {
		t.Fatalf("export through a failing writer: %v (writer %+v, %d sstables done)", err, fw, len(done))
	}
}

// ExportView exports the committed state of the view's snapshot while the store
// commits on: a base taken at one epoch, exported after the next commit, holds the
// first epoch's rows (and equals ExportCommitted's at that epoch). It refuses a
// released view, another store's and a node's.
func TestExportView(t *testing.T) {
	fs := vfs.NewMem()
	open := func(dir string) *storage.Store { return openStoreIn(t, dir, testOptions(fs)) }
	s, other := open("s"), open("other")
	tabs := stateTables(t, s.AddNode(), []uint32{7})
	w := &remoteWriter{rng: rand.New(rand.NewPCG(3, 4)), tables: []uint32{7}, live: map[string]bool{}}
	objs := remoteObjects{}
	commit := func(i int) {
		writeOps(t, tabs, w.epoch(i), ep(i))
		names := export(t, s, ep(i), 0, objs)
		applyChanges(t, s, ep(i), objs, names, storage.Changes{Sequence: uint64(i)})
	}
	base := func(prefix string, export func(create func(int) (string, io.WriteCloser, error)) (storage.BaseInfo, []storage.SSTable, error)) (storage.BaseInfo, []string) {
		t.Helper()
		info, tabs, err := export(func(k int) (string, io.WriteCloser, error) {
			name := fmt.Sprintf("%s-%d.sst", prefix, k)
			return name, &objectWriter{objs: objs, name: name}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tab := range tabs {
			names = append(names, tab.Name)
		}
		return info, names
	}
	commit(1)
	want, wantNames := base("committed", func(c func(int) (string, io.WriteCloser, error)) (storage.BaseInfo, []storage.SSTable, error) {
		return s.ExportCommitted(storage.ExportOptions{}, c)
	})
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	commit(2) // after the view
	got, gotNames := base("view", func(c func(int) (string, io.WriteCloser, error)) (storage.BaseInfo, []storage.SSTable, error) {
		return s.ExportView(v, storage.ExportOptions{}, c)
	})
	if got.Epoch != ep(1) || got.Sequence != 1 || got.Epoch != want.Epoch || got.Sequence != want.Sequence {
		t.Fatalf("the view's base is at epoch %d sequence %d, want %d and 1", got.Epoch, got.Sequence, ep(1))
	}
	a, b := open("a"), open("b")
	applyChanges(t, a, want.Epoch, objs, wantNames, storage.Changes{Catalog: want.Catalog, Sequence: want.Sequence})
	applyChanges(t, b, got.Epoch, objs, gotNames, storage.Changes{Catalog: got.Catalog, Sequence: got.Sequence})
	sameScan(t, "the view's base", rawScan(t, a), rawScan(t, b))

	never := func(int) (string, io.WriteCloser, error) { return "", nil, errors.New("not reached") }
	ov, err := other.View()
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Release()
	nv, err := s.AddNode().View()
	if err != nil {
		t.Fatal(err)
	}
	defer nv.Release()
	for _, tc := range []struct {
		name string
		v    *storage.View
		want string
	}{
		{"another store's view", ov, "another store"},
		{"a node's view", nv, "a node's"},
	} {
		if _, _, err := s.ExportView(tc.v, storage.ExportOptions{}, never); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	v.Release()
	if _, _, err := s.ExportView(v, storage.ExportOptions{}, never); err == nil || !strings.Contains(err.Error(), "released") {
		t.Errorf("a released view: %v", err)
	}
}
