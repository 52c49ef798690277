package commitlog

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/storage"
)

// nodeRequestCase is a request that round-trips, and what it decodes as (req itself
// unless want is set: an empty list or byte string decodes as nil).
type nodeRequestCase struct {
	name string
	req  any
	want any
}

// nodeRequestCases are the round trips; n scales the large lists (the fuzz targets'
// seeds keep them small: the fuzzer minimizes a large interesting input for long).
func nodeRequestCases(n int) []nodeRequestCase {
	maxName := strings.Repeat("n", maxObjectName)
	manyDrops := make([]uint32, 10*n)
	for i := range manyDrops {
		manyDrops[i] = uint32(i) * 429497
	}
	manyOthers := make([]objstore.Object, n)
	for i := range manyOthers {
		manyOthers[i] = objstore.Object{
			Name:     objstore.Name{Epoch: uint64(i), Node: 3, Incarnation: 2, K: uint64(i) << 40}.String(),
			Smallest: storage.AppendKey(nil, uint32(i), 0, nil), Largest: storage.AppendKey(nil, uint32(i), 255, []byte("pk")), Size: int64(i) << 20,
		}
	}
	changes := bytes.Repeat([]byte{0, 0xff, 0x80}, 40*n)
	return []nodeRequestCase{
		{name: "export zero", req: exportRequest{}},
		{name: "export", req: exportRequest{Epoch: 7, Sequence: 12, Committed: 6, Node: 2, Incarnation: 3, First: 4, Drops: []uint32{9, 300}, TableBytes: 1 << 20}},
		{name: "export max", req: exportRequest{
			Epoch: math.MaxUint64, Sequence: math.MaxUint64, Committed: math.MaxUint64, Node: math.MaxUint64,
			Incarnation: math.MaxUint64, First: math.MaxUint64, Drops: []uint32{0, 1, math.MaxUint32}, TableBytes: math.MaxUint64,
		}},
		{name: "export empty drops", req: exportRequest{Epoch: 1, Drops: []uint32{}}, want: exportRequest{Epoch: 1}},
		{name: "export many drops", req: exportRequest{Epoch: 1, Drops: manyDrops}},
		{name: "apply zero", req: applyRequest{}},
		{name: "apply", req: applyRequest{Epoch: 7, Sequence: 12, Changes: []byte(`{"v":1,"drops":[3]}`), Others: []objstore.Object{{Name: "e7-n1-i1-0.sst", Smallest: []byte("a"), Largest: []byte("b"), Size: 9}, {Name: "e7-n2-i1-0.sst", Size: 1}}}},
		{name: "apply max", req: applyRequest{Epoch: math.MaxUint64, Sequence: math.MaxUint64, Changes: []byte{0}, Others: []objstore.Object{{Name: "x"}, {Name: maxName, Size: math.MaxInt64}}}},
		{name: "apply empty lists", req: applyRequest{Epoch: 2, Changes: []byte{}, Others: []objstore.Object{}}, want: applyRequest{Epoch: 2}},
		{name: "apply large", req: applyRequest{Epoch: 2, Sequence: 3, Changes: changes, Others: manyOthers, RowDeltas: manyDeltas(n)}},
		{name: "apply row deltas", req: applyRequest{Epoch: 2, RowDeltas: []storage.RowDelta{{Table: 1, Vnode: 5, Delta: -1}, {Table: math.MaxUint32, Vnode: math.MaxUint16, Delta: math.MinInt64}}}},
		{name: "apply empty row deltas", req: applyRequest{Epoch: 2, RowDeltas: []storage.RowDelta{}}, want: applyRequest{Epoch: 2}},
		{name: "discard zero", req: discardRequest{}},
		{name: "discard max", req: discardRequest{Epoch: math.MaxUint64}},
		{name: "recover", req: recoverRequest{}},
	}
}

