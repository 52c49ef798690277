package engine

import (
	"fmt"
	"strings"
)

// maxPlanDepth bounds the nodes from a plan's root to its deepest scan: deeper plans
// are refused before anything recurses over them.
const maxPlanDepth = 64

// checkPlanTree refuses a plan that the planner cannot walk: a nil input, or a nil
// pointer of a plan type (a *FilterPlan that is nil); a node that is its own input,
// directly or through others; a plan deeper than maxPlanDepth. The error names the
// path to the node from the root, as "filter.input.join.right". A node may appear
// twice in one plan (a self-join's two scans).
func checkPlanTree(p Plan) error {
	onPath := map[Plan]bool{}
	var walk func(p Plan, path []string) error
	walk = func(p Plan, path []string) error {
		at := strings.Join(path, ".")
		if at == "" {
			at = "the plan's root"
		}
		if isNilPlan(p) {
			return fmt.Errorf("%s: nil plan node", at)
		}
		if onPath[p] {
			return fmt.Errorf("%s: the %s node is its own input (a cycle)", at, p.kind())
		}
		if len(path) >= maxPlanDepth {
			return fmt.Errorf("%s: the plan is deeper than %d nodes", at, maxPlanDepth)
		}
		onPath[p] = true
		defer delete(onPath, p)
		var names []string
		switch p.(type) {
		case *FilterPlan, *ProjectPlan, *AggregatePlan:
			names = []string{"input"}
		case *JoinPlan:
			names = []string{"left", "right"}
		}
		for i, in := range p.inputs() {
			if err := walk(in, append(path, p.kind()+"."+names[i])); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(p, nil)
}

// isNilPlan reports whether p is nil, or a nil pointer of one of the plan types.
func isNilPlan(p Plan) bool {
	switch n := p.(type) {
	case nil:
		return true
	case *ScanPlan:
		return n == nil
	case *FilterPlan:
		return n == nil
	case *ProjectPlan:
		return n == nil
	case *AggregatePlan:
		return n == nil
	case *JoinPlan:
		return n == nil
	}
	return false
}
