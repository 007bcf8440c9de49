package projector

import (
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
	"github.com/cespare/xxhash/v2"
)

// ErrFold marks an event the fold cannot apply to the view it has: out of
// order, for another run, after the run ended, or naming a step or approval
// that does not exist. A run whose events do not fold is never driven.
var ErrFold = errors.New("event does not fold")

// Fold folds evs, a run's events from its first on, into a view.
func Fold(evs ...events.Event) (View, error) {
	var v View
	for _, e := range evs {
		if err := v.Apply(e); err != nil {
			return View{}, err
		}
	}
	return v, nil
}

// Apply folds one event into v.
//
// Apply must be deterministic: the view it produces depends only on v and e,
// never on the clock, the environment, randomness or map order, so that
// folding a run's events from the start, or from any prefix's view onward,
// gives the same view on every worker (TestFold_PrefixThenRestEqualsAll).
// Every handler checks the event fully before it changes anything, so on
// error v is left unchanged. Apply changes v in place (a fold is linear in
// the events, not quadratic); hand consumers [View.Clone].
func (v *View) Apply(e events.Event) error { return v.ApplyWith(e, nil) }

// ApplyWith is [View.Apply] for the writer of e, which already holds its
// body decoded: body must be the very value e.Body encodes (of the kind's
// body type, e.g. [events.PolicyBody] for a step.policy). It saves decoding
// the body again and gives the same view as Apply (the driver's own view is
// held equal to a fresh load by TestDriver_ViewEqualsFreshLoad). A body of
// another type, or nil, is decoded from e.Body as Apply does.
func (v *View) ApplyWith(e events.Event, body any) error {
	if v.Run.Events == 0 && e.Kind != events.RunCreated {
		return v.errf(e, "a run starts with %s", events.RunCreated)
	}
	if v.Run.Events > 0 && e.Kind == events.RunCreated {
		return v.errf(e, "a run is created once")
	}
	if v.Run.Events > 0 && e.Run != v.Run.ID {
		return v.errf(e, "event of run %q", e.Run)
	}
	if e.Seq != v.Run.Events+1 {
		return v.errf(e, "position %d after %d events", e.Seq, v.Run.Events)
	}
	if v.Run.Status.Ended() {
		return v.errf(e, "run already %s", v.Run.Status)
	}
	if err := v.apply(e, body); err != nil {
		return err
	}
	v.Run.Events = e.Seq
	v.Run.Updated = e.Time
	return nil
}

func (v *View) errf(e events.Event, format string, a ...any) error {
	return fmt.Errorf("%w: run %s event %d (%s %s): %s", ErrFold, e.Run, e.Seq, e.Kind, e.ID, fmt.Sprintf(format, a...))
}

func (v *View) apply(e events.Event, known any) error {
	switch e.Kind {
	case events.RunCreated:
		return applyBody(v, e, known, v.created)
	case events.RunTools:
		return applyBody(v, e, known, func(e events.Event, b events.RunToolsBody) error {
			v.Run.Tools, v.Run.Withheld = b.Tools, b.Withheld
			return nil
		})
	case events.StepDecided:
		return applyBody(v, e, known, v.decided)
	case events.StepPolicy, events.ApprovalRequested:
		return applyBody(v, e, known, v.policy)
	case events.StepObserved:
		return applyBody(v, e, known, v.observed)
	case events.StepInterrupted:
		return applyBody(v, e, known, v.interrupted)
	case events.ApprovalGranted, events.ApprovalDenied:
		return applyBody(v, e, known, v.decision)
	case events.ApprovalExpired:
		return applyBody(v, e, known, v.expired)
	case events.ApprovalRefused:
		return applyBody(v, e, known, v.refused)
	case events.RunFinished, events.RunFailed, events.RunCancelled:
		return applyBody(v, e, known, v.ended)
	case events.ModelAttempted:
		return applyBody(v, e, known, v.modelAttempted)
	case events.ModelReplied:
		return applyBody(v, e, known, v.modelReplied)
	case events.ModelFailed:
		return applyBody(v, e, known, v.modelFailed)
	case events.ApprovalBudget:
		return applyBody(v, e, known, v.budgetRequested)
	}
	return v.errf(e, "unknown kind")
}

func applyBody[T any](v *View, e events.Event, known any, fn func(events.Event, T) error) error {
	if b, ok := known.(T); ok {
		return fn(e, b)
	}
	b, err := events.DecodeBody[T](e)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrFold, err)
	}
	return fn(e, b)
}

func (v *View) created(e events.Event, b events.RunCreatedBody) error {
	v.Run = Run{
		ID: e.Run, Status: Running, Agent: b.Agent, Input: b.Input,
		Tools: b.Tools, Withheld: b.Withheld, Limits: b.Limits, Created: e.Time,
		Actor: b.Actor, Surface: b.Surface,
	}
	return nil
}

