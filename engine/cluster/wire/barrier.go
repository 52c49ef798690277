package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vnode"
)

// The mutation tags: the byte after a barrier's kind.
const (
	tagNone byte = iota
	tagAdd
	tagUpdate
	tagPause
	tagResume
	tagThrottle
	tagStop
)

// AppendBarrier appends the metadata of barrier b:
//
//	header | prev, curr (uint64 big-endian each) | kind (byte) | mutation tag (byte)
//	| the mutation's body
//
// Lists are a uvarint count then the elements; actor and fragment ids, uvarints; a
// node, a zigzag varint; a vnode mapping, a uvarint count then uint16 little-endian
// entries; a vnode bitmap, a uvarint length then vnode.Bitmap.MarshalBinary's bytes
// (length 0: a nil bitmap). Maps (Update.Vnodes, Throttle.Limits) are written in
// increasing key order; a Throttle limit is a flag byte (0: nil, the limit removed)
// then, when set, a zigzag varint. The bodies, field by field in declaration order:
//
//	add:      actors | pause on bootstrap (0 or 1)
//	          | dispatchers: actor | fragment | kind (byte) | outputs | mapping
//	update:   dispatchers: actor | fragment | add outputs | remove outputs (actors) | mapping
//	          | merges: actor | add inputs | remove inputs | vnodes: actor | bitmap | stop
//	pause, resume: fragments
//	throttle: limits: fragment | flag | limit
//	stop:     actors
//
// An output is an actor then a node. AppendBarrier fails on a barrier that does not
// validate (executors.Barrier.Validate), a mutation type it does not know (a pointer
// to a mutation, say), or a bitmap that does not marshal.
func AppendBarrier(dst []byte, b *executors.Barrier) ([]byte, error) {
	if err := b.Validate(); err != nil {
		return dst, fmt.Errorf("wire: %w", err)
	}
	if b.Kind > executors.Checkpoint {
		return dst, fmt.Errorf("wire: barrier %d -> %d: unknown barrier kind %d", b.Prev, b.Curr, b.Kind)
	}
	dst = appendHeader(dst, KindBarrier)
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.Prev))
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.Curr))
	dst = append(dst, byte(b.Kind))
	var err error
	switch m := b.Mutation.(type) {
	case nil:
		dst = append(dst, tagNone)
	case executors.Add:
		dst = appendAdd(append(dst, tagAdd), m)
	case executors.Update:
		dst, err = appendUpdate(append(dst, tagUpdate), m)
	case executors.Pause:
		dst = appendIDs(append(dst, tagPause), m.Fragments)
	case executors.Resume:
		dst = appendIDs(append(dst, tagResume), m.Fragments)
	case executors.Throttle:
		dst = appendThrottle(append(dst, tagThrottle), m)
	case executors.Stop:
		dst = appendIDs(append(dst, tagStop), m.Actors)
	default:
		err = fmt.Errorf("unknown mutation type %T", m)
	}
	if err != nil {
		return dst, fmt.Errorf("wire: barrier %d -> %d: %w", b.Prev, b.Curr, err)
	}
	return dst, nil
}

func appendIDs[ID executors.ActorID | executors.FragmentID](dst []byte, ids []ID) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ids)))
	for _, id := range ids {
		dst = binary.AppendUvarint(dst, uint64(id))
	}
	return dst
}

func appendOutputs(dst []byte, outs []executors.Output) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(outs)))
	for _, o := range outs {
		dst = binary.AppendUvarint(dst, uint64(o.Actor))
		dst = binary.AppendVarint(dst, int64(o.Node))
	}
	return dst
}

func appendMapping(dst []byte, m vnode.Mapping) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(m)))
	for _, a := range m {
		dst = binary.LittleEndian.AppendUint16(dst, a)
	}
	return dst
}

func appendAdd(dst []byte, m executors.Add) []byte {
	dst = appendIDs(dst, m.Actors)
	if m.PauseOnBootstrap {
		dst = append(dst, 1)
	} else {
		dst = append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.Dispatchers)))
	for _, d := range m.Dispatchers {
		dst = binary.AppendUvarint(dst, uint64(d.Actor))
		dst = binary.AppendUvarint(dst, uint64(d.Fragment))
		dst = append(dst, byte(d.Kind))
		dst = appendOutputs(dst, d.Outputs)
		dst = appendMapping(dst, d.Mapping)
	}
	return dst
}

