package commitlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/seed04fbb902/weir/engine/cluster/objstore"
	"github.com/seed04fbb902/weir/engine/cluster/wire"
	"github.com/seed04fbb902/weir/storage"
)

// nodeRequestVersion is the version of the encoding of a node request and of an
// export's answer (exported), the first byte of either. Version 2 added the row
// count changes to both; version 3 gives the other nodes' objects of an apply
// request with their keys and sizes, as an export's answer gives its own.
const nodeRequestVersion byte = 3

// maxObjectName bounds the length of an object name in a request or an answer: the
// names objstore.Name formats are far shorter, and the bound keeps a forged payload
// from carrying large strings.
const maxObjectName = 1024

// appendNodeRequest appends the encoding of req, an exportRequest, applyRequest,
// discardRequest or recoverRequest (a value, not a pointer):
//
//	version | kind | fields
//
// where the fields are, by kind (integers as uvarints, byte strings and lists after
// their length as a uvarint):
//
//	export:  epoch | sequence | committed | node | incarnation | first | drops | table bytes
//	apply:   epoch | sequence | changes | others (objects, as in an export's answer) | row deltas
//	discard: epoch
//	recover: nothing
//
// Row deltas are a count, then each change's table, vnode (uvarints) and change (a
// zig-zag varint), in table and vnode order. It fails on another type, on an object
// of Others that an export's answer could not hold (see appendExported), and on row
// deltas out of order or with a zero change, which decodeNodeRequest would refuse.
func appendNodeRequest(dst []byte, req any) ([]byte, error) {
	switch x := req.(type) {
	case exportRequest:
		out := append(dst, nodeRequestVersion, reqExport)
		for _, v := range []uint64{x.Epoch, x.Sequence, x.Committed, x.Node, x.Incarnation, x.First} {
			out = binary.AppendUvarint(out, v)
		}
		out = binary.AppendUvarint(out, uint64(len(x.Drops)))
		for _, t := range x.Drops {
			out = binary.AppendUvarint(out, uint64(t))
		}
		return binary.AppendUvarint(out, x.TableBytes), nil
	case applyRequest:
		if err := checkRowDeltas(x.RowDeltas); err != nil {
			return dst, fmt.Errorf("node request: apply: row deltas: %v", err)
		}
		if err := checkObjects(x.Others); err != nil {
			return dst, fmt.Errorf("node request: apply: others: %v", err)
		}
		out := append(dst, nodeRequestVersion, reqApply)
		out = binary.AppendUvarint(out, x.Epoch)
		out = binary.AppendUvarint(out, x.Sequence)
		out = appendPrefixed(out, x.Changes)
		out = appendObjects(out, x.Others)
		return appendRowDeltas(out, x.RowDeltas, "node request: apply")
	case discardRequest:
		return binary.AppendUvarint(append(dst, nodeRequestVersion, reqDiscard), x.Epoch), nil
	case recoverRequest:
		return append(dst, nodeRequestVersion, reqRecover), nil
	default:
		return dst, fmt.Errorf("node request: unknown request type %T", req)
	}
}

// decodeNodeRequest decodes what appendNodeRequest wrote, all of b, into the request's
// value (exportRequest, applyRequest, discardRequest or recoverRequest). It fails,
// naming the kind and the field, on empty input, another version, an unknown kind,
// truncated input, a non-minimal varint, a count or length longer than the rest of b
// could hold, a table id above math.MaxUint32, an object that an export's answer
// would refuse (see decodeExported), row deltas out of order, with a vnode above math.MaxUint16 or
// a zero change, and trailing bytes. An empty list or byte string decodes as nil,
// so that a decoded request re-encodes to b; nothing decoded aliases b, and nothing
// allocated is larger than a constant times len(b).
func decodeNodeRequest(b []byte) (any, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("node request: empty")
	}
	if b[0] != nodeRequestVersion {
		return nil, fmt.Errorf("node request: version %d, this build reads %d", b[0], nodeRequestVersion)
	}
	if len(b) < 2 {
		return nil, fmt.Errorf("node request: kind: truncated")
	}
	kind := b[1]
	r := wire.NewReader(b[2:])
	var req any
	switch kind {
	case reqExport:
		x := exportRequest{
			Epoch:       r.Uvarint("epoch", math.MaxUint64),
			Sequence:    r.Uvarint("sequence", math.MaxUint64),
			Committed:   r.Uvarint("committed", math.MaxUint64),
			Node:        r.Uvarint("node", math.MaxUint64),
			Incarnation: r.Uvarint("incarnation", math.MaxUint64),
			First:       r.Uvarint("first", math.MaxUint64),
		}
		// Each table id takes at least a byte.
		if n := r.Count("drops", 1); n > 0 {
			x.Drops = make([]uint32, n)
			for i := range x.Drops {
				x.Drops[i] = uint32(r.Uvarint("drops", math.MaxUint32))
			}
		}
		x.TableBytes = r.Uvarint("table bytes", math.MaxUint64)
		req = x
	case reqApply:
		x := applyRequest{
			Epoch:    r.Uvarint("epoch", math.MaxUint64),
			Sequence: r.Uvarint("sequence", math.MaxUint64),
			Changes:  bytes.Clone(r.Prefixed("changes")),
		}
		x.Others = readObjects(r, "others", "others: object ")
		x.RowDeltas = readRowDeltas(r)
		req = x
	case reqDiscard:
		req = discardRequest{Epoch: r.Uvarint("epoch", math.MaxUint64)}
	case reqRecover:
		req = recoverRequest{}
	default:
		return nil, fmt.Errorf("node request: unknown kind %d", kind)
	}
	if err := r.Finish(); err != nil {
		return nil, fmt.Errorf("node request: %s: %w", nodeRequestKind(kind), err)
	}
	return req, nil
}

