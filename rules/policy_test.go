package rules_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/rules"
)

func mustParse(t *testing.T, doc string) *rules.Policy {
	t.Helper()
	p, err := rules.Parse("t.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

// request builds a request for tool at step 1 of a run created by actor,
// decided at at.
func request(tool events.ToolSpec, args string, actor *events.Actor, at time.Time) (policy.Request, projector.View) {
	if tool.Schema == nil {
		tool.Schema = json.RawMessage(`{}`)
	}
	v := projector.View{
		Run:   projector.Run{ID: "r1", Status: projector.Running, Tools: []events.ToolSpec{tool}, Steps: 1, Actor: actor},
		Steps: projector.StepsOf(projector.Step{N: 1, Decision: events.StepDecidedBody{Step: 1, Tool: tool.Name, Args: args}, Decided: at}),
	}
	return policy.Request{Run: "r1", Step: 1, Tool: tool, Args: json.RawMessage(args)}, v
}

func decide(t *testing.T, p policy.Policy, tool events.ToolSpec, args string, actor *events.Actor) policy.Ruling {
	t.Helper()
	req, v := request(tool, args, actor, time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC))
	d, err := p.Evaluate(context.Background(), req, v)
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	return d
}

func partIDs(d policy.Ruling) []string {
	var ids []string
	for _, p := range d.Parts {
		ids = append(ids, p.ID+"="+string(p.Outcome))
	}
	return ids
}

var readTool = events.ToolSpec{Name: "docs_read", SideEffect: events.ReadOnly}

// TestPolicy_DenyWinsWhateverTheOrder: an allow at a higher priority does
// not outweigh a deny; priority orders the record only.
func TestPolicy_DenyWinsWhateverTheOrder(t *testing.T) {
	doc := `version: 1
policies:
  - id: lo
    type: tool_access
    priority: 1
    rules: [{id: d, action: deny, target: {type: tool, pattern: "docs_*"}, reason: no}]
    enforcement: {mode: block}
  - id: hi
    type: tool_access
    priority: 9
    rules: [{id: a, action: allow, target: {type: tool, pattern: docs_read}}]
    enforcement: {mode: block}
`
	d := decide(t, mustParse(t, doc), readTool, `{}`, nil)
	if d.Outcome != events.Deny || d.Reason != "lo/d: no" {
		t.Errorf("got %s %q, want deny %q", d.Outcome, d.Reason, "lo/d: no")
	}
	if got, want := strings.Join(partIDs(d), " "), "hi/a=allow lo/d=deny"; got != want {
		t.Errorf("parts %s, want %s (priority order)", got, want)
	}
}

// TestPolicy_Modes: what each enforcement mode makes of an applying deny rule.
func TestPolicy_Modes(t *testing.T) {
	tests := []struct {
		mode, extra string
		want        events.Outcome
	}{
		{"block", "", events.Deny},
		{"block", ", abort: true", events.Abort},
		{"confirm", "", events.RequireApproval},
		{"warn", "", events.Allow},
		{"audit", "", events.Allow},
	}
	for _, tt := range tests {
		t.Run(tt.mode+tt.extra, func(t *testing.T) {
			doc := `version: 1
policies:
  - id: p
    type: tool_access
    rules: [{id: r, action: deny, target: {type: tool, pattern: docs_read}, code: NOPE}]
    enforcement: {mode: ` + tt.mode + tt.extra + `, message: careful}
`
			d := decide(t, mustParse(t, doc), readTool, `{"q":1}`, nil)
			if d.Outcome != tt.want {
				t.Fatalf("got %s, want %s", d.Outcome, tt.want)
			}
			if len(d.Parts) == 0 || d.Parts[0].ID != "p/r" || d.Parts[0].Mode != tt.mode || d.Parts[0].Code != "NOPE" {
				t.Errorf("parts %+v, want p/r recorded first with mode %s and its code", d.Parts, tt.mode)
			}
			if tt.mode == "warn" || tt.mode == "audit" {
				if last := d.Parts[len(d.Parts)-1]; last.ID != "default side_effects" || d.Parts[0].Outcome != "deny" {
					t.Errorf("parts %+v, want the rule's deny recorded and the default deciding", d.Parts)
				}
			}
			if tt.want == events.RequireApproval {
				a := d.Approval
				if a == nil || a.Kind != "p" {
					t.Fatalf("approval %+v, want kind p", a)
				}
				if got, want := string(a.Capability), `{"args":{"q":1},"tool":"docs_read"}`; got != want {
					t.Errorf("capability %s, want %s", got, want)
				}
				if !strings.Contains(string(a.Presentation), `"message":"careful"`) {
					t.Errorf("presentation %s does not carry the message", a.Presentation)
				}
			}
		})
	}
}

// TestPolicy_WarnDoesNotGrant: a warn rule on a destructive tool leaves it
// to the default, which denies.
func TestPolicy_WarnDoesNotGrant(t *testing.T) {
	doc := `version: 1
policies:
  - id: p
    type: tool_access
    rules: [{id: r, action: allow, target: {type: operation, pattern: destructive}}]
    enforcement: {mode: warn}
`
	d := decide(t, mustParse(t, doc), events.ToolSpec{Name: "rm", SideEffect: events.Destructive}, `{}`, nil)
	if d.Outcome != events.Deny {
		t.Errorf("got %s, want deny (the side-effect default)", d.Outcome)
	}
}

func TestPolicy_Defaults(t *testing.T) {
	body := `policies:
  - id: p
    type: tool_access
    rules: [{id: r, action: deny, target: {type: tool, pattern: other}}]
    enforcement: {mode: block}
`
	destructive := events.ToolSpec{Name: "rm", SideEffect: events.Destructive}
	tests := []struct {
		def  string
		tool events.ToolSpec
		want events.Outcome
	}{
		{"", destructive, events.Deny},
		{"", events.ToolSpec{Name: "send", SideEffect: events.RemoteMutation}, events.RequireApproval},
		{"", events.ToolSpec{Name: "odd", SideEffect: "unheard_of"}, events.Deny},
		{"default: side_effects\n", readTool, events.Allow},
		{"default: deny\n", readTool, events.Deny},
		{"default: allow\n", destructive, events.Allow},
	}
	for _, tt := range tests {
		d := decide(t, mustParse(t, "version: 1\n"+tt.def+body), tt.tool, `{}`, nil)
		if d.Outcome != tt.want {
			t.Errorf("%q on %s: got %s, want %s", tt.def, tt.tool.Name, d.Outcome, tt.want)
		}
	}
}

// TestPolicy_NotApplying: a disabled policy, a discovery-only policy, one out
// of scope, a target or attribute that does not match, a false condition:
// none of them applies.
func TestPolicy_NotApplying(t *testing.T) {
	rule := `rules: [{id: r, action: deny, target: {type: tool, pattern: docs_read}}]
    enforcement: {mode: block}`
	tests := map[string]string{
		"disabled":       "enabled: false\n    " + rule,
		"discovery only": "phases: [discovery]\n    " + rule,
		"scope tools":    "scope: {tools: [other_*]}\n    " + rule,
		"scope classes":  "scope: {side_effects: [destructive]}\n    " + rule,
		"attribute":      `rules: [{id: r, action: deny, target: {type: tool, pattern: docs_read, attributes: {q: 2}}}]` + "\n    enforcement: {mode: block}",
		"condition":      `rules: [{id: r, action: deny, target: {type: tool, pattern: docs_read}, condition: "args.q > 1"}]` + "\n    enforcement: {mode: block}",
		"data":           `rules: [{id: r, action: deny, target: {type: data, pattern: "*"}}]` + "\n    enforcement: {mode: block}",
	}
	for name, p := range tests {
		t.Run(name, func(t *testing.T) {
			doc := "version: 1\npolicies:\n  - id: p\n    type: tool_access\n    " + p + "\n"
			d := decide(t, mustParse(t, doc), readTool, `{"q":1}`, nil)
			if d.Outcome != events.Allow || len(d.Parts) != 1 {
				t.Errorf("got %s %v, want the default's allow alone", d.Outcome, partIDs(d))
			}
			// The same policy applies once what kept it out is changed.
			on := strings.NewReplacer("enabled: false", "enabled: true", "phases: [discovery]", "phases: [invocation]",
				"other_*", "docs_*", "[destructive]", "[read_only]", "q: 2", "q: 1", "args.q > 1", "args.q > 0", `pattern: "*"`, "pattern: secret").Replace(doc)
			tool := readTool
			tool.Data = []string{"secret"}
			if d := decide(t, mustParse(t, on), tool, `{"q":1}`, nil); d.Outcome != events.Deny {
				t.Errorf("changed to apply: got %s, want deny", d.Outcome)
			}
		})
	}
}

// TestPolicy_ConditionErrorFailsClosed: a condition that fails to evaluate
// (a missing argument, a cost over the limit) denies, and says so.
func TestPolicy_ConditionErrorFailsClosed(t *testing.T) {
	for name, cond := range map[string]string{
		"missing field": "args.nothere > 1",
		"over cost":     "args.items.all(x, args.items.all(y, args.items.all(z, x + y + z >= 0)))",
	} {
		t.Run(name, func(t *testing.T) {
			doc := `version: 1
default: allow
policies:
  - id: p
    type: tool_access
    rules: [{id: r, action: allow, target: {type: tool, pattern: docs_read}, condition: "` + cond + `"}]
    enforcement: {mode: block}
`
			items := "[" + strings.TrimSuffix(strings.Repeat("1,", 100), ",") + "]"
			d := decide(t, mustParse(t, doc), readTool, `{"items":`+items+`}`, nil)
			if d.Outcome != events.Deny || len(d.Parts) != 1 || d.Parts[0].Code != "CONDITION_ERROR" {
				t.Errorf("got %s %+v, want deny with CONDITION_ERROR", d.Outcome, d.Parts)
			}
			if !strings.Contains(d.Reason, "failed to evaluate") {
				t.Errorf("reason %q does not say the condition failed", d.Reason)
			}
		})
	}
}

// TestPolicy_ConditionVariables: the actor (as user and actor), the run and
// the step's recorded time, the tool, the resource's URL host.
func TestPolicy_ConditionVariables(t *testing.T) {
	tool := events.ToolSpec{Name: "http_get", SideEffect: events.ReadOnly, Tags: []string{"net"}, Data: []string{"web"}, Resource: "url"}
	finance := &events.Actor{ID: "ana", Roles: []string{"finance", "ops"}, Attributes: map[string]string{"team": "emea"}}
	tests := []struct {
		cond  string
		actor *events.Actor
		want  bool
	}{
		{"user.role != 'finance'", finance, false},
		{"user.role != 'finance'", nil, true},
		{"'ops' in actor.roles && actor.attributes.team == 'emea' && actor.id == 'ana'", finance, true},
		{"run.time.getHours() == 9 && run.time.getDayOfWeek() == 1", nil, true},
		{"run.step == 1 && run.steps == 1 && run.id == 'r1'", nil, true},
		{"tool.name == 'http_get' && 'net' in tool.tags && tool.data == ['web'] && tool.resource == 'url'", nil, true},
		{"args.url.startsWith('https://') && args.n == 3 && args.n == 3.0", nil, true},
	}
	for _, tt := range tests {
		doc := `version: 1
default: allow
policies:
  - id: p
    type: tool_access
    rules: [{id: r, action: deny, target: {type: resource, pattern: "*.example.com"}, condition: "` + tt.cond + `"}]
    enforcement: {mode: block}
`
		d := decide(t, mustParse(t, doc), tool, `{"n":3,"url":"https://api.example.com/x"}`, tt.actor)
		if got := d.Outcome == events.Deny; got != tt.want {
			t.Errorf("%s (actor %v): applied %v, want %v (%s)", tt.cond, tt.actor, got, tt.want, d.Reason)
		}
	}
}

func TestPolicy_RateLimitPerRun(t *testing.T) {
	doc := `version: 1
policies:
  - id: p
    type: rate_limit
    rules: [{id: r, action: allow, target: {type: tool, pattern: docs_read, attributes: {max_per_run: 2}}, code: LIMIT}]
    enforcement: {mode: block}
`
	p := mustParse(t, doc)
	at := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	v := projector.View{Run: projector.Run{ID: "r1", Tools: []events.ToolSpec{readTool}}}
	var steps []projector.Step
	var got []events.Outcome
	for n := 1; n <= 4; n++ {
		steps = append(steps, projector.Step{N: n, Decision: events.StepDecidedBody{Step: n, Tool: readTool.Name}, Decided: at})
		v.Steps = projector.StepsOf(steps...)
		d, err := p.Evaluate(context.Background(), policy.Request{Run: "r1", Step: n, Tool: readTool, Args: json.RawMessage(`{}`)}, v)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Outcome)
		steps[n-1].Policy = &events.PolicyBody{Step: n, Outcome: d.Outcome}
		steps[n-1].Observation = &events.ObservedBody{Step: n, Kind: events.ObsResult}
	}
	want := []events.Outcome{events.Allow, events.Allow, events.Deny, events.Deny}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d: got %s, want %s", i+1, got[i], want[i])
		}
	}
}

