package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkEpochCommit compares two ways of making a view's backfilled epochs durable
// in pebble, as a guide for the checkpoint's write path (it does not use Store):
//
//   - "batch": what Checkpoint does, a synced batch per epoch (pebble then copies it
//     into its WAL and a memtable, or takes an epoch over half a memtable as a
//     "flushable" batch, and flushes it to L0 later);
//   - "ingest": the epoch written as an sstable and ingested (atomic, no WAL, no
//     memtable).
//
// An iteration opens an empty store (the Store's pebble options), commits 5 epochs of
// 200,000 rows (keys of two actors' vnode ranges advancing as a backfill's do, 14-byte
// keys and 170-byte values: about 37 MB an epoch), then flushes and waits until no
// compaction runs, so that both sides pay the work they defer. Only that is timed:
//
//	go test ./storage -run XXX -bench EpochCommit -benchtime 3x
func BenchmarkEpochCommit(b *testing.B) {
	const epochs, rows = 5, 200_000
	data := epochData(epochs, rows)
	for _, how := range []string{"batch", "ingest"} {
		b.Run(how, func(b *testing.B) {
			var bytes int64
			for i := range b.N {
				b.StopTimer()
				dir, tmp := filepath.Join(b.TempDir(), fmt.Sprint(i)), b.TempDir()
				po, err := Options{}.pebbleOptions()
				if err != nil {
					b.Fatal(err)
				}
				po.EnsureDefaults()
				db, err := pebble.Open(dir, po)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for e, kvs := range data {
					var err error
					if how == "batch" {
						err = commitBatch(db, kvs)
					} else {
						err = commitIngest(db, po, filepath.Join(tmp, fmt.Sprintf("epoch-%d.sst", e)), kvs)
					}
					if err != nil {
						b.Fatal(err)
					}
					for _, kv := range kvs {
						bytes += int64(len(kv[0]) + len(kv[1]))
					}
				}
				if err := db.Flush(); err != nil {
					b.Fatal(err)
				}
				for db.Metrics().Compact.NumInProgress > 0 {
					time.Sleep(time.Millisecond)
				}
				b.StopTimer()
				if err := verifyEpochs(db, data); err != nil {
					b.Fatalf("%s: %v", how, err)
				}
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(bytes)/b.Elapsed().Seconds()/1e6, "MB/s")
		})
	}
}

// epochData is epochs sorted epochs of rows key-value pairs each: two actors, each
// reading its 128 vnodes in order, about 7,800 rows a vnode; an epoch is the next
// rows/2 of each actor's.
func epochData(epochs, rows int) [][][2][]byte {
	const perVnode = 7_812
	value := make([]byte, 170)
	for i := range value {
		value[i] = byte(i)
	}
	out := make([][][2][]byte, epochs)
	next := [2]int{} // each actor's next row
	for e := range out {
		var kvs [][2][]byte
		for a := range 2 {
			for range rows / 2 {
				r := next[a]
				next[a]++
				vn := uint16(a*128 + r/perVnode)
				k := AppendKey(nil, 7, vn, binary.BigEndian.AppendUint64(nil, uint64(r%perVnode)))
				kvs = append(kvs, [2][]byte{k, value})
			}
		}
		out[e] = kvs // actor 0's keys, then actor 1's: ascending
	}
	return out
}

func commitBatch(db *pebble.DB, kvs [][2][]byte) error {
	size := 0
	for _, kv := range kvs {
		size += len(kv[0]) + len(kv[1])
	}
	batch := db.NewBatchWithSize(size + size/4)
	defer batch.Close()
	for _, kv := range kvs {
		if err := batch.Set(kv[0], kv[1], nil); err != nil {
			return err
		}
	}
	return batch.Commit(pebble.Sync)
}

func commitIngest(db *pebble.DB, po *pebble.Options, path string, kvs [][2][]byte) error {
	f, err := po.FS.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), po.MakeWriterOptions(0, db.TableFormat()))
	for _, kv := range kvs {
		if err := w.Set(kv[0], kv[1]); err != nil {
			w.Close()
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := db.Ingest(context.Background(), []string{path}); err != nil {
		return err
	}
	// Pebble links the file into its directory; the link left here, if any, goes.
	if err := po.FS.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// verifyEpochs checks that db holds every row of data.
func verifyEpochs(db *pebble.DB, data [][][2][]byte) error {
	want := 0
	for _, kvs := range data {
		want += len(kvs)
	}
	it, err := db.NewIter(nil)
	if err != nil {
		return err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("%d rows, want %d", n, want)
	}
	return nil
}