// nodeRequestKind names a known kind of node request, for errors.
func nodeRequestKind(kind byte) string {
	switch kind {
	case reqExport:
		return "export"
	case reqApply:
		return "apply"
	case reqDiscard:
		return "discard"
	case reqRecover:
		return "recover"
	}
	return fmt.Sprintf("kind %d", kind)
}

// appendExported appends the encoding of x, the answer to an exportRequest:
//
//	version | count | (name | smallest | largest | size)... | row deltas
//
// with the count and size as uvarints, name, smallest and largest each after its
// length as a uvarint, and row deltas as in a node request. It fails on what
// decodeExported would refuse: an empty name or one longer than maxObjectName bytes,
// a negative size, a Smallest after Largest, and row deltas out of order or with a
// zero change.
func appendExported(dst []byte, x exported) ([]byte, error) {
	if err := checkRowDeltas(x.RowDeltas); err != nil {
		return dst, fmt.Errorf("export answer: row deltas: %v", err)
	}
	if err := checkObjects(x.Objects); err != nil {
		return dst, fmt.Errorf("export answer: %v", err)
	}
	out := append(dst, nodeRequestVersion)
	out = appendObjects(out, x.Objects)
	return appendRowDeltas(out, x.RowDeltas, "export answer")
}

// checkObjects refuses what readObjects would: an object with an empty name or one
// longer than maxObjectName bytes, a negative size, a Smallest after its Largest.
func checkObjects(objs []objstore.Object) error {
	for i, o := range objs {
		if err := checkObjectName(uint64(len(o.Name))); err != nil {
			return fmt.Errorf("object name: object %d: %v", i, err)
		}
		if o.Size < 0 {
			return fmt.Errorf("object size: object %d: %d, below 0", i, o.Size)
		}
		if bytes.Compare(o.Smallest, o.Largest) > 0 {
			return fmt.Errorf("object keys: object %d: smallest %q after largest %q", i, o.Smallest, o.Largest)
		}
	}
	return nil
}

// appendObjects appends objs, checked by checkObjects: a count, then each object's
// name, smallest and largest keys (each after its length) and size.
func appendObjects(dst []byte, objs []objstore.Object) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(objs)))
	for _, o := range objs {
		dst = appendPrefixed(dst, o.Name)
		dst = appendPrefixed(dst, o.Smallest)
		dst = appendPrefixed(dst, o.Largest)
		dst = binary.AppendUvarint(dst, uint64(o.Size))
	}
	return dst
}

// readObjects reads what appendObjects wrote, failing r on what checkObjects
// refuses, naming the count field and each object's field after prefix; none decode
// as nil.
func readObjects(r *wire.Reader, field, prefix string) []objstore.Object {
	// An object takes at least five bytes: a name's length and a byte, the keys'
	// lengths and the size.
	n := r.Count(field, 5)
	if n == 0 {
		return nil
	}
	name, smallest, largest, size := prefix+"name", prefix+"smallest", prefix+"largest", prefix+"size"
	objs := make([]objstore.Object, n)
	for i := range objs {
		o := objstore.Object{
			Name:     string(readObjectName(r, name, "object %d", i)),
			Smallest: bytes.Clone(r.Prefixed(smallest)),
			Largest:  bytes.Clone(r.Prefixed(largest)),
			Size:     int64(r.Uvarint(size, math.MaxInt64)),
		}
		if r.Err() != nil {
			return nil
		}
		if bytes.Compare(o.Smallest, o.Largest) > 0 {
			r.Fail(prefix+"keys", "object %d: smallest %q after largest %q", i, o.Smallest, o.Largest)
			return nil
		}
		objs[i] = o
	}
	return objs
}

