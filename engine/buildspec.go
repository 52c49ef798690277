package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/seed04fbb902/weir/executors"
	"github.com/seed04fbb902/weir/vnode"
)

// Building actors is split in two, as it is between a meta node and its compute nodes:
// the coordinator places the actors (ids, nodes, vnodes, the edges between them) and
// sends each node a build spec; the node builds its actors from that spec and from
// nothing else of the coordinator's: the catalog entries of the objects they run are
// in the spec, and the node lowers a view's plan itself. The node keeps what it built
// (node.go): once every node has built its part of a change, each gets a spec that
// starts its actors, and when one node fails, each gets one that drops them. With a
// Control, the spec travels over the node's control stream (ControlGraph.Build);
// without one, the coordinator hands it to the node's side directly, in the same
// encoding.

// BuildSpecVersion is the version of the encoding of a build spec (the payload of
// ControlGraph.Build); a change to the spec's fields bumps it.
const BuildSpecVersion = 3

// maxSpecActors bounds the actors of one build spec, so that a decoded spec never
// allocates past what its frame could describe.
const maxSpecActors = 1 << 16

// buildSpec is what a node is asked to do with its actors: build those of Actors, then
// start those of Start, all of it or none; or drop those of Drop (a spec that drops
// does nothing else).
type buildSpec struct {
	Version uint32 `json:"version"`
	// Node is the node the spec is for: another node refuses it.
	Node int `json:"node"`
	// Paused is the engine's pause (Pause, Options.PauseOnBootstrap) as the spec
	// left: the backfills it builds start paused.
	Paused bool `json:"paused,omitempty"`
	// Objects are the catalog entries (object.encode) of every object whose actors
	// the spec builds, and of the upstreams their views read.
	Objects []json.RawMessage `json:"objects"`
	Actors  []actorSpec       `json:"actors"`
	// Start are actors built by this spec or an earlier one and not started yet,
	// to start; Drop are actors built and not started, to forget (an actor the
	// node does not have is dropped already).
	Start []executors.ActorID `json:"start,omitempty"`
	Drop  []executors.ActorID `json:"drop,omitempty"`
}

// The roles of an actor spec.
const (
	roleDML   = "dml"   // a table's DML actor: the writers' channel, hash-dispatched
	roleTable = "table" // a table's actor: materializes what its DML actor sends
	roleView  = "view"  // one actor of one node of a view's plan
	roleFeed  = "feed"  // more dispatchers for an actor built earlier and not started
)

// actorSpec is one actor of a build spec.
type actorSpec struct {
	ID       executors.ActorID    `json:"id"`
	Fragment executors.FragmentID `json:"fragment"`
	Role     string               `json:"role"`
	Object   string               `json:"object"`
	// PlanNode is a view actor's node of the view's plan, its index in the plan's
	// post-order.
	PlanNode int `json:"plan_node,omitempty"`
	// Vnodes are the vnodes a table or view actor owns (vnode.Bitmap's encoding).
	Vnodes []byte `json:"vnodes,omitempty"`
	// States are a view actor's state tables: a scan's progress table, an
	// aggregate's or join's tables in its node's order.
	States []uint32 `json:"states,omitempty"`
	// Inputs are, per input of the actor's operator, the actors whose edges it
	// merges (a table actor: its DML actor), each with its node.
	Inputs [][]executors.Output `json:"inputs,omitempty"`
	// Dispatchers are the actor's outputs.
	Dispatchers []executors.NewDispatcher `json:"dispatchers,omitempty"`
	// LocalUpstream: the scan's backfill reads its upstream's uncommitted data in
	// this node's store instead of replicating the change stream.
	LocalUpstream bool `json:"local_upstream,omitempty"`
}

// encodeBuildSpec encodes s (with its version set).
func encodeBuildSpec(s *buildSpec) ([]byte, error) {
	s.Version = BuildSpecVersion
	return json.Marshal(s)
}

