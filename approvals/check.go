package approvals

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/projector"
)

// DefaultSkew is how far apart the clocks of an operator, the workers and
// the server may be before a decision's signing time is refused: see
// [Admit].
const DefaultSkew = 30 * time.Second

// Errors a decision's times are refused with.
var (
	ErrSignedBeforeRequest = errors.New("decision signed before its approval was requested")
	ErrSignedAfterReceipt  = errors.New("decision signed after the log received it")
	ErrNotReceived         = errors.New("decision has no time of receipt")
	ErrMalformedDecision   = errors.New("malformed decision")
)

// Admit decides whether decision d on approval a of run can be acted on:
// d names a, is signed by a configured operator over run and its own
// fields, names a's hash, and its times hold within skew:
//
//   - it was signed no earlier than skew before a was requested;
//   - it was signed no later than skew after it was received
//     (d.Received, the time the worker read it from the decisions stream,
//     which the operator cannot choose): a decision dated ahead is refused;
//   - when a expires, it was received, and signed, no later than the
//     expiry: a decision backdated under the deadline but sent after it is
//     refused.
//
// A nil error means a worker may record and act on it; any other is the
// reason it records in its refusal. Whether a is still pending is the
// caller's to know.
func Admit(ops Operators, run string, a *projector.Approval, d events.DecisionBody, skew time.Duration) error {
	if a == nil {
		return ErrNoApproval
	}
	if d.Approval != a.ID {
		return fmt.Errorf("%w: decision names approval %q, the run waits on %s", ErrNoApproval, d.Approval, a.ID)
	}
	if err := Verify(ops, run, d); err != nil {
		return fmt.Errorf("approval %s: %w", a.ID, err)
	}
	if d.Hash != a.Hash {
		return fmt.Errorf("approval %s: %w: %s, approval is %s", a.ID, ErrWrongHash, d.Hash, a.Hash)
	}
	if d.Received.IsZero() {
		return fmt.Errorf("approval %s: %w", a.ID, ErrNotReceived)
	}
	const layout = time.RFC3339Nano
	switch {
	case d.Signed.Before(a.Requested.Add(-skew)):
		return fmt.Errorf("approval %s: %w: signed %s, requested %s (skew %s)", a.ID, ErrSignedBeforeRequest, d.Signed.Format(layout), a.Requested.Format(layout), skew)
	case d.Signed.After(d.Received.Add(skew)):
		return fmt.Errorf("approval %s: %w: signed %s, received %s (skew %s)", a.ID, ErrSignedAfterReceipt, d.Signed.Format(layout), d.Received.Format(layout), skew)
	case a.ExpiresAt != nil && d.Received.After(*a.ExpiresAt):
		return fmt.Errorf("approval %s: %w: expired %s, received %s", a.ID, ErrExpired, a.ExpiresAt.Format(layout), d.Received.Format(layout))
	case a.ExpiresAt != nil && d.Signed.After(*a.ExpiresAt):
		return fmt.Errorf("approval %s: %w: expired %s, signed %s", a.ID, ErrExpired, a.ExpiresAt.Format(layout), d.Signed.Format(layout))
	}
	return nil
}

// AdmitRecorded is [Admit] of the decision recorded on a, which must be
// granted or denied as that decision says.
func AdmitRecorded(ops Operators, run string, a *projector.Approval, skew time.Duration) error {
	if a == nil {
		return ErrNoApproval
	}
	d := a.Decision
	if d == nil || (a.State != projector.Granted && a.State != projector.Denied) {
		return fmt.Errorf("approval %s: no decision to act on (it is %s): %w", a.ID, a.State, ErrNotPending)
	}
	if (a.State == projector.Granted) != (d.Decision == events.DecisionGrant) {
		return fmt.Errorf("approval %s: %w: %s recorded on an approval in state %s", a.ID, ErrBadDecision, d.Decision, a.State)
	}
	return Admit(ops, run, a, *d, skew)
}

// ParseDecision decodes a decision as an operator publishes it: one
// boundary-clean JSON object (see [jsonform.Validate]) with exactly the
// fields of [events.DecisionBody] an operator sets, and neither a time of
// receipt nor an intake sequence, which are the worker's to record. It
// checks no signature: see [Admit].
func ParseDecision(data []byte) (events.DecisionBody, error) {
	if err := jsonform.Validate(data); err != nil {
		return events.DecisionBody{}, fmt.Errorf("%w: %w", ErrMalformedDecision, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d events.DecisionBody
	if err := dec.Decode(&d); err != nil {
		return events.DecisionBody{}, fmt.Errorf("%w: %w", ErrMalformedDecision, err)
	}
	if !d.Received.IsZero() || d.Intake != 0 {
		return events.DecisionBody{}, fmt.Errorf("%w: it sets received or intake, which only a worker records", ErrMalformedDecision)
	}
	return d, nil
}

// Expired reports whether a has an expiry and it has passed at now.
func Expired(a *projector.Approval, now time.Time) bool {
	return a.ExpiresAt != nil && now.After(*a.ExpiresAt)
}

// Publish stores decision d, signed by an operator (see [Sign]), on run's
// decision subject, where the worker that drives run reads, verifies and
// records it; the caller then nudges the fleet. It returns the decision's
// sequence in the decisions stream. The message id is the signature, so a
// retried publish is stored once.
func Publish(ctx context.Context, log *events.Log, run string, d events.DecisionBody) (uint64, error) {
	if d.Signature == "" {
		return 0, fmt.Errorf("publish decision on %s: %w: unsigned", d.Approval, ErrBadSignature)
	}
	d.Received, d.Intake = time.Time{}, 0
	data, err := json.Marshal(d)
	if err != nil {
		return 0, fmt.Errorf("publish decision on %s: %w", d.Approval, err)
	}
	return decisions.Publish(ctx, log, run, "decision-"+d.Signature, data)
}
