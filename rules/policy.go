package rules

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/common/types"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// Policy is a compiled rules file. It is safe for concurrent use.
type Policy struct {
	name     string
	file     *File
	id       string
	canon    []byte
	policies []*compiledPolicy // priority order
	rules    []*compiledRule   // every rule, in priority order
	defName  string
	defID    string        // the default's part id: "default <name>"
	def      policy.Policy // nil for deny or allow
	windows  Windows       // fleet-wide counters; nil: none configured
	// toolCache holds tools as CEL values by spec hash (bounded by the
	// specs a worker has: one per tool and version).
	toolCache *sync.Map
	// candCache holds, by spec hash, the rules that can apply to a call of
	// that tool at all (see [Policy.candidates]); bounded like toolCache.
	candCache *sync.Map
	discovers bool // see Discovers
}

// WithWindows returns p counting its per: fleet rules in w. The id is p's:
// where calls are counted is not part of what the file says.
func (p *Policy) WithWindows(w Windows) *Policy {
	c := *p
	c.windows = w
	return &c
}

var _ policy.IdentifiedPolicy = (*Policy)(nil)

// PolicyID is "rules sha256:<hex>" over the file's canonical form: any
// change that could change a decision changes it (and so do changes that
// cannot, such as a new description).
func (p *Policy) PolicyID() string { return p.id }

// File returns the file as written (do not change it).
func (p *Policy) File() *File { return p.file }

// Canonical returns the canonical form the id is the hash of.
func (p *Policy) Canonical() []byte { return append([]byte(nil), p.canon...) }

// Default returns the fall-through: side_effects, deny or allow.
func (p *Policy) Default() string { return p.defName }

// Evaluate decides req by every enabled policy that applies to the tool,
// every rule whose target matches and whose condition holds: the strongest
// deciding verdict wins (abort, then deny, then require_approval, then
// allow), whatever the order; warn and audit rules are recorded and decide
// nothing; with no deciding rule the default decides. The result records
// every rule that applied, in priority order, then the default if it
// decided. A condition that fails to evaluate denies (recorded with its
// error): the policy fails closed.
func (p *Policy) Evaluate(ctx context.Context, req policy.Request, view projector.View) (policy.Ruling, error) {
	return p.evaluate(ctx, req, view, nil, nil)
}

var _ policy.PartsAppender = (*Policy)(nil)

// AppendingParts returns an evaluator that decides as [Policy.Evaluate]
// does, writing its parts into the slice it is handed with their ids
// prefixed: the rules' and the default's prefixed ids are made here, once,
// instead of on every decision by the composition (see
// [policy.PartsAppender]).
func (p *Policy) AppendingParts(prefix string) policy.PartsEvaluator {
	n := &partNames{p: p, def: prefix + p.defID, ids: make([]string, len(p.rules))}
	for i, r := range p.rules {
		n.ids[i] = prefix + r.id
	}
	return n
}

// partNames is a policy whose parts are named with a prefix.
type partNames struct {
	p   *Policy
	ids []string // by the rule's place in the file
	def string
}

func (n *partNames) EvaluateAppend(ctx context.Context, req policy.Request, view projector.View, dst []events.PolicyPart) (policy.Ruling, error) {
	return n.p.evaluate(ctx, req, view, dst, n)
}

