package gate

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// Verdict is what the gate says about a call.
type Verdict string

// The verdicts of [Run.Ask] and [Run.Report].
const (
	// Allow: the write-ahead record is stored; run the call with
	// [Answer.Args] and report its result.
	Allow Verdict = "allow"
	// Deny: the call must not run; [Answer.Observation] is what to show
	// the model (a policy denial, arguments the schema refused, an unknown
	// tool, a denied or expired approval).
	Deny Verdict = "deny"
	// Pending: the call waits for an operator; [Answer.Approval] is the
	// approval to decide. Ask again with the same arguments once it is
	// decided.
	Pending Verdict = "pending"
	// Done: the reported result is recorded as [Answer.Observation].
	Done Verdict = "done"
)

// Answer is the gate's answer about one call.
type Answer struct {
	Verdict Verdict
	// Step is the run's step the call is.
	Step int
	// Args (Allow) are the arguments to run, in PolicyJSON form: exactly
	// what was recorded and checked.
	Args []byte
	// Observation (Deny, Done) is what the run recorded for the step.
	Observation *events.ObservedBody
	// Approval (Pending) is the approval the call waits on.
	Approval *projector.Approval
	// Ended (Deny) is set when the answer ended the run (an approval
	// denied or expired, a limit reached): later asks fail with
	// [ErrEnded].
	Ended bool
	// Ran ([Run.Call]) is set when the call's function was run.
	Ran bool
}

// copyApproval copies a out of the run's view, sharing nothing with it.
func copyApproval(a *projector.Approval) projector.Approval {
	c := *a
	c.Capability = bytes.Clone(a.Capability)
	c.Presentation = bytes.Clone(a.Presentation)
	c.Args = bytes.Clone(a.Args)
	if a.ExpiresAt != nil {
		t := *a.ExpiresAt
		c.ExpiresAt = &t
	}
	if a.Decision != nil {
		d := *a.Decision
		c.Decision = &d
	}
	return c
}

// Errors the gate returns; callers branch on them with errors.Is.
var (
	// ErrEnded: the run has ended; nothing more can be asked of it.
	ErrEnded = errors.New("run has ended")
	// ErrWaiting: the run waits on an approval for another call; that
	// call must be asked again (or the approval decided) first.
	ErrWaiting = errors.New("run waits on an approval for another call")
	// ErrUnreported: an allowed call's result has not been reported yet.
	ErrUnreported = errors.New("an allowed call has not been reported")
	// ErrNoCall: Report was called with no allowed call in flight.
	ErrNoCall = errors.New("no allowed call to report")
	// ErrLate: the result came after the tool's timeout; the call was
	// taken as interrupted and the result is not recorded.
	ErrLate = errors.New("result reported after the tool's timeout")
	// ErrElsewhere: another process moved the run on while this one asked
	// (see [events.ErrConflict]); this call did not run here.
	ErrElsewhere = errors.New("run moved on in another process")
	// ErrNotGateRun: Resume was given a run that is not a gate run (its
	// agent lacks [AgentPrefix]): a fleet's workers drive it, and a gate
	// must not ask calls on it as if its agent were the program.
	ErrNotGateRun = errors.New("not a gate run")
)

// EndedError is [ErrEnded] with the run's end.
type EndedError struct {
	Run    string
	Status projector.Status
	Reason string
	Detail string
}

func (e *EndedError) Error() string {
	s := fmt.Sprintf("run %s has ended (%s, %s)", e.Run, e.Status, e.Reason)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *EndedError) Unwrap() error { return ErrEnded }

// WaitingError is [ErrWaiting] with the approval the run waits on.
type WaitingError struct {
	Run      string
	Approval projector.Approval
}

func (e *WaitingError) Error() string {
	return fmt.Sprintf("run %s waits on approval %s (%s) for step %d, a call to %s with %s; ask that call again, or have an operator decide it, before another",
		e.Run, e.Approval.ID, e.Approval.Kind, e.Approval.Step, e.Approval.Tool, e.Approval.Args)
}

func (e *WaitingError) Unwrap() error { return ErrWaiting }
