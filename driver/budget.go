package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// settleBudget acts on the decision recorded on a budget approval a,
// checked again just before (see settle): a denial ends the run
// budget_exceeded, as reaching the budget does without an approval; a
// grant lets the agent be asked, and its next attempt uses the grant (one
// fenced append: recording the attempt consumes it).
func (d *Driver) settleBudget(ctx context.Context, r *Run, a *projector.Approval) (bool, error) {
	if a.State == projector.Denied {
		return true, d.append(ctx, r, r.ID(), events.RunFailed, events.EndBody{
			Reason: events.ReasonBudgetExceeded,
			Detail: fmt.Sprintf("budget approval %s denied by %s: %s", a.ID, d.cfg.Operators[a.Decision.Operator], a.Decision.Reason),
		})
	}
	r.checkedGrant = a.DecisionEvent
	return true, nil
}

// budgetGrantChecked reports whether r waits on a budget grant this driver
// checked since it last loaded r: the agent is asked next.
func budgetGrantChecked(r *Run) bool {
	a := r.view.BudgetGrant()
	return a != nil && r.checkedGrant != "" && a.DecisionEvent == r.checkedGrant
}

// agentWaits ends a step whose agent left the run waiting (it recorded a
// budget approval): nothing more is recorded when the agent says so with
// [ErrWaiting]; an agent that made the run wait and then decided, or
// failed otherwise, ends it agent_error.
func (d *Driver) agentWaits(ctx context.Context, r *Run, err error) (bool, error) {
	if errors.Is(err, ErrWaiting) {
		return true, nil
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	detail := fmt.Sprintf("the run waits for an operator (%s) and the agent decided a step", r.view.Run.Reason)
	if err != nil {
		detail = fmt.Sprintf("the run waits for an operator (%s) and the agent failed: %v", r.view.Run.Reason, err)
	}
	return true, d.append(ctx, r, r.ID(), events.RunFailed, events.EndBody{Reason: events.ReasonAgentError, Detail: detail})
}
