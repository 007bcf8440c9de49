package rules

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// evaluation is one request's variables, built when a condition first asks
// for them. It is the CEL activation.
type evaluation struct {
	ctx     context.Context
	req     *policy.Request
	view    *projector.View
	windows Windows
	tools   *sync.Map // tool hash → CEL value, the policy's cache

	args               any     // the decoded arguments
	argsVal, tool      ref.Val // as CEL values, converted once
	run, actor         ref.Val
	haveArgs, haveTool bool
	haveRun, haveActor bool
	// phase is PhaseDiscovery when asked which tools to show; "" is
	// invocation.
	phase string
}

var _ interpreter.Activation = (*evaluation)(nil)

func (ev *evaluation) Parent() interpreter.Activation { return nil }

func (ev *evaluation) ResolveName(name string) (any, bool) {
	switch name {
	case "args":
		if ev.argsVal == nil {
			ev.argsVal = ev.argsCEL()
		}
		return ev.argsVal, true
	case "tool":
		if !ev.haveTool {
			ev.tool, ev.haveTool = ev.toolVal(), true
		}
		return ev.tool, true
	case "run":
		if !ev.haveRun {
			ev.run, ev.haveRun = celValue(runValue(ev)), true
		}
		return ev.run, true
	case "actor", "user":
		if !ev.haveActor {
			ev.actor, ev.haveActor = celValue(actorValue(ev.view.Run.Actor)), true
		}
		return ev.actor, true
	}
	return nil, false
}

// toolVal is the tool as a CEL value, cached by the spec's hash: a spec
// with a hash is the same spec every time.
func (ev *evaluation) toolVal() ref.Val {
	h := ev.req.Tool.Hash
	if h != "" && ev.tools != nil {
		if v, ok := ev.tools.Load(h); ok {
			return v.(ref.Val)
		}
	}
	v := celValue(toolValue(ev.req))
	if h != "" && ev.tools != nil {
		ev.tools.Store(h, v)
	}
	return v
}

func (ev *evaluation) argsValue() any {
	if !ev.haveArgs {
		ev.haveArgs = true
		var v any
		if len(ev.req.Args) > 0 && json.Unmarshal(ev.req.Args, &v) == nil {
			ev.args = v
		} else {
			ev.args = map[string]any{}
		}
	}
	return ev.args
}

// argsCEL is the arguments as a CEL value: decoded straight from the
// request's bytes, unless they are decoded already (see argsValue), and {}
// where argsValue gives {}.
func (ev *evaluation) argsCEL() ref.Val {
	if !ev.haveArgs && len(ev.req.Args) > 0 {
		if v, ok := jsonCEL(ev.req.Args); ok {
			return v
		}
	}
	return celValue(ev.argsValue())
}

// arg returns the top-level argument name, or nil.
func (ev *evaluation) arg(name string) any {
	m, _ := ev.argsValue().(map[string]any)
	return m[name]
}

// stepTime is the time recorded with this step's decision (the zero time
// when the view does not hold it).
func (ev *evaluation) stepTime() time.Time {
	if s := ev.view.Step(ev.req.Step); s != nil {
		return s.Decided
	}
	return time.Time{}
}

func toolValue(req *policy.Request) map[string]any {
	t := req.Tool
	return map[string]any{
		"name": t.Name, "side_effect": t.SideEffect, "description": t.Description,
		"data": nonNil(t.Data), "tags": nonNil(t.Tags), "resource": t.Resource,
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func runValue(ev *evaluation) map[string]any {
	v := ev.view
	phase := ev.phase
	if phase == "" {
		phase = PhaseInvocation
	}
	calls := map[string]int64{}
	failures := int64(0)
	for i := 0; i < v.Steps.Len(); i++ {
		s := v.Steps.At(i)
		if s.N >= ev.req.Step {
			continue
		}
		calls[s.Decision.Tool]++
		if o := s.Observation; o != nil && o.Kind != events.ObsResult {
			failures++
		}
	}
	approvals := int64(0)
	for _, a := range v.Approvals {
		if a.State == projector.Granted || a.State == projector.Consumed {
			approvals++
		}
	}
	var input any = map[string]any{}
	if len(v.Run.Input) > 0 {
		var in any
		if json.Unmarshal(v.Run.Input, &in) == nil {
			input = in
		}
	}
	return map[string]any{
		"id": v.Run.ID, "step": int64(ev.req.Step), "steps": int64(v.Run.Steps), "input": input,
		"calls": calls, "failures": failures, "failures_in_row": int64(v.Run.FailuresInRow),
		"approvals": approvals, "time": ev.stepTime(), "surface": v.Run.Surface, "agent": v.Run.Agent,
		"phase": phase,
	}
}

func actorValue(a *events.Actor) map[string]any {
	if a == nil {
		return map[string]any{"id": "", "role": "", "roles": []string{}, "attributes": map[string]string{}}
	}
	role := ""
	if len(a.Roles) > 0 {
		role = a.Roles[0]
	}
	attrs := a.Attributes
	if attrs == nil {
		attrs = map[string]string{}
	}
	return map[string]any{"id": a.ID, "role": role, "roles": nonNil(a.Roles), "attributes": attrs}
}
