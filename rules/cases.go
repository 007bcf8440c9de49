package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"go.yaml.in/yaml/v3"
)

// ErrCases marks a case table that cannot be used.
var ErrCases = errors.New("unusable case table")

// Cases is a table of requests and the outcomes a rules file must give them
// (`arbiter policy test`).
type Cases struct {
	// Tools are the specs the requests name.
	Tools []CaseTool `yaml:"tools"`
	Cases []Case     `yaml:"cases"`
}

// CaseTool is a tool spec in a case table.
type CaseTool struct {
	Name       string            `yaml:"name"`
	SideEffect events.SideEffect `yaml:"side_effect"`
	Data       []string          `yaml:"data"`
	Tags       []string          `yaml:"tags"`
	Resource   string            `yaml:"resource"`
}

// Spec is the tool as a recorded spec (no schema: any arguments).
func (t CaseTool) Spec() events.ToolSpec {
	return events.ToolSpec{Name: t.Name, SideEffect: t.SideEffect, Schema: json.RawMessage(`{}`), Data: t.Data, Tags: t.Tags, Resource: t.Resource, TimeoutMS: 1000}
}

// Case is one request and what must come of it.
type Case struct {
	Name    string        `yaml:"name"`
	Tool    string        `yaml:"tool"`
	Args    yaml.Node     `yaml:"args"`
	Actor   *events.Actor `yaml:"actor"`
	Surface string        `yaml:"surface"`
	Input   yaml.Node     `yaml:"input"`
	// History is the run's earlier calls, oldest first.
	History []PastCall `yaml:"history"`
	// Phase is invocation (the default) or discovery.
	Phase string `yaml:"phase"`
	// Want is the outcome: allow, deny, abort or require_approval; in the
	// discovery phase, shown or hidden.
	Want string `yaml:"want"`
	// WantKind is the approval kind a require_approval must ask for.
	WantKind string `yaml:"want_kind"`
	// WantCode is a code one of the applying rules must carry.
	WantCode string `yaml:"want_code"`
	// Window is how many calls every fleet-wide window (per: fleet) has
	// already counted this hour, across the fleet.
	Window int64 `yaml:"window"`
	line   int
}

// caseWindows is a fleet counter for one case: every window starts at the
// case's count.
type caseWindows struct {
	start  int64
	counts map[string]int64
}

func (w *caseWindows) Take(_ context.Context, key string, max int64) (int64, bool, error) {
	n, ok := w.counts[key]
	if !ok {
		n = w.start
	}
	if n >= max {
		return n, false, nil
	}
	w.counts[key] = n + 1
	return n, true, nil
}

// PastCall is an earlier call of the run: its tool, its outcome (default
// allow) and how long before the case's request it was decided.
type PastCall struct {
	Tool    string         `yaml:"tool"`
	Outcome events.Outcome `yaml:"outcome"`
	Ago     string         `yaml:"ago"`
	Count   int            `yaml:"count"`
}

// CaseResult is what one case came to.
type CaseResult struct {
	Name string
	Line int
	// Want is what the case expected.
	Want string
	Got  policy.Ruling
	// Problem is empty when the case passed.
	Problem string
}

// caseTime is the recorded time of every case's request.
var caseTime = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// LoadCases reads a case table. Errors wrap [ErrCases] and name path:line.
func LoadCases(path string) (*Cases, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load cases %s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCases, path, err)
	}
	var c Cases
	if err := root.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCases, path, err)
	}
	// Record each case's line for the report.
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		m := root.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == "cases" {
				for j, n := range m.Content[i+1].Content {
					if j < len(c.Cases) {
						c.Cases[j].line = n.Line
					}
				}
			}
		}
	}
	for i, cs := range c.Cases {
		if cs.Name == "" || cs.Tool == "" {
			return nil, fmt.Errorf("%w: %s:%d: case %d needs a name and a tool", ErrCases, path, cs.line, i+1)
		}
		switch cs.Phase {
		case "", PhaseInvocation:
			if !events.Outcome(cs.Want).Valid() {
				return nil, fmt.Errorf("%w: %s:%d: case %q: want %q (want one of allow, deny, abort, require_approval)", ErrCases, path, cs.line, cs.Name, cs.Want)
			}
		case PhaseDiscovery:
			if cs.Want != "shown" && cs.Want != "hidden" {
				return nil, fmt.Errorf("%w: %s:%d: case %q: want %q at discovery (want shown or hidden)", ErrCases, path, cs.line, cs.Name, cs.Want)
			}
		default:
			return nil, fmt.Errorf("%w: %s:%d: case %q: phase %q (want invocation or discovery)", ErrCases, path, cs.line, cs.Name, cs.Phase)
		}
	}
	return &c, nil
}

