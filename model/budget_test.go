package model_test

import (
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/model"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/replay"
	"github.com/nats-io/nkeys"
)

// overBudget is a harness whose runs have 270 output tokens: the first
// attempt reserves 256 and its reply uses 20, so the second (20 + 256)
// would pass the budget and the run pauses on an approval of kind budget.
func overBudget(t *testing.T, w wire, edit func(*model.Config)) *harness {
	t.Helper()
	return newHarness(t, w, func(c *model.Config) {
		c.Budget = model.Budget{OutputTokens: 270}
		c.OverBudget = model.OverBudget{Approve: true}
		if edit != nil {
			edit(c)
		}
	}, reply(w.tools("", call{"c1", "read_file", `{"path":"a"}`})), reply(w.text("done")))
}

// drive loads run and drives it once more, as the worker a nudge wakes.
func (h *harness) drive(run string) projector.View {
	h.t.Helper()
	r, err := h.d.Load(h.t.Context(), run)
	if err != nil {
		h.t.Fatalf("load %s: %v", run, err)
	}
	if err := h.d.Drive(h.t.Context(), r, h.agent); err != nil {
		h.t.Fatalf("drive %s: %v", run, err)
	}
	return h.view(run)
}

// publish signs decision on approval id with hash by kp and publishes it,
// as an operator's command does.
func publish(t *testing.T, h *harness, kp nkeys.KeyPair, run, id, hash, decision string) {
	t.Helper()
	b, err := approvals.Sign(kp, run, id, hash, decision, "because", time.Now())
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	if _, err := approvals.Publish(t.Context(), h.log, run, b); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

func waitsOnBudget(t *testing.T, v projector.View, id string) *projector.Approval {
	t.Helper()
	a := v.PendingApproval()
	if v.Run.Status != projector.Waiting || v.Run.Reason != events.BudgetApproval || a == nil || a.ID != id || a.Kind != events.BudgetApproval || a.State != projector.Pending {
		t.Fatalf("run %s %q, approval %+v: want it waiting on budget approval %s", v.Run.Status, v.Run.Reason, a, id)
	}
	return a
}

// TestAgent_BudgetApprovalGrantedGoesOn: over budget, the run pauses on
// a budget approval saying which limit, the totals and the reservation;
// the model is not asked. A grant raises the output limit by the budget
// once more (270), the attempt that uses it names it, the run goes on to
// its end, and replay re-checks every budget check and the grant from the
// events alone as the same.
func TestAgent_BudgetApprovalGrantedGoesOn(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := overBudget(t, w, nil)
		v := h.run("r1", "hi")
		a := waitsOnBudget(t, v, "budget-1")
		if n := len(h.srv.Requests()); n != 1 {
			t.Fatalf("%d requests before the grant, want 1", n)
		}
		reqs := bodiesOf[events.BudgetBody](t, h.records("r1"), events.ApprovalBudget)
		if len(reqs) != 1 {
			t.Fatalf("%d budget approvals recorded, want 1", len(reqs))
		}
		b := reqs[0]
		want := events.BudgetBody{Call: 2, Attempt: 1, Limit: events.ModelUsage{OutputTokens: 270},
			Used:    events.ModelUsage{Calls: 1, InputTokens: 100, OutputTokens: 20},
			Reserve: events.ModelUsage{Calls: 1, InputTokens: b.Reserve.InputTokens, OutputTokens: 256},
			Raise:   events.ModelUsage{OutputTokens: 270}, Over: b.Over}
		b.Approval = events.ApprovalRequest{}
		if !reflect.DeepEqual(b, want) || !strings.HasPrefix(want.Over, "output tokens: 20 used + 256 reserved > budget 270") {
			t.Errorf("budget approval %+v, want %+v", b, want)
		}
		if a.Raise != want.Raise || a.Step != 0 {
			t.Errorf("approval raises %+v at step %d, want %+v at 0", a.Raise, a.Step, want.Raise)
		}

		grant(t, h, "r1")
		v = h.drive("r1")
		wantEnd(t, v, projector.Completed, events.ReasonCompleted)
		if n := len(h.srv.Requests()); n != 2 {
			t.Errorf("%d requests, want 2", n)
		}
		if got := v.Approval("budget-1"); got == nil || got.State != projector.Consumed {
			t.Errorf("budget approval after the run: %+v, want consumed", got)
		}
		if want := (events.ModelUsage{OutputTokens: 270}); v.Model.Raised != want {
			t.Errorf("raised %+v, want %+v", v.Model.Raised, want)
		}
		recs := h.records("r1")
		ks := kindsOf(recs)
		i := slices.Index(ks, events.ApprovalGranted)
		if i < 0 || i+1 >= len(ks) || ks[i+1] != events.ModelAttempted {
			t.Fatalf("kinds %v: want the grant recorded, then the attempt that uses it", ks)
		}
		ats := bodiesOf[events.ModelAttemptBody](t, recs, events.ModelAttempted)
		if last := ats[len(ats)-1]; last.Grant != "budget-1" || last.Limit != (events.ModelUsage{OutputTokens: 540}) {
			t.Errorf("the attempt after the grant: grant %q limit %+v, want budget-1 and 540 output tokens", last.Grant, last.Limit)
		}

		_, ops := operator(t)
		var checks []replay.BudgetResult
		sum, err := replay.Audit(t.Context(), h.log, policy.WithID(policy.DefaultSideEffects(), "side-effects default"), replay.Selection{},
			replay.Options{Operators: ops, OnBudget: func(r replay.BudgetResult) error { checks = append(checks, r); return nil }}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !sum.Clean() || sum.Budgets != 3 || sum.BudgetsSame != 3 || sum.GrantsValid != 1 {
			t.Errorf("replay summary %+v, want 3 budget checks (two attempts, one approval) the same and the grant valid", sum)
		}
		if len(checks) == 3 && (checks[1].Kind != events.ApprovalBudget || checks[2].Grant != "budget-1" || checks[2].Raised != want.Raise) {
			t.Errorf("budget checks %+v", checks)
		}
	})
}

