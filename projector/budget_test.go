package projector_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

var (
	budgetReserve = events.ModelUsage{Calls: 1, InputTokens: 10, OutputTokens: 50}
	budgetUsed    = events.ModelUsage{Calls: 1, InputTokens: 10, OutputTokens: 30}
)

// overBudget is a run whose first call used 30 output tokens of a budget
// of 60; the second, reserving 50, would pass it.
func overBudget(t *testing.T) *history {
	t.Helper()
	h := started(t, "r1")
	h.add(events.ModelAttempted, attempt(1, 1, budgetReserve))
	h.add(events.ModelReplied, events.ModelReplyBody{Call: 1, Attempt: 1, Text: "x", Usage: budgetUsed})
	return h
}

func budgetBody(id string, call, n int, used events.ModelUsage) events.BudgetBody {
	return events.BudgetBody{
		Approval: events.ApprovalRequest{ID: id, Kind: events.BudgetApproval, Hash: "hash-" + id},
		Call:     call, Attempt: n, Limit: events.ModelUsage{OutputTokens: 60}, Used: used, Reserve: budgetReserve,
		Over: "output tokens", Raise: events.ModelUsage{OutputTokens: 60},
	}
}

// TestFold_BudgetApprovalPausesAndItsGrantIsUsedOnce: a budget approval
// makes the run wait; its grant leaves it waiting until the attempt that
// names it, which consumes it, raises the budget and runs the run again.
func TestFold_BudgetApprovalPausesAndItsGrantIsUsedOnce(t *testing.T) {
	h := overBudget(t)
	h.add(events.ApprovalBudget, budgetBody("budget-1", 2, 1, budgetUsed))
	v := h.fold()
	a := v.PendingApproval()
	if v.Run.Status != projector.Waiting || v.Run.Reason != events.BudgetApproval || a == nil || a.State != projector.Pending || a.Step != 0 {
		t.Fatalf("run %s %q, approval %+v: want waiting on a pending budget approval of no step", v.Run.Status, v.Run.Reason, a)
	}
	h.grant("budget-1")
	v = h.fold()
	if g := v.BudgetGrant(); v.Run.Status != projector.Waiting || g == nil || g.ID != "budget-1" {
		t.Fatalf("after the grant: run %s, budget grant %+v: want waiting on budget-1", v.Run.Status, g)
	}
	uses := attempt(2, 1, budgetReserve)
	uses.Grant, uses.Limit = "budget-1", events.ModelUsage{OutputTokens: 120}
	h.add(events.ModelAttempted, uses)
	v = h.fold()
	if v.Run.Status != projector.Running || v.Approval("budget-1").State != projector.Consumed || v.BudgetGrant() != nil {
		t.Errorf("after the attempt: run %s, approval %s: want running, consumed", v.Run.Status, v.Approval("budget-1").State)
	}
	if want := (events.ModelUsage{OutputTokens: 60}); v.Model.Raised != want {
		t.Errorf("raised %+v, want %+v", v.Model.Raised, want)
	}
	if c := v.Clone(); !reflect.DeepEqual(c, v) {
		t.Errorf("clone differs from the view")
	}
}

// TestFold_BudgetEventsThatDoNotFold: a budget approval the events do not
// bear out, an attempt while the run waits, and an attempt using a grant
// that is not granted and unused (a second use, another approval's) are
// refused, and leave the view as it was.
func TestFold_BudgetEventsThatDoNotFold(t *testing.T) {
	withGrant := func(grant string) events.ModelAttemptBody {
		b := attempt(2, 1, budgetReserve)
		b.Grant = grant
		return b
	}
	bad := func(edit func(*events.BudgetBody)) events.BudgetBody {
		b := budgetBody("budget-9", 2, 1, budgetUsed)
		edit(&b)
		return b
	}
	cases := []struct {
		name  string
		setup func(h *history)
		kind  events.Kind
		body  any
	}{
		{"wrong totals", nil, events.ApprovalBudget, bad(func(b *events.BudgetBody) { b.Used = events.ModelUsage{} })},
		{"within the limit", nil, events.ApprovalBudget, bad(func(b *events.BudgetBody) { b.Limit.OutputTokens = 1000 })},
		{"raise too small", nil, events.ApprovalBudget, bad(func(b *events.BudgetBody) { b.Raise.OutputTokens = 5 })},
		{"another kind", nil, events.ApprovalBudget, bad(func(b *events.BudgetBody) { b.Approval.Kind = "remote_write" })},
		{"out of turn", nil, events.ApprovalBudget, bad(func(b *events.BudgetBody) { b.Call = 3 })},
		{"attempt open", func(h *history) { h.add(events.ModelAttempted, attempt(2, 1, budgetReserve)) }, events.ApprovalBudget, bad(func(b *events.BudgetBody) { b.Attempt = 2 })},
		{"twice", func(h *history) { h.add(events.ApprovalBudget, budgetBody("budget-9", 2, 1, budgetUsed)) }, events.ApprovalBudget, budgetBody("budget-9", 2, 1, budgetUsed)},
		{"attempt while waiting", func(h *history) { h.add(events.ApprovalBudget, budgetBody("budget-1", 2, 1, budgetUsed)) }, events.ModelAttempted, attempt(2, 1, budgetReserve)},
		{"attempt on a pending approval", func(h *history) { h.add(events.ApprovalBudget, budgetBody("budget-1", 2, 1, budgetUsed)) }, events.ModelAttempted, withGrant("budget-1")},
		{"grant used twice", func(h *history) {
			h.add(events.ApprovalBudget, budgetBody("budget-1", 2, 1, budgetUsed))
			h.grant("budget-1")
			h.add(events.ModelAttempted, withGrant("budget-1"))
			h.add(events.ModelFailed, events.ModelFailBody{Call: 2, Attempt: 1, Error: "x", Charge: events.ModelUsage{Calls: 1}})
		}, events.ModelAttempted, func() events.ModelAttemptBody { b := withGrant("budget-1"); b.Attempt = 2; return b }()},
		{"grant of no such approval", nil, events.ModelAttempted, withGrant("budget-7")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := overBudget(t)
			if c.setup != nil {
				c.setup(h)
			}
			v := h.fold()
			before := v.Clone()
			err := apply(t, &v, h.next(c.kind, c.body))
			if !errors.Is(err, projector.ErrFold) {
				t.Fatalf("got %v, want ErrFold", err)
			}
			if !reflect.DeepEqual(v, before) {
				t.Errorf("the view changed on a refused event")
			}
		})
	}
}

// TestFold_BudgetApprovalExpiredExceedsTheBudget: an expiry ends the run
// failed budget_exceeded, not cancelled.
func TestFold_BudgetApprovalExpiredExceedsTheBudget(t *testing.T) {
	h := overBudget(t)
	h.add(events.ApprovalBudget, budgetBody("budget-1", 2, 1, budgetUsed))
	h.add(events.ApprovalExpired, events.ExpiredBody{Approval: "budget-1"})
	v := h.fold()
	if v.Run.Status != projector.Failed || v.Run.Reason != string(events.ReasonBudgetExceeded) || v.Approval("budget-1").State != projector.Expired {
		t.Errorf("run %s %q, approval %s: want failed budget_exceeded, expired", v.Run.Status, v.Run.Reason, v.Approval("budget-1").State)
	}
}
