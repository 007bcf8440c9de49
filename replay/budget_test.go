package replay_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/replay"
	"github.com/arbiter-run/arbiter/testkit"
)

// budgetRun appends a model run by hand, as a worker (or one whose
// config or code is not to be trusted) leaves it: a first attempt within
// a budget of 60 output tokens, its reply using 30, then what follows.
func budgetRun(t *testing.T, log *events.Log, id string, then ...func() (events.Kind, any)) {
	t.Helper()
	ctx := t.Context()
	reserve := events.ModelUsage{Calls: 1, InputTokens: 10, OutputTokens: 50}
	limit := events.ModelUsage{OutputTokens: 60}
	evs := []func() (events.Kind, any){
		func() (events.Kind, any) {
			return events.RunCreated, events.RunCreatedBody{Tools: []events.ToolSpec{}, Input: json.RawMessage(`"hi"`), Agent: "model"}
		},
		func() (events.Kind, any) {
			return events.ModelAttempted, events.ModelAttemptBody{Call: 1, Attempt: 1, Provider: "openai", Model: "m", Reserve: reserve, Limit: limit, SideEffect: events.SideEffectNone}
		},
		func() (events.Kind, any) {
			return events.ModelReplied, events.ModelReplyBody{Call: 1, Attempt: 1, Text: "thinking", Usage: events.ModelUsage{Calls: 1, InputTokens: 10, OutputTokens: 30}}
		},
	}
	var tail events.Tail
	for _, f := range append(evs, then...) {
		k, body := f()
		ev, err := events.New(id, k, body)
		if err != nil {
			t.Fatalf("new %s: %v", k, err)
		}
		ev.Time = time.Now().UTC()
		if tail, err = log.Append(ctx, tail, ev); err != nil {
			t.Fatalf("append %s: %v", k, err)
		}
	}
}

func secondAttempt(limit events.ModelUsage) func() (events.Kind, any) {
	return func() (events.Kind, any) {
		return events.ModelAttempted, events.ModelAttemptBody{Call: 2, Attempt: 1, Provider: "openai", Model: "m",
			Reserve: events.ModelUsage{Calls: 1, InputTokens: 10, OutputTokens: 50}, Limit: limit, SideEffect: events.SideEffectNone}
	}
}

func budgetRequest(t *testing.T, edit func(*events.BudgetBody)) func() (events.Kind, any) {
	return func() (events.Kind, any) {
		b, err := approvals.Budget(events.BudgetBody{
			Approval: events.ApprovalRequest{ID: "budget-1"}, Call: 2, Attempt: 1,
			Limit: events.ModelUsage{OutputTokens: 60}, Used: events.ModelUsage{Calls: 1, InputTokens: 10, OutputTokens: 30},
			Reserve: events.ModelUsage{Calls: 1, InputTokens: 10, OutputTokens: 50}, Over: "output tokens",
			Raise: events.ModelUsage{OutputTokens: 60},
		})
		if err != nil {
			t.Fatalf("budget approval: %v", err)
		}
		if edit != nil {
			edit(&b)
		}
		return events.ApprovalBudget, b
	}
}

// TestCheck_BudgetsFromTheEventsAlone: replay re-checks each attempt made
// against a budget and each budget approval from the events alone. An
// attempt made beyond its limit, a limit raised with no grant, and a
// budget approval whose raise is not the one its hash binds are
// different, and the summary is not clean; an honest pause is the same.
func TestCheck_BudgetsFromTheEventsAlone(t *testing.T) {
	cases := []struct {
		name string
		then func() (events.Kind, any)
		want string // the reason of the last check; "" for the same
	}{
		{"honest pause", budgetRequest(t, nil), ""},
		{"beyond the limit", secondAttempt(events.ModelUsage{OutputTokens: 60}), "made beyond its limit"},
		{"raised with no grant", secondAttempt(events.ModelUsage{OutputTokens: 200}), "is not the run's budget"},
		{"raise not the one signed", budgetRequest(t, func(b *events.BudgetBody) { b.Raise.OutputTokens = 6000 }), approvals.ErrBudgetRequest.Error()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			log := testkit.JetStream(t).Log(t, events.Config{})
			budgetRun(t, log, "r1", c.then)
			var got []replay.BudgetResult
			sum, err := replay.Audit(t.Context(), log, baseline(), replay.Selection{}, replay.Options{
				OnBudget: func(r replay.BudgetResult) error { got = append(got, r); return nil },
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || got[0].Verdict != replay.Same {
				t.Fatalf("budget checks %+v, want 2, the first the same", got)
			}
			last := got[1]
			if c.want == "" {
				if last.Verdict != replay.Same || !sum.Clean() || sum.BudgetsSame != 2 {
					t.Errorf("last check %+v, summary %+v: want the same, clean", last, sum)
				}
				return
			}
			if last.Verdict != replay.Different || !strings.Contains(last.Reason, c.want) {
				t.Errorf("last check %s %q, want different: %q", last.Verdict, last.Reason, c.want)
			}
			if sum.Clean() || sum.BudgetsDifferent != 1 {
				t.Errorf("summary %+v: want 1 budget check different, not clean", sum)
			}
		})
	}
}