// decodeExported decodes what appendExported wrote, all of b. It fails, naming the
// field, on empty input, another version, truncated input, a non-minimal varint, a
// count or length longer than the rest of b could hold, an empty name or one longer
// than maxObjectName bytes, a size above math.MaxInt64, a Smallest after Largest, and
// trailing bytes. No objects, or an empty key, decode as nil, so that a decoded answer
// re-encodes to b; nothing decoded aliases b, and nothing allocated is larger than a
// constant times len(b).
func decodeExported(b []byte) (exported, error) {
	if len(b) == 0 {
		return exported{}, fmt.Errorf("export answer: empty")
	}
	if b[0] != nodeRequestVersion {
		return exported{}, fmt.Errorf("export answer: version %d, this build reads %d", b[0], nodeRequestVersion)
	}
	r := wire.NewReader(b[1:])
	var x exported
	x.Objects = readObjects(r, "objects", "object ")
	x.RowDeltas = readRowDeltas(r)
	if err := r.Finish(); err != nil {
		return exported{}, fmt.Errorf("export answer: %w", err)
	}
	return x, nil
}

// checkRowDeltas refuses row deltas out of table and vnode order (a vnode twice
// included), of table 0 (the metadata's) and with a zero change: what a store's
// export counts never holds any of them.
func checkRowDeltas(ds []storage.RowDelta) error {
	for i, d := range ds {
		if d.Table == storage.MetaTable {
			return fmt.Errorf("vnode %d of table %d, reserved for metadata", d.Vnode, d.Table)
		}
		if d.Delta == 0 {
			return fmt.Errorf("table %d vnode %d: a zero change", d.Table, d.Vnode)
		}
		if i > 0 {
			p := ds[i-1]
			if d.Table < p.Table || (d.Table == p.Table && d.Vnode <= p.Vnode) {
				return fmt.Errorf("table %d vnode %d after table %d vnode %d", d.Table, d.Vnode, p.Table, p.Vnode)
			}
		}
	}
	return nil
}

// appendRowDeltas appends ds, checked by checkRowDeltas: a count, then each change's
// table, vnode and change.
func appendRowDeltas(dst []byte, ds []storage.RowDelta, what string) ([]byte, error) {
	if err := checkRowDeltas(ds); err != nil {
		return dst, fmt.Errorf("%s: row deltas: %v", what, err)
	}
	dst = binary.AppendUvarint(dst, uint64(len(ds)))
	for _, d := range ds {
		dst = binary.AppendUvarint(dst, uint64(d.Table))
		dst = binary.AppendUvarint(dst, uint64(d.Vnode))
		dst = binary.AppendVarint(dst, d.Delta)
	}
	return dst, nil
}

// readRowDeltas reads what appendRowDeltas wrote, failing r on what checkRowDeltas
// refuses; none decode as nil.
func readRowDeltas(r *wire.Reader) []storage.RowDelta {
	// Each change takes at least three bytes.
	n := r.Count("row deltas", 3)
	if n == 0 {
		return nil
	}
	ds := make([]storage.RowDelta, n)
	for i := range ds {
		ds[i] = storage.RowDelta{
			Table: uint32(r.Uvarint("row delta table", math.MaxUint32)),
			Vnode: uint16(r.Uvarint("row delta vnode", math.MaxUint16)),
			Delta: r.Varint("row delta change"),
		}
		if r.Err() != nil {
			return nil
		}
	}
	if err := checkRowDeltas(ds); err != nil {
		r.Fail("row deltas", "%v", err)
		return nil
	}
	return ds
}

// checkObjectName refuses a name of n bytes that is empty or longer than
// maxObjectName.
func checkObjectName(n uint64) error {
	switch {
	case n == 0:
		return fmt.Errorf("empty")
	case n > maxObjectName:
		return fmt.Errorf("%d bytes, longer than %d", n, maxObjectName)
	}
	return nil
}

// readObjectName reads a length-prefixed name of field, the i-th one, refusing what
// checkObjectName does (the failure names it by format and i) before it takes the
// name's bytes (aliasing the input).
func readObjectName(r *wire.Reader, field, format string, i int) []byte {
	n := r.Uvarint(field, math.MaxUint64)
	if r.Err() != nil {
		return nil
	}
	if err := checkObjectName(n); err != nil {
		r.Fail(field, format+": %v", i, err)
		return nil
	}
	return r.Bytes(field, int(n))
}

// appendPrefixed appends v after its length as a uvarint.
func appendPrefixed[T string | []byte](dst []byte, v T) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(v))), v...)
}
