package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/arbiter-run/arbiter/driver"
)

// Script is an agent that returns its decisions in order, one per step, and
// fails once it has none left. It records the inputs it was handed.
type Script struct {
	mu        sync.Mutex
	decisions []driver.Decision
	Inputs    []driver.StepInput
}

var _ driver.Agent = (*Script)(nil)

// NewScript returns a scripted agent.
func NewScript(decisions ...driver.Decision) *Script { return &Script{decisions: decisions} }

// Call is a decision to call tool with args (raw bytes, malformed or not).
func Call(tool, args string) driver.Decision {
	return driver.Decision{Tool: tool, Args: json.RawMessage(args)}
}

// Decide returns the next decision.
func (s *Script) Decide(_ context.Context, in driver.StepInput) (driver.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Inputs = append(s.Inputs, in)
	// Resume after a restart: the script position is the number of steps the
	// run already has.
	n := len(in.Steps)
	if n >= len(s.decisions) {
		return driver.Decision{}, fmt.Errorf("script exhausted after %d decisions", len(s.decisions))
	}
	return s.decisions[n], nil
}
