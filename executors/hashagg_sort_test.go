package executors

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/vec"
)

// TestSortEntries checks that a packed slot's entries sort by marker and packed value
// as their keys sort (NULLs first or last, values of every packed width, ascending
// and descending encodings), against a sort of the keys themselves.
func TestSortEntries(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var buf []hgSortKey
	for _, k := range []schema.Kind{schema.Boolean, schema.Int16, schema.Int32, schema.Int64, schema.Float64, schema.Varchar} {
		w := hgPackWidth(k)
		for range 100 {
			seen := map[string]bool{}
			var es []*hgEntry
			for range rng.IntN(40) {
				var key []byte
				switch {
				case rng.IntN(10) == 0:
					key = []byte{vec.KeyNullMarker(rng.IntN(2) == 0)}
				case w == 0:
					key = vec.AppendKeyString(nil, strings.Repeat("ab", rng.IntN(6)), rng.IntN(2) == 0)
				default:
					v := binary.BigEndian.AppendUint64(nil, rng.Uint64())
					key = append([]byte{vec.KeyValue}, v[:w-1]...)
				}
				if !seen[string(key)] {
					seen[string(key)] = true
					es = append(es, newHgEntry(key, 1))
				}
			}
			want := slices.Clone(es)
			slices.SortFunc(want, func(a, b *hgEntry) int { return strings.Compare(a.key, b.key) })
			buf = sortEntries(es, w, buf)
			if !slices.Equal(es, want) {
				t.Fatalf("seed %d kind %s: sorted %q, want %q", seed, k, keysOf(es), keysOf(want))
			}
		}
	}
}

func keysOf(es []*hgEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.key
	}
	return out
}
