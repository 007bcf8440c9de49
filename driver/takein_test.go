package driver_test

import (
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nkeys"
)

// takeIn takes in what came for the approval r waits on, failing the test
// on an error.
func takeIn(t *testing.T, p paused) {
	t.Helper()
	if err := p.d.TakeIn(t.Context(), p.r); err != nil {
		t.Fatalf("take in on run %s: %v", p.r.ID(), err)
	}
}

// TakeIn records an operator's word on a waiting run, and its expiry, as
// a drive does, but never runs a granted step: that is left to the drive
// the step's caller asks for.
func TestTakeIn_RecordsTheOperatorsWordAndRunsNothing(t *testing.T) {
	t.Run("a denial ends the run", func(t *testing.T) {
		p := pauseOnSend(t, driver.Config{}, `{"to":"ops"}`)
		a := pending(t, p.r)
		publish(t, p.d, p.r, sign(t, p.kp, p.r.ID(), a, events.DecisionDeny, time.Now()))
		takeIn(t, p)
		wantEnd(t, p.r.View(), projector.Cancelled, events.ReasonApprovalDenied)
		wantCount(t, p.send, 0)
		if got := len(p.agent.Inputs()); got != 1 {
			t.Errorf("agent asked %d times, want 1 (taking in asks no agent)", got)
		}
	})

	t.Run("a grant is recorded and left for the drive", func(t *testing.T) {
		p := pauseOnSend(t, driver.Config{}, `{"to":"ops"}`)
		a := grant(t, p.d, p.r, p.kp)
		takeIn(t, p)
		wantEnd(t, p.r.View(), projector.Waiting, a.Kind)
		wantCount(t, p.send, 0)
		if got := approvalOf(t, p.r, a.ID).State; got != projector.Granted {
			t.Fatalf("approval state after taking in a grant: %s, want %s", got, projector.Granted)
		}
		n := len(records(t, p.log, p.r.ID()))
		takeIn(t, p) // again: the grant is not consumed, nothing more recorded
		if got := len(records(t, p.log, p.r.ID())); got != n {
			t.Fatalf("a second take-in recorded %d events", got-n)
		}
		wantCount(t, p.send, 0)
		drive(t, p.d, p.r, p.agent)
		wantCount(t, p.send, 1)
		wantEnd(t, p.r.View(), projector.Completed, events.ReasonCompleted)
		if got := len(ofKind(records(t, p.log, p.r.ID()), events.ApprovalGranted)); got != 1 {
			t.Errorf("approval.granted events: %d, want 1", got)
		}
	})

	t.Run("an expiry is recorded once the deadline has passed", func(t *testing.T) {
		clk := newClock()
		p := pauseOnSend(t, driver.Config{ApprovalTTL: time.Minute, Now: clk.Now}, `{"to":"ops"}`)
		a := pending(t, p.r)
		clk.Advance(59 * time.Second)
		takeIn(t, p)
		wantEnd(t, p.r.View(), projector.Waiting, a.Kind)
		clk.Advance(2 * time.Second)
		takeIn(t, p)
		wantEnd(t, p.r.View(), projector.Cancelled, events.ReasonApprovalExpired)
		if got := approvalOf(t, p.r, a.ID).State; got != projector.Expired {
			t.Errorf("approval state: %s, want %s", got, projector.Expired)
		}
		wantCount(t, p.send, 0)
	})

	t.Run("a forged decision is refused and the next one read", func(t *testing.T) {
		p := pauseOnSend(t, driver.Config{}, `{"to":"ops"}`)
		a := pending(t, p.r)
		stranger, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		publish(t, p.d, p.r, sign(t, stranger, p.r.ID(), a, events.DecisionGrant, time.Now()))
		publish(t, p.d, p.r, sign(t, p.kp, p.r.ID(), a, events.DecisionDeny, time.Now()))
		takeIn(t, p)
		recs := records(t, p.log, p.r.ID())
		if got := len(ofKind(recs, events.ApprovalRefused)); got != 1 {
			t.Errorf("approval.refused events: %d, want 1", got)
		}
		wantEnd(t, p.r.View(), projector.Cancelled, events.ReasonApprovalDenied)
		wantCount(t, p.send, 0)
	})

	t.Run("a run that does not wait is left alone", func(t *testing.T) {
		p := pauseOnSend(t, driver.Config{}, `{"to":"ops"}`)
		grant(t, p.d, p.r, p.kp)
		drive(t, p.d, p.r, p.agent)
		n := len(records(t, p.log, p.r.ID()))
		takeIn(t, p)
		if got := len(records(t, p.log, p.r.ID())); got != n {
			t.Errorf("take-in on an ended run recorded %d events", got-n)
		}
	})
}
