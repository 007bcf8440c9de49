package rules

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
)

// Directions of a [Change].
const (
	Widens  = "widens"  // something refused or held before may now run
	Narrows = "narrows" // something that ran may now be refused or held
	Changes = "changes" // may do either (a condition, target or scope changed)
)

// Change is one difference between two rules files that can change an
// outcome, with the tools and classes it reaches.
type Change struct {
	Direction string
	// Rule is "policy/rule", or "default".
	Rule string
	// Target is what the rule matches ("tool github_*"), Scope its policy's
	// scope ("tools [a b]", "classes [destructive]", "all tools").
	Target, Scope string
	Detail        string
	// Tools, set by [DiffOver] only, are the tools whose outcome the change
	// can move, as a worker composing the file with the side-effect mapping
	// decides them.
	Tools []string
}

func (c Change) String() string {
	var on string
	if c.Tools != nil {
		on = " on " + strings.Join(c.Tools, ", ")
	}
	if c.Rule == "default" {
		return fmt.Sprintf("%s: default: %s%s", c.Direction, c.Detail, on)
	}
	return fmt.Sprintf("%s: %s (%s; %s): %s%s", c.Direction, c.Rule, c.Target, c.Scope, c.Detail, on)
}

// Widening reports whether any change widens or may widen: what the drift
// gate refuses.
func Widening(cs []Change) bool {
	for _, c := range cs {
		if c.Direction != Narrows {
			return true
		}
	}
	return false
}

// Diff compares two files statically: every rule removed, added or changed,
// and the default, each classed as widening, narrowing or either. A rule
// that refused or held something (deny, abort, confirm, a limit) widens
// when it goes (removing or disabling its policy included) and narrows when
// it comes; a rule that granted (an allow in block mode) the other way
// round. A rule that changed its condition, target, scope or phases may do
// either, and counts as widening for the gate.
func Diff(old, new *Policy) []Change {
	var out []Change
	if dr := defaultRank(new.defName) - defaultRank(old.defName); dr != 0 {
		dir := Narrows
		if dr < 0 {
			dir = Widens
		}
		out = append(out, Change{Direction: dir, Rule: "default", Detail: old.defName + " → " + new.defName})
	}
	oldR, newR := ruleIndex(old), ruleIndex(new)
	for _, r := range old.rules {
		n, ok := newR[r.id]
		switch {
		case !ok || !n.active():
			if r.active() {
				why := "removed"
				if ok {
					why = "its policy is disabled or no longer decides calls"
				}
				if !ok && new.policyByID(r.pol.spec.ID) == nil {
					why = "its policy " + r.pol.spec.ID + " is removed"
				}
				out = append(out, r.change(flip(r.effect()), why))
			}
		case r.active():
			out = append(out, compareRules(r, n)...)
		}
	}
	for _, n := range new.rules {
		o, ok := oldR[n.id]
		if n.active() && (!ok || !o.active()) {
			out = append(out, n.change(n.effect(), "added"))
		}
	}
	// Drop changes of rules that decide nothing (warn, audit).
	kept := out[:0]
	for _, c := range out {
		if c.Direction != "" {
			kept = append(kept, c)
		}
	}
	return kept
}

func (p *Policy) policyByID(id string) *compiledPolicy {
	for _, cp := range p.policies {
		if cp.spec.ID == id {
			return cp
		}
	}
	return nil
}

func ruleIndex(p *Policy) map[string]*compiledRule {
	m := make(map[string]*compiledRule, len(p.rules))
	for _, r := range p.rules {
		m[r.id] = r
	}
	return m
}

// active: the rule can decide a call.
func (r *compiledRule) active() bool {
	return r.pol.spec.On() && r.pol.spec.HasPhase(PhaseInvocation)
}

// effect is the direction the rule's presence pushes outcomes: narrows for
// a refusal or a limit, widens for a grant, "" for a rule that decides
// nothing. An approval is narrower than an allow and wider than a deny:
// it narrows only where what would decide without it allows (an allow
// default, or side_effects over classes the mapping allows), and otherwise
// may do either.
func (r *compiledRule) effect() string {
	switch {
	case r.pol.spec.Enforcement.Mode == ModeWarn || r.pol.spec.Enforcement.Mode == ModeAudit:
		return ""
	case r.perRun >= 0 || r.perHour >= 0:
		return Narrows
	}
	switch r.strength() {
	case rank(events.Allow):
		return Widens
	case rank(events.RequireApproval):
		if r.baselineAllows() {
			return Narrows
		}
		return Changes
	}
	return Narrows
}

// baselineAllows reports whether the file's default allows every call the
// rule can reach (by its policy's classes, or an operation target naming
// one class).
func (r *compiledRule) baselineAllows() bool {
	switch r.pol.def {
	case DefaultAllow:
		return true
	case DefaultDeny:
		return false
	}
	classes := r.pol.spec.Scope.SideEffects
	if len(classes) == 0 && r.spec.Target.Type == TargetOperation && !r.glob.star {
		classes = []string{r.spec.Target.Pattern}
	}
	if len(classes) == 0 {
		classes = sideEffectClasses
	}
	mapping := policy.DefaultSideEffects()
	for _, c := range classes {
		if mapping[events.SideEffect(c)] != events.Allow {
			return false
		}
	}
	return true
}

