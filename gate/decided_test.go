package gate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/projector"
)

// askOther asks a read while r waits on another call's approval.
func askOther(t *testing.T, r *gate.Run) error {
	t.Helper()
	_, err := r.Ask(t.Context(), "read", json.RawMessage(`{"path":"a"}`))
	if err == nil {
		t.Fatal("a read asked while the run waited on a send: no error")
	}
	return err
}

func wantEnded(t *testing.T, err error, reason events.EndReason) {
	t.Helper()
	var ended *gate.EndedError
	if !errors.As(err, &ended) || ended.Reason != string(reason) {
		t.Fatalf("got %v, want an *EndedError for %s", err, reason)
	}
}

// The operator's word on a call the program has not asked again is taken
// in by whatever the program asks next, and by TakeIn: a denial or an
// expiry ends the run then, and a grant is recorded and left for the same
// call, instead of every other call being refused as waiting on an
// approval an operator already decided.
func TestGate_AnotherCallTakesInTheOperatorsWord(t *testing.T) {
	t.Run("denied", func(t *testing.T) {
		e := newEnv(t)
		r := open(t, e.gate(t), "denied")
		p := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
		e.decide(t, r.ID(), p.Approval, events.DecisionDeny)
		wantEnded(t, askOther(t, r), events.ReasonApprovalDenied)
		ks := kinds(t, e.log, r.ID())
		if count(ks, events.ApprovalDenied) != 1 || count(ks, events.StepObserved) != 0 {
			t.Fatalf("events %v: want the denial recorded once and nothing run", ks)
		}
	})

	t.Run("expired", func(t *testing.T) {
		e := newEnv(t)
		e.cfg.ApprovalTTL = time.Minute
		r := open(t, e.gate(t), "expired")
		ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
		// Before the deadline the other call is refused as waiting: the
		// end below is the expiry's.
		var w *gate.WaitingError
		if err := askOther(t, r); !errors.As(err, &w) || w.Approval.State != projector.Pending {
			t.Fatalf("before the expiry: %v, want a *WaitingError on a pending approval", err)
		}
		e.clk.Advance(2 * time.Minute)
		wantEnded(t, askOther(t, r), events.ReasonApprovalExpired)
		if n := count(kinds(t, e.log, r.ID()), events.ApprovalExpired); n != 1 {
			t.Fatalf("approval.expired recorded %d times, want 1", n)
		}
	})

	t.Run("granted", func(t *testing.T) {
		e := newEnv(t)
		r := open(t, e.gate(t), "granted")
		p := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
		e.decide(t, r.ID(), p.Approval, events.DecisionGrant)
		var w *gate.WaitingError
		if err := askOther(t, r); !errors.As(err, &w) || w.Approval.State != projector.Granted {
			t.Fatalf("another call after the grant: %v, want a *WaitingError on the granted approval", err)
		}
		ks := kinds(t, e.log, r.ID())
		if count(ks, events.ApprovalGranted) != 1 || count(ks, events.StepObserved) != 0 {
			t.Fatalf("events %v: want the grant recorded once and nothing run", ks)
		}
		ask(t, r, "send", `{"to":"x@example.com"}`, gate.Allow)
		report(t, r, "sent")
		if n := count(kinds(t, e.log, r.ID()), events.StepObserved); n != 1 {
			t.Fatalf("observations: %d, want the granted call run once", n)
		}
	})

	t.Run("through TakeIn, nothing asked", func(t *testing.T) {
		e := newEnv(t)
		r := open(t, e.gate(t), "taken-in")
		p := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
		if err := r.TakeIn(t.Context()); err != nil {
			t.Fatal(err)
		}
		if v := view(t, r); v.Run.Status != projector.Waiting {
			t.Fatalf("take-in before a decision: run %s, want still waiting", v.Run.Status)
		}
		e.decide(t, r.ID(), p.Approval, events.DecisionDeny)
		if err := r.TakeIn(t.Context()); err != nil {
			t.Fatal(err)
		}
		if v := view(t, r); v.Run.Status != projector.Cancelled || v.Run.Reason != string(events.ReasonApprovalDenied) {
			t.Fatalf("take-in after a denial: run %s %s, want cancelled %s", v.Run.Status, v.Run.Reason, events.ReasonApprovalDenied)
		}
	})
}

// While a program holds a run, the expiry of the approval it waits on is
// recorded when it passes, with nothing asked then; a program that
// resumes a waiting run watches it the same way.
func TestGate_AnExpiryIsRecordedWithNothingAsked(t *testing.T) {
	e := newEnv(t)
	e.cfg.Now, e.cfg.ApprovalTTL = time.Now, 300*time.Millisecond
	g := e.gate(t)
	r := open(t, g, "held")
	ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
	waitFor(t, "the expiry recorded", func() bool { return count(kinds(t, e.log, r.ID()), events.ApprovalExpired) == 1 })
	if v := view(t, r); v.Run.Reason != string(events.ReasonApprovalExpired) {
		t.Fatalf("run %s %s, want ended %s", v.Run.Status, v.Run.Reason, events.ReasonApprovalExpired)
	}

	first := open(t, g, "resumed")
	ask(t, first, "send", `{"to":"x@example.com"}`, gate.Pending)
	first.Close() // before the deadline: its timer goes with it
	again, err := g.Resume(t.Context(), first.ID())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Close)
	waitFor(t, "the resumed run's expiry recorded", func() bool { return count(kinds(t, e.log, first.ID()), events.ApprovalExpired) == 1 })
}

