package engine

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/seed04fbb902/weir/schema"
	"github.com/seed04fbb902/weir/storage"
	"github.com/seed04fbb902/weir/vnode"
)

// The catalog is the set of tables and materialized views, persisted in the committed
// store: one entry per object, staged and committed with the checkpoint of the barrier
// that changes it (so an object and its data commit together).

const (
	kindTable = "table"
	kindMV    = "mv"

	catalogPrefix = "object/"
	catalogNextID = "next_id"
)

// object is a table or materialized view of the catalog.
type object struct {
	ID   uint32    `json:"id"`
	Name string    `json:"name"`
	Kind string    `json:"kind"`
	Def  tableJSON `json:"table"`
	// Parallelism is the number of actors of the object's fragment and Mapping their
	// vnodes (vnode -> actor index).
	Parallelism int      `json:"parallelism"`
	Mapping     []uint16 `json:"mapping"`

	// Materialized views only.
	//
	// StateIDs are the ids of the view's state tables besides its own: per node of
	// its plan, in the plan's post-order, a scan's progress table and an aggregate's
	// or join's state tables. ProgressID is the first scan's progress table (the
	// first of StateIDs).
	StateIDs   []uint32        `json:"state_ids,omitempty"`
	ProgressID uint32          `json:"progress_id,omitempty"`
	Plan       json.RawMessage `json:"plan,omitempty"`
	// Upstreams are the tables and views the plan scans, left to right.
	Upstreams []string `json:"upstreams,omitempty"`
	// Mappings are the vnode mappings of the plan's nodes' fragments (in post-order;
	// the last, the root's, is Mapping), each over Parallelism actors.
	Mappings  [][]uint16 `json:"mappings,omitempty"`
	Backfill  string     `json:"backfill,omitempty"`
	RateLimit *int64     `json:"rate_limit,omitempty"`
	Paused    bool       `json:"paused,omitempty"`
	// Role is the role of the nodes the view's job runs on ("": the regular
	// nodes): MVOptions.BackfillOn until its backfill is done and it has moved.
	Role string `json:"role,omitempty"`

	t    *schema.Table // Def, validated
	plan Plan          // Plan, decoded
}

// checkLowered checks a view's stored state against its plan, lowered again.
func (o *object) checkLowered(l *lowered) error {
	if l.out.Fingerprint() != o.t.Fingerprint() {
		return fmt.Errorf("materialized view %s: its plan now gives a table of another shape", o.Name)
	}
	if len(o.Mappings) != len(l.nodes) || len(o.StateIDs) != l.stateIDs() {
		return fmt.Errorf("materialized view %s: %d mappings and %d state ids stored for %d plan nodes and %d state tables", o.Name, len(o.Mappings), len(o.StateIDs), len(l.nodes), l.stateIDs())
	}
	for i, n := range l.nodes {
		if err := vnode.Mapping(o.Mappings[i]).Validate(n.vnodeCount, o.Parallelism); err != nil {
			return fmt.Errorf("materialized view %s: mapping of plan node %d: %w", o.Name, i, err)
		}
	}
	return nil
}

// mappings are the fragment mappings of a view.
func (o *object) mappings() []vnode.Mapping {
	out := make([]vnode.Mapping, len(o.Mappings))
	for i, m := range o.Mappings {
		out[i] = vnode.Mapping(m)
	}
	return out
}

// tableJSON is the stored form of a schema.Table.
type tableJSON struct {
	Columns []columnJSON `json:"columns"`
	PK      []keyJSON    `json:"pk"`
	DistKey []int        `json:"dist_key"`
	Vnodes  int          `json:"vnodes"`
}

type columnJSON struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable,omitempty"`
}

type keyJSON struct {
	Column     int  `json:"column"`
	Desc       bool `json:"desc,omitempty"`
	NullsFirst bool `json:"nulls_first,omitempty"`
}

func tableToJSON(t *schema.Table) tableJSON {
	d := tableJSON{DistKey: slices.Clone(t.DistKey), Vnodes: t.VnodeCount}
	for _, c := range t.Columns {
		d.Columns = append(d.Columns, columnJSON{Name: c.Name, Type: c.Type.String(), Nullable: c.Nullable})
	}
	for _, k := range t.PK {
		d.PK = append(d.PK, keyJSON{Column: k.Column, Desc: k.Desc, NullsFirst: k.NullsFirst})
	}
	return d
}