// evaluate is [Policy.Evaluate] with the parts appended to dst, and named
// by names when it is set.
func (p *Policy) evaluate(ctx context.Context, req policy.Request, view projector.View, dst []events.PolicyPart, names *partNames) (policy.Ruling, error) {
	// The request, the view and the evaluation escape together (CEL holds
	// the evaluation as its activation), and nothing keeps them once the
	// decision is made: they are taken from a pool and handed back
	// cleared, instead of a kilobyte allocated on every step.
	h := holders.Get().(*holder)
	defer h.release()
	h.req, h.view = req, view
	h.ev = evaluation{ctx: ctx, req: &h.req, view: &h.view, windows: p.windows, tools: p.toolCache}
	ev := &h.ev
	spec := p.specRules(&h.req.Tool)
	cands, folds := spec.rules, spec.folded(ev)
	parts := dst
	var win, confirm verdict // the zero verdict has no rule
	for i, r := range cands {
		var fd *folded
		if folds != nil {
			fd = folds[i]
		}
		v, ok := r.apply(ev, fd)
		if !ok {
			continue
		}
		if names != nil {
			v.part.ID = names.ids[r.ord]
		}
		if parts == nil {
			parts = make([]events.PolicyPart, 0, len(cands)+1)
		}
		parts = append(parts, v.part)
		if !v.decides {
			continue
		}
		if win.rule == nil || rank(v.outcome) > rank(win.outcome) {
			win = v
		}
		if v.outcome == events.RequireApproval && confirm.rule == nil {
			confirm = v
		}
	}
	if win.rule == nil {
		dec, err := p.fallThrough(ctx, req, view)
		if err != nil {
			return policy.Ruling{}, err
		}
		id := p.defID
		if names != nil {
			id = names.def
		}
		dec.Parts = append(parts, events.PolicyPart{ID: id, Outcome: dec.Outcome, Reason: dec.Reason})
		return dec, nil
	}
	dec := policy.Ruling{Outcome: win.outcome, Reason: win.reason, Parts: parts}
	if win.outcome == events.RequireApproval {
		a, err := confirm.rule.approval(req)
		if err != nil {
			return policy.Ruling{}, err
		}
		dec.Approval = a
	}
	return dec, nil
}

// holder is what one decision evaluates over (see [Policy.Evaluate]).
type holder struct {
	req  policy.Request
	view projector.View
	ev   evaluation
}

var holders = sync.Pool{New: func() any { return new(holder) }}

// release clears h, so that the pool keeps nothing of the run, and hands it
// back.
func (h *holder) release() {
	*h = holder{}
	holders.Put(h)
}

// candidates returns the rules, in priority order, that can apply to a
// call of tool whatever its arguments and run: their policy is enabled, in
// the invocation phase and in scope, and their target matches what the spec
// declares (a resource target: any spec naming a resource; the argument is
// matched by apply). What is left to decide per call is the arguments, the
// condition and the limits. A spec with a hash is the same spec every time,
// so its list is kept.
func (p *Policy) candidates(tool *events.ToolSpec) []*compiledRule {
	return p.specRules(tool).rules
}

// specRules is what is worked out once per tool spec: the candidates, and
// their conditions folded for the tool.
type specRules struct {
	rules []*compiledRule
	hash  string // "": not kept, and nothing folded
	once  sync.Once
	folds []*folded // by candidate; nil entries run the condition whole
}

// folded returns the candidates' conditions folded for the tool ev holds
// (see [folder]), worked out on the first call; nil for a spec without a
// hash.
func (s *specRules) folded(ev *evaluation) []*folded {
	if s.hash == "" {
		return nil
	}
	s.once.Do(func() {
		folds := make([]*folded, len(s.rules))
		for i, r := range s.rules {
			if r.fold != nil {
				folds[i] = r.fold.fold(ev)
			}
		}
		s.folds = folds
	})
	return s.folds
}

func (p *Policy) specRules(tool *events.ToolSpec) *specRules {
	if tool.Hash != "" && p.candCache != nil {
		if c, ok := p.candCache.Load(tool.Hash); ok {
			return c.(*specRules)
		}
	}
	var out []*compiledRule
	for _, r := range p.rules {
		cp := r.pol
		if !cp.spec.On() || !cp.spec.HasPhase(PhaseInvocation) || !cp.inScope(tool) {
			continue
		}
		if r.spec.Target.Type == TargetResource {
			if tool.Resource == "" {
				continue
			}
		} else if !r.limitTargets(tool) {
			continue
		}
		out = append(out, r)
	}
	s := &specRules{rules: out}
	if tool.Hash != "" && p.candCache != nil {
		s.hash = tool.Hash
		if c, loaded := p.candCache.LoadOrStore(tool.Hash, s); loaded {
			return c.(*specRules)
		}
	}
	return s
}

