package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// budgetPause appends a run waiting on approval budget-1 of kind budget.
func (e *opsEnv) budgetPause(t *testing.T, run string) {
	t.Helper()
	testkit.BudgetPause(t, e.log, run, "budget-1", e.d.Tools())
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