// Every kind of request round-trips, edge values included, and re-encodes to the
// same bytes.
func TestNodeRequestRoundTrip(t *testing.T) {
	for _, c := range nodeRequestCases(1000) {
		t.Run(c.name, func(t *testing.T) {
			want := c.want
			if want == nil {
				want = c.req
			}
			b, err := appendNodeRequest([]byte("prefix"), c.req)
			if err != nil {
				t.Fatal(err)
			}
			b, ok := bytes.CutPrefix(b, []byte("prefix"))
			if !ok {
				t.Fatalf("the encoding does not start with dst: %q", b)
			}
			got, err := decodeNodeRequest(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoded %#v, want %#v", got, want)
			}
			again, err := appendNodeRequest(nil, got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, b) {
				t.Fatalf("re-encoded as %x, want %x", again, b)
			}
		})
	}
}

// The layout is as documented: version, kind, then the fields.
func TestNodeRequestLayout(t *testing.T) {
	for _, c := range []struct {
		req  any
		want []byte
	}{
		{exportRequest{Epoch: 1, Sequence: 2, Committed: 3, Node: 4, Incarnation: 5, First: 6, Drops: []uint32{7, 300}, TableBytes: 8},
			[]byte{3, reqExport, 1, 2, 3, 4, 5, 6, 2, 7, 0xac, 0x02, 8}},
		{applyRequest{Epoch: 1, Sequence: 2, Changes: []byte("ch"), Others: []objstore.Object{{Name: "a"}, {Name: "bc", Smallest: []byte("x"), Largest: []byte("y"), Size: 300}}, RowDeltas: []storage.RowDelta{{Table: 7, Vnode: 300, Delta: -1}, {Table: 8, Vnode: 0, Delta: 2}}},
			[]byte{3, reqApply, 1, 2, 2, 'c', 'h', 2, 1, 'a', 0, 0, 0, 2, 'b', 'c', 1, 'x', 1, 'y', 0xac, 0x02, 2, 7, 0xac, 0x02, 1, 8, 0, 4}},
		{discardRequest{Epoch: 128}, []byte{3, reqDiscard, 0x80, 0x01}},
		{recoverRequest{}, []byte{3, reqRecover}},
	} {
		b, err := appendNodeRequest(nil, c.req)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, c.want) {
			t.Errorf("%#v encodes as %x, want %x", c.req, b, c.want)
		}
	}
}

// A decoded request keeps nothing of its input: the caller may reuse the buffer.
func TestNodeRequestNoAlias(t *testing.T) {
	req := applyRequest{Epoch: 1, Changes: []byte("changes"), Others: []objstore.Object{{Name: "e1-n1-i1-0.sst", Smallest: []byte("lo"), Largest: []byte("lp")}}}
	b, err := appendNodeRequest(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeNodeRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	if !reflect.DeepEqual(got, req) {
		t.Fatalf("after the input was cleared, the request is %#v, want %#v", got, req)
	}
}

// uv is the uvarint encoding of v.
func uv(v uint64) []byte { return binary.AppendUvarint(nil, v) }

// cat concatenates byte strings and bytes.
func cat(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch p := p.(type) {
		case []byte:
			b = append(b, p...)
		case string:
			b = append(b, p...)
		case byte:
			b = append(b, p)
		case int:
			b = append(b, byte(p))
		default:
			panic(p)
		}
	}
	return b
}

const varintErr = "truncated, overlong or non-minimal varint"