// decodeBuildSpec decodes what encodeBuildSpec wrote and checks what it can without
// the node's state: the version, the objects' entries, every actor's role, object
// and vnodes. It returns the objects by name and the actors' vnodes in spec order.
func decodeBuildSpec(data []byte) (*buildSpec, map[string]*object, []*vnode.Bitmap, error) {
	var s buildSpec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, nil, nil, fmt.Errorf("build spec: %w", err)
	}
	if s.Version != BuildSpecVersion {
		return nil, nil, nil, fmt.Errorf("build spec: version %d, want %d", s.Version, BuildSpecVersion)
	}
	if s.Node < 0 {
		return nil, nil, nil, fmt.Errorf("build spec: node %d", s.Node)
	}
	if len(s.Actors) > maxSpecActors || len(s.Start) > maxSpecActors || len(s.Drop) > maxSpecActors {
		return nil, nil, nil, fmt.Errorf("build spec: %d actors (%d to start, %d to drop), more than the %d a spec may hold", len(s.Actors), len(s.Start), len(s.Drop), maxSpecActors)
	}
	for _, ids := range [][]executors.ActorID{s.Start, s.Drop} {
		if slices.Contains(ids, 0) {
			return nil, nil, nil, errors.New("build spec: actor id 0 to start or drop")
		}
	}
	if len(s.Drop) > 0 && (len(s.Actors) > 0 || len(s.Start) > 0) {
		return nil, nil, nil, fmt.Errorf("build spec: %d actors to drop with %d to build and %d to start: a spec that drops does nothing else", len(s.Drop), len(s.Actors), len(s.Start))
	}
	objs := map[string]*object{}
	for i, raw := range s.Objects {
		o, err := decodeObject(fmt.Sprintf("build spec object %d", i), raw)
		if err != nil {
			return nil, nil, nil, err
		}
		if _, dup := objs[o.Name]; dup {
			return nil, nil, nil, fmt.Errorf("build spec: object %s twice", o.Name)
		}
		objs[o.Name] = o
	}
	vnodes := make([]*vnode.Bitmap, len(s.Actors))
	seen := map[executors.ActorID]bool{}
	for i, a := range s.Actors {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("build spec: actor %d (%s of %s): %s", a.ID, a.Role, a.Object, fmt.Sprintf(format, args...))
		}
		if a.ID == 0 {
			return nil, nil, nil, fail("actor id 0")
		}
		if seen[a.ID] {
			return nil, nil, nil, fail("built twice, or built and fed")
		}
		if a.Role != roleFeed {
			seen[a.ID] = true
		}
		o, ok := objs[a.Object]
		if !ok {
			return nil, nil, nil, fail("the spec has no object %s", a.Object)
		}
		want := kindTable
		if a.Role == roleView {
			want = kindMV
		}
		switch {
		case a.Role != roleDML && a.Role != roleTable && a.Role != roleView && a.Role != roleFeed:
			return nil, nil, nil, fail("unknown role")
		case a.Role != roleFeed && o.Kind != want:
			return nil, nil, nil, fail("%s is a %s", o.Name, o.Kind)
		}
		if a.Role == roleTable || a.Role == roleView {
			b, err := vnode.UnmarshalBitmap(a.Vnodes)
			if err != nil {
				return nil, nil, nil, fail("vnodes: %v", err)
			}
			vnodes[i] = b
		}
	}
	return &s, objs, vnodes, nil
}

// specBuilder collects the build specs of one change of the graph, one per node.
type specBuilder struct {
	g     *graph
	specs map[int]*buildSpec
	objs  map[int]map[string]bool
	err   error
}

func (g *graph) newSpecs() *specBuilder {
	return &specBuilder{g: g, specs: map[int]*buildSpec{}, objs: map[int]map[string]bool{}}
}

// spec is node's spec.
func (b *specBuilder) spec(node int) *buildSpec {
	spec := b.specs[node]
	if spec == nil {
		spec = &buildSpec{Node: node}
		b.specs[node], b.objs[node] = spec, map[string]bool{}
	}
	return spec
}

// start asks actor a's node to start it.
func (b *specBuilder) start(a *actor) {
	spec := b.spec(a.node)
	spec.Start = append(spec.Start, a.id)
}

// drop asks actor a's node to drop it.
func (b *specBuilder) drop(a *actor) {
	spec := b.spec(a.node)
	spec.Drop = append(spec.Drop, a.id)
}

// add adds actor s to node's spec, with the catalog entries of objs.
func (b *specBuilder) add(node int, s actorSpec, vnodes *vnode.Bitmap, objs ...*object) {
	if b.err != nil {
		return
	}
	spec := b.spec(node)
	for _, o := range objs {
		if b.objs[node][o.Name] {
			continue
		}
		raw, err := o.encode()
		if err != nil {
			b.err = fmt.Errorf("%s: %w", o.Name, err)
			return
		}
		spec.Objects = append(spec.Objects, raw)
		b.objs[node][o.Name] = true
	}
	if vnodes != nil {
		v, err := vnodes.MarshalBinary()
		if err != nil {
			b.err = fmt.Errorf("actor %d: vnodes: %w", s.ID, err)
			return
		}
		s.Vnodes = v
	}
	spec.Actors = append(spec.Actors, s)
}

// run sends every node its spec, in node order, and returns the first node's error.
// Actors built on other nodes before it stay built: the caller discards them.
// Without a Control each spec goes to the node's side in this process.
func (b *specBuilder) run() error {
	if b.err != nil {
		return b.err
	}
	nodes := make([]int, 0, len(b.specs))
	for n := range b.specs {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	g := b.g
	for _, n := range nodes {
		b.specs[n].Paused = g.e.paused
		data, err := encodeBuildSpec(b.specs[n])
		if err != nil {
			return fmt.Errorf("build spec for node %d: %w", n, err)
		}
		if g.ctl != nil {
			err = g.ctl.Build(g.ctx, n, data)
		} else {
			err = g.buildAt(g.ctx, n, data)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startActors has the nodes of actors start them: once each node has built its part
// of a change. An error means a node's stream is lost: the caller recovers.
func (g *graph) startActors(actors []*actor) error {
	b := g.newSpecs()
	for _, a := range actors {
		b.start(a)
	}
	return b.run()
}