// TestAgent_BudgetApprovalDeniedEndsTheRun: a denial ends the run
// budget_exceeded, naming the approval, and the model is not asked again.
func TestAgent_BudgetApprovalDeniedEndsTheRun(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := overBudget(t, w, nil)
		a := waitsOnBudget(t, h.run("r1", "hi"), "budget-1")
		kp, _ := operator(t)
		publish(t, h, kp, "r1", a.ID, a.Hash, events.DecisionDeny)
		v := h.drive("r1")
		wantEnd(t, v, projector.Failed, events.ReasonBudgetExceeded)
		if !strings.Contains(v.Run.Detail, "budget approval budget-1 denied by alice") {
			t.Errorf("detail %q, want it to name the denial", v.Run.Detail)
		}
		if n := len(h.srv.Requests()); n != 1 {
			t.Errorf("%d requests, want 1", n)
		}
	})
}

// TestAgent_BudgetApprovalExpires: an approval nobody decides before its
// expiry ends the run budget_exceeded once a worker looks after it; a
// worker looking before it leaves the run waiting. The worker's clock is
// set, not slept on.
func TestAgent_BudgetApprovalExpires(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := overBudget(t, w, func(c *model.Config) { c.OverBudget.Expires = time.Hour })
		a := waitsOnBudget(t, h.run("r1", "hi"), "budget-1")
		if a.ExpiresAt == nil || a.ExpiresAt.Before(time.Now().Add(50*time.Minute)) {
			t.Fatalf("the approval expires at %v, want in an hour", a.ExpiresAt)
		}
		var now atomic.Pointer[time.Time]
		at := time.Now()
		now.Store(&at)
		_, ops := operator(t)
		d, err := driver.New(driver.Config{Log: h.log, Policy: policy.WithID(policy.DefaultSideEffects(), "side-effects default"),
			Tools: []driver.Tool{h.read, h.send}, Operators: ops, Now: func() time.Time { return *now.Load() }})
		if err != nil {
			t.Fatal(err)
		}
		drive := func() projector.View {
			t.Helper()
			r, err := d.Load(t.Context(), "r1")
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Drive(t.Context(), r, h.agent); err != nil {
				t.Fatal(err)
			}
			return r.View()
		}
		waitsOnBudget(t, drive(), "budget-1")
		later := a.ExpiresAt.Add(time.Second)
		now.Store(&later)
		v := drive()
		wantEnd(t, v, projector.Failed, events.ReasonBudgetExceeded)
		if got := v.Approval("budget-1"); got.State != projector.Expired || !strings.Contains(v.Run.Detail, "expired") {
			t.Errorf("approval %s, detail %q: want expired", got.State, v.Run.Detail)
		}
		if n := len(h.srv.Requests()); n != 1 {
			t.Errorf("%d requests, want 1", n)
		}
	})
}