// nodeRequestRefusals are inputs decodeNodeRequest refuses, with its error.
func nodeRequestRefusals() []struct {
	name string
	b    []byte
	err  string
} {
	exportHead := cat(3, reqExport, 0, 0, 0, 0, 0, 0) // through First
	applyHead := cat(3, reqApply, 0, 0)               // through Sequence
	long := strings.Repeat("n", maxObjectName+1)
	return []struct {
		name string
		b    []byte
		err  string
	}{
		{"empty", nil, "node request: empty"},
		{"version 0", cat(0, reqExport), "node request: version 0, this build reads 3"},
		{"version 1", cat(1, reqRecover), "node request: version 1, this build reads 3"},
		{"version 2", cat(2, reqRecover), "node request: version 2, this build reads 3"},
		{"version 4", cat(4, reqRecover), "node request: version 4, this build reads 3"},
		{"no kind", cat(3), "node request: kind: truncated"},
		{"kind 0", cat(3, 0), "node request: unknown kind 0"},
		{"kind 5", cat(3, 5, 0), "node request: unknown kind 5"},

		{"export no epoch", cat(3, reqExport), "node request: export: epoch: " + varintErr},
		{"export non-minimal epoch", cat(3, reqExport, 0x80, 0x00), "node request: export: epoch: " + varintErr},
		{"export overlong epoch", cat(3, reqExport, bytes.Repeat([]byte{0xff}, 10), 1), "node request: export: epoch: " + varintErr},
		{"export truncated sequence", cat(3, reqExport, 0, 0x80), "node request: export: sequence: " + varintErr},
		{"export no committed", cat(3, reqExport, 0, 0), "node request: export: committed: " + varintErr},
		{"export no node", cat(3, reqExport, 0, 0, 0), "node request: export: node: " + varintErr},
		{"export no incarnation", cat(3, reqExport, 0, 0, 0, 0), "node request: export: incarnation: " + varintErr},
		{"export no first", cat(3, reqExport, 0, 0, 0, 0, 0), "node request: export: first: " + varintErr},
		{"export no drops", exportHead, "node request: export: drops: " + varintErr},
		{"export drops past the input", cat(exportHead, 3, 1), "node request: export: drops: 3 out of range 0..2"},
		{"export huge drops", cat(exportHead, uv(1<<62)), "node request: export: drops: 4611686018427387904 out of range 0..9"},
		{"export truncated drop", cat(exportHead, 2, 0x80, 0x80), "node request: export: drops: " + varintErr},
		{"export drop above uint32", cat(exportHead, 1, uv(1<<32), 0), "node request: export: drops: 4294967296 out of range 0..4294967295"},
		{"export no table bytes", cat(exportHead, 1, 5), "node request: export: table bytes: " + varintErr},
		{"export trailing", cat(exportHead, 0, 0, 0), "node request: export: 1 trailing bytes"},

		{"apply no epoch", cat(3, reqApply), "node request: apply: epoch: " + varintErr},
		{"apply no sequence", cat(3, reqApply, 0), "node request: apply: sequence: " + varintErr},
		{"apply no changes", applyHead, "node request: apply: changes: " + varintErr},
		{"apply changes past the input", cat(applyHead, 5, "abc"), "node request: apply: changes: 5 out of range 0..4"},
		{"apply no others", cat(applyHead, 0), "node request: apply: others: " + varintErr},
		{"apply others past the input", cat(applyHead, 0, 2, 1, "a", 0, 0, 0), "node request: apply: others: 2 out of range 0..1"},
		{"apply huge others", cat(applyHead, 0, uv(math.MaxUint64)), "node request: apply: others: 18446744073709551615 out of range 0..2"},
		{"apply empty name", cat(applyHead, 0, 1, 0, 0, 0, 0), "node request: apply: others: object name: object 0: empty"},
		{"apply second name empty", cat(applyHead, 0, 2, 1, "a", 0, 0, 0, 0, 0, 0, 0), "node request: apply: others: object name: object 1: empty"},
		{"apply long name", cat(applyHead, 0, 1, uv(uint64(len(long))), long, 0, 0, 0), "node request: apply: others: object name: object 0: 1025 bytes, longer than 1024"},
		{"apply huge name", cat(applyHead, 0, 1, uv(math.MaxUint64), 0, 0, 0, 0, 0), "node request: apply: others: object name: object 0: 18446744073709551615 bytes, longer than 1024"},
		{"apply truncated name", cat(applyHead, 0, 1, 5, "abcd"), "node request: apply: others: object name: 5 bytes, 4 left"},
		{"apply no size", cat(applyHead, 0, 1, 1, "a", 0, 0), "node request: apply: others: object size: " + varintErr},
		{"apply smallest after largest", cat(applyHead, 0, 1, 1, "a", 1, "b", 1, "a", 0), `node request: apply: others: object keys: object 0: smallest "b" after largest "a"`},
		{"apply no row deltas", cat(applyHead, 0, 1, 1, "a", 0, 0, 0), "node request: apply: row deltas: " + varintErr},
		{"apply row deltas past the input", cat(applyHead, 0, 0, 2, 7, 1, 2), "node request: apply: row deltas: 2 out of range 0..1"},
		{"apply truncated row delta", cat(applyHead, 0, 0, 1, 7, 1), "node request: apply: row delta change: " + varintErr},
		{"apply row delta table above uint32", cat(applyHead, 0, 0, 1, uv(1<<32), 1, 2), "node request: apply: row delta table: 4294967296 out of range 0..4294967295"},
		{"apply row delta vnode above uint16", cat(applyHead, 0, 0, 1, 7, uv(1<<16), 2), "node request: apply: row delta vnode: 65536 out of range 0..65535"},
		{"apply row delta no change", cat(applyHead, 0, 0, 1, 7, 1, 0x80), "node request: apply: row delta change: " + varintErr},
		{"apply row delta zero", cat(applyHead, 0, 0, 1, 7, 1, 0), "node request: apply: row deltas: table 7 vnode 1: a zero change"},
		{"apply row delta of table 0", cat(applyHead, 0, 0, 1, 0, 1, 2), "node request: apply: row deltas: vnode 1 of table 0, reserved for metadata"},
		{"apply row deltas twice", cat(applyHead, 0, 0, 2, 7, 1, 2, 7, 1, 2), "node request: apply: row deltas: table 7 vnode 1 after table 7 vnode 1"},
		{"apply row deltas out of order", cat(applyHead, 0, 0, 2, 8, 0, 2, 7, 1, 2), "node request: apply: row deltas: table 7 vnode 1 after table 8 vnode 0"},
		{"apply trailing", cat(applyHead, 0, 1, 1, "a", 0, 0, 0, 0, 0), "node request: apply: 1 trailing bytes"},

		{"discard no epoch", cat(3, reqDiscard), "node request: discard: epoch: " + varintErr},
		{"discard epoch above uint64", cat(3, reqDiscard, bytes.Repeat([]byte{0xff}, 9), 0x02), "node request: discard: epoch: " + varintErr},
		{"discard trailing", cat(3, reqDiscard, 0, 0), "node request: discard: 1 trailing bytes"},

		{"recover trailing", cat(3, reqRecover, 0, 0), "node request: recover: 2 trailing bytes"},
	}
}

