package driver

import (
	"context"
	"fmt"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/projector"
)

// settle moves a waiting run on if it can. A decision already recorded is
// checked again (a key removed since is refused) and acted on: a denial
// cancels the run, a grant resumes the step. Otherwise the decisions
// operators published for the run since the last one it recorded are read
// from the decisions stream, in order: the first is verified (see
// [approvals.Admit], judged against the time this worker read it) and
// recorded, as a grant or denial when it holds, as a refusal when it does
// not; an approval past its expiry with no decision received in time is
// recorded expired (which cancels the run). It reports false when the run
// must go on waiting.
func (d *Driver) settle(ctx context.Context, r *Run) (bool, error) {
	a := r.view.PendingApproval()
	if a == nil {
		return false, fmt.Errorf("run %s waits with no open approval", r.ID())
	}
	switch a.State {
	case projector.Pending:
		return d.intake(ctx, r, a)
	case projector.Denied, projector.Granted:
		if err := approvals.AdmitRecorded(d.cfg.Operators, r.ID(), a, d.cfg.ClockSkew); err != nil {
			return true, d.append(ctx, r, r.ID(), events.ApprovalRefused, events.RefusedBody{
				Approval: a.ID, Event: a.DecisionEvent, Operator: a.Decision.Operator, Reason: err.Error(),
			})
		}
		if a.Kind == events.BudgetApproval {
			return d.settleBudget(ctx, r, a)
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

// intake reads the next decision published for r, which waits on the
// pending approval a, and records what it comes to.
func (d *Driver) intake(ctx context.Context, r *Run, a *projector.Approval) (bool, error) {
	msgs, err := decisions.Read(ctx, d.log, r.ID(), r.view.Intake, 1)
	if err != nil {
		return false, err
	}
	if len(msgs) == 0 {
		if approvals.Expired(a, d.cfg.Now()) {
			return true, d.append(ctx, r, r.ID(), events.ApprovalExpired, events.ExpiredBody{Approval: a.ID})
		}
		return false, nil
	}
	m := msgs[0]
	refuse := func(operator string, why error) (bool, error) {
		return true, d.append(ctx, r, r.ID(), events.ApprovalRefused, events.RefusedBody{
			Approval: a.ID, Intake: m.Sequence, Operator: operator, Reason: why.Error(),
		})
	}
	dec, err := approvals.ParseDecision(m.Data)
	if err != nil {
		return refuse("", err)
	}
	dec.Received, dec.Intake = d.cfg.Now().UTC(), m.Sequence
	if err := approvals.Admit(d.cfg.Operators, r.ID(), a, dec, d.cfg.ClockSkew); err != nil {
		return refuse(dec.Operator, err)
	}
	return true, d.append(ctx, r, r.ID(), dec.Kind(), dec)
}

// resume re-checks a granted step: its recorded arguments against the tool's
// current schema, then the policy again. It executes only on allow, or on a
// require_approval whose hash equals the grant's; anything else pauses or
// ends the run as the new answer says. Consuming the grant is the one fenced
// append of the write-ahead result, so across a fleet only one resume can.
func (d *Driver) resume(ctx context.Context, r *Run, grant *projector.Approval) error {
	return d.evaluate(ctx, r, grant.Step, grant)
}

// InterruptedSideEffect is the kind of the approval the runtime raises for a
// call a crash interrupted, when nothing can say whether it took effect.
const InterruptedSideEffect = "interrupted_side_effect"

// TakeIn records what has come for the approval r waits on without acting
// on a grant: the decisions operators published for it since the last one
// the run recorded, each verified and recorded (or recorded refused), and
// its expiry once the deadline has passed. A denial and an expiry end the
// run as a drive would; a grant is recorded and left for the drive that
// runs its step, which only [Driver.Drive] does. A run that does not wait
// on a pending approval is left as it is.
//
// It is for a holder that drives a run only when its caller asks that
// step of it (a gate): the operator's word on a call the caller has not
// asked again is still the run's record, and a denied or expired call
// still ends the run, before whatever the caller asks next. The errors
// are [Driver.Drive]'s.
func (d *Driver) TakeIn(ctx context.Context, r *Run) error {
	for r.view.Run.Status == projector.Waiting {
		if r.cached {
			// A decision is acted on as the events say the run is.
			if err := d.verify(ctx, r); err != nil {
				return fmt.Errorf("take in decisions on run %s: %w", r.ID(), err)
			}
			continue
		}
		a := r.view.PendingApproval()
		if a == nil || a.State == projector.Granted || budgetGrantChecked(r) {
			return nil
		}
		moved, err := d.settle(ctx, r)
		if err != nil {
			return fmt.Errorf("take in decisions on run %s: %w", r.ID(), err)
		}
		if !moved {
			return nil
		}
	}
	return nil
}
