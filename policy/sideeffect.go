package policy

import (
	"context"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// SideEffectPolicy decides by the side-effect class a tool declared: a map
// from class to outcome. A class with no entry is denied. It has no id; wrap
// it with [WithID] to make its decisions re-checkable.
type SideEffectPolicy map[events.SideEffect]events.Outcome

var _ Policy = SideEffectPolicy(nil)

// DefaultSideEffects is the default mapping: reads and local changes are
// allowed, remote changes need an operator, destructive calls are denied.
func DefaultSideEffects() SideEffectPolicy {
	return SideEffectPolicy{
		events.ReadOnly:       events.Allow,
		events.LocalMutation:  events.Allow,
		events.RemoteMutation: events.RequireApproval,
		events.Destructive:    events.Deny,
	}
}

// Evaluate answers with the outcome mapped to the tool's class. A
// require_approval asks for an approval of the class's kind whose capability
// and presentation name the tool. The arguments are not repeated in them:
// the approval hash binds the exact request's arguments already
// (docs/adr/0004), the operator commands show them from the request, and an
// approval event then carries them once.
func (p SideEffectPolicy) Evaluate(_ context.Context, req Request, _ projector.View) (Ruling, error) {
	class := req.Tool.SideEffect
	o, ok := p[class]
	if !ok {
		return Ruling{Outcome: events.Deny, Reason: fmt.Sprintf("side-effect class %q has no policy entry", class)}, nil
	}
	reason := string(class) + " tool " + req.Tool.Name
	if o != events.RequireApproval {
		return Ruling{Outcome: o, Reason: reason}, nil
	}
	capability := map[string]any{"tool": req.Tool.Name}
	return NeedApproval(string(class), reason+" needs an operator", capability, capability)
}