func (v *View) decided(e events.Event, b events.StepDecidedBody) error {
	n := v.Steps.Len()
	if b.Step != n+1 {
		return v.errf(e, "step %d decided after %d steps", b.Step, n)
	}
	if last := v.stepRef(n); last != nil && last.Observation == nil {
		return v.errf(e, "step %d decided while step %d has no observation", b.Step, last.N)
	}
	pb := b.Policy
	if pb != nil {
		switch {
		case pb.Step != b.Step:
			return v.errf(e, "step %d decided with the policy result of step %d", b.Step, pb.Step)
		case pb.Approval != nil || pb.Consumes != "" || pb.Resume || pb.Origin != events.OriginPolicy:
			return v.errf(e, "a decision's own policy result asks for, consumes or resumes an approval, or is not the policy's")
		case pb.Outcome != events.Allow && pb.Outcome != events.Deny && pb.Outcome != events.Abort:
			return v.errf(e, "a decision's own policy result has outcome %q", pb.Outcome)
		case b.Oversize != nil:
			return v.errf(e, "an oversize decision carries a policy result: it is never shown to the policy")
		}
		b.Policy = nil // the step keeps it as its Policy
	}
	v.Steps.push(Step{N: b.Step, Decision: b, Decided: e.Time})
	v.Run.Steps++
	if pb != nil {
		return v.policy(e, *pb)
	}
	return nil
}

func (v *View) step(e events.Event, n int) (*Step, error) {
	s := v.stepRef(n)
	if s == nil {
		return nil, v.errf(e, "no step %d", n)
	}
	if s.Observation != nil {
		return nil, v.errf(e, "step %d already observed", n)
	}
	return s, nil
}

func (v *View) policy(e events.Event, b events.PolicyBody) error {
	s, err := v.step(e, b.Step)
	if err != nil {
		return err
	}
	wantApproval := e.Kind == events.ApprovalRequested
	switch {
	case wantApproval && (b.Outcome != events.RequireApproval || b.Approval == nil):
		return v.errf(e, "approval request with outcome %q and approval %v", b.Outcome, b.Approval != nil)
	case !wantApproval && b.Outcome != events.Allow && b.Outcome != events.Deny && b.Outcome != events.Abort &&
		!(b.Outcome == events.RequireApproval && b.Consumes != ""):
		return v.errf(e, "policy result with outcome %q", b.Outcome)
	}
	var consumed *Approval
	if b.Consumes != "" {
		consumed = v.Approval(b.Consumes)
		if consumed == nil || consumed.State != Granted || consumed.Step != b.Step {
			return v.errf(e, "consumes approval %q, which is not granted for step %d", b.Consumes, b.Step)
		}
	}
	if wantApproval && v.Approval(b.Approval.ID) != nil {
		return v.errf(e, "approval %q requested twice", b.Approval.ID)
	}
	if consumed != nil {
		consumed.State = Consumed
	}
	// A new evaluation supersedes any approval of this step still open.
	for i := range v.Approvals {
		if a := &v.Approvals[i]; a.Step == b.Step && (a.State == Pending || a.State == Granted) {
			a.State = Superseded
		}
	}
	s.Policy = &b
	s.Evaluations++
	v.Run.Status, v.Run.Reason = Running, ""
	switch {
	case wantApproval:
		v.Approvals = append(v.Approvals, Approval{
			ApprovalRequest: *b.Approval, Step: b.Step, Tool: s.Decision.Tool, Args: b.Args,
			Origin: b.Origin, State: Pending, Requested: e.Time,
		})
		v.Run.Status, v.Run.Reason = Waiting, b.Approval.Kind
	case b.Outcome == events.Deny:
		v.observe(s, events.ObservedBody{Step: b.Step, Kind: events.ObsPolicyDenied, Content: fmt.Sprintf("%s: %s", s.Decision.Tool, b.Reason)})
	case b.Outcome == events.Abort:
		v.Run.Status, v.Run.Reason, v.Run.Detail = Failed, string(events.ReasonPolicyAbort), b.Reason
	}
	return nil
}

func (v *View) observed(e events.Event, b events.ObservedBody) error {
	s, err := v.step(e, b.Step)
	if err != nil {
		return err
	}
	v.observe(s, b)
	return nil
}

// observe records a step's observation and the counters that follow from it.
// An observed step is settled: an approval of it still open can never be
// used, and a run that waited on it runs again.
func (v *View) observe(s *Step, o events.ObservedBody) {
	s.Observation = &o
	for i := range v.Approvals {
		if a := &v.Approvals[i]; a.Step == s.N && (a.State == Pending || a.State == Granted) {
			a.State = Superseded
		}
	}
	if v.Run.Status == Waiting {
		v.Run.Status, v.Run.Reason = Running, ""
	}
	if o.Kind == events.ObsResult {
		v.Run.FailuresInRow = 0
	} else {
		v.Run.FailuresInRow++
	}
	h := xxhash.New()
	for _, part := range [][]byte{[]byte(s.Decision.Tool), s.Decision.RawArgs(), []byte(o.Kind), []byte(o.Content)} {
		_, _ = h.Write(part)
		_, _ = h.Write([]byte{0})
	}
	if fp := h.Sum64(); fp == v.Run.Fingerprint && v.Run.Repeats > 0 {
		v.Run.Repeats++
	} else {
		v.Run.Fingerprint, v.Run.Repeats = fp, 1
	}
}