func TestPolicy_VisibleHidesByDiscoveryRules(t *testing.T) {
	doc := `version: 1
policies:
  - id: hide
    type: tool_access
    phases: [discovery, invocation]
    rules:
      - {id: secret, action: deny, target: {type: data, pattern: "secret.*"}, condition: "user.role != 'admin' && run.phase == 'discovery'"}
      - {id: broken, action: deny, target: {type: tool, pattern: odd}, condition: "args.x > 1"}
  - id: confirm-only
    type: confirmation_required
    phases: [discovery]
    rules: [{id: c, action: deny, target: {type: tool, pattern: "*"}}]
    enforcement: {mode: confirm}
  - id: invocation-only
    type: tool_access
    rules: [{id: i, action: deny, target: {type: tool, pattern: plain}}]
    enforcement: {mode: block}
`
	doc = strings.Replace(doc, "      - {id: broken", "      - {id: broken", 1)
	doc = strings.Replace(doc, "  - id: confirm-only", "    enforcement: {mode: block}\n  - id: confirm-only", 1)
	p := mustParse(t, doc)
	admin := &events.Actor{ID: "a", Roles: []string{"admin"}}
	tests := []struct {
		tool  events.ToolSpec
		actor *events.Actor
		want  bool
	}{
		{events.ToolSpec{Name: "vault", SideEffect: events.ReadOnly, Data: []string{"secret.keys"}}, nil, false},
		{events.ToolSpec{Name: "vault", SideEffect: events.ReadOnly, Data: []string{"secret.keys"}}, admin, true},
		{events.ToolSpec{Name: "odd", SideEffect: events.ReadOnly}, nil, false},  // the condition fails on {}: hidden
		{events.ToolSpec{Name: "plain", SideEffect: events.ReadOnly}, nil, true}, // invocation only
	}
	for _, tt := range tests {
		_, v := request(tt.tool, `{}`, tt.actor, time.Time{})
		if got := p.Visible(tt.tool, v); got != tt.want {
			t.Errorf("%s for %v: visible %v, want %v", tt.tool.Name, tt.actor, got, tt.want)
		}
	}
}

