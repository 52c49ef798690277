package wire

import (
	"fmt"
	"slices"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vnode"
)

// barriersEqual reports the first difference between a and b, field by field, or
// nil. An empty list or map equals a nil one.
func barriersEqual(a, b *executors.Barrier) error {
	if a.Prev != b.Prev || a.Curr != b.Curr || a.Kind != b.Kind {
		return fmt.Errorf("barrier %d -> %d kind %d != %d -> %d kind %d", a.Prev, a.Curr, a.Kind, b.Prev, b.Curr, b.Kind)
	}
	switch x := a.Mutation.(type) {
	case nil:
		if b.Mutation != nil {
			return fmt.Errorf("mutation nil != %T", b.Mutation)
		}
		return nil
	case executors.Add:
		y, ok := b.Mutation.(executors.Add)
		if !ok {
			return fmt.Errorf("mutation %T != %T", a.Mutation, b.Mutation)
		}
		return addsEqual(x, y)
	case executors.Update:
		y, ok := b.Mutation.(executors.Update)
		if !ok {
			return fmt.Errorf("mutation %T != %T", a.Mutation, b.Mutation)
		}
		return updatesEqual(x, y)
	case executors.Pause:
		y, ok := b.Mutation.(executors.Pause)
		if !ok || !slices.Equal(x.Fragments, y.Fragments) {
			return fmt.Errorf("mutation %#v != %#v", a.Mutation, b.Mutation)
		}
	case executors.Resume:
		y, ok := b.Mutation.(executors.Resume)
		if !ok || !slices.Equal(x.Fragments, y.Fragments) {
			return fmt.Errorf("mutation %#v != %#v", a.Mutation, b.Mutation)
		}
	case executors.Stop:
		y, ok := b.Mutation.(executors.Stop)
		if !ok || !slices.Equal(x.Actors, y.Actors) {
			return fmt.Errorf("mutation %#v != %#v", a.Mutation, b.Mutation)
		}
	case executors.Throttle:
		y, ok := b.Mutation.(executors.Throttle)
		if !ok || len(x.Limits) != len(y.Limits) {
			return fmt.Errorf("mutation %#v != %#v", a.Mutation, b.Mutation)
		}
		for f, l := range x.Limits {
			m, ok := y.Limits[f]
			if !ok || (l == nil) != (m == nil) || (l != nil && *l != *m) {
				return fmt.Errorf("throttle: limit of fragment %d: %v != %v (present %v)", f, fmtLimit(l), fmtLimit(m), ok)
			}
		}
	default:
		return fmt.Errorf("unexpected mutation %T", a.Mutation)
	}
	return nil
}

func fmtLimit(l *int64) string {
	if l == nil {
		return "nil"
	}
	return fmt.Sprint(*l)
}

func addsEqual(x, y executors.Add) error {
	if !slices.Equal(x.Actors, y.Actors) || x.PauseOnBootstrap != y.PauseOnBootstrap || len(x.Dispatchers) != len(y.Dispatchers) {
		return fmt.Errorf("add %#v != %#v", x, y)
	}
	for i, d := range x.Dispatchers {
		e := y.Dispatchers[i]
		if d.Actor != e.Actor || d.Fragment != e.Fragment || d.Kind != e.Kind ||
			!slices.Equal(d.Outputs, e.Outputs) || !slices.Equal(d.Mapping, e.Mapping) {
			return fmt.Errorf("add: dispatcher %d: %#v != %#v", i, d, e)
		}
	}
	return nil
}

func updatesEqual(x, y executors.Update) error {
	if len(x.Dispatchers) != len(y.Dispatchers) || len(x.Merges) != len(y.Merges) ||
		len(x.Vnodes) != len(y.Vnodes) || !slices.Equal(x.Stop, y.Stop) {
		return fmt.Errorf("update %#v != %#v", x, y)
	}
	for i, d := range x.Dispatchers {
		e := y.Dispatchers[i]
		if d.Actor != e.Actor || d.Fragment != e.Fragment || !slices.Equal(d.AddOutputs, e.AddOutputs) ||
			!slices.Equal(d.RemoveOutputs, e.RemoveOutputs) || !slices.Equal(d.Mapping, e.Mapping) {
			return fmt.Errorf("update: dispatcher %d: %#v != %#v", i, d, e)
		}
	}
	for i, m := range x.Merges {
		n := y.Merges[i]
		if m.Actor != n.Actor || !slices.Equal(m.AddInputs, n.AddInputs) || !slices.Equal(m.RemoveInputs, n.RemoveInputs) {
			return fmt.Errorf("update: merge %d: %#v != %#v", i, m, n)
		}
	}
	for a, bm := range x.Vnodes {
		cm, ok := y.Vnodes[a]
		if !ok || !bitmapsEqual(bm, cm) {
			return fmt.Errorf("update: vnodes of actor %d: %v != %v (present %v)", a, bm, cm, ok)
		}
	}
	return nil
}

func bitmapsEqual(a, b *vnode.Bitmap) bool { return a.Equal(b) }

// limit returns a pointer to v, for Throttle limits.
func limit(v int64) *int64 { return &v }
