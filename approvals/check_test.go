package approvals_test

import (
	"bytes"
	"encoding/json"
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
	if d.Decision == events.DecisionDeny {
		state = projector.Denied
	}
	if d.Received.IsZero() {
		d.Received = signedAt.Add(time.Second)
	}
	return &projector.Approval{
		ApprovalRequest: events.ApprovalRequest{ID: testApproval, Kind: "publication", Hash: testHash, ExpiresAt: expires},
		Step:            1, State: state, Decision: &d, DecisionEvent: "01JDECISION",
		Requested: signedAt.Add(-time.Minute),
	}
}

// check is approvals.AdmitRecorded with the default skew.
func check(ops approvals.Operators, a *projector.Approval) error {
	return approvals.AdmitRecorded(ops, testRun, a, approvals.DefaultSkew)
}

func TestCheck_AcceptsAVerifiedTimelyDecision(t *testing.T) {
	kp, pub := newOperator(t)
	ops := approvals.Operators{pub: "alice"}
	later := signedAt.Add(time.Minute)
	for _, decision := range []string{events.DecisionGrant, events.DecisionDeny} {
		if err := check(ops, decided(signGrant(t, kp, decision), &later)); err != nil {
			t.Errorf("Check(%s before expiry) = %v, want nil", decision, err)
		}
		if err := check(ops, decided(signGrant(t, kp, decision), nil)); err != nil {
			t.Errorf("Check(%s, no expiry) = %v, want nil", decision, err)
		}
	}
	// Signed and received exactly at the expiry is still in time: it
	// expires after.
	at := signedAt
	d := signGrant(t, kp, events.DecisionGrant)
	d.Received = at
	if err := check(ops, decided(d, &at)); err != nil {
		t.Errorf("Check(signed and received at the expiry instant) = %v, want nil", err)
	}
	// Within the skew either side.
	early := decided(signGrant(t, kp, events.DecisionGrant), nil)
	early.Requested = signedAt.Add(approvals.DefaultSkew)
	if err := check(ops, early); err != nil {
		t.Errorf("Check(signed one skew before the request) = %v, want nil", err)
	}
	ahead := signGrant(t, kp, events.DecisionGrant)
	ahead.Received = signedAt.Add(-approvals.DefaultSkew)
	if err := check(ops, decided(ahead, nil)); err != nil {
		t.Errorf("Check(signed one skew after receipt) = %v, want nil", err)
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
			d, err := approvals.Sign(kp, testRun, testApproval, "0000", events.DecisionGrant, "", signedAt)
			if err != nil {
				t.Fatal(err)
			}
			return decided(d, nil)
		}, approvals.ErrWrongHash},
		{"expired (signed after ExpiresAt)", func() *projector.Approval {
			return decided(signGrant(t, kp, events.DecisionGrant), &earlier)
		}, approvals.ErrExpired},
		{"denial after expiry", func() *projector.Approval {
			return decided(signGrant(t, kp, events.DecisionDeny), &earlier)
		}, approvals.ErrExpired},
		{"signed before the request existed", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.DecisionGrant), nil)
			a.Requested = signedAt.Add(approvals.DefaultSkew + time.Nanosecond)
			return a
		}, approvals.ErrSignedBeforeRequest},
		{"dated 100 years ahead, no expiry", func() *projector.Approval {
			d, err := approvals.Sign(kp, testRun, testApproval, testHash, events.DecisionGrant, "", signedAt.AddDate(100, 0, 0))
			if err != nil {
				t.Fatal(err)
			}
			d.Received = signedAt
			return decided(d, nil)
		}, approvals.ErrSignedAfterReceipt},
		{"backdated under the expiry, received after it", func() *projector.Approval {
			expires := signedAt.Add(time.Second)
			d := signGrant(t, kp, events.DecisionGrant)
			d.Received = expires.Add(time.Nanosecond)
			return decided(d, &expires)
		}, approvals.ErrExpired},
		{"no time of receipt", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.DecisionGrant), nil)
			a.Decision.Received = time.Time{}
			return a
		}, approvals.ErrNotReceived},
		{"a denial recorded as a grant", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.DecisionDeny), nil)
			a.State = projector.Granted
			return a
		}, approvals.ErrBadDecision},
		{"a grant recorded as a denial", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.DecisionGrant), nil)
			a.State = projector.Denied
			return a
		}, approvals.ErrBadDecision},
		{"names another approval", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.DecisionGrant), nil)
			a.ID = "01JOTHERAPPROVAL"
			return a
		}, approvals.ErrNoApproval},
		{"pending, no decision", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.DecisionGrant), nil)
			a.State, a.Decision = projector.Pending, nil
			return a
		}, approvals.ErrNotPending},
		{"expired state", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.DecisionGrant), nil)
			a.State = projector.Expired
			return a
		}, approvals.ErrNotPending},
		{"consumed", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.DecisionGrant), nil)
			a.State = projector.Consumed
			return a
		}, approvals.ErrNotPending},
		{"superseded", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.DecisionGrant), nil)
			a.State = projector.Superseded
			return a
		}, approvals.ErrNotPending},
		{"granted state with no decision", func() *projector.Approval {
			a := decided(signGrant(t, kp, events.DecisionGrant), nil)
			a.Decision = nil
			return a
		}, approvals.ErrNotPending},
		{"unknown operator", func() *projector.Approval {
			return decided(signGrant(t, stranger, events.DecisionGrant), nil)
		}, approvals.ErrUnknownOperator},
		{"bad signature", func() *projector.Approval {
			d := signGrant(t, kp, events.DecisionGrant)
			d.Reason = "edited"
			return decided(d, nil)
		}, approvals.ErrBadSignature},
		{"signed for another run", func() *projector.Approval {
			d, err := approvals.Sign(kp, "run-2", testApproval, testHash, events.DecisionGrant, "", signedAt)
			if err != nil {
				t.Fatal(err)
			}
			return decided(d, nil)
		}, approvals.ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := check(ops, tt.a())
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

// TestParseDecision_Refusals: what an operator publishes is decoded through
// the JSON boundary, strictly: a key folded onto another (which
// encoding/json would decode into the same field), an unknown field, or a
// time of receipt the operator has no business setting is refused.
func TestParseDecision_Refusals(t *testing.T) {
	kp, _ := newOperator(t)
	good, err := json.Marshal(signGrant(t, kp, events.DecisionGrant))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := approvals.ParseDecision(good); err != nil || d.Decision != events.DecisionGrant {
		t.Fatalf("ParseDecision(a signed grant) = %+v, %v", d, err)
	}
	swap := func(old, new string) []byte { return bytes.Replace(good, []byte(old), []byte(new), 1) }
	for name, data := range map[string][]byte{
		"folded key":    swap(`"decision":"grant"`, `"decision":"grant","Decision":"deny"`),
		"unknown field": swap(`"decision":"grant"`, `"decision":"grant","extra":1`),
		"received set":  swap(`"decision":"grant"`, `"decision":"grant","received":"2030-01-01T00:00:00Z"`),
		"intake set":    swap(`"decision":"grant"`, `"decision":"grant","intake":7`),
		"not JSON":      []byte(`{"decision":`),
		"two values":    append(append([]byte{}, good...), good...),
	} {
		if _, err := approvals.ParseDecision(data); !errors.Is(err, approvals.ErrMalformedDecision) {
			t.Errorf("ParseDecision(%s) = %v, want ErrMalformedDecision", name, err)
		}
	}
}

// FuzzParseDecision: what an operator publishes is parsed without panic,
// and whatever is accepted is boundary-clean, carries no time of receipt
// or intake of its own, and reads back the same after encoding.
func FuzzParseDecision(f *testing.F) {
	kp, _ := newOperator(f)
	good, err := json.Marshal(signGrant(f, kp, events.DecisionGrant))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"decision":"grant","Decision":"deny"}`))
	f.Add([]byte(`{"approval":"a","received":"2030-01-01T00:00:00Z"}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := approvals.ParseDecision(b)
		if err != nil {
			if !errors.Is(err, approvals.ErrMalformedDecision) {
				t.Fatalf("ParseDecision(%q) = %v, want ErrMalformedDecision", b, err)
			}
			return
		}
		if !d.Received.IsZero() || d.Intake != 0 {
			t.Fatalf("ParseDecision(%q) accepted a time of receipt or an intake: %+v", b, d)
		}
		again, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := approvals.ParseDecision(again)
		if err != nil || d2.Decision != d.Decision || d2.Approval != d.Approval || d2.Signature != d.Signature || !d2.Signed.Equal(d.Signed) {
			t.Fatalf("round trip of %q: %+v, %v", b, d2, err)
		}
	})
}