func appendUpdate(dst []byte, m executors.Update) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(m.Dispatchers)))
	for _, d := range m.Dispatchers {
		dst = binary.AppendUvarint(dst, uint64(d.Actor))
		dst = binary.AppendUvarint(dst, uint64(d.Fragment))
		dst = appendOutputs(dst, d.AddOutputs)
		dst = appendIDs(dst, d.RemoveOutputs)
		dst = appendMapping(dst, d.Mapping)
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.Merges)))
	for _, mu := range m.Merges {
		dst = binary.AppendUvarint(dst, uint64(mu.Actor))
		dst = appendOutputs(dst, mu.AddInputs)
		dst = appendIDs(dst, mu.RemoveInputs)
	}
	actors := make([]executors.ActorID, 0, len(m.Vnodes))
	for a := range m.Vnodes {
		actors = append(actors, a)
	}
	slices.Sort(actors)
	dst = binary.AppendUvarint(dst, uint64(len(actors)))
	for _, a := range actors {
		dst = binary.AppendUvarint(dst, uint64(a))
		bm := m.Vnodes[a]
		if bm == nil {
			dst = append(dst, 0)
			continue
		}
		data, err := bm.MarshalBinary()
		if err != nil {
			return dst, fmt.Errorf("update: vnodes of actor %d: %w", a, err)
		}
		dst = binary.AppendUvarint(dst, uint64(len(data)))
		dst = append(dst, data...)
	}
	return appendIDs(dst, m.Stop), nil
}

func appendThrottle(dst []byte, m executors.Throttle) []byte {
	frags := make([]executors.FragmentID, 0, len(m.Limits))
	for f := range m.Limits {
		frags = append(frags, f)
	}
	slices.Sort(frags)
	dst = binary.AppendUvarint(dst, uint64(len(frags)))
	for _, f := range frags {
		dst = binary.AppendUvarint(dst, uint64(f))
		if l := m.Limits[f]; l == nil {
			dst = append(dst, 0)
		} else {
			dst = binary.AppendVarint(append(dst, 1), *l)
		}
	}
	return dst
}

// DecodeBarrier decodes what AppendBarrier wrote. It fails, naming the field, on
// truncated input, a list longer than the rest of the input could hold, an id out of
// the uint32 range, an unknown barrier kind, mutation tag or dispatcher kind, a map
// whose keys do not increase, a bitmap that vnode.UnmarshalBitmap refuses, trailing
// bytes, and a barrier that does not validate. Nothing it allocates is larger than a
// constant times the input.
func DecodeBarrier(md []byte) (*executors.Barrier, error) {
	body, err := expect(md, KindBarrier)
	if err != nil {
		return nil, err
	}
	r := Reader{b: body}
	b := &executors.Barrier{
		Prev: executors.Epoch(r.U64("prev")),
		Curr: executors.Epoch(r.U64("curr")),
	}
	kind := r.Byte("barrier kind")
	if kind > byte(executors.Checkpoint) {
		r.Fail("barrier kind", "unknown kind %d", kind)
	}
	b.Kind = executors.BarrierKind(kind)
	switch tag := r.Byte("mutation"); tag {
	case tagNone:
	case tagAdd:
		b.Mutation = r.add()
	case tagUpdate:
		b.Mutation = r.update()
	case tagPause:
		b.Mutation = executors.Pause{Fragments: readIDs[executors.FragmentID](&r, "pause.fragments")}
	case tagResume:
		b.Mutation = executors.Resume{Fragments: readIDs[executors.FragmentID](&r, "resume.fragments")}
	case tagThrottle:
		b.Mutation = r.throttle()
	case tagStop:
		b.Mutation = executors.Stop{Actors: readIDs[executors.ActorID](&r, "stop.actors")}
	default:
		r.Fail("mutation", "unknown mutation tag %d", tag)
	}
	if err := r.Finish(); err != nil {
		return nil, fmt.Errorf("wire: barrier %d -> %d: %w", b.Prev, b.Curr, err)
	}
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	return b, nil
}

func (r *Reader) id(field string) uint32 { return uint32(r.Uvarint(field, math.MaxUint32)) }

// readIDs reads a list of ids; an empty list is nil.
func readIDs[ID executors.ActorID | executors.FragmentID](r *Reader, field string) []ID {
	n := r.Count(field, 1)
	if n == 0 {
		return nil
	}
	ids := make([]ID, n)
	for i := range ids {
		ids[i] = ID(r.id(field))
	}
	return ids
}

func (r *Reader) outputs(field string) []executors.Output {
	n := r.Count(field, 2)
	if n == 0 {
		return nil
	}
	outs := make([]executors.Output, n)
	for i := range outs {
		outs[i].Actor = executors.ActorID(r.id(field + ".actor"))
		outs[i].Node = int(r.Varint(field + ".node"))
	}
	return outs
}

