package testkit

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
)

// BudgetPause appends to log, as a model agent's worker does, run id whose
// second model call would pass its budget of 60 output tokens and which
// waits on an approval of kind budget, id approval; the run records tools.
// It returns the approval request.
func BudgetPause(t testing.TB, log *events.Log, id, approval string, tools []events.ToolSpec) events.BudgetBody {
	t.Helper()
	reserve := events.ModelUsage{Calls: 1, InputTokens: 10, OutputTokens: 50}
	used := events.ModelUsage{Calls: 1, InputTokens: 10, OutputTokens: 30}
	limit := events.ModelUsage{OutputTokens: 60}
	req, err := approvals.Budget(events.BudgetBody{Approval: events.ApprovalRequest{ID: approval, Reason: "model budget: output tokens"},
		Call: 2, Attempt: 1, Limit: limit, Used: used, Reserve: reserve, Over: "output tokens", Raise: events.ModelUsage{OutputTokens: 60}})
	if err != nil {
		t.Fatal(err)
	}
	var tail events.Tail
	for _, ev := range []struct {
		k    events.Kind
		body any
	}{
		{events.RunCreated, events.RunCreatedBody{Tools: tools, Input: json.RawMessage(`"hi"`), Agent: "model"}},
		{events.ModelAttempted, events.ModelAttemptBody{Call: 1, Attempt: 1, Provider: "openai", Model: "m", Reserve: reserve, Limit: limit, SideEffect: events.SideEffectNone}},
		{events.ModelReplied, events.ModelReplyBody{Call: 1, Attempt: 1, Text: "thinking", Usage: used}},
		{events.ApprovalBudget, req},
	} {
		x, err := events.New(id, ev.k, ev.body)
		if err != nil {
			t.Fatal(err)
		}
		x.Time = time.Now().UTC()
		if tail, err = log.Append(t.Context(), tail, x); err != nil {
			t.Fatalf("append %s: %v", ev.k, err)
		}
	}
	return req
}
