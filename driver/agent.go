package driver

import (
	"context"
	"encoding/json"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// Decision is what an agent asks for: one tool call. Args are recorded
// exactly as given, malformed or not, before anything checks them.
type Decision struct {
	Tool   string
	Args   json.RawMessage
	CallID string
	Reason string
}

// StepInput is what an agent is handed to decide the next step: the run, the
// steps and approvals so far, and the tools. Everything in it is a copy: an
// agent that writes through it changes neither the log, the driver nor the
// policy's view. It holds no handle to the policy or the log.
type StepInput struct {
	Run       projector.Run
	Steps     projector.Steps
	Approvals []projector.Approval
	Tools     []events.ToolSpec
}

// Agent decides the next step of a run. An error fails the run
// (agent_error); it is the agent's to retry a flaky model before returning.
type Agent interface {
	Decide(ctx context.Context, in StepInput) (Decision, error)
}

// AgentFunc adapts a function to [Agent].
type AgentFunc func(ctx context.Context, in StepInput) (Decision, error)

// Decide calls f.
func (f AgentFunc) Decide(ctx context.Context, in StepInput) (Decision, error) { return f(ctx, in) }
