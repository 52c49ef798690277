package storage

import (
	"encoding/binary"
	"fmt"
)

// MetaTable is the table id reserved for metadata.
const MetaTable uint32 = 0

// KeyPrefixLen is the length of the table id and vnode prefix of a storage key.
const KeyPrefixLen = 6

// AppendKey appends the storage key of a row: table | vnode | pk.
func AppendKey(dst []byte, table uint32, vnode uint16, pk []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, table)
	dst = binary.BigEndian.AppendUint16(dst, vnode)
	return append(dst, pk...)
}

// VnodePrefix is the key prefix of every row of one vnode of a table.
func VnodePrefix(table uint32, vnode uint16) []byte {
	return AppendKey(make([]byte, 0, KeyPrefixLen), table, vnode, nil)
}

// SplitKey splits a storage key into table, vnode and pk.
func SplitKey(key []byte) (table uint32, vnode uint16, pk []byte, err error) {
	if len(key) < KeyPrefixLen {
		return 0, 0, nil, fmt.Errorf("storage key of %d bytes is shorter than its %d-byte prefix", len(key), KeyPrefixLen)
	}
	return binary.BigEndian.Uint32(key), binary.BigEndian.Uint16(key[4:]), key[KeyPrefixLen:], nil
}

// prefixEnd is the smallest key above every key with the prefix (nil when none).
func prefixEnd(prefix []byte) []byte {
	return toPrefixEnd(append([]byte(nil), prefix...))
}

// toPrefixEnd turns p, in place, into the smallest key above every key starting with
// p, or nil when there is none (p is all 0xff).
func toPrefixEnd(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		p[i]++
		if p[i] != 0 {
			return p[:i+1]
		}
	}
	return nil
}

// Metadata keys live under table 0, vnode 0, then a kind byte.
const (
	metaEpoch    byte = 'e' // committed epoch: uint64 BE
	metaCatalog  byte = 'c' // + name: catalog entry
	metaRowCount byte = 'r' // + table (4 BE) + vnode (2 BE): row count, int64 BE
	metaApplied  byte = 'a' // the version-log sequence IngestFiles applied last: uint64 BE
)

func metaKey(kind byte, rest ...[]byte) []byte {
	k := AppendKey(nil, MetaTable, 0, []byte{kind})
	for _, r := range rest {
		k = append(k, r...)
	}
	return k
}

func rowCountKey(table uint32, vnode uint16) []byte {
	return metaKey(metaRowCount, AppendKey(nil, table, vnode, nil))
}
