package storage

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/sstable/block"
)

// Options' compression and block size reach every level of pebble's options; the
// zero values are Snappy and DefaultBlockSize, and an unknown compression is
// refused by name.
func TestPebbleOptionsLevels(t *testing.T) {
	for _, tc := range []struct {
		o     Options
		prof  *block.CompressionProfile
		block int
	}{
		{Options{}, block.SnappyCompression, DefaultBlockSize},
		{Options{Compression: "none", BlockSize: 64 << 10}, block.NoCompression, 64 << 10},
		{Options{Compression: "zstd", BlockSize: 32 << 10}, block.ZstdCompression, 32 << 10},
		{Options{Compression: "minlz", BlockSize: 4096}, block.MinLZCompression, 4096},
	} {
		po, err := tc.o.pebbleOptions()
		if err != nil {
			t.Fatal(err)
		}
		po.EnsureDefaults()
		for i, l := range po.Levels {
			if got := l.Compression(); got != tc.prof {
				t.Errorf("%+v: level %d compression %v, want %v", tc.o, i, got, tc.prof)
			}
			if l.BlockSize != tc.block {
				t.Errorf("%+v: level %d block size %d, want %d", tc.o, i, l.BlockSize, tc.block)
			}
		}
	}
	if _, err := (Options{Compression: "lz4"}).pebbleOptions(); err == nil {
		t.Fatal(`compression "lz4" accepted`)
	}
}
