package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vnode"
)

// BidTableID is the table id the benchmarks store the Nexmark bid table under.
const BidTableID uint32 = 1

// LoadChunkRows is the rows the loader writes, seals and checkpoints at a time.
const LoadChunkRows = 1 << 16

// BidChunk returns n bid rows shaped like Nexmark's, rows start to start+n-1 of a
// stream: hot auctions and bidders, a few channels, a URL and an extra string, about
// 100 bytes of row value. Row i's date_time is a base plus i*100µs, so pks are unique
// across the whole stream. The same (start, n, seed) give the same rows.
func BidChunk(mem memory.Allocator, start, n int, seed uint64) *vec.Chunk {
	rng := rand.New(rand.NewPCG(seed, uint64(start)))
	b := tables.NewBidBuilder(mem)
	defer b.Release()
	b.Reserve(n)
	const letters = "abcdefghijklmnopqrstuvwxyz"
	var scratch [64]byte
	str := func(k int) string {
		s := scratch[:k]
		for i := range s {
			s[i] = letters[rng.IntN(len(letters))]
		}
		return string(s)
	}
	channels := []string{"Google", "Facebook", "Baidu", "Apple"}
	for i := 0; i < n; i++ {
		r := tables.Bid{
			Auction:  1000 + int64(rng.IntN(100)),
			Bidder:   1000 + int64(rng.IntN(1000)),
			Price:    int64(100 + rng.IntN(1_000_000)),
			Channel:  channels[rng.IntN(len(channels))],
			URL:      "https://www.nexmark.com/" + str(5) + "/" + str(5) + "/item.htm?query=1",
			DateTime: arrow.Timestamp(1_700_000_000_000_000 + int64(start+i)*100),
			Extra:    str(20 + rng.IntN(20)),
		}
		b.Append(vec.Insert, &r)
	}
	return b.Build()
}

// LoadBids writes rows bid rows (BidChunk with seed) into store as table BidTableID the
// way the engine does: through a state table on a node owning every vnode, sealing and
// checkpointing every LoadChunkRows rows (epochs 1, 2, ... above the store's committed
// epoch). It then flushes pebble and compacts the table's key range, so that reads
// come from sstables.
func LoadBids(store *storage.Store, rows int, seed uint64) error {
	t := tables.BidTable()
	node := store.AddNode()
	st, err := storage.NewStateTable(node, BidTableID, t, vnode.Full(t.VnodeCount))
	if err != nil {
		return err
	}
	mem := memory.NewGoAllocator()
	epoch := store.CommittedEpoch()
	for start := 0; start < rows; start += LoadChunkRows {
		n := min(LoadChunkRows, rows-start)
		c := BidChunk(mem, start, n, seed)
		err := st.Write(c)
		c.Release()
		if err != nil {
			return fmt.Errorf("bench: load bids: %w", err)
		}
		epoch++
		st.Seal(epoch)
		if _, err := store.Checkpoint(epoch); err != nil {
			return fmt.Errorf("bench: load bids: %w", err)
		}
	}
	return compactTable(store, BidTableID)
}

// BulkLoadBids writes the same rows as LoadBids, under the same keys with the same
// values (each chunk's vnodes, keys and values come from the bid table's kernels, as
// StateTable.Write computes them), straight into pebble in unsynced batches, then
// flushes and compacts like LoadBids. It writes neither row counts nor a committed
// epoch: it is for benchmarks of reads, where the engine's loader (whose checkpoints
// probe pebble once per key) would take minutes for millions of rows. A test checks
// that both loaders leave identical table contents.
func BulkLoadBids(store *storage.Store, rows int, seed uint64) error {
	return BulkLoadBidsTable(store, BidTableID, rows, seed)
}

// BulkLoadBidsTable is BulkLoadBids under table id table: to load the bid table of an
// engine (closed meanwhile) under the id its catalog gave it. It writes neither row
// counts nor anything of the catalog.
func BulkLoadBidsTable(store *storage.Store, table uint32, rows int, seed uint64) error {
	k := tables.BidKernels()
	mem := memory.NewGoAllocator()
	db := store.DB()
	var keys, vals vec.Bytes
	var vn []uint16
	var key []byte
	var order []int
	for start := 0; start < rows; start += LoadChunkRows {
		n := min(LoadChunkRows, rows-start)
		c := BidChunk(mem, start, n, seed)
		if cap(vn) < n {
			vn = make([]uint16, n)
		}
		vn = vn[:n]
		k.Vnodes(c, vn)
		keys.Reset()
		vals.Reset()
		k.EncodeKeys(c, &keys)
		k.EncodeValues(c, &vals)
		c.Release()
		// In key order: pebble's memtable inserts a sorted batch much faster.
		if cap(order) < n {
			order = make([]int, n)
		}
		order = order[:n]
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(i, j int) int {
			if vn[i] != vn[j] {
				return cmp.Compare(vn[i], vn[j])
			}
			return bytes.Compare(keys.At(i), keys.At(j))
		})
		b := db.NewBatch()
		for _, i := range order {
			key = storage.AppendKey(key[:0], table, vn[i], keys.At(i))
			if err := b.Set(key, vals.At(i), nil); err != nil {
				b.Close()
				return fmt.Errorf("bench: bulk load bids: %w", err)
			}
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			b.Close()
			return fmt.Errorf("bench: bulk load bids: %w", err)
		}
		b.Close()
	}
	return compactTable(store, table)
}

// compactTable flushes pebble and compacts table's key range.
func compactTable(store *storage.Store, table uint32) error {
	db := store.DB()
	if err := db.Flush(); err != nil {
		return fmt.Errorf("bench: load bids: flush: %w", err)
	}
	lo := storage.VnodePrefix(table, 0)
	hi := storage.VnodePrefix(table+1, 0)
	if err := db.Compact(context.Background(), lo, hi, true); err != nil {
		return fmt.Errorf("bench: load bids: compact: %w", err)
	}
	return nil
}