// TestPolicy_RateLimitPerRunHour: max_per_hour per: run counts the run's
// own calls let through in the hour before the step's recorded time.
func TestPolicy_RateLimitPerRunHour(t *testing.T) {
	p, err := rules.Load("testdata/per-run-hour.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases, err := rules.LoadCases("testdata/per-run-hour.cases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := rules.RunCases(context.Background(), p, cases)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Problem != "" {
			t.Errorf("line %d %q: %s", r.Line, r.Name, r.Problem)
		}
	}
	if len(res) != 7 {
		t.Errorf("%d cases, want 7", len(res))
	}
}

func TestPolicy_DiscoversOnlyWithADiscoveryPhase(t *testing.T) {
	without := mustParse(t, minimal)
	with := mustParse(t, strings.Replace(minimal, "    enforcement", "    phases: [discovery, invocation]\n    enforcement", 1))
	off := mustParse(t, strings.Replace(minimal, "    enforcement", "    enabled: false\n    phases: [discovery]\n    enforcement", 1))
	if policy.Discovers(without) || !policy.Discovers(with) || policy.Discovers(off) {
		t.Error("Discovers: want true only for an enabled policy with a discovery phase")
	}
}

// TestPolicy_PartsRecordOnlyWhatTheFileDoesNotSay: a rule's part records
// its id, outcome, code and mode, and a reason only when it is not the
// rule's own text (which the file, named by its hash, holds): a condition
// that failed, a limit's reading. The decision's reason still carries the
// deciding rule's text, for the agent and the operator.
func TestPolicy_PartsRecordOnlyWhatTheFileDoesNotSay(t *testing.T) {
	p, err := rules.Parse("parts.yaml", []byte(`version: 1
policies:
  - id: watch
    type: tool_access
    enforcement: {mode: audit}
    rules:
      - {id: seen, action: deny, target: {type: tool, pattern: "*"}, reason: Noted in the audit, code: SEEN}
  - id: stop
    type: tool_access
    enforcement: {mode: block, message: Ask ops}
    rules:
      - {id: big, action: deny, target: {type: tool, pattern: pay}, condition: "args.amount > 10", reason: Too much, code: BIG}
      - {id: odd, action: deny, target: {type: tool, pattern: pay}, condition: "args.nosuch > 1", code: ODD}
`))
	if err != nil {
		t.Fatal(err)
	}
	tool := events.ToolSpec{Name: "pay", SideEffect: events.ReadOnly}
	d := decide(t, p, tool, `{"amount":20}`, nil)
	byID := map[string]events.PolicyPart{}
	for _, part := range d.Parts {
		byID[part.ID] = part
	}
	if got := byID["watch/seen"]; got.Reason != "" || got.Code != "SEEN" || got.Mode != "audit" || got.Outcome != "deny" {
		t.Errorf("audit part %+v, want deny SEEN audit with no reason", got)
	}
	if got := byID["stop/big"]; got.Reason != "" || got.Code != "BIG" {
		t.Errorf("deciding part %+v, want BIG with no reason", got)
	}
	if got := byID["stop/odd"]; got.Code != "CONDITION_ERROR" || !strings.Contains(got.Reason, "condition failed to evaluate") {
		t.Errorf("failed condition's part %+v, want CONDITION_ERROR with the error", got)
	}
	if d.Outcome != events.Deny || d.Reason != "stop/big: Too much (Ask ops)" {
		t.Errorf("decision %s %q, want a deny naming its rule's text", d.Outcome, d.Reason)
	}
}