// decodeNodeRequest refuses malformed input with an error that names the kind and the
// field.
func TestNodeRequestRefused(t *testing.T) {
	for _, c := range nodeRequestRefusals() {
		t.Run(c.name, func(t *testing.T) {
			got, err := decodeNodeRequest(c.b)
			if err == nil {
				t.Fatalf("decoded %x as %#v, want error %q", c.b, got, c.err)
			}
			if err.Error() != c.err {
				t.Fatalf("error %q, want %q", err, c.err)
			}
			if got != nil {
				t.Fatalf("with an error, returned %#v", got)
			}
		})
	}
}

// appendNodeRequest refuses another type (a pointer too) and names decodeNodeRequest
// would refuse, and leaves dst as it was.
func TestNodeRequestEncodeRefused(t *testing.T) {
	for _, c := range []struct {
		req any
		err string
	}{
		{nil, "node request: unknown request type <nil>"},
		{&exportRequest{}, "node request: unknown request type *commitlog.exportRequest"},
		{&recoverRequest{}, "node request: unknown request type *commitlog.recoverRequest"},
		{exported{}, "node request: unknown request type commitlog.exported"},
		{reqExport, "node request: unknown request type uint8"},
		{applyRequest{Others: []objstore.Object{{Name: "a"}, {Name: ""}}}, "node request: apply: others: object name: object 1: empty"},
		{applyRequest{Others: []objstore.Object{{Name: strings.Repeat("n", maxObjectName+1)}}}, "node request: apply: others: object name: object 0: 1025 bytes, longer than 1024"},
		{applyRequest{Others: []objstore.Object{{Name: "a", Size: -1}}}, "node request: apply: others: object size: object 0: -1, below 0"},
		{applyRequest{Others: []objstore.Object{{Name: "a", Smallest: []byte("b"), Largest: []byte("a")}}}, `node request: apply: others: object keys: object 0: smallest "b" after largest "a"`},
		{applyRequest{RowDeltas: []storage.RowDelta{{Table: 1, Delta: 0}}}, "node request: apply: row deltas: table 1 vnode 0: a zero change"},
		{applyRequest{RowDeltas: []storage.RowDelta{{Table: 2, Delta: 1}, {Table: 1, Delta: 1}}}, "node request: apply: row deltas: table 1 vnode 0 after table 2 vnode 0"},
	} {
		dst := []byte("dst")
		b, err := appendNodeRequest(dst, c.req)
		if err == nil || err.Error() != c.err {
			t.Errorf("appendNodeRequest(%#v): error %v, want %q", c.req, err, c.err)
		}
		if string(b) != "dst" {
			t.Errorf("appendNodeRequest(%#v) returned %q, want dst", c.req, b)
		}
	}
}

