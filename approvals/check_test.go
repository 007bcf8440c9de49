package approvals_test

import (
	"errors"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// decided returns an approval as the fold shows it once d is recorded on it.
func decided(d events.DecisionBody, expires *time.Time) *projector.Approval {
	state := projector.Granted
	if d.Decision == events.Deny {
		state = projector.Denied
	}
	return &projector.Approval{
		ApprovalRequest: events.ApprovalRequest{ID: testApproval, Kind: "publication", Hash: testHash, ExpiresAt: expires},
		Step:            1, State: state, Decision: &d, DecisionEvent: "01JDECISION",
	}
}

func TestCheck_AcceptsAVerifiedTimelyDecision(t *testing.T) {
	kp, pub := newOperator(t)
	ops := approvals.Operators{pub: "alice"}
	later := signedAt.Add(time.Minute)
	for _, decision := range []string{events.Grant, events.Deny} {
		if err := approvals.Check(ops, testRun, decided(signGrant(t, kp, decision), &later)); err != nil {
			t.Errorf("Check(%s before expiry) = %v, want nil", decision, err)
		}
		if err := approvals.Check(ops, testRun, decided(signGrant(t, kp, decision), nil)); err != nil {
			t.Errorf("Check(%s, no expiry) = %v, want nil", decision, err)
		}
	}
	// Signed exactly at the expiry is still in time: it expires after.
	at := signedAt
	if err := approvals.Check(ops, testRun, decided(signGrant(t, kp, events.Grant), &at)); err != nil {
		t.Errorf("Check(signed at the expiry instant) = %v, want nil", err)
	}
}

func TestCheck_Refusals(t *testing.T) {
	kp, pub := newOperator(t)
	stranger, _ := newOperator(t)
	ops := approvals.Operators{pub: "alice"}
	earlier := signedAt.Add(-time.Nanosecond)
	tests := []struct {
		name string
		a    func() *projector.Approval
		want error
	}{
		{"no approval", func() *projector.Approval { return nil }, approvals.ErrNoApproval},
		{"wrong hash", func() *projector.Approval {
			d, err := approvals.Sign(kp, testRun, testApproval, "0000", events.Grant, "", signedAt)
			if err != nil {
				t.Fatal(err)
			}
			return decided(d, nil)
		}, approvals.ErrWrongHash},
		{"expired (signed after ExpiresAt)", func() *projector.Approval {
			return decided(signGrant(t, kp, events.Grant), &earlier)
		}, approvals.ErrExpired},
		{"denial after expiry", func() *projector.Approval {
			return decided(signGrant(t, kp, events.Deny), &earlier)
		}, approvals.ErrExpired},
		{"pending, no decision", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.Grant), nil)
			a.State, a.Decision = projector.Pending, nil
			return a
		}, approvals.ErrNotPending},
		{"expired state", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.Grant), nil)
			a.State = projector.Expired
			return a
		}, approvals.ErrNotPending},
		{"consumed", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.Grant), nil)
			a.State = projector.Consumed
			return a
		}, approvals.ErrNotPending},
		{"superseded", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.Grant), nil)
			a.State = projector.Superseded
			return a
		}, approvals.ErrNotPending},
		{"granted state with no decision", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.Grant), nil)
			a.Decision = nil
			return a
		}, approvals.ErrNotPending},
		{"unknown operator", func() *projector.Approval {
			return decided(signGrant(t, stranger, events.Grant), nil)
		}, approvals.ErrUnknownOperator},
		{"bad signature", func() *projector.Approval {
			d := signGrant(t, kp, events.Grant)
			d.Reason = "edited"
			return decided(d, nil)
		}, approvals.ErrBadSignature},
		{"signed for another run", func() *projector.Approval {
			d, err := approvals.Sign(kp, "run-2", testApproval, testHash, events.Grant, "", signedAt)
			if err != nil {
				t.Fatal(err)
			}
			return decided(d, nil)
		}, approvals.ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := approvals.Check(ops, testRun, tt.a())
			if !errors.Is(err, tt.want) {
				t.Errorf("Check = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestExpired(t *testing.T) {
	at := signedAt
	a := &projector.Approval{ApprovalRequest: events.ApprovalRequest{ExpiresAt: &at}}
	tests := []struct {
		name string
		a    *projector.Approval
		now  time.Time
		want bool
	}{
		{"before", a, at.Add(-time.Second), false},
		{"at", a, at, false},
		{"after", a, at.Add(time.Nanosecond), true},
		{"no expiry", &projector.Approval{}, at.Add(1000 * time.Hour), false},
	}
	for _, tt := range tests {
		if got := approvals.Expired(tt.a, tt.now); got != tt.want {
			t.Errorf("Expired(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
