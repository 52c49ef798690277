package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// Node roles and dedicated backfill nodes (docs/design.md §8). A node may carry a role
// (Options.NodeRoles); tables and views run on the nodes without one. A view created
// with MVOptions.BackfillOn runs its whole job on the nodes of that role while it
// backfills, so that a large backfill takes no CPU from the views already running;
// its scans then replicate their upstreams' change streams, as arrangement backfill
// does for any scan whose upstream runs elsewhere. Once every backfill actor is
// done, the job moves onto the regular nodes in one checkpoint Update barrier (the
// actors of a rescale that keeps the parallelism and the mappings), and the catalog
// records the move, so that a recovery places the job where it last was.

// checkRoles checks Options.NodeRoles against the node count.
func checkRoles(roles []string, nodes int) error {
	if len(roles) > nodes {
		return fmt.Errorf("engine: %d node roles for %d nodes", len(roles), nodes)
	}
	regular := nodes - len(roles)
	for i, r := range roles {
		if r == "" {
			regular++
			continue
		}
		if err := checkRoleName(r); err != nil {
			return fmt.Errorf("engine: role of node %d: %w", i, err)
		}
	}
	if regular == 0 {
		return fmt.Errorf("engine: every node has a role (%s): at least one must have none, to run the tables and the views", strings.Join(roles, ", "))
	}
	return nil
}

// checkRoleName refuses a role that is too long or holds other than letters, digits,
// '-', '_' and '.'.
func checkRoleName(r string) error {
	if len(r) > 64 {
		return fmt.Errorf("role %q: longer than 64 bytes", r)
	}
	for _, c := range r {
		if !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("role %q: %q is not a letter, digit, '-', '_' or '.'", r, c)
		}
	}
	return nil
}

// roleOf is node i's role ("" for a regular node).
func (e *Engine) roleOf(i int) string {
	if i < len(e.opts.NodeRoles) {
		return e.opts.NodeRoles[i]
	}
	return ""
}

// remote reports whether node i's side runs in another process (Options.RemoteNodes).
func (e *Engine) remote(i int) bool { return slices.Contains(e.opts.RemoteNodes, i) }

// dmlOnly reports whether node i of an engine of opts runs no actor but the tables'
// DML inputs: in an engine with remote nodes, a local node with a role (weir meta's
// node 0, of role "meta"). No job is placed on it (nor does its role take a view's
// backfill), so it has no store of its own: its actors, which keep no state, use the
// engine's store, and the commit log neither asks it for a part of a checkpoint nor
// has it apply or recover one.
func dmlOnly(opts *Options, i int) bool {
	return len(opts.RemoteNodes) > 0 && !slices.Contains(opts.RemoteNodes, i) && i < len(opts.NodeRoles) && opts.NodeRoles[i] != ""
}

// dmlNode is the node of the tables' DML actors, whose inputs the writers send into:
// the first regular node in this process, else node 0 (which always is).
func (e *Engine) dmlNode() int {
	for _, n := range e.nodesOf("") {
		if !e.remote(n) {
			return n
		}
	}
	return 0
}

// nodesOf lists the nodes of role r that are up, in order ("" the regular nodes),
// but no DML-only node.
func (e *Engine) nodesOf(r string) []int {
	var out []int
	for i := range e.nodes {
		if e.roleOf(i) == r && !e.isDown(i) && !dmlOnly(&e.opts, i) {
			out = append(out, i)
		}
	}
	return out
}

// isDown reports whether node i is down in the current graph (ControlDown).
func (e *Engine) isDown(i int) bool { return e.g != nil && e.g.downNodes[i] }

// roles lists the roles the nodes have, sorted, for errors.
func (e *Engine) roles() []string {
	var out []string
	for i := range e.nodes {
		if r := e.roleOf(i); r != "" && !slices.Contains(out, r) && !dmlOnly(&e.opts, i) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// checkBackfillOn checks MVOptions.BackfillOn: a role some node has, for a view
// that is not co-located with its upstream.
func (e *Engine) checkBackfillOn(role string, kind BackfillKind) error {
	if role == "" {
		return nil
	}
	if kind == NoShuffleBackfill {
		return fmt.Errorf("a no-shuffle backfill runs beside its upstream's actors, not on the nodes of role %q", role)
	}
	if len(e.nodesOf(role)) == 0 {
		have := "no node has a role"
		if rs := e.roles(); len(rs) > 0 {
			have = "the nodes' roles are " + strings.Join(rs, ", ")
		}
		return fmt.Errorf("backfill on role %q: no node has it (%s; see Options.NodeRoles)", role, have)
	}
	return nil
}

// placeOn returns the nodes a job placed on role runs on: that role's, or the
// regular nodes for "" and for a role no node has now (the engine reopened with
// other roles).
func (e *Engine) placeOn(role string) []int {
	if ns := e.nodesOf(role); len(ns) > 0 {
		return ns
	}
	return e.nodesOf("")
}

// viewNode places actor i of fragment f of a job on role: beside the upstream's
// actors for a no-shuffle scan, on the node of the upstream actors that own most of
// its vnodes when that node is one of the role's, else round-robin over the role's
// nodes from base.
func (e *Engine) viewNode(role string, f *fragment, i, base int, upstream func() (int, bool)) int {
	if f.pn.kind == scanNode && f.pn.scan.kind.coLocated() {
		return f.up.actors[i].node
	}
	nodes := e.placeOn(role)
	if n, ok := upstream(); ok && slices.Contains(nodes, n) {
		return n
	}
	return nodes[(base+i)%len(nodes)]
}

// moveBackfilled moves every job that ran on a role's nodes and whose backfill is
// done onto the regular nodes, one Update round each; e.mu is held. A move that fails
// leaves the job where it was (the round recovers), to be moved after a later round;
// the error is logged, not returned: the caller's own round succeeded.
func (e *Engine) moveBackfilled(ctx context.Context) {
	var names []string
	for _, o := range e.cat.sorted() {
		if o.Kind == kindMV && o.Role != "" {
			names = append(names, o.Name)
		}
	}
	for _, name := range names {
		// Looked up again: a failed move recovers, which reloads the catalog.
		o, ok := e.cat.objects[name]
		if !ok || o.Role == "" || e.usable() != nil {
			continue
		}
		j, ok := e.g.jobs[o.Name]
		if !ok || !jobDone(j) {
			continue
		}
		err := e.reschedule(ctx, o, o.Parallelism, true)
		if err == nil {
			// The new actors load their vnodes' progress at the barrier after the
			// Update: until then Progress would not call the job done.
			_, err = e.round(ctx, roundSpec{})
		}
		if err != nil {
			e.log.Warn("move a backfilled view onto the regular nodes", "view", name, "error", err)
			return // the next round tries again
		}
	}
}
