package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// budgetPause appends, as a model agent's worker does, a run whose second
// model call would pass its budget of 60 output tokens and which waits on
// an approval of kind budget.
func (e *opsEnv) budgetPause(t *testing.T, run string) {
	t.Helper()
	reserve := events.ModelUsage{Calls: 1, InputTokens: 10, OutputTokens: 50}
	used := events.ModelUsage{Calls: 1, InputTokens: 10, OutputTokens: 30}
	limit := events.ModelUsage{OutputTokens: 60}
	req, err := approvals.Budget(events.BudgetBody{Approval: events.ApprovalRequest{ID: "budget-1", Reason: "model budget: output tokens"},
		Call: 2, Attempt: 1, Limit: limit, Used: used, Reserve: reserve, Over: "output tokens", Raise: events.ModelUsage{OutputTokens: 60}})
	if err != nil {
		t.Fatal(err)
	}
	var tail events.Tail
	for _, ev := range []struct {
		k    events.Kind
		body any
	}{
		{events.RunCreated, events.RunCreatedBody{Tools: e.d.Tools(), Input: json.RawMessage(`"hi"`), Agent: "model"}},
		{events.ModelAttempted, events.ModelAttemptBody{Call: 1, Attempt: 1, Provider: "openai", Model: "m", Reserve: reserve, Limit: limit, SideEffect: events.SideEffectNone}},
		{events.ModelReplied, events.ModelReplyBody{Call: 1, Attempt: 1, Text: "thinking", Usage: used}},
		{events.ApprovalBudget, req},
	} {
		x, err := events.New(run, ev.k, ev.body)
		if err != nil {
			t.Fatal(err)
		}
		x.Time = time.Now().UTC()
		if tail, err = e.log.Append(t.Context(), tail, x); err != nil {
			t.Fatalf("append %s: %v", ev.k, err)
		}
	}
}

// TestApprovals_ListsBudgetApproval: a run paused over its model budget
// is listed with what a grant raises; `arbiter grant` signs it like any
// other, and a worker records the grant, which then waits for the agent's
// next attempt to use it.
func TestApprovals_ListsBudgetApproval(t *testing.T) {
	e := newOpsEnv(t)
	e.budgetPause(t, "run-budget")
	e.pause(t, "run-step", `{"to":"ops"}`)
	var out bytes.Buffer
	if err := runApprovals(t.Context(), e.args(), &out); err != nil {
		t.Fatalf("approvals: %v", err)
	}
	s := out.String()
	for _, want := range []string{"run run-budget:", "approval budget-1 (step 0) pending: kind budget", "raises the model budget by: 0 calls, 0 input tokens, 60 output tokens", "run run-step:", "2 approval(s) waiting"} {
		if !strings.Contains(s, want) {
			t.Errorf("approvals output lacks %q:\n%s", want, s)
		}
	}
	if err := runGrant(t.Context(), e.args("run-budget", "budget-1", "--key", e.key, "--yes"), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	e.settle(t, "run-budget")
	r, err := e.d.Load(t.Context(), "run-budget")
	if err != nil {
		t.Fatal(err)
	}
	v := r.View()
	if a := v.Approval("budget-1"); v.Run.Status != projector.Waiting || a.State != projector.Granted || !e.d.NeedsAgent(r) {
		t.Errorf("run %s, approval %s, needs agent %v: want waiting on the granted approval for the agent", v.Run.Status, a.State, e.d.NeedsAgent(r))
	}
}
