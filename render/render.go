// Package render turns a run's history into what a model reads: each step as
// the model's own tool call followed by its result, attached to that call.
// A denial, an invalid request, a tool error or a timeout is an error result
// that says why, so the model can choose again.
//
// It owns presentation to a model only; it must not decide or record
// anything.
package render

import (
	"fmt"
	"strconv"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// ToolCall is a tool call as the model made it.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // exactly the bytes the model sent
}

// ToolResult answers one tool call.
type ToolResult struct {
	CallID  string
	Content string
	IsError bool
}

// Turn is one step: the model's call and what came of it (Result is nil
// for a step that has no outcome yet). Text is what the model said with
// the call (the decision's reason), if anything.
type Turn struct {
	Text   string
	Call   ToolCall
	Result *ToolResult
}

// History renders steps in order. A step whose decision carried no call id
// gets "step-<n>", so every result can name its call.
func History(steps projector.Steps) []Turn {
	return From(steps, 0)
}

// From renders the steps after the first n, in order, as [History] does:
// a caller that keeps what it rendered before renders only what is new.
func From(steps projector.Steps, n int) []Turn {
	out := make([]Turn, 0, max(steps.Len()-n, 0))
	for i := n; i < steps.Len(); i++ {
		out = append(out, turnOf(steps.At(i)))
	}
	return out
}

// turnOf renders one step.
func turnOf(s projector.Step) Turn {
	id := s.Decision.CallID
	if id == "" {
		id = "step-" + strconv.Itoa(s.N)
	}
	t := Turn{Text: s.Decision.Reason, Call: ToolCall{ID: id, Name: s.Decision.Tool, Arguments: string(s.Decision.RawArgs())}}
	if s.Observation != nil {
		t.Result = result(id, *s.Observation)
	}
	return t
}

func result(id string, o events.ObservedBody) *ToolResult {
	r := &ToolResult{CallID: id, Content: o.Content, IsError: o.Kind != events.ObsResult}
	switch o.Kind {
	case events.ObsPolicyDenied:
		r.Content = "error: denied by policy: " + o.Content + ". Choose another action."
	case events.ObsInvalidDecision:
		r.Content = "error: the request was not valid JSON: " + o.Content + ". Send one JSON object."
	case events.ObsInvalidArguments:
		r.Content = "error: the arguments do not match the tool's schema: " + o.Content
	case events.ObsUnknownTool:
		r.Content = "error: " + o.Content
	case events.ObsTimeout, events.ObsToolError:
		r.Content = fmt.Sprintf("error (%s): %s", o.Kind, o.Content)
	}
	if o.Truncated {
		r.Content += "\n[output truncated]"
	}
	return r
}