// The densest inputs (the most list elements a byte string of their size can hold)
// allocate no more than a small constant times their size: a count is checked against
// the input before anything is allocated for it.
func TestNodeCodecAllocBound(t *testing.T) {
	const n = 1 << 14
	dense := []struct {
		name   string
		b      []byte
		decode func([]byte) error
	}{
		{"export drops", cat(3, reqExport, 0, 0, 0, 0, 0, 0, uv(n), make([]byte, n), 0), func(b []byte) error { _, err := decodeNodeRequest(b); return err }},
		{"apply others", cat(3, reqApply, 0, 0, 0, uv(n), bytes.Repeat([]byte{1, 'a', 0, 0, 0}, n), 0), func(b []byte) error { _, err := decodeNodeRequest(b); return err }},
		{"apply row deltas", cat(3, reqApply, 0, 0, 0, 0, denseRowDeltas(n)), func(b []byte) error { _, err := decodeNodeRequest(b); return err }},
		{"exported objects", cat(3, uv(n), bytes.Repeat([]byte{1, 'a', 0, 0, 0}, n), 0), func(b []byte) error { _, err := decodeExported(b); return err }},
		{"exported row deltas", cat(3, 0, denseRowDeltas(n)), func(b []byte) error { _, err := decodeExported(b); return err }},
	}
	for _, c := range dense {
		if err := c.decode(c.b); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		const runs = 10
		for range runs {
			_ = c.decode(c.b)
		}
		runtime.ReadMemStats(&after)
		per := (after.TotalAlloc - before.TotalAlloc) / runs
		t.Logf("%s: %d bytes allocate %d", c.name, len(c.b), per)
		if limit := uint64(16*len(c.b) + 4096); per > limit {
			t.Errorf("%s: decoding %d bytes allocates %d, more than %d", c.name, len(c.b), per, limit)
		}
	}
}

// exportedCase is an answer that round-trips, and what it decodes as (x unless want
// is set).
type exportedCase struct {
	name string
	x    exported
	want *exported
}

// denseRowDeltas encodes n row deltas of three bytes each (vnodes 0 to 127 of
// tables 1, 2, ...: four bytes past table 127), about the densest a list can be.
func denseRowDeltas(n int) []byte {
	ds := make([]storage.RowDelta, n)
	for i := range ds {
		ds[i] = storage.RowDelta{Table: uint32(1 + i/128), Vnode: uint16(i % 128), Delta: 1}
	}
	b, err := appendRowDeltas(nil, ds, "dense")
	if err != nil {
		panic(err)
	}
	return b
}