// endObserved folds the terminal tool's result a run's end carries (ADR
// 0017): only a completion may carry one, and only the successful result
// of the last step, still executing, whose recorded tool is terminal, with
// the run's result its content. Anything else would let an end say a tool
// ran, or a run completed, that no step bears out.
func (v *View) endObserved(e events.Event, b events.EndBody) error {
	o := b.Observation
	n := v.Steps.Len()
	s := v.stepRef(n)
	switch {
	case e.Kind != events.RunFinished || b.Reason != events.ReasonCompleted:
		return v.errf(e, "a %s (%s) carrying an observation", e.Kind, b.Reason)
	case o.Kind != events.ObsResult:
		return v.errf(e, "a run's end carrying an observation of kind %q", o.Kind)
	case s == nil || o.Step != n:
		return v.errf(e, "a run's end carrying the observation of step %d after %d steps", o.Step, n)
	case !s.Executing():
		return v.errf(e, "a run's end carrying the observation of step %d, which is not executing", n)
	case !terminal(v.Run.Tools, s.Decision.Tool):
		return v.errf(e, "a run's end carrying the observation of step %d, whose tool %q is not a recorded terminal tool", n, s.Decision.Tool)
	case b.Result != o.Content:
		return v.errf(e, "a run's end whose result is not the content of the observation it carries")
	}
	v.observe(s, *o)
	return nil
}

func terminal(tools []events.ToolSpec, name string) bool {
	for _, t := range tools {
		if t.Name == name {
			return t.Terminal
		}
	}
	return false
}

func (v *View) interrupted(e events.Event, b events.InterruptedBody) error {
	s, err := v.step(e, b.Step)
	if err != nil {
		return err
	}
	if !s.Executing() {
		return v.errf(e, "step %d is not an allowed call without observation", b.Step)
	}
	switch b.Resolution {
	case events.ResolvedDone:
		if b.Observation == nil {
			return v.errf(e, "reconciled as done with no observation")
		}
		v.observe(s, *b.Observation)
	case events.ResolvedNotDone:
		s.Policy = nil
	case events.ResolvedRerun:
	default:
		return v.errf(e, "unknown resolution %q", b.Resolution)
	}
	s.Interrupted = &b
	return nil
}

func (v *View) decision(e events.Event, b events.DecisionBody) error {
	// Only a worker records a decision, after it verified it against a
	// pending approval: anything else in the log is not a decision the run
	// can have taken, and the run does not fold.
	if b.Kind() != e.Kind {
		return v.errf(e, "decision %q recorded as %s", b.Decision, e.Kind)
	}
	a := v.Approval(b.Approval)
	if a == nil || a.State != Pending {
		return v.errf(e, "decision on approval %q, which is not pending", b.Approval)
	}
	if b.Intake <= v.Intake || b.Received.IsZero() {
		return v.errf(e, "decision from intake %d received %s, after intake %d", b.Intake, b.Received, v.Intake)
	}
	if e.Kind == events.ApprovalGranted {
		a.State = Granted
	} else {
		a.State = Denied
	}
	a.Decision, a.DecisionEvent = &b, e.ID
	v.Intake = b.Intake
	return nil
}

func (v *View) expired(e events.Event, b events.ExpiredBody) error {
	a := v.Approval(b.Approval)
	if a == nil || a.State != Pending {
		return v.errf(e, "approval %q is not pending", b.Approval)
	}
	a.State = Expired
	if a.Kind == events.BudgetApproval {
		// No operator raised the budget: it stands, and the run passed it.
		v.Run.Status, v.Run.Reason, v.Run.Detail = Failed, string(events.ReasonBudgetExceeded), budgetEnd(a, "expired with no decision")
		return nil
	}
	v.Run.Status, v.Run.Reason = Cancelled, string(events.ReasonApprovalExpired)
	return nil
}

func (v *View) refused(e events.Event, b events.RefusedBody) error {
	switch {
	case b.Intake > 0 && b.Intake <= v.Intake:
		return v.errf(e, "refusal of intake %d, after intake %d", b.Intake, v.Intake)
	case b.Intake > 0:
		v.Intake = b.Intake
	case b.Event != "":
		a := v.Approval(b.Approval)
		if a == nil || a.DecisionEvent != b.Event || (a.State != Granted && a.State != Denied) {
			return v.errf(e, "refusal of decision event %q, which approval %q does not hold", b.Event, b.Approval)
		}
		a.State, a.Decision, a.DecisionEvent = Pending, nil, ""
	default:
		return v.errf(e, "refusal of nothing")
	}
	v.Refusals = append(v.Refusals, b)
	return nil
}

func (v *View) ended(e events.Event, b events.EndBody) error {
	if b.Observation != nil {
		if err := v.endObserved(e, b); err != nil {
			return err
		}
	}
	switch e.Kind {
	case events.RunFinished:
		v.Run.Status = Completed
	case events.RunFailed:
		v.Run.Status = Failed
	default:
		v.Run.Status = Cancelled
	}
	v.Run.Reason, v.Run.Detail, v.Run.Result = string(b.Reason), b.Detail, b.Result
	return nil
}