func (p *Policy) fallThrough(ctx context.Context, req policy.Request, view projector.View) (policy.Ruling, error) {
	switch p.defName {
	case DefaultAllow:
		return policy.Ruling{Outcome: events.Allow, Reason: "no rule decided; the file's default is allow"}, nil
	case DefaultDeny:
		return policy.Ruling{Outcome: events.Deny, Reason: "no rule decided; the file's default is deny"}, nil
	}
	return p.def.Evaluate(ctx, req, view)
}

func rank(o events.Outcome) int {
	switch o {
	case events.Abort:
		return 4
	case events.Deny:
		return 3
	case events.RequireApproval:
		return 2
	case events.Allow:
		return 1
	}
	return 0
}

// verdict is what one applicable rule says.
type verdict struct {
	rule    *compiledRule
	outcome events.Outcome
	reason  string
	decides bool
	part    events.PolicyPart
}

// apply reports whether r applies to the request, and its verdict. fd is
// r's condition folded for the request's tool, or nil.
func (r *compiledRule) apply(ev *evaluation, fd *folded) (verdict, bool) {
	cp := r.pol
	spec := &ev.req.Tool
	if !cp.spec.On() || !cp.spec.HasPhase(PhaseInvocation) || !cp.inScope(spec) {
		return verdict{}, false
	}
	if !r.targets(spec, ev) || !r.argsEqual(ev) {
		return verdict{}, false
	}
	if r.cond != nil {
		holds, err := r.holds(ev, fd)
		if err != nil {
			reason := fmt.Sprintf("%s: condition failed to evaluate (denied): %v", r.id, err)
			return verdict{rule: r, outcome: events.Deny, reason: reason, decides: true,
				part: events.PolicyPart{ID: r.id, Outcome: events.Deny, Reason: reason, Code: "CONDITION_ERROR", Mode: ModeBlock}}, true
		}
		if !holds {
			return verdict{}, false
		}
	}
	mode := cp.spec.Enforcement.Mode
	outcome := events.Allow
	reason := r.reasonText()
	limited := r.perRun >= 0 || r.perHour >= 0
	var window string
	var reading int64
	if limited {
		over, count := r.overLimit(ev)
		if !over && r.fleet {
			var err error
			over, count, window, reading, err = r.fleetWindow(ev)
			if err != nil {
				reason := fmt.Sprintf("%s: fleet window failed (denied): %v", r.id, err)
				return verdict{rule: r, outcome: events.Deny, reason: reason, decides: true,
					part: events.PolicyPart{ID: r.id, Outcome: events.Deny, Reason: reason, Code: "WINDOW_ERROR", Mode: ModeBlock}}, true
			}
		}
		if !over {
			// Within its limit a rate rule decides nothing: it limits, it
			// never grants.
			return verdict{rule: r, outcome: events.Allow, reason: reason,
				part: events.PolicyPart{ID: r.id, Outcome: events.Allow, Reason: r.id + ": within limit (" + count + ")", Code: r.spec.Code, Mode: mode, Window: window, Count: reading}}, true
		}
		reason = r.id + ": limit reached (" + count + ")" + r.suffix()
		outcome = events.Deny
	} else if r.spec.Action == "deny" {
		outcome = events.Deny
	}
	decides := true
	switch mode {
	case ModeConfirm:
		outcome = events.RequireApproval
	case ModeWarn, ModeAudit:
		decides = false
	case ModeBlock:
		if outcome == events.Deny && cp.spec.Enforcement.Abort {
			outcome = events.Abort
		}
	}
	// The part records a reason only when it is not the rule's own text:
	// that is in the file, which the result names by its hash. Recording it
	// again for every rule that applied, on every step, was most of a
	// step's audit record.
	partReason := reason
	if !limited {
		partReason = ""
	}
	return verdict{rule: r, outcome: outcome, reason: reason, decides: decides,
		part: events.PolicyPart{ID: r.id, Outcome: outcome, Reason: partReason, Code: r.spec.Code, Mode: mode, Window: window, Count: reading}}, true
}