// exportedCases are the round trips; n scales the large lists and keys, as in
// nodeRequestCases.
func exportedCases(n int) []exportedCase {
	maxName := strings.Repeat("n", maxObjectName)
	many := make([]objstore.Object, n)
	for i := range many {
		k := binary.BigEndian.AppendUint64(nil, uint64(i)<<20)
		many[i] = objstore.Object{
			Name:     objstore.Name{Epoch: 9, Node: 1, Incarnation: 1, K: uint64(i)}.String(),
			Smallest: k, Largest: append(k, 0xff), Size: int64(i) * 65537,
		}
	}
	return []exportedCase{
		{name: "none", x: exported{}},
		{name: "empty list", x: exported{Objects: []objstore.Object{}}, want: &exported{}},
		{name: "one", x: exported{Objects: []objstore.Object{{Name: "e7-n1-i1-0.sst", Smallest: []byte("a"), Largest: []byte("k"), Size: 4096}}}},
		{name: "edges", x: exported{Objects: []objstore.Object{
			{Name: "x"},
			{Name: maxName, Smallest: []byte("same"), Largest: []byte("same"), Size: math.MaxInt64},
			{Name: "y", Largest: []byte{0}, Size: 1},
		}}},
		{name: "empty keys", x: exported{Objects: []objstore.Object{{Name: "z", Smallest: []byte{}, Largest: []byte{}}}},
			want: &exported{Objects: []objstore.Object{{Name: "z"}}}},
		{name: "large keys", x: exported{Objects: []objstore.Object{{Name: "k", Smallest: bytes.Repeat([]byte{1}, 70*n), Largest: bytes.Repeat([]byte{2}, 70*n), Size: 1 << 40}}}},
		{name: "many", x: exported{Objects: many}},
		{name: "row deltas", x: exported{Objects: many[:1], RowDeltas: []storage.RowDelta{{Table: 7, Vnode: 1, Delta: 3}, {Table: 7, Vnode: 2, Delta: -3}, {Table: 9, Vnode: 0, Delta: 1}}}},
		{name: "row delta edges", x: exported{RowDeltas: []storage.RowDelta{{Table: 1, Vnode: 0, Delta: math.MinInt64}, {Table: math.MaxUint32, Vnode: math.MaxUint16, Delta: math.MaxInt64}}}},
		{name: "empty row deltas", x: exported{RowDeltas: []storage.RowDelta{}}, want: &exported{}},
		{name: "many row deltas", x: exported{RowDeltas: manyDeltas(n)}},
	}
}

// manyDeltas is n row deltas in order, of every size of change.
func manyDeltas(n int) []storage.RowDelta {
	ds := make([]storage.RowDelta, n)
	for i := range ds {
		ds[i] = storage.RowDelta{Table: uint32(1 + i/300), Vnode: uint16(i % 300 * 200), Delta: int64(i+1) * int64(1-2*(i%2)) << (i % 50)}
	}
	return ds
}

// An export's answer round-trips, edge values included, and re-encodes to the same
// bytes.
func TestExportedRoundTrip(t *testing.T) {
	for _, c := range exportedCases(1000) {
		t.Run(c.name, func(t *testing.T) {
			want := c.x
			if c.want != nil {
				want = *c.want
			}
			b, err := appendExported([]byte("prefix"), c.x)
			if err != nil {
				t.Fatal(err)
			}
			b, ok := bytes.CutPrefix(b, []byte("prefix"))
			if !ok {
				t.Fatalf("the encoding does not start with dst: %q", b)
			}
			got, err := decodeExported(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoded %#v, want %#v", got, want)
			}
			again, err := appendExported(nil, got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, b) {
				t.Fatalf("re-encoded as %x, want %x", again, b)
			}
		})
	}
}

// The layout is as documented, and the decoded answer keeps nothing of its input.
func TestExportedLayoutNoAlias(t *testing.T) {
	x := exported{Objects: []objstore.Object{{Name: "ab", Smallest: []byte("c"), Largest: []byte("d"), Size: 300}}}
	b, err := appendExported(nil, x)
	if err != nil {
		t.Fatal(err)
	}
	if want := cat(3, 1, 2, "ab", 1, "c", 1, "d", 0xac, 0x02, 0); !bytes.Equal(b, want) {
		t.Fatalf("encoded as %x, want %x", b, want)
	}
	got, err := decodeExported(b)
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	if !reflect.DeepEqual(got, x) {
		t.Fatalf("after the input was cleared, the answer is %#v, want %#v", got, x)
	}
}

