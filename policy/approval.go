package policy

import (
	"encoding/json"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
)

// NeedApproval builds a require_approval decision. capability says exactly
// what would be authorised, presentation what the operator is shown; both
// are marshalled to JSON here, so a value that will not marshal is an error
// in the policy rather than a corrupt approval. nil (typed nil included) becomes {}. A
// json.RawMessage (or []byte) is taken as JSON and held to the boundary of
// [jsonform.Validate].
func NeedApproval(kind, reason string, capability, presentation any) (Ruling, error) {
	if kind == "" {
		return Ruling{}, fmt.Errorf("need approval: empty kind")
	}
	c, err := approvalJSON(capability)
	if err != nil {
		return Ruling{}, fmt.Errorf("need approval %q: capability: %w", kind, err)
	}
	p, err := approvalJSON(presentation)
	if err != nil {
		return Ruling{}, fmt.Errorf("need approval %q: presentation: %w", kind, err)
	}
	return Ruling{Outcome: events.RequireApproval, Reason: reason, Approval: &Approval{Kind: kind, Capability: c, Presentation: p}}, nil
}

func approvalJSON(v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case nil:
		return json.RawMessage(`{}`), nil
	case json.RawMessage:
		if x == nil {
			return json.RawMessage(`{}`), nil
		}
		return jsonform.PolicyJSON(x)
	case []byte:
		return jsonform.PolicyJSON(x)
	}
	b, err := jsonform.Marshal(v)
	if err == nil && string(b) == "null" {
		// A typed nil (nil map, slice or pointer) is no value, like nil.
		return json.RawMessage(`{}`), nil
	}
	return b, err
}