// While a program holds a run, an operator's decision on its approval is
// recorded within a second or so of its arrival, with nothing asked: a
// grant sent in time is judged in time, not when the program next asks.
func TestGate_ADecisionIsRecordedOnArrivalWithNothingAsked(t *testing.T) {
	e := newEnv(t)
	e.cfg.Now, e.cfg.ApprovalTTL = time.Now, time.Minute
	r := open(t, e.gate(t), "on-arrival")
	p := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
	e.decide(t, r.ID(), p.Approval, events.DecisionGrant)
	waitFor(t, "the grant recorded", func() bool { return count(kinds(t, e.log, r.ID()), events.ApprovalGranted) == 1 })
	if v := view(t, r); v.Run.Status != projector.Waiting || v.Approval(p.Approval.ID).State != projector.Granted {
		t.Fatalf("run %s, approval %s: want the grant recorded and left for the call", v.Run.Status, v.Approval(p.Approval.ID).State)
	}
	if n := count(kinds(t, e.log, r.ID()), events.StepObserved); n != 0 {
		t.Fatalf("observations %d: the grant ran something on its own", n)
	}
	ask(t, r, "send", `{"to":"x@example.com"}`, gate.Allow)
	report(t, r, "sent")
}

// A call that Report leaves waiting on an operator (its result unknown)
// is watched as any pending call: its approval's expiry is recorded when
// it passes, with nothing asked.
func TestGate_AnInterruptedCallsApprovalExpiresWithNothingAsked(t *testing.T) {
	e := newEnv(t)
	e.cfg.Now, e.cfg.ApprovalTTL = time.Now, 300*time.Millisecond
	r := open(t, e.gate(t), "interrupted")
	ask(t, r, "note", `{"path":"a"}`, gate.Allow)
	a, err := r.Report(t.Context(), "", fmt.Errorf("the program lost the call: %w", driver.ErrInterrupted))
	if err != nil || a.Verdict != gate.Pending || a.Approval == nil || a.Approval.ExpiresAt == nil {
		t.Fatalf("report of an interrupted call: %+v, %v; want it pending on an approval with a deadline", a, err)
	}
	waitFor(t, "the expiry recorded", func() bool { return count(kinds(t, e.log, r.ID()), events.ApprovalExpired) == 1 })
}

// A denial recorded without the run's end (the take-in cut short between
// the two appends) is taken in again by the next call, which ends the run:
// it is not refused for ever as waiting on an approval already decided.
func TestGate_ADenialRecordedWithoutTheEndIsFinishedByTheNextCall(t *testing.T) {
	for cut := 1; cut <= 10; cut++ {
		e := newEnv(t)
		var (
			mu     sync.Mutex
			cancel context.CancelFunc
			reads  int
		)
		// The clock cuts the take-in short: it cancels the call's context
		// at its cut-th reading, which falls between the two appends for
		// one value of cut.
		e.cfg.Now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			if cancel != nil {
				if reads++; reads == cut {
					cancel()
				}
			}
			return time.Now()
		}
		r := open(t, e.gate(t), fmt.Sprintf("cut-%d", cut))
		p := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
		e.decide(t, r.ID(), p.Approval, events.DecisionDeny)
		ctx, c := context.WithCancel(t.Context())
		mu.Lock()
		cancel = c
		mu.Unlock()
		_, _ = r.Ask(ctx, "read", json.RawMessage(`{"path":"a"}`))
		mu.Lock()
		cancel = nil
		mu.Unlock()
		c()
		if ks := kinds(t, e.log, r.ID()); count(ks, events.ApprovalDenied) != 1 || count(ks, events.RunCancelled) != 0 {
			continue // not cut between the two
		}
		wantEnded(t, askOther(t, r), events.ReasonApprovalDenied)
		return
	}
	t.Fatal("no cut fell between the denial and the run's end")
}

// A process told "may still be running" of another's call reads the run
// again before it says so: once the other process has recorded the call's
// result, the next call runs, and a reader (TakeIn, then View) sees it (an
// eighth outside review had a second gateway say so for the call's whole
// timeout).
func TestGate_AnotherProcesssFinishedCallIsNotSaidToBeRunning(t *testing.T) {
	e := newEnv(t)
	rA := open(t, e.gate(t), "two-processes")
	resume := func() *gate.Run {
		r, err := e.gate(t).Resume(t.Context(), rA.ID())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	rB, rC := resume(), resume() // C only reads
	release, done := callHeld(t, rA, "note", `{"path":"a"}`, "A wrote")
	f := &runner{}
	if _, err := rB.Call(t.Context(), "read", json.RawMessage(`{"path":"b"}`), f.run); !errors.Is(err, gate.ErrElsewhere) {
		t.Fatalf("B's call while A's runs: %v, want ErrElsewhere", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("A's call: %v", err)
	}
	if a := call(t, rB, "read", `{"path":"b"}`, f, gate.Done); a.Step != 2 {
		t.Fatalf("B's next call: %+v, want it run as step 2", a)
	}
	if err := rC.TakeIn(t.Context()); err != nil {
		t.Fatal(err)
	}
	vC := view(t, rC)
	if o := vC.Observation(1); o == nil || o.Content != "A wrote" || vC.Steps.Len() != 2 {
		t.Fatalf("C's view: %d steps, step 1's observation %+v; want both steps, A's result", vC.Steps.Len(), o)
	}
}
