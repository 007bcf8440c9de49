package driver

import (
	"context"
	"fmt"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// settle moves a waiting run on if it can: a pending approval past its expiry
// is recorded expired (which cancels the run); a recorded decision is checked
// (signature by a configured operator, hash, expiry) and then either refused
// and recorded, or acted on: a denial cancels the run, a grant resumes the
// step. It reports false when the run must go on waiting.
func (d *Driver) settle(ctx context.Context, r *Run) (bool, error) {
	a := r.view.PendingApproval()
	if a == nil {
		return false, fmt.Errorf("run %s waits with no open approval", r.ID())
	}
	switch a.State {
	case projector.Pending:
		if approvals.Expired(a, d.cfg.Now()) {
			return true, d.append(ctx, r, r.ID(), events.ApprovalExpired, events.ExpiredBody{Approval: a.ID})
		}
		return false, nil
	case projector.Denied, projector.Granted:
		if err := approvals.Check(d.cfg.Operators, r.ID(), a); err != nil {
			return true, d.append(ctx, r, r.ID(), events.ApprovalRefused, events.RefusedBody{
				Approval: a.ID, Event: a.DecisionEvent, Operator: a.Decision.Operator, Reason: err.Error(),
			})
		}
		if a.State == projector.Denied {
			return true, d.append(ctx, r, r.ID(), events.RunCancelled, events.EndBody{
				Reason: events.ReasonApprovalDenied, Detail: fmt.Sprintf("%s denied by %s: %s", a.ID, d.cfg.Operators[a.Decision.Operator], a.Decision.Reason),
			})
		}
		grant := *a
		return true, d.resume(ctx, r, &grant)
	}
	return false, fmt.Errorf("run %s: approval %s in state %s", r.ID(), a.ID, a.State)
}

// resume re-checks a granted step: its recorded arguments against the tool's
// current schema, then the policy again. It executes only on allow, or on a
// require_approval whose hash equals the grant's; anything else pauses or
// ends the run as the new answer says. Consuming the grant is the one fenced
// append of the write-ahead result, so across a fleet only one resume can.
func (d *Driver) resume(ctx context.Context, r *Run, grant *projector.Approval) error {
	return d.evaluate(ctx, r, grant.Step, grant)
}

// refuseStray records the refusal of an operator decision that named no
// approval of the run, or one that was no longer pending.
func (d *Driver) refuseStray(ctx context.Context, r *Run, s projector.Stray) error {
	reason := approvals.ErrNoApproval.Error()
	if a := r.view.Approval(s.Decision.Approval); a != nil {
		reason = fmt.Sprintf("%v (state %s)", approvals.ErrNotPending, a.State)
	}
	if err := approvals.Verify(d.cfg.Operators, r.ID(), s.Decision); err != nil {
		reason += "; " + err.Error()
	}
	return d.append(ctx, r, r.ID(), events.ApprovalRefused, events.RefusedBody{
		Approval: s.Decision.Approval, Event: s.Event, Operator: s.Decision.Operator, Reason: reason,
	})
}

// InterruptedSideEffect is the kind of the approval the runtime raises for a
// call a crash interrupted, when nothing can say whether it took effect.
const InterruptedSideEffect = "interrupted_side_effect"
