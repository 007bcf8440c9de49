package approvals

import (
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/projector"
)

// Check decides whether the decision recorded on approval a of run can be
// acted on: signed by a configured operator, over a's hash, made before a
// expired. A nil error means a worker may act on it; any other is the reason
// it records in its refusal.
func Check(ops Operators, run string, a *projector.Approval) error {
	if a == nil {
		return ErrNoApproval
	}
	d := a.Decision
	if d == nil || (a.State != projector.Granted && a.State != projector.Denied) {
		return fmt.Errorf("approval %s: no decision to act on (it is %s): %w", a.ID, a.State, ErrNotPending)
	}
	if err := Verify(ops, run, *d); err != nil {
		return fmt.Errorf("approval %s: %w", a.ID, err)
	}
	if d.Hash != a.Hash {
		return fmt.Errorf("approval %s: %w: %s, approval is %s", a.ID, ErrWrongHash, d.Hash, a.Hash)
	}
	if Expired(a, d.Signed) {
		return fmt.Errorf("approval %s: %w: expired %s, signed %s", a.ID, ErrExpired, a.ExpiresAt.Format(time.RFC3339), d.Signed.Format(time.RFC3339))
	}
	return nil
}

// Expired reports whether a has an expiry and it has passed at now.
func Expired(a *projector.Approval, now time.Time) bool {
	return a.ExpiresAt != nil && now.After(*a.ExpiresAt)
}
