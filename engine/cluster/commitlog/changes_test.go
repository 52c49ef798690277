package commitlog

import (
	"bytes"
	"slices"
	"testing"

	"github.com/seed04fbb902/weir/storage"
)

// A commit's changes round-trip, a deleted entry (nil) stays a deletion, and another
// version, an unknown field and trailing data are refused.
func TestChangesRoundTrip(t *testing.T) {
	ch := storage.Changes{Catalog: map[string][]byte{"a": []byte("x"), "b": nil, "c": {}}, Drops: []uint32{4, 9}}
	b, err := encodeChanges(ch)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeChanges(b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Drops, ch.Drops) || len(got.Catalog) != 3 || got.Catalog["b"] != nil || got.Catalog["c"] == nil || string(got.Catalog["a"]) != "x" {
		t.Fatalf("round trip of %v gave %v", ch, got)
	}
	for _, bad := range []string{`{"v":2}`, `{"v":1,"x":1}`, `{"v":1}{}`, `[]`, ``} {
		if _, err := decodeChanges([]byte(bad)); err == nil {
			t.Errorf("decode %q succeeded", bad)
		}
	}
}

// FuzzDecodeChanges: decoding never panics, and what decodes re-encodes to bytes that
// decode to the same changes.
func FuzzDecodeChanges(f *testing.F) {
	f.Add([]byte(`{"v":1,"catalog":{"a":"eA==","b":null},"drops":[3]}`))
	f.Add([]byte(`{"v":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ch, err := decodeChanges(data)
		if err != nil {
			return
		}
		b, err := encodeChanges(ch)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeChanges(b)
		if err != nil {
			t.Fatalf("re-encoded changes %q do not decode: %v", b, err)
		}
		b2, _ := encodeChanges(again)
		if !bytes.Equal(b, b2) {
			t.Fatalf("changes re-encode as %q, then %q", b, b2)
		}
	})
}