// TestAgent_BudgetGrantForgedOrReusedIsRefused: a grant signed by a key
// that is no operator's is refused; after a true grant was used and the
// run passed its raised budget again, the first grant cannot serve the
// second approval (named as the first, or with its hash): each is
// recorded refused, the run keeps waiting and the model is not asked.
func TestAgent_BudgetGrantForgedOrReusedIsRefused(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := newHarness(t, w, func(c *model.Config) {
			c.Budget = model.Budget{Calls: 1}
			c.OverBudget = model.OverBudget{Approve: true}
		}, reply(w.tools("", call{"c1", "read_file", `{"path":"a"}`})), reply(w.tools("", call{"c2", "read_file", `{"path":"b"}`})), reply(w.text("done")))
		first := waitsOnBudget(t, h.run("r1", "hi"), "budget-1")

		stranger, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		publish(t, h, stranger, "r1", first.ID, first.Hash, events.DecisionGrant)
		v := h.drive("r1")
		waitsOnBudget(t, v, "budget-1")
		if len(v.Refusals) != 1 || !strings.Contains(v.Refusals[0].Reason, approvals.ErrUnknownOperator.Error()) {
			t.Fatalf("refusals %+v, want the stranger's grant refused", v.Refusals)
		}

		kp, _ := operator(t)
		publish(t, h, kp, "r1", first.ID, first.Hash, events.DecisionGrant)
		v = h.drive("r1")
		second := waitsOnBudget(t, v, "budget-2")
		if second.Hash == first.Hash {
			t.Fatalf("both approvals have hash %s", first.Hash)
		}
		if n := len(h.srv.Requests()); n != 2 {
			t.Fatalf("%d requests after the first grant, want 2", n)
		}

		publish(t, h, kp, "r1", first.ID, first.Hash, events.DecisionGrant)
		publish(t, h, kp, "r1", second.ID, first.Hash, events.DecisionGrant)
		for range 2 {
			v = h.drive("r1")
		}
		waitsOnBudget(t, v, "budget-2")
		if len(v.Refusals) != 3 {
			t.Fatalf("refusals %+v, want 3", v.Refusals)
		}
		if r := v.Refusals[1].Reason; !strings.Contains(r, approvals.ErrNoApproval.Error()) {
			t.Errorf("the first grant again: refused %q, want %q", r, approvals.ErrNoApproval)
		}
		if r := v.Refusals[2].Reason; !strings.Contains(r, approvals.ErrWrongHash.Error()) {
			t.Errorf("the first grant's hash on the second approval: refused %q, want %q", r, approvals.ErrWrongHash)
		}
		if n := len(h.srv.Requests()); n != 2 {
			t.Errorf("%d requests, want 2", n)
		}
		if h.read.Count() != 2 {
			t.Errorf("read ran %d times, want 2", h.read.Count())
		}
	})
}

// TestAgent_BudgetGrantInASnapshotIsNotBelieved: a snapshot that says the
// budget approval was granted (forged, or stale) is folded from the
// events again before the grant is used: with no grant on the log the run
// keeps waiting and the model is not asked; once an operator grants it,
// a worker loading the same snapshot checks the grant and goes on.
func TestAgent_BudgetGrantInASnapshotIsNotBelieved(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := overBudget(t, w, nil)
		waitsOnBudget(t, h.run("r1", "hi"), "budget-1")
		r, err := h.d.Load(t.Context(), "r1")
		if err != nil {
			t.Fatal(err)
		}
		snap, at := r.View(), r.Tail()
		a := snap.Approval("budget-1")
		a.State, a.Decision, a.DecisionEvent = projector.Granted, &events.DecisionBody{Approval: a.ID, Hash: a.Hash, Decision: events.DecisionGrant}, "forged"

		fromSnap := func() projector.View {
			t.Helper()
			r, err := h.d.LoadFrom(t.Context(), "r1", snap, at)
			if err != nil {
				t.Fatalf("load from snapshot: %v", err)
			}
			if err := h.d.Drive(t.Context(), r, h.agent); err != nil {
				t.Fatalf("drive: %v", err)
			}
			return h.view("r1")
		}
		waitsOnBudget(t, fromSnap(), "budget-1")
		if n := len(h.srv.Requests()); n != 1 {
			t.Fatalf("%d requests on a forged grant, want 1", n)
		}
		grant(t, h, "r1")
		wantEnd(t, fromSnap(), projector.Completed, events.ReasonCompleted)
		if n := len(h.srv.Requests()); n != 2 {
			t.Errorf("%d requests, want 2", n)
		}
	})
}
