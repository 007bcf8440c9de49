package rules

import (
	"slices"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
)

// DiffOver is [Diff] made exact over tools, for a worker that composes the
// file with base (the side-effect mapping; deny wins across both), which is
// how cmd/worker and `replay --rules` run a rules file. Each change keeps
// the tools whose outcome it can move (in [Change.Tools]), and a change
// that can move none is dropped: removing a deny on a destructive tool the
// mapping already denies widens nothing. A change of an approval rule is
// then exact too: where it can move an outcome the mapping allows the
// call, so it widens when it goes and narrows when it comes.
//
// What it still cannot know, being static: the arguments and the run. A
// change whose rule has a condition, attributes, a limit or a resource
// target is kept for a tool when it can move some call of it, whether or
// not any call ever does; and a rule's removal is counted even where
// another rule of the file would refuse the same calls. It errs towards
// widening, never away from it, over the tools it is given; a tool not
// given is not judged at all.
func DiffOver(old, new *Policy, base policy.SideEffectPolicy, tools []events.ToolSpec) []Change {
	oldR, newR := ruleIndex(old), ruleIndex(new)
	var out []Change
	for _, c := range Diff(old, new) {
		o, n := oldR[c.Rule], newR[c.Rule]
		if o != nil && !o.active() {
			o = nil
		}
		if n != nil && !n.active() {
			n = nil
		}
		c.Tools = []string{}
		for _, t := range tools {
			if movesTool(c, old, new, o, n, base, &t) {
				c.Tools = append(c.Tools, t.Name)
			}
		}
		if len(c.Tools) == 0 {
			continue
		}
		switch {
		case o != nil && n == nil:
			c.Direction = Widens
			if o.permission() == 1 { // a grant gone
				c.Direction = Narrows
			}
		case o == nil && n != nil:
			c.Direction = Narrows
			if n.permission() == 1 {
				c.Direction = Widens
			}
		}
		slices.Sort(c.Tools)
		out = append(out, c)
	}
	return out
}

// movesTool reports whether change c (of rule o in old, n in new, either
// nil where the rule is absent or inactive) can change the composed outcome
// of some call of t.
func movesTool(c Change, old, new *Policy, o, n *compiledRule, base policy.SideEffectPolicy, t *events.ToolSpec) bool {
	floor := basePermission(base, t)
	if c.Rule == "default" {
		// Only a deny default can refuse what the mapping lets through
		// (allow and side_effects never go below it).
		return floor < 3 && (old.defName == DefaultDeny || new.defName == DefaultDeny)
	}
	for _, r := range []*compiledRule{o, n} {
		if r == nil || !r.couldApply(t) {
			continue
		}
		p := r.permission()
		if p == 1 {
			// A grant decides the file's outcome instead of its default: it
			// matters only where that default refuses what the mapping
			// does not.
			if r.pol.def == DefaultDeny && floor < 3 {
				return true
			}
			continue
		}
		if p > floor {
			return true
		}
	}
	return false
}

// couldApply reports whether r can apply to some call of t: its policy
// admits t and its target matches what t declares (a resource target: any
// t that names a resource).
func (r *compiledRule) couldApply(t *events.ToolSpec) bool {
	if !r.pol.inScope(t) {
		return false
	}
	if r.spec.Target.Type == TargetResource {
		return t.Resource != ""
	}
	return r.limitTargets(t)
}

// permission is how far r, where it decides, lets a call go: 1 allow, 2
// require_approval, 3 deny or abort (neither runs it), 0 nothing (warn,
// audit). A limit counts at its limit.
func (r *compiledRule) permission() int {
	switch m := r.pol.spec.Enforcement.Mode; {
	case m == ModeWarn || m == ModeAudit:
		return 0
	case r.perRun >= 0 || r.perHour >= 0:
		return min(r.decisive(), 3)
	}
	return min(r.strength(), 3)
}

// basePermission is what base gives a call of t on the same scale; a class
// it does not know it denies.
func basePermission(base policy.SideEffectPolicy, t *events.ToolSpec) int {
	switch base[t.SideEffect] {
	case events.Allow:
		return 1
	case events.RequireApproval:
		return 2
	}
	return 3
}
