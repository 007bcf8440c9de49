package rules

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// TestPolicy_CandidatesAreEveryRuleThatCanApply: the rules Evaluate
// considers for a tool (kept per spec hash) are exactly those of every
// rule that applies to some call of it: for each example file, tool spec
// and arguments, asking every rule and asking only the candidates find
// the same rules applying, and a second look (from the cache) the same.
func TestPolicy_CandidatesAreEveryRuleThatCanApply(t *testing.T) {
	files, err := filepath.Glob("../examples/policies/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	specs := []events.ToolSpec{
		{Name: "orders_refund", SideEffect: events.LocalMutation},
		{Name: "files_delete_all", SideEffect: events.Destructive},
		{Name: "db_drop_users", SideEffect: events.LocalMutation},
		{Name: "hr_lookup", SideEffect: events.ReadOnly, Data: []string{"ssn"}},
		{Name: "ledger_read", SideEffect: events.ReadOnly, Data: []string{"financial.ledger"}},
		{Name: "email_send", SideEffect: events.RemoteMutation, Resource: "to"},
		{Name: "slack_send_message", SideEffect: events.RemoteMutation, Tags: []string{"chat"}},
		{Name: "github_search", SideEffect: events.ReadOnly},
		{Name: "weather", SideEffect: events.ReadOnly},
	}
	argsList := []string{`{}`, `{"amount":9000}`, `{"amount":700}`, `{"to":"x@ext.org"}`, `{"to":"me@company.com","channel_type":"external"}`}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".cases.yaml") {
			continue
		}
		p, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, spec := range specs {
			spec.Schema = json.RawMessage(`{}`)
			spec.Hash = strings.Repeat("0", 63) + string(rune('a'+i))
			for _, args := range argsList {
				for _, surface := range []string{"api", "mcp"} {
					all, cand := applying(p, p.rules, spec, args, surface), applying(p, p.candidates(&spec), spec, args, surface)
					again := applying(p, p.candidates(&spec), spec, args, surface)
					if !slices.Equal(all, cand) || !slices.Equal(cand, again) {
						t.Errorf("%s, %s %s over %s: every rule finds %v applying, the candidates %v, cached %v", filepath.Base(f), spec.Name, args, surface, all, cand, again)
					}
					n += len(all)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no rule applied to anything: the test proves nothing")
	}
}

func applying(p *Policy, rs []*compiledRule, spec events.ToolSpec, args, surface string) []string {
	req := policy.Request{Run: "r1", Step: 1, Tool: spec, Args: json.RawMessage(args)}
	view := projector.View{Run: projector.Run{ID: "r1", Status: projector.Running, Tools: []events.ToolSpec{spec}, Steps: 1, Surface: surface},
		Steps: projector.StepsOf(projector.Step{N: 1, Decision: events.StepDecidedBody{Step: 1, Tool: spec.Name, Args: args}})}
	ev := evaluation{ctx: context.Background(), req: &req, view: &view, tools: p.toolCache}
	var out []string
	for _, r := range rs {
		if v, ok := r.apply(&ev, nil); ok {
			out = append(out, r.id+"="+string(v.outcome))
		}
	}
	return out
}
