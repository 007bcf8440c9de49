package driver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// pausing is an agent that records a budget approval for its first model
// call, then returns err (nil: a decision) instead of waiting.
func pausing(dec driver.Action, err error) driver.Agent {
	return driver.AgentFunc(func(ctx context.Context, in driver.StepInput) (driver.Action, error) {
		b, berr := approvals.Budget(events.BudgetBody{Approval: events.ApprovalRequest{ID: "budget-1"}, Call: 1, Attempt: 1,
			Limit: events.ModelUsage{Calls: 1}, Reserve: events.ModelUsage{Calls: 2}, Over: "calls", Raise: events.ModelUsage{Calls: 1}})
		if berr != nil {
			return driver.Action{}, berr
		}
		if rerr := in.Record(ctx, events.ApprovalBudget, b); rerr != nil {
			return driver.Action{}, rerr
		}
		return dec, err
	})
}

// TestDriver_AgentThatPausesWaits: an agent that recorded a budget
// approval and says so (ErrWaiting) leaves the run waiting on it, with
// nothing else recorded; one that recorded it and then decided a step,
// or failed otherwise, ends the run agent_error; one that says it waits
// without having paused ends it agent_error too.
func TestDriver_AgentThatPausesWaits(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	d := newDriver(t, log, allowAll, done())
	cases := []struct {
		run    string
		agent  driver.Agent
		status projector.Status
		detail string
	}{
		{"waits", pausing(driver.Action{}, fmt.Errorf("over: %w", driver.ErrWaiting)), projector.Waiting, ""},
		{"decides", pausing(driver.Action{Tool: "done", Args: []byte(`{}`)}, nil), projector.Failed, "the agent decided a step"},
		{"fails", pausing(driver.Action{}, fmt.Errorf("boom")), projector.Failed, "the agent failed: boom"},
		{"says-so-only", driver.AgentFunc(func(context.Context, driver.StepInput) (driver.Action, error) {
			return driver.Action{}, driver.ErrWaiting
		}), projector.Failed, driver.ErrWaiting.Error()},
	}
	for _, c := range cases {
		t.Run(c.run, func(t *testing.T) {
			r := create(t, d, c.run)
			drive(t, d, r, c.agent)
			v := load(t, d, c.run).View()
			if v.Run.Status != c.status || !strings.Contains(v.Run.Detail, c.detail) {
				t.Fatalf("run %s %s %q, want %s with %q", v.Run.Status, v.Run.Reason, v.Run.Detail, c.status, c.detail)
			}
			if c.status == projector.Failed && v.Run.Reason != string(events.ReasonAgentError) {
				t.Errorf("reason %s, want %s", v.Run.Reason, events.ReasonAgentError)
			}
			if v.Steps.Len() != 0 {
				t.Errorf("%d steps recorded, want none", v.Steps.Len())
			}
		})
	}
}