// RunCases decides every case with p and compares.
func RunCases(ctx context.Context, p policy.Policy, c *Cases) ([]CaseResult, error) {
	specs := map[string]events.ToolSpec{}
	var tools []events.ToolSpec
	for _, t := range c.Tools {
		s := t.Spec()
		specs[t.Name] = s
		tools = append(tools, s)
	}
	var out []CaseResult
	for _, cs := range c.Cases {
		res := CaseResult{Name: cs.Name, Line: cs.line, Want: cs.Want}
		req, view, err := cs.request(specs, tools)
		if err != nil {
			return nil, fmt.Errorf("%w: case %q (line %d): %v", ErrCases, cs.Name, cs.line, err)
		}
		if cs.Phase == PhaseDiscovery {
			got := "shown"
			if !policy.Visible(p, req.Tool, view) {
				got = "hidden"
			}
			if got != cs.Want {
				res.Problem = fmt.Sprintf("%s at discovery, want %s", got, cs.Want)
			}
			out = append(out, res)
			continue
		}
		pp := p
		if rp, ok := p.(*Policy); ok {
			pp = rp.WithWindows(&caseWindows{start: cs.Window, counts: map[string]int64{}})
		}
		dec, err := pp.Evaluate(ctx, req, view)
		res.Got = dec
		switch {
		case err != nil:
			res.Problem = fmt.Sprintf("error: %v", err)
		case string(dec.Outcome) != cs.Want:
			res.Problem = fmt.Sprintf("got %s (%s), want %s", dec.Outcome, dec.Reason, cs.Want)
		case cs.WantKind != "" && (dec.Approval == nil || dec.Approval.Kind != cs.WantKind):
			res.Problem = fmt.Sprintf("approval kind %q, want %q", approvalKind(dec), cs.WantKind)
		case cs.WantCode != "" && !hasCode(dec, cs.WantCode):
			res.Problem = fmt.Sprintf("no applying rule has code %s", cs.WantCode)
		}
		out = append(out, res)
	}
	return out, nil
}

func approvalKind(d policy.Ruling) string {
	if d.Approval == nil {
		return ""
	}
	return d.Approval.Kind
}

func hasCode(d policy.Ruling, code string) bool {
	for _, p := range d.Parts {
		if p.Code == code {
			return true
		}
	}
	return false
}

func (cs Case) request(specs map[string]events.ToolSpec, tools []events.ToolSpec) (policy.Request, projector.View, error) {
	spec, ok := specs[cs.Tool]
	if !ok {
		return policy.Request{}, projector.View{}, fmt.Errorf("tool %q is not in the table's tools", cs.Tool)
	}
	args, err := nodeJSON(&cs.Args)
	if err != nil {
		return policy.Request{}, projector.View{}, fmt.Errorf("args: %v", err)
	}
	input, err := nodeJSON(&cs.Input)
	if err != nil {
		return policy.Request{}, projector.View{}, fmt.Errorf("input: %v", err)
	}
	var steps []projector.Step
	for _, h := range cs.History {
		ago := time.Duration(0)
		if h.Ago != "" {
			if ago, err = time.ParseDuration(h.Ago); err != nil {
				return policy.Request{}, projector.View{}, fmt.Errorf("history ago %q: %v", h.Ago, err)
			}
		}
		outcome := h.Outcome
		if outcome == "" {
			outcome = events.Allow
		}
		n := max(h.Count, 1)
		for range n {
			k := len(steps) + 1
			steps = append(steps, projector.Step{
				N: k, Decision: events.StepDecidedBody{Step: k, Tool: h.Tool, Args: "{}"}, Decided: caseTime.Add(-ago),
				Policy:      &events.PolicyBody{Step: k, Outcome: outcome},
				Observation: &events.ObservedBody{Step: k, Kind: events.ObsResult},
			})
		}
	}
	n := len(steps) + 1
	steps = append(steps, projector.Step{N: n, Decision: events.StepDecidedBody{Step: n, Tool: cs.Tool, Args: string(args)}, Decided: caseTime})
	view := projector.View{
		Run: projector.Run{
			ID: "case", Status: projector.Running, Tools: tools, Steps: n, Actor: cs.Actor, Surface: cs.Surface,
			Input: input, Created: caseTime.Add(-24 * time.Hour), Updated: caseTime,
		},
		Steps: projector.StepsOf(steps...),
	}
	return policy.Request{Run: "case", Step: n, Tool: spec, Args: args}, view, nil
}

// nodeJSON turns a YAML value into PolicyJSON ({} for none).
func nodeJSON(n *yaml.Node) (json.RawMessage, error) {
	if n.Kind == 0 {
		return json.RawMessage(`{}`), nil
	}
	v, err := generic(n, "", positions{})
	if err != nil {
		return nil, err
	}
	return jsonform.Marshal(v)
}

// ArgsJSON returns the case's arguments in PolicyJSON form ({} for none).
func (cs Case) ArgsJSON() (json.RawMessage, error) { return nodeJSON(&cs.Args) }
