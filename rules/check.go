package rules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/arbiter-run/arbiter/events"
)

// Severities of a [Finding].
const (
	SevError   = "error"
	SevWarning = "warning"
)

// Finding is something `arbiter policy check` reports about a file that
// loaded: a rule that can never apply, one another rule always outweighs, a
// pattern that matches everything, an explicit allow default.
type Finding struct {
	Severity  string
	File      string
	Line, Col int
	// Rule is "policy/rule", or "" for the file.
	Rule    string
	Message string
}

func (f Finding) String() string {
	where := f.File + ":" + fmt.Sprint(f.Line) + ":" + fmt.Sprint(f.Col)
	if f.Rule != "" {
		return fmt.Sprintf("%s: %s: %s: %s", where, f.Severity, f.Rule, f.Message)
	}
	return fmt.Sprintf("%s: %s: %s", where, f.Severity, f.Message)
}

// Lint lints a loaded file. Loading already refused everything that is an
// error (schema, conditions, repeated ids); what Lint finds is legal and
// probably not meant.
func Lint(p *Policy) []Finding {
	var out []Finding
	add := func(at pos, rule, format string, a ...any) {
		out = append(out, Finding{Severity: SevWarning, File: p.name, Line: at.line, Col: at.col, Rule: rule, Message: fmt.Sprintf(format, a...)})
	}
	if p.defName == DefaultAllow {
		add(pos{1, 1}, "", "default: allow lets through every call no rule decides, destructive ones included (the side_effects default fails closed)")
	}
	for _, r := range p.rules {
		cp := r.pol
		switch {
		case !cp.spec.On():
			add(r.at, r.id, "never applies: policy %q is disabled", cp.spec.ID)
			continue
		case !cp.spec.HasPhase(PhaseInvocation):
			// A discovery-only policy hides tools; it decides no call.
		case strings.TrimSpace(r.spec.Condition) == "false":
			add(r.at, r.id, "never applies: its condition is false")
			continue
		case !r.reachableInScope():
			add(r.at, r.id, "never applies: pattern %q matches none of the policy's scope tools %v", r.spec.Target.Pattern, cp.spec.Scope.Tools)
			continue
		}
		if cp.spec.HasPhase(PhaseDiscovery) && !r.canHide() {
			add(r.at, r.id, "does nothing at discovery: only a deny under block, on a tool, data or operation target, with no limit or attributes, hides a tool")
		}
		if r.glob.all() && r.spec.Condition == "" && len(cp.spec.Scope.Tools) == 0 && len(cp.spec.Scope.SideEffects) == 0 && len(r.equal) == 0 {
			add(r.at, r.id, "pattern %q matches every %s, with no condition or scope to narrow it", r.spec.Target.Pattern, r.spec.Target.Type)
		}
		if by := p.shadowedBy(r); by != nil {
			add(r.at, r.id, "never changes an outcome: rule %s applies whenever it does and decides at least as strongly (%s)", by.id, by.verdictName())
		}
	}
	return out
}

// canHide reports whether the rule can hide a tool at discovery (see
// [Policy.Visible]).
func (r *compiledRule) canHide() bool {
	return r.pol.spec.Enforcement.Mode == ModeBlock && r.spec.Action == "deny" && r.perRun < 0 && r.perHour < 0 &&
		r.spec.Target.Type != TargetResource && len(r.equal) == 0
}

// reachableInScope: a tool-name rule in a policy scoped to literal tool
// names must match one of them.
func (r *compiledRule) reachableInScope() bool {
	if r.spec.Target.Type != TargetTool || len(r.pol.tools) == 0 {
		return true
	}
	for _, g := range r.pol.tools {
		if g.star || r.glob.match(g.src) {
			return true
		}
	}
	return false
}

// strength is what the rule decides when it applies (0: decides nothing,
// or depends on a limit).
func (r *compiledRule) strength() int {
	if r.perRun >= 0 || r.perHour >= 0 {
		return 0
	}
	switch r.pol.spec.Enforcement.Mode {
	case ModeWarn, ModeAudit:
		return 0
	case ModeConfirm:
		return rank(events.RequireApproval)
	}
	if r.spec.Action == "deny" {
		if r.pol.spec.Enforcement.Abort {
			return rank(events.Abort)
		}
		return rank(events.Deny)
	}
	return rank(events.Allow)
}

func (r *compiledRule) verdictName() string {
	switch r.strength() {
	case 4:
		return "abort"
	case 3:
		return "deny"
	case 2:
		return "require_approval"
	case 1:
		return "allow"
	}
	return "nothing"
}

// shadowedBy returns a rule that applies whenever r does (unconditional, at
// least as broad a target and scope) and decides at least as strongly, so r
// never changes an outcome; or nil.
func (p *Policy) shadowedBy(r *compiledRule) *compiledRule {
	if r.strength() == 0 {
		return nil
	}
	for _, a := range p.rules {
		if a == r || !a.pol.spec.On() || a.spec.Condition != "" || len(a.equal) > 0 || a.strength() < r.strength() || a.strength() == 0 {
			continue
		}
		if !a.pol.spec.HasPhase(PhaseInvocation) || a.spec.Target.Type != r.spec.Target.Type {
			continue
		}
		if !(a.glob.all() || a.spec.Target.Pattern == r.spec.Target.Pattern || (!r.glob.star && a.glob.match(r.spec.Target.Pattern))) {
			continue
		}
		if !scopeCovers(a.pol.spec.Scope, r.pol.spec.Scope) {
			continue
		}
		// Two rules that shadow each other: report only the later one.
		if a.strength() == r.strength() && p.shadowedByCheck(a, r) && p.index(a) > p.index(r) {
			continue
		}
		return a
	}
	return nil
}

func (p *Policy) shadowedByCheck(a, r *compiledRule) bool {
	return r.spec.Condition == "" && len(r.equal) == 0 && r.spec.Target.Type == a.spec.Target.Type &&
		(r.glob.all() || r.spec.Target.Pattern == a.spec.Target.Pattern || (!a.glob.star && r.glob.match(a.spec.Target.Pattern))) &&
		scopeCovers(r.pol.spec.Scope, a.pol.spec.Scope)
}

func (p *Policy) index(r *compiledRule) int { return slices.Index(p.rules, r) }

// scopeCovers reports whether scope a admits every tool scope b admits.
func scopeCovers(a, b Scope) bool {
	if len(a.Tools) > 0 && !(len(b.Tools) > 0 && subset(b.Tools, a.Tools)) {
		return false
	}
	if len(a.SideEffects) > 0 && !(len(b.SideEffects) > 0 && subset(b.SideEffects, a.SideEffects)) {
		return false
	}
	return true
}

func subset(sub, of []string) bool {
	for _, s := range sub {
		if !slices.Contains(of, s) {
			return false
		}
	}
	return true
}
