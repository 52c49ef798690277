// Package storetest holds test helpers for the committed store: its whole contents as
// text, and those contents restricted to the vnodes a partial store holds.
package storetest

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
)

// RawScan is every key and value of s's pebble, metadata included, as key=value in
// hex, in key order.
func RawScan(t testing.TB, s *storage.Store) []string {
	t.Helper()
	it, err := s.DB().NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, fmt.Sprintf("%x=%x", it.Key(), it.Value()))
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Restrict is scan (RawScan's) as a partial store holding holds (vnodes per table)
// would have it: without the table keys and row counts of the vnodes holds does not
// hold, without row counts of 0 (a store may keep one as a count or have none), and
// without a partial store's own metadata, so that a partial store's restricted scan
// equals a whole store's restricted to the same vnodes.
func Restrict(t testing.TB, scan []string, holds map[uint32]*vnode.Bitmap) []string {
	t.Helper()
	out, _ := restrict(t, scan, holds)
	return out
}

// Stray are the entries of scan (RawScan's) of the vnodes holds does not hold: table
// keys, and row counts other than 0. A partial store holding holds has none.
func Stray(t testing.TB, scan []string, holds map[uint32]*vnode.Bitmap) []string {
	t.Helper()
	_, stray := restrict(t, scan, holds)
	return stray
}

func restrict(t testing.TB, scan []string, holds map[uint32]*vnode.Bitmap) (out, stray []string) {
	t.Helper()
	metaLen := len(storage.AppendKey(nil, storage.MetaTable, 0, nil))
	held := func(k []byte) bool {
		b := holds[binary.BigEndian.Uint32(k)]
		v := int(binary.BigEndian.Uint16(k[4:]))
		return b != nil && v < b.Count() && b.Contains(vnode.Vnode(v))
	}
	for _, e := range scan {
		hexKey, _, _ := strings.Cut(e, "=")
		var k []byte
		if _, err := fmt.Sscanf(hexKey, "%x", &k); err != nil || len(k) < storage.KeyPrefixLen {
			t.Fatalf("entry %s: not a storage key (%v)", e, err)
		}
		if binary.BigEndian.Uint32(k) != storage.MetaTable {
			if held(k) {
				out = append(out, e)
			} else {
				stray = append(stray, e)
			}
			continue
		}
		if rest := k[metaLen:]; len(rest) > 0 {
			switch rest[0] {
			case 'r': // a row count: table and vnode
				zero := strings.HasSuffix(e, "=0000000000000000")
				if len(rest) < 1+storage.KeyPrefixLen || !held(rest[1:]) {
					if !zero {
						stray = append(stray, e)
					}
					continue
				}
				if zero {
					continue
				}
			case 'h', 'p': // a partial store's held vnodes, and its mark
				continue
			}
		}
		out = append(out, e)
	}
	return out, stray
}