func (r *compiledRule) reasonText() string { return r.reason }

func (r *compiledRule) suffix() string {
	var b strings.Builder
	if r.spec.Reason != "" {
		b.WriteString(": ")
		b.WriteString(r.spec.Reason)
	}
	if m := r.pol.spec.Enforcement.Message; m != "" {
		b.WriteString(" (")
		b.WriteString(m)
		b.WriteString(")")
	}
	return b.String()
}

func (cp *compiledPolicy) inScope(t *events.ToolSpec) bool {
	if cp.class != nil && !cp.class[string(t.SideEffect)] {
		return false
	}
	if len(cp.tools) == 0 {
		return true
	}
	for _, g := range cp.tools {
		if g.match(t.Name) {
			return true
		}
	}
	return false
}

// targets reports whether the rule's target matches the tool (and, for a
// resource, the argument the tool names as its resource).
func (r *compiledRule) targets(t *events.ToolSpec, ev *evaluation) bool {
	switch r.spec.Target.Type {
	case TargetTool:
		return r.glob.match(t.Name)
	case TargetData:
		return r.anyMatch(t.Data)
	case TargetOperation:
		return r.glob.match(string(t.SideEffect)) || r.anyMatch(t.Tags)
	case TargetResource:
		if t.Resource == "" {
			return false
		}
		s, ok := ev.arg(t.Resource).(string)
		if !ok {
			return false
		}
		if r.glob.match(s) {
			return true
		}
		if u, err := url.Parse(s); err == nil && u.Host != "" {
			return r.glob.match(u.Hostname())
		}
	}
	return false
}

func (r *compiledRule) anyMatch(ss []string) bool {
	for _, s := range ss {
		if r.glob.match(s) {
			return true
		}
	}
	return false
}

func (r *compiledRule) argsEqual(ev *evaluation) bool {
	for k, want := range r.equal {
		if !reflect.DeepEqual(ev.arg(k), want) {
			return false
		}
	}
	return true
}

// holds evaluates r's condition: as folded for the tool when fd is
// given, else whole.
func (r *compiledRule) holds(ev *evaluation, fd *folded) (bool, error) {
	prg := r.cond
	if fd != nil {
		if fd.constant {
			return fd.holds, nil
		}
		prg = fd.prg
	}
	out, _, err := prg.Eval(ev)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("yields %s, want bool", out.Type())
	}
	return bool(b), nil
}

// overLimit counts the calls the run already made that this rule's target
// matches and that were let through, over the run and over the hour before
// this step's recorded time.
func (r *compiledRule) overLimit(ev *evaluation) (bool, string) {
	now := ev.stepTime()
	var inRun, inHour int64
	for i := 0; i < ev.view.Steps.Len(); i++ {
		s := ev.view.Steps.At(i)
		if s.N >= ev.req.Step || s.Policy == nil || !(s.Policy.Outcome == events.Allow || s.Policy.Consumes != "") {
			continue
		}
		spec, ok := toolSpec(ev.view, s.Decision.Tool)
		if !ok || !r.limitTargets(&spec) {
			continue
		}
		inRun++
		if !s.Decided.After(now) && now.Sub(s.Decided) < time.Hour {
			inHour++
		}
	}
	switch {
	case r.perRun >= 0 && inRun >= r.perRun:
		return true, fmt.Sprintf("%d of %d calls in this run", inRun, r.perRun)
	case r.fleet:
		return false, fmt.Sprintf("%d of %d calls in this run", inRun, r.perRun)
	case r.perHour >= 0 && inHour >= r.perHour:
		return true, fmt.Sprintf("%d of %d calls in the hour", inHour, r.perHour)
	case r.perHour >= 0:
		return false, fmt.Sprintf("%d of %d calls in the hour", inHour, r.perHour)
	}
	return false, fmt.Sprintf("%d of %d calls in this run", inRun, r.perRun)
}

