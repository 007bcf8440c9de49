package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// Action is what an agent asks for: one tool call. Args are recorded
// exactly as given, malformed or not, before anything checks them.
//
// A decision with Final set is no call: it ends the run as completed,
// with the answer as its result (recorded like a terminal tool's), and
// its other fields are ignored.
type Action struct {
	Tool   string
	Args   json.RawMessage
	CallID string
	Reason string
	Final  *Answer
}

// Answer is an agent's final answer to a run's input.
type Answer struct {
	Text string
}

// EndError is an error an agent returns to end a run with a reason other
// than agent_error: [events.ReasonBudgetExceeded] (any other reason is recorded
// as agent_error). Detail says why, for a person.
type EndError struct {
	Reason events.EndReason
	Detail string
}

func (e *EndError) Error() string { return string(e.Reason) + ": " + e.Detail }

// agentEndReasons are the end reasons an agent may give with [EndError].
var agentEndReasons = []events.EndReason{events.ReasonAgentError, events.ReasonBudgetExceeded}

// ErrNotModelEvent is returned by a [Recorder] asked to record an event
// that is not a model call's.
var ErrNotModelEvent = errors.New("agents record only model events")

// ErrWaiting is what an agent returns (wrapped) once it recorded an
// approval of its own ([events.ApprovalBudget]): the run waits for an
// operator, and the driver records nothing for the step. An agent that
// returns it without having made the run wait ends the run agent_error.
var ErrWaiting = errors.New("the agent made the run wait for an operator")

// Recorder appends one model event or budget approval (see
// [events.Kind.Agent]) to the run
// the agent decides for, fenced on its tail, and folds it into the
// driver's view of it. An error wrapping [events.ErrConflict] means
// another writer moved the run: the agent must return at once, and the
// driver drops the run. An error wrapping [events.ErrTooLarge] changed
// nothing: the agent may record something smaller.
type Recorder func(ctx context.Context, kind events.Kind, body any) error

// StepInput is what an agent is handed to decide the next step: the run, the
// steps and approvals so far, and the tools. Everything in it is a copy: an
// agent that writes through it changes neither the log, the driver nor the
// policy's view. It holds no handle to the policy or the log.
type StepInput struct {
	Run       projector.Run
	Steps     projector.Steps
	Approvals []projector.Approval
	Tools     []events.ToolSpec
	// Model is what the run's model calls came to so far.
	Model projector.ModelCalls
	// Record, set by the driver, records the agent's model calls on the
	// run. It is valid only during the Decide call it was handed to.
	Record Recorder
}

// Agent decides the next step of a run. An error fails the run
// (agent_error, or an [EndError]'s reason); it is the agent's to retry a
// flaky model before returning.
type Agent interface {
	Decide(ctx context.Context, in StepInput) (Action, error)
}

// Pure is implemented by an agent whose Decide depends on its input alone
// and does nothing else: it records no model call (StepInput.Record is not
// used), calls out to nothing, and answers the same input the same way.
// The driver may then ask it for a run's next decision, check it and ask the
// policy while the observation before it is still being stored, and drop
// all of that if the observation's append is refused (ADR 0017): nothing
// is acted on, and nothing recorded, before the observation is stored.
type Pure interface {
	Agent
	// Pure marks the agent; it is never called.
	Pure()
}

// Stepper is implemented by an agent that decides from the step number
// alone and reads nothing else of the run: the gate's, which hands over
// the one decision a program gave it. The driver asks it with DecideStep
// for step n (the step its decision would be) instead of Decide, and
// copies nothing of the view for it. ok false says it has no decision for
// step n: the drive stops there, with nothing recorded, as a drive without
// an agent stops where a decision is needed. A Stepper records no model
// calls; a panic in DecideStep fails the run as Decide's would.
type Stepper interface {
	Agent
	DecideStep(ctx context.Context, n int) (dec Action, ok bool)
}

// AgentFunc adapts a function to [Agent].
type AgentFunc func(ctx context.Context, in StepInput) (Action, error)

// Decide calls f.
func (f AgentFunc) Decide(ctx context.Context, in StepInput) (Action, error) { return f(ctx, in) }

// endOf is the end an agent's error gives a run.
func endOf(err error) events.EndBody {
	var ee *EndError
	if errors.As(err, &ee) {
		for _, r := range agentEndReasons {
			if ee.Reason == r {
				return events.EndBody{Reason: r, Detail: ee.Detail}
			}
		}
		return events.EndBody{Reason: events.ReasonAgentError, Detail: fmt.Sprintf("agent gave end reason %q: %s", ee.Reason, ee.Detail)}
	}
	return events.EndBody{Reason: events.ReasonAgentError, Detail: err.Error()}
}
