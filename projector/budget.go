package projector

import (
	"fmt"

	"github.com/arbiter-run/arbiter/events"
)

// budgetRequested folds an agent's budget approval: the run waits on it.
// It must ask for the next attempt, with the totals the events give, on a
// running run, or on one whose budget grant is still unused (a request
// that supersedes it: the raise was not enough).
func (v *View) budgetRequested(e events.Event, b events.BudgetBody) error {
	m, a := &v.Model, b.Approval
	unused := v.unusedBudgetGrant()
	switch {
	case a.Kind != events.BudgetApproval || a.ID == "" || a.Hash == "":
		return v.errf(e, "budget approval %q of kind %q with hash %q", a.ID, a.Kind, a.Hash)
	case v.Approval(a.ID) != nil:
		return v.errf(e, "approval %q requested twice", a.ID)
	case v.Run.Status != Running && unused == nil:
		return v.errf(e, "budget approval while the run is %s", v.Run.Status)
	case m.Open != nil:
		return v.errf(e, "budget approval while model call %d attempt %d is open", m.Open.Call, m.Open.Attempt)
	case b.Call != m.Replies+1 || b.Attempt != m.Attempts+1:
		return v.errf(e, "budget approval for model call %d attempt %d after %d replies and %d attempts", b.Call, b.Attempt, m.Replies, m.Attempts)
	case b.Used != m.Used:
		return v.errf(e, "budget approval says %+v used, the events say %+v", b.Used, m.Used)
	case !b.Used.Add(b.Reserve).Exceeds(b.Limit):
		return v.errf(e, "budget approval for an attempt within its limit")
	case b.Used.Add(b.Reserve).Exceeds(b.Limit.Raised(b.Raise)):
		return v.errf(e, "budget approval whose raise %+v leaves the attempt over its limit", b.Raise)
	}
	if unused != nil {
		unused.State = Superseded
	}
	v.Approvals = append(v.Approvals, Approval{
		ApprovalRequest: a, Origin: events.BudgetApproval, State: Pending, Requested: e.Time, Raise: b.Raise,
	})
	v.Run.Status, v.Run.Reason = Waiting, events.BudgetApproval
	return nil
}

// unusedBudgetGrant is the granted budget approval the run waits on, or
// nil: the next attempt uses it.
func (v *View) unusedBudgetGrant() *Approval {
	if v.Run.Status != Waiting {
		return nil
	}
	if a := v.PendingApproval(); a != nil && a.Kind == events.BudgetApproval && a.State == Granted {
		return a
	}
	return nil
}

// BudgetGrant returns the granted budget approval the run waits on (the
// next model attempt uses it: see [events.ModelAttemptBody.Grant]), or
// nil.
func (v *View) BudgetGrant() *Approval {
	a := v.unusedBudgetGrant()
	if a == nil {
		return nil
	}
	c := a.clone()
	return &c
}

// useBudgetGrant checks that a model attempt may be made on the run: it
// must name the run's unused budget grant when the run waits on one, and
// nothing else. It returns the grant to consume, or nil.
func (v *View) useBudgetGrant(e events.Event, grant string) (*Approval, error) {
	unused := v.unusedBudgetGrant()
	switch {
	case grant == "" && v.Run.Status == Waiting:
		return nil, v.errf(e, "model attempt while the run waits for an approval (%s)", v.Run.Reason)
	case grant == "":
		return nil, nil
	case unused == nil || unused.ID != grant:
		return nil, v.errf(e, "model attempt uses budget approval %q, which is not granted and unused", grant)
	}
	return unused, nil
}

// budgetEnd is the end of a run whose budget approval a was denied or
// expired: budget_exceeded.
func budgetEnd(a *Approval, why string) string {
	return fmt.Sprintf("budget approval %s %s", a.ID, why)
}