// decisive is what the rule decides when it applies, a limit rule at its
// limit (0: nothing).
func (r *compiledRule) decisive() int {
	if r.perRun < 0 && r.perHour < 0 {
		return r.strength()
	}
	switch r.pol.spec.Enforcement.Mode {
	case ModeConfirm:
		return rank(events.RequireApproval)
	case ModeBlock:
		if r.pol.spec.Enforcement.Abort {
			return rank(events.Abort)
		}
		return rank(events.Deny)
	}
	return 0
}

// combine is the direction of two changes made together.
func combine(a, b string) string {
	switch {
	case a == b, b == "":
		return a
	case a == "":
		return b
	}
	return Changes
}

func flip(dir string) string {
	switch dir {
	case Narrows:
		return Widens
	case Widens:
		return Narrows
	}
	return dir
}

func (r *compiledRule) change(dir, detail string) Change {
	return Change{Direction: dir, Rule: r.id, Target: r.spec.Target.Type + " " + r.spec.Target.Pattern, Scope: scopeText(r.pol.spec.Scope), Detail: detail}
}

func scopeText(s Scope) string {
	var parts []string
	if len(s.Tools) > 0 {
		parts = append(parts, "tools "+strings.Join(s.Tools, ","))
	}
	if len(s.SideEffects) > 0 {
		parts = append(parts, "classes "+strings.Join(s.SideEffects, ","))
	}
	if len(parts) == 0 {
		return "all tools"
	}
	return strings.Join(parts, ", ")
}

// compareRules classes the change of a rule present and active in both.
func compareRules(o, n *compiledRule) []Change {
	var out []Change
	os, ns := o.decisive(), n.decisive()
	oe, ne := o.effect(), n.effect()
	switch {
	case os > 0 && ns > 0 && os != ns:
		// The same rule decides more or less strictly where it applies.
		dir := Narrows
		if ns < os {
			dir = Widens
		}
		out = append(out, n.change(dir, fmt.Sprintf("now %s (was %s)", n.describe(), o.describe())))
	case os != ns || oe != ne:
		// The rule starts or stops deciding (a warn, an audit): as if it
		// were removed and added.
		if dir := combine(flip(oe), ne); dir != "" {
			out = append(out, n.change(dir, fmt.Sprintf("now %s (was %s)", n.describe(), o.describe())))
		}
	}
	if o.fleet != n.fleet && o.perHour >= 0 && n.perHour >= 0 {
		// Counting across the fleet counts more calls than the run's own.
		dir, what := Narrows, "per: run → per: fleet"
		if o.fleet {
			dir, what = Widens, "per: fleet → per: run"
		}
		out = append(out, n.change(dir, what))
	}
	out = append(out, compareLimit(o, n, "max_per_run", o.perRun, n.perRun)...)
	out = append(out, compareLimit(o, n, "max_per_hour", o.perHour, n.perHour)...)
	if o.spec.Condition != n.spec.Condition || o.spec.Target.Type != n.spec.Target.Type || o.spec.Target.Pattern != n.spec.Target.Pattern ||
		!reflect.DeepEqual(o.equal, n.equal) || !reflect.DeepEqual(o.pol.spec.Scope, n.pol.spec.Scope) || !reflect.DeepEqual(o.pol.spec.Phases, n.pol.spec.Phases) {
		if ne != "" {
			out = append(out, n.change(Changes, "its condition, target or scope changed: it may apply to other calls"))
		}
	}
	return out
}

func compareLimit(o, n *compiledRule, name string, was, now int64) []Change {
	if was == now {
		return nil
	}
	dir := Narrows
	switch {
	case now < 0: // the limit is gone
		dir = Widens
	case was >= 0 && now > was:
		dir = Widens
	}
	return []Change{n.change(dir, fmt.Sprintf("%s %s → %s", name, limitText(was), limitText(now)))}
}

func limitText(n int64) string {
	if n < 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

func (r *compiledRule) describe() string {
	return r.spec.Action + " under " + r.pol.spec.Enforcement.Mode
}

func defaultRank(d string) int {
	switch d {
	case DefaultDeny:
		return 2
	case DefaultSideEffects:
		return 1
	}
	return 0
}

// Targets reports whether rule id ("policy/rule") of p could apply to a
// call of the tool spec: its policy's scope admits it and its target
// matches what the spec declares (a resource target: any spec that names a
// resource). Conditions and attributes are not considered.
func (p *Policy) Targets(id string, t events.ToolSpec) bool {
	for _, r := range p.rules {
		if r.id != id {
			continue
		}
		if !r.pol.inScope(&t) {
			return false
		}
		if r.spec.Target.Type == TargetResource {
			return t.Resource != ""
		}
		return r.limitTargets(&t)
	}
	return false
}