// exportedRefusals are inputs decodeExported refuses, with its error.
func exportedRefusals() []struct {
	name string
	b    []byte
	err  string
} {
	long := strings.Repeat("n", maxObjectName+1)
	return []struct {
		name string
		b    []byte
		err  string
	}{
		{"empty", nil, "export answer: empty"},
		{"version 0", cat(0, 0), "export answer: version 0, this build reads 3"},
		{"version 1", cat(1, 0), "export answer: version 1, this build reads 3"},
		{"version 2", cat(2, 0), "export answer: version 2, this build reads 3"},
		{"version 4", cat(4, 0), "export answer: version 4, this build reads 3"},
		{"no count", cat(3), "export answer: objects: " + varintErr},
		{"non-minimal count", cat(3, 0x80, 0x00), "export answer: objects: " + varintErr},
		{"count past the input", cat(3, 2, 1, "a", 0, 0, 0), "export answer: objects: 2 out of range 0..1"},
		{"huge count", cat(3, uv(math.MaxUint64)), "export answer: objects: 18446744073709551615 out of range 0..2"},
		{"empty name", cat(3, 1, 0, 0, 0, 0, 0), "export answer: object name: object 0: empty"},
		{"second name empty", cat(3, 2, 1, "a", 0, 0, 0, 0, 0, 0, 0, 0), "export answer: object name: object 1: empty"},
		{"long name", cat(3, 1, uv(uint64(len(long))), long, 0, 0, 0), "export answer: object name: object 0: 1025 bytes, longer than 1024"},
		{"truncated name", cat(3, 1, 5, "abcd"), "export answer: object name: 5 bytes, 4 left"},
		{"smallest past the input", cat(3, 1, 1, "a", 3, "xy"), "export answer: object smallest: 3 bytes, 2 left"},
		{"no largest", cat(3, 1, 1, "a", 2, "xy"), "export answer: object largest: " + varintErr},
		{"largest past the input", cat(3, 1, 1, "a", 0, 3, "xy"), "export answer: object largest: 3 bytes, 2 left"},
		{"no size", cat(3, 1, 1, "a", 0, 1, "x"), "export answer: object size: " + varintErr},
		{"non-minimal size", cat(3, 1, 1, "a", 0, 0, 0x81, 0x00), "export answer: object size: " + varintErr},
		{"size above int64", cat(3, 1, 1, "a", 0, 0, uv(1<<63)), "export answer: object size: 9223372036854775808 out of range 0..9223372036854775807"},
		{"smallest after largest", cat(3, 1, 1, "a", 1, "b", 1, "a", 0), `export answer: object keys: object 0: smallest "b" after largest "a"`},
		{"smallest after empty largest", cat(3, 2, 1, "a", 0, 0, 0, 1, "b", 1, 0, 0, 0), `export answer: object keys: object 1: smallest "\x00" after largest ""`},
		{"no row deltas", cat(3, 1, 1, "a", 0, 0, 0), "export answer: row deltas: " + varintErr},
		{"row deltas past the input", cat(3, 0, 2, 7, 1, 2), "export answer: row deltas: 2 out of range 0..1"},
		{"row delta zero", cat(3, 0, 1, 7, 1, 0), "export answer: row deltas: table 7 vnode 1: a zero change"},
		{"row delta of table 0", cat(3, 0, 1, 0, 3, 2), "export answer: row deltas: vnode 3 of table 0, reserved for metadata"},
		{"row deltas out of order", cat(3, 0, 2, 7, 2, 2, 7, 1, 2), "export answer: row deltas: table 7 vnode 1 after table 7 vnode 2"},
		{"trailing", cat(3, 1, 1, "a", 0, 0, 0, 0, 0), "export answer: 1 trailing bytes"},
		{"trailing after none", cat(3, 0, 0, 7), "export answer: 1 trailing bytes"},
	}
}