// limitTargets is targets for a past call: by what its spec declares.
func (r *compiledRule) limitTargets(t *events.ToolSpec) bool {
	switch r.spec.Target.Type {
	case TargetTool:
		return r.glob.match(t.Name)
	case TargetData:
		return r.anyMatch(t.Data)
	case TargetOperation:
		return r.glob.match(string(t.SideEffect)) || r.anyMatch(t.Tags)
	}
	return false
}

func toolSpec(v *projector.View, name string) (events.ToolSpec, bool) {
	for _, t := range v.Run.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return events.ToolSpec{}, false
}

// approval is what a confirm rule asks an operator: the exact request as
// capability, the rule, its message and the request as presentation.
func (r *compiledRule) approval(req policy.Request) (*policy.Approval, error) {
	kind := r.pol.spec.Enforcement.ApprovalKind
	if kind == "" {
		kind = r.pol.spec.ID
	}
	capability := map[string]any{"tool": req.Tool.Name, "args": req.Args}
	presentation := map[string]any{"tool": req.Tool.Name, "args": req.Args, "rule": r.id}
	if m := r.pol.spec.Enforcement.Message; m != "" {
		presentation["message"] = m
	}
	if r.spec.Reason != "" {
		presentation["reason"] = r.spec.Reason
	}
	if e := r.pol.spec.Enforcement.Escalation; e != "" {
		presentation["escalation"] = e
	}
	dec, err := policy.NeedApproval(kind, r.reasonText(), capability, presentation)
	if err != nil {
		return nil, fmt.Errorf("rule %s: %w", r.id, err)
	}
	return dec.Approval, nil
}

var _ policy.Discoverer = (*Policy)(nil)

// Discovers reports whether any enabled policy of the file runs in the
// discovery phase: one that does not hides nothing.
func (p *Policy) Discovers() bool { return p.discovers }

// anyDiscovery is [Policy.Discovers], worked out once at load: the driver
// asks it on every step.
func (p *Policy) anyDiscovery() bool {
	for _, cp := range p.policies {
		if cp.spec.On() && cp.spec.HasPhase(PhaseDiscovery) {
			return true
		}
	}
	return false
}

// Visible is the discovery phase: a tool is hidden when a rule of an
// enabled policy whose phases include discovery, in scope, targets it (by
// name, data or operation: a resource is an argument, and there are no
// arguments yet), has its condition hold, and would refuse it (deny or
// abort under block). Conditions see args as {} and run.phase as
// "discovery"; one that fails to evaluate hides the tool (fail closed).
func (p *Policy) Visible(tool events.ToolSpec, view projector.View) bool {
	req := policy.Request{Run: view.Run.ID, Step: view.Run.Steps + 1, Tool: tool, Args: json.RawMessage(`{}`)}
	ev := evaluation{req: &req, view: &view, phase: PhaseDiscovery}
	for _, r := range p.rules {
		cp := r.pol
		if !cp.spec.On() || !cp.spec.HasPhase(PhaseDiscovery) || !cp.inScope(&tool) {
			continue
		}
		if cp.spec.Enforcement.Mode != ModeBlock || r.spec.Action != "deny" || r.perRun >= 0 || r.perHour >= 0 {
			continue
		}
		if r.spec.Target.Type == TargetResource || !r.limitTargets(&tool) || len(r.equal) > 0 {
			continue
		}
		if r.cond != nil {
			holds, err := r.holds(&ev, nil)
			if err == nil && !holds {
				continue
			}
		}
		return false
	}
	return true
}