func (r *Reader) mapping(field string) vnode.Mapping {
	n := r.Count(field, 2)
	if n > vnode.MaxCount {
		r.Fail(field, "%d vnodes, at most %d", n, vnode.MaxCount)
	}
	raw := r.Bytes(field, 2*n)
	if len(raw) == 0 {
		return nil
	}
	m := make(vnode.Mapping, n)
	for i := range m {
		m[i] = binary.LittleEndian.Uint16(raw[2*i:])
	}
	return m
}

func (r *Reader) add() executors.Add {
	m := executors.Add{
		Actors:           readIDs[executors.ActorID](r, "add.actors"),
		PauseOnBootstrap: r.Flag("add.pause_on_bootstrap"),
	}
	n := r.Count("add.dispatchers", 5)
	for range n {
		d := executors.NewDispatcher{
			Actor:    executors.ActorID(r.id("add.dispatchers.actor")),
			Fragment: executors.FragmentID(r.id("add.dispatchers.fragment")),
		}
		kind := r.Byte("add.dispatchers.kind")
		if kind > byte(executors.NoShuffle) {
			r.Fail("add.dispatchers.kind", "unknown dispatcher kind %d", kind)
		}
		d.Kind = executors.DispatcherKind(kind)
		d.Outputs = r.outputs("add.dispatchers.outputs")
		d.Mapping = r.mapping("add.dispatchers.mapping")
		if r.err != nil {
			break
		}
		m.Dispatchers = append(m.Dispatchers, d)
	}
	return m
}

func (r *Reader) update() executors.Update {
	var m executors.Update
	n := r.Count("update.dispatchers", 5)
	for range n {
		d := executors.DispatcherUpdate{
			Actor:         executors.ActorID(r.id("update.dispatchers.actor")),
			Fragment:      executors.FragmentID(r.id("update.dispatchers.fragment")),
			AddOutputs:    r.outputs("update.dispatchers.add_outputs"),
			RemoveOutputs: readIDs[executors.ActorID](r, "update.dispatchers.remove_outputs"),
			Mapping:       r.mapping("update.dispatchers.mapping"),
		}
		if r.err != nil {
			break
		}
		m.Dispatchers = append(m.Dispatchers, d)
	}
	n = r.Count("update.merges", 3)
	for range n {
		mu := executors.MergeUpdate{
			Actor:        executors.ActorID(r.id("update.merges.actor")),
			AddInputs:    r.outputs("update.merges.add_inputs"),
			RemoveInputs: readIDs[executors.ActorID](r, "update.merges.remove_inputs"),
		}
		if r.err != nil {
			break
		}
		m.Merges = append(m.Merges, mu)
	}
	n = r.Count("update.vnodes", 2)
	var last executors.ActorID
	for i := range n {
		a := executors.ActorID(r.id("update.vnodes.actor"))
		if i > 0 && a <= last {
			r.Fail("update.vnodes.actor", "actor %d after actor %d: keys must increase", a, last)
		}
		last = a
		data := r.Bytes("update.vnodes.bitmap", int(r.Uvarint("update.vnodes.bitmap", math.MaxInt32)))
		if r.err != nil {
			break
		}
		var bm *vnode.Bitmap
		if len(data) > 0 {
			var err error
			if bm, err = vnode.UnmarshalBitmap(data); err != nil {
				r.Fail("update.vnodes.bitmap", "actor %d: %v", a, err)
				break
			}
		}
		if m.Vnodes == nil {
			m.Vnodes = make(map[executors.ActorID]*vnode.Bitmap, n)
		}
		m.Vnodes[a] = bm
	}
	m.Stop = readIDs[executors.ActorID](r, "update.stop")
	return m
}

func (r *Reader) throttle() executors.Throttle {
	var m executors.Throttle
	n := r.Count("throttle.limits", 2)
	var last executors.FragmentID
	for i := range n {
		f := executors.FragmentID(r.id("throttle.limits.fragment"))
		if i > 0 && f <= last {
			r.Fail("throttle.limits.fragment", "fragment %d after fragment %d: keys must increase", f, last)
		}
		last = f
		var limit *int64
		if r.Flag("throttle.limits.set") {
			v := r.Varint("throttle.limits.limit")
			limit = &v
		}
		if r.err != nil {
			break
		}
		if m.Limits == nil {
			m.Limits = make(map[executors.FragmentID]*int64, n)
		}
		m.Limits[f] = limit
	}
	return m
}
