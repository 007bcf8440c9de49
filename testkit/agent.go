package testkit

import (
	"context"
	"fmt"
	"sync"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/scripted"
)

// Script is a [scripted.Agent] that also records every input it was handed.
type Script struct {
	agent  scripted.Agent
	mu     sync.Mutex
	inputs []driver.StepInput
}

var _ driver.Agent = (*Script)(nil)

// NewScript returns a scripted agent: the n-th decision for the n-th step.
func NewScript(decisions ...driver.Action) *Script {
	return &Script{agent: scripted.Agent{Decisions: decisions}}
}

// Call is a decision to call tool with args (raw bytes, malformed or not).
func Call(tool, args string) driver.Action { return scripted.Call(tool, args) }

// Decide records in and returns the next decision of the script.
func (s *Script) Decide(ctx context.Context, in driver.StepInput) (driver.Action, error) {
	s.mu.Lock()
	s.inputs = append(s.inputs, in)
	s.mu.Unlock()
	return s.agent.Decide(ctx, in)
}

// Inputs returns what the agent was handed, one per decision asked.
func (s *Script) Inputs() []driver.StepInput {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]driver.StepInput(nil), s.inputs...)
}

// Counter is an agent for runs of a known length: Steps-1 calls of Tool,
// each with its step number in the arguments (so loop detection never
// fires), then a call of the terminal tool "done".
type Counter struct {
	Tool  string
	Steps int
}

// Pure marks Counter as a pure function of its input ([driver.Pure]).
func (Counter) Pure() {}

// Decide returns the call for the next step.
func (c Counter) Decide(_ context.Context, in driver.StepInput) (driver.Action, error) {
	n := in.Steps.Len() + 1
	if n >= c.Steps {
		return Call("done", `{}`), nil
	}
	return Call(c.Tool, fmt.Sprintf(`{"n":%d}`, n)), nil
}