func tableFromJSON(name string, d tableJSON) (*schema.Table, error) {
	t := &schema.Table{Name: name, DistKey: slices.Clone(d.DistKey), VnodeCount: d.Vnodes}
	for _, c := range d.Columns {
		typ, err := schema.ParseType(c.Type)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		t.Columns = append(t.Columns, schema.Column{Name: c.Name, Type: typ, Nullable: c.Nullable})
	}
	for _, k := range d.PK {
		t.PK = append(t.PK, schema.KeyColumn{Column: k.Column, Desc: k.Desc, NullsFirst: k.NullsFirst})
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

func (o *object) encode() ([]byte, error) { return json.Marshal(o) }

func decodeObject(key string, data []byte) (*object, error) {
	var o object
	if err := json.Unmarshal(data, &o); err != nil {
		return nil, fmt.Errorf("catalog entry %s: %w", key, err)
	}
	t, err := tableFromJSON(o.Name, o.Def)
	if err != nil {
		return nil, fmt.Errorf("catalog entry %s: %w", key, err)
	}
	o.t = t
	if err := vnode.Mapping(o.Mapping).Validate(t.VnodeCount, o.Parallelism); err != nil {
		return nil, fmt.Errorf("catalog entry %s: %w", key, err)
	}
	if o.Kind == kindMV {
		p, err := unmarshalPlan(o.Plan)
		if err != nil {
			return nil, fmt.Errorf("catalog entry %s: plan: %w", key, err)
		}
		o.plan = p
	} else if o.Kind != kindTable {
		return nil, fmt.Errorf("catalog entry %s: unknown kind %q", key, o.Kind)
	}
	return &o, nil
}

// catalog is the in-memory copy of the committed catalog plus the changes of the DDL
// in progress; it is owned by the coordinator.
type catalog struct {
	objects map[string]*object
	nextID  uint32
}

func loadCatalog(store *storage.Store) (*catalog, error) {
	entries, err := store.Catalog()
	if err != nil {
		return nil, err
	}
	c := &catalog{objects: map[string]*object{}, nextID: 1}
	for k, v := range entries {
		switch {
		case k == catalogNextID:
			var n uint32
			if err := json.Unmarshal(v, &n); err != nil {
				return nil, fmt.Errorf("catalog entry %s: %w", k, err)
			}
			c.nextID = n
		case strings.HasPrefix(k, catalogPrefix):
			o, err := decodeObject(k, v)
			if err != nil {
				return nil, err
			}
			c.objects[o.Name] = o
		default:
			return nil, fmt.Errorf("catalog: unknown entry %q", k)
		}
	}
	for _, o := range c.objects {
		if o.ID >= c.nextID {
			return nil, fmt.Errorf("catalog: object %s has id %d, not below the next id %d", o.Name, o.ID, c.nextID)
		}
		if o.Kind == kindMV {
			for _, u := range o.Upstreams {
				if _, ok := c.objects[u]; !ok {
					return nil, fmt.Errorf("catalog: materialized view %s reads %s, which is not in the catalog", o.Name, u)
				}
			}
			for _, id := range o.StateIDs {
				if id >= c.nextID {
					return nil, fmt.Errorf("catalog: materialized view %s has state table id %d, not below the next id %d", o.Name, id, c.nextID)
				}
			}
		}
	}
	return c, nil
}

// stage writes o (or its deletion, when del) and the next id into the store's pending
// catalog, for the next checkpoint.
func (c *catalog) stage(store *storage.Store, o *object, del bool) error {
	if del {
		store.SetCatalog(catalogPrefix+o.Name, nil)
	} else {
		data, err := o.encode()
		if err != nil {
			return fmt.Errorf("catalog: encode %s: %w", o.Name, err)
		}
		store.SetCatalog(catalogPrefix+o.Name, data)
	}
	next, _ := json.Marshal(c.nextID)
	store.SetCatalog(catalogNextID, next)
	return nil
}

// sorted lists the objects so that every object comes after its upstream.
func (c *catalog) sorted() []*object {
	var out []*object
	seen := map[string]bool{}
	var visit func(o *object)
	visit = func(o *object) {
		if seen[o.Name] {
			return
		}
		seen[o.Name] = true
		if o.Kind == kindMV {
			for _, u := range o.Upstreams {
				visit(c.objects[u])
			}
		}
		out = append(out, o)
	}
	names := make([]string, 0, len(c.objects))
	for n := range c.objects {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		visit(c.objects[n])
	}
	return out
}

// dependents lists the views that read o.
func (c *catalog) dependents(name string) []string {
	var out []string
	for _, o := range c.objects {
		if o.Kind == kindMV && slices.Contains(o.Upstreams, name) {
			out = append(out, o.Name)
		}
	}
	slices.Sort(out)
	return out
}
