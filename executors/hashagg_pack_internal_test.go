package executors

import (
	"bytes"
	"cmp"
	"math"
	"testing"

	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
	"github.com/seed04fbb902/weir/vec/vectest"
)

// TestHgPackWidth checks that hgPackWidth is the length of every non-NULL value key
// of its kind (else the packed map would never be used), and that keys of one length
// pack to integers in the keys' order, so distinct keys never share an entry.
func TestHgPackWidth(t *testing.T) {
	rng := vectest.NewRand(vectest.Seed(t))
	keys := map[schema.Kind]func() []byte{
		schema.Boolean:     func() []byte { return vec.AppendKeyBool(nil, rng.IntN(2) == 1, false) },
		schema.Int16:       func() []byte { return vec.AppendKeyInt16(nil, int16(rng.Uint32()), false) },
		schema.Int32:       func() []byte { return vec.AppendKeyInt32(nil, int32(rng.Uint32()), false) },
		schema.Date:        func() []byte { return vec.AppendKeyInt32(nil, int32(rng.Uint32()), false) },
		schema.Float32:     func() []byte { return vec.AppendKeyFloat32(nil, math.Float32frombits(rng.Uint32()), false) },
		schema.Int64:       func() []byte { return vec.AppendKeyInt64(nil, int64(rng.Uint64()), false) },
		schema.Timestamp:   func() []byte { return vec.AppendKeyInt64(nil, int64(rng.Uint64()), false) },
		schema.Timestamptz: func() []byte { return vec.AppendKeyInt64(nil, int64(rng.Uint64()), false) },
		schema.Float64:     func() []byte { return vec.AppendKeyFloat64(nil, rng.NormFloat64()*1e6, false) },
	}
	for kind, key := range keys {
		w := hgPackWidth(kind)
		if w == 0 || w > 9 {
			t.Errorf("%s: width %d, want 1 to 9", kind, w)
			continue
		}
		for range 200 {
			a, b := key(), key()
			if len(a) != w || len(b) != w {
				t.Fatalf("%s: keys %x and %x, width %d", kind, a, b, w)
			}
			if got, want := cmp.Compare(hgPack(a), hgPack(b)), bytes.Compare(a, b); got != want {
				t.Fatalf("%s: keys %x and %x compare %d, packed %d", kind, a, b, want, got)
			}
		}
	}
	for _, kind := range []schema.Kind{schema.Varchar, schema.Bytea, schema.Decimal} {
		if w := hgPackWidth(kind); w != 0 {
			t.Errorf("%s: width %d, want 0 (keys longer than 9 bytes or of varying length)", kind, w)
		}
	}
}
