package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"cel.dev/cel-go/cel"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/policy"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var printer = message.NewPrinter(language.English)

// Keys of a target's attributes the runtime gives a meaning to; every other
// attribute must equal the top-level argument of that name.
const (
	AttrMaxPerRun  = "max_per_run"
	AttrMaxPerHour = "max_per_hour"
	AttrPer        = "per"
)

// compiledPolicy is a policy of the file, ready to evaluate.
type compiledPolicy struct {
	spec  PolicySpec
	def   string // the file's default
	index int    // position in the file
	rules []*compiledRule
	tools []glob
	class map[string]bool
}

// compiledRule is one rule, its pattern and condition compiled.
type compiledRule struct {
	spec  RuleSpec
	pol   *compiledPolicy
	id    string // policy/rule
	ord   int    // its place in the file's rules (Policy.rules)
	glob  glob
	cond  cel.Program
	fold  *folder        // cond folded per tool spec; nil: none to fold
	equal map[string]any // attributes the arguments must match
	// perRun and perHour bound calls counted in the run's view (-1: none);
	// with fleet, perHour is counted across runs in a [Windows] counter.
	perRun, perHour int64
	fleet           bool
	at              pos
	// reason is what the rule's results say: its id, reason and message.
	reason string
}

// Parse compiles the rules file data (YAML or JSON), named name in errors.
// Errors are a [*LoadError] naming name:line:column and wrapping
// [ErrSyntax], [ErrSchema], [ErrCondition] or [ErrInvalid].
func Parse(name string, data []byte) (*Policy, error) {
	f, ps, err := parse(name, data)
	if err != nil {
		return nil, err
	}
	return compile(name, f, ps)
}

func compile(name string, f *File, ps positions) (*Policy, error) {
	fail := func(ptr string, sentinel error, format string, a ...any) error {
		p := ps.at(ptr)
		return &LoadError{File: name, Line: p.line, Col: p.col, Pointer: ptr, Reason: fmt.Sprintf(format, a...), Err: sentinel}
	}
	if f.Default == "" {
		f.Default = DefaultSideEffects
	}
	p := &Policy{name: name, file: f, defName: f.Default, defID: "default " + f.Default, toolCache: &sync.Map{}, candCache: &sync.Map{}}
	switch f.Default {
	case DefaultSideEffects:
		p.def = policy.DefaultSideEffects()
	case DefaultDeny, DefaultAllow:
	}
	seen := map[string]string{}
	for i := range f.Policies {
		ps0 := f.Policies[i]
		ptr := "/policies/" + strconv.Itoa(i)
		if prev, dup := seen[ps0.ID]; dup {
			return nil, fail(ptr+"/id", ErrInvalid, "policy id %q repeated (first at %s)", ps0.ID, prev)
		}
		at := ps.at(ptr + "/id")
		seen[ps0.ID] = fmt.Sprintf("%d:%d", at.line, at.col)
		cp := &compiledPolicy{spec: ps0, index: i, def: f.Default}
		for _, t := range ps0.Scope.Tools {
			cp.tools = append(cp.tools, compileGlob(t))
		}
		if len(ps0.Scope.SideEffects) > 0 {
			cp.class = map[string]bool{}
			for _, c := range ps0.Scope.SideEffects {
				cp.class[c] = true
			}
		}
		ruleSeen := map[string]bool{}
		for j, rs := range ps0.Rules {
			rptr := ptr + "/rules/" + strconv.Itoa(j)
			if ruleSeen[rs.ID] {
				return nil, fail(rptr+"/id", ErrInvalid, "rule id %q repeated in policy %q", rs.ID, ps0.ID)
			}
			ruleSeen[rs.ID] = true
			r, err := compileRule(cp, rs, rptr, fail)
			if err != nil {
				return nil, err
			}
			r.at = ps.at(rptr)
			cp.rules = append(cp.rules, r)
		}
		p.policies = append(p.policies, cp)
	}
	// Priority orders the record, never the outcome: higher first, then the
	// file's order.
	slices.SortStableFunc(p.policies, func(a, b *compiledPolicy) int { return b.spec.Priority - a.spec.Priority })
	for _, cp := range p.policies {
		p.rules = append(p.rules, cp.rules...)
	}
	for i, r := range p.rules {
		r.ord = i
	}
	p.discovers = p.anyDiscovery()
	canon, err := jsonform.Marshal(normalized(f))
	if err != nil {
		return nil, fail("", ErrInvalid, "canonical form: %v", err)
	}
	sum := sha256.Sum256(canon)
	p.canon = canon
	p.id = "rules sha256:" + hex.EncodeToString(sum[:])
	return p, nil
}

// maxLimit bounds max_per_run and max_per_hour: 2^53, from which on a
// JSON or YAML number no longer holds every whole number exactly (the
// written 2^53+1 reads as 2^53).
const maxLimit = 1 << 53

func compileRule(cp *compiledPolicy, rs RuleSpec, ptr string, fail func(string, error, string, ...any) error) (*compiledRule, error) {
	r := &compiledRule{spec: rs, pol: cp, id: cp.spec.ID + "/" + rs.ID, glob: compileGlob(rs.Target.Pattern), perRun: -1, perHour: -1}
	for k, v := range rs.Target.Attributes {
		switch k {
		case AttrMaxPerRun, AttrMaxPerHour:
			// The schema holds it to a non-negative whole number, but not
			// to one a count can hold: 1e19 is whole, and converted it
			// would be negative, which means no limit at all.
			n, ok := v.(float64)
			if !ok || n < 0 || n != math.Trunc(n) || n >= maxLimit {
				return nil, fail(ptr+"/target/attributes/"+k, ErrInvalid, "rule %q: %s: %v is not a count under %d", r.id, k, v, int64(maxLimit))
			}
			if k == AttrMaxPerRun {
				r.perRun = int64(n)
			} else {
				r.perHour = int64(n)
			}
		case AttrPer:
			r.fleet = v == "fleet"
		default:
			if r.equal == nil {
				r.equal = map[string]any{}
			}
			r.equal[k] = v
		}
	}
	if r.fleet && r.perHour < 0 {
		return nil, fail(ptr+"/target/attributes/per", ErrInvalid, "rule %q: per: fleet needs max_per_hour (windows across runs are hourly)", r.id)
	}
	r.reason = r.id + r.suffix()
	if rs.Condition != "" {
		prg, checked, err := compileChecked(rs.Condition)
		if err != nil {
			return nil, fail(ptr+"/condition", ErrCondition, "condition of rule %q: %v: %s", r.id, err, rs.Condition)
		}
		r.cond = prg
		if checked != nil {
			r.fold = newFolder(checked)
		}
	}
	return r, nil
}

// normalized is f with every default written out, so that two files that
// mean the same have one canonical form.
func normalized(f *File) *File {
	c := *f
	c.Policies = make([]PolicySpec, len(f.Policies))
	for i, p := range f.Policies {
		on := p.On()
		p.Enabled = &on
		if len(p.Phases) == 0 {
			p.Phases = []string{PhaseInvocation}
		}
		c.Policies[i] = p
	}
	return &c
}