// decodeExported refuses malformed input with an error that names the field.
func TestExportedRefused(t *testing.T) {
	for _, c := range exportedRefusals() {
		t.Run(c.name, func(t *testing.T) {
			got, err := decodeExported(c.b)
			if err == nil {
				t.Fatalf("decoded %x as %#v, want error %q", c.b, got, c.err)
			}
			if err.Error() != c.err {
				t.Fatalf("error %q, want %q", err, c.err)
			}
			if got.Objects != nil {
				t.Fatalf("with an error, returned %#v", got)
			}
		})
	}
}

// appendExported refuses what decodeExported would, and leaves dst as it was.
func TestExportedEncodeRefused(t *testing.T) {
	ok := objstore.Object{Name: "a"}
	for _, c := range []struct {
		o   objstore.Object
		err string
	}{
		{objstore.Object{}, "export answer: object name: object 1: empty"},
		{objstore.Object{Name: strings.Repeat("n", maxObjectName+1)}, "export answer: object name: object 1: 1025 bytes, longer than 1024"},
		{objstore.Object{Name: "b", Size: -1}, "export answer: object size: object 1: -1, below 0"},
		{objstore.Object{Name: "b", Smallest: []byte("b"), Largest: []byte("a")}, `export answer: object keys: object 1: smallest "b" after largest "a"`},
	} {
		b, err := appendExported([]byte("dst"), exported{Objects: []objstore.Object{ok, c.o}})
		if err == nil || err.Error() != c.err {
			t.Errorf("appendExported(%#v): error %v, want %q", c.o, err, c.err)
		}
		if string(b) != "dst" {
			t.Errorf("appendExported(%#v) returned %q, want dst", c.o, b)
		}
	}
}

// FuzzDecodeNodeRequest: decoding never panics, and what decodes re-encodes to its
// input (the encoding is canonical), which decodes to the same request.
func FuzzDecodeNodeRequest(f *testing.F) {
	for _, c := range nodeRequestCases(4) {
		b, err := appendNodeRequest(nil, c.req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, c := range nodeRequestRefusals() {
		f.Add(c.b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeNodeRequest(data)
		if err != nil {
			if req != nil {
				t.Fatalf("with error %v, returned %#v", err, req)
			}
			return
		}
		b, err := appendNodeRequest(nil, req)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", req, err)
		}
		if !bytes.Equal(b, data) {
			t.Fatalf("%x decodes as %#v, which encodes as %x", data, req, b)
		}
		again, err := decodeNodeRequest(b)
		if err != nil {
			t.Fatalf("re-encoded request %x does not decode: %v", b, err)
		}
		if !reflect.DeepEqual(again, req) {
			t.Fatalf("request %#v decodes again as %#v", req, again)
		}
		b2, err := appendNodeRequest(nil, again)
		if err != nil || !bytes.Equal(b2, b) {
			t.Fatalf("request re-encodes as %x, then %x (%v)", b, b2, err)
		}
	})
}

// FuzzDecodeExported: decoding never panics, and what decodes re-encodes to its input
// (the encoding is canonical), which decodes to the same answer.
func FuzzDecodeExported(f *testing.F) {
	for _, c := range exportedCases(4) {
		b, err := appendExported(nil, c.x)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, c := range exportedRefusals() {
		f.Add(c.b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := decodeExported(data)
		if err != nil {
			if x.Objects != nil {
				t.Fatalf("with error %v, returned %#v", err, x)
			}
			return
		}
		b, err := appendExported(nil, x)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", x, err)
		}
		if !bytes.Equal(b, data) {
			t.Fatalf("%x decodes as %#v, which encodes as %x", data, x, b)
		}
		again, err := decodeExported(b)
		if err != nil {
			t.Fatalf("re-encoded answer %x does not decode: %v", b, err)
		}
		if !reflect.DeepEqual(again, x) {
			t.Fatalf("answer %#v decodes again as %#v", x, again)
		}
		b2, err := appendExported(nil, again)
		if err != nil || !bytes.Equal(b2, b) {
			t.Fatalf("answer re-encodes as %x, then %x (%v)", b, b2, err)
		}
	})
}
