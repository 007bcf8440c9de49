// Package scripted is an agent that needs no model: it returns a fixed list
// of decisions, the n-th for a run's n-th step. Because it decides by the
// step count in the view it is handed, any worker can pick a run up where
// another left it. The demo, the worker's config and the fault tests use it.
package scripted

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/arbiter-run/arbiter/driver"
)

// Agent returns Decisions[len(steps so far)].
type Agent struct {
	Decisions []driver.Action
}

var _ driver.Pure = Agent{}

// Pure marks the agent as a pure function of the run's step count
// ([driver.Pure]).
func (Agent) Pure() {}

// Decide returns the decision for the next step, or an error when the script
// has none left.
func (a Agent) Decide(_ context.Context, in driver.StepInput) (driver.Action, error) {
	n := in.Steps.Len()
	if n >= len(a.Decisions) {
		return driver.Action{}, fmt.Errorf("script exhausted after %d decisions", len(a.Decisions))
	}
	return a.Decisions[n], nil
}

// Call is a decision to call tool with args, given as raw bytes exactly as a
// model might send them (malformed or not).
func Call(tool, args string) driver.Action {
	return driver.Action{Tool: tool, Args: json.RawMessage(args)}
}
