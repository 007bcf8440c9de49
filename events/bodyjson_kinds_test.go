package events

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"
)

// drawBodies draws, for each kind, a body of the type that kind records,
// with its strings drawn to exercise every escaping path. A kind added to
// [Kinds] without an entry here fails TestBodyJSON_EveryKindSameAsEncodingJSON.
var drawBodies = map[Kind]func(t *rapid.T) any{
	RunCreated: func(t *rapid.T) any {
		return RunCreatedBody{Tools: []ToolSpec{{Name: drawText(t, "tool"), Schema: []byte(`{}`), SideEffect: ReadOnly, TimeoutMS: 1}},
			Input: []byte(`"hi"`), Agent: drawText(t, "agent"), Surface: drawText(t, "surface"), Actor: &Actor{ID: drawText(t, "actor")}}
	},
	RunTools: func(t *rapid.T) any {
		return RunToolsBody{Tools: []ToolSpec{{Name: drawText(t, "tool"), Schema: []byte(`{}`)}}}
	},
	StepDecided:  func(t *rapid.T) any { return drawDecided(t) },
	StepPolicy:   func(t *rapid.T) any { return drawPolicy(t) },
	StepObserved: func(t *rapid.T) any { return drawObserved(t) },
	StepInterrupted: func(t *rapid.T) any {
		o := drawObserved(t)
		return InterruptedBody{Step: 1, Resolution: drawText(t, "resolution"), Observation: &o}
	},
	ApprovalRequested: func(t *rapid.T) any {
		p := drawPolicy(t)
		p.Approval = &ApprovalRequest{ID: drawText(t, "id"), Kind: drawText(t, "approval_kind"), Hash: "h", Capability: []byte(`{}`), Presentation: []byte(`{}`)}
		return p
	},
	ApprovalGranted: func(t *rapid.T) any { return drawDecision(t, DecisionGrant) },
	ApprovalDenied:  func(t *rapid.T) any { return drawDecision(t, DecisionDeny) },
	ApprovalExpired: func(t *rapid.T) any { return ExpiredBody{Approval: drawText(t, "approval")} },
	ApprovalRefused: func(t *rapid.T) any {
		return RefusedBody{Approval: drawText(t, "approval"), Event: drawText(t, "event"), Intake: 3, Reason: drawText(t, "reason")}
	},
	RunFinished:  func(t *rapid.T) any { return drawEnd(t) },
	RunFailed:    func(t *rapid.T) any { return drawEnd(t) },
	RunCancelled: func(t *rapid.T) any { return EndBody{Reason: ReasonCancelled, Detail: drawText(t, "detail")} },
	ModelAttempted: func(t *rapid.T) any {
		return ModelAttemptBody{Call: 1, Attempt: 2, Provider: drawText(t, "provider"), Model: drawText(t, "model"), SideEffect: SideEffectNone}
	},
	ModelReplied: func(t *rapid.T) any {
		return ModelReplyBody{Call: 1, Attempt: 1, Text: drawText(t, "text"), Response: drawText(t, "response"),
			ToolCalls: []ModelToolCall{{ID: drawText(t, "call_id"), Name: drawText(t, "name"), Args: drawText(t, "args")}}}
	},
	ModelFailed: func(t *rapid.T) any {
		return ModelFailBody{Call: 1, Attempt: 1, Status: 503, Error: drawText(t, "error")}
	},
	ApprovalBudget: func(t *rapid.T) any {
		return BudgetBody{Approval: ApprovalRequest{ID: drawText(t, "id"), Kind: drawText(t, "approval_kind"), Hash: "h", Capability: []byte(`{}`), Presentation: []byte(`{}`)},
			Call: 2, Attempt: 1, Limit: ModelUsage{Calls: 3}, Used: ModelUsage{Calls: 3}, Reserve: ModelUsage{Calls: 1}, Over: drawText(t, "over"), Raise: ModelUsage{Calls: 1}}
	},
}

func drawDecided(t *rapid.T) StepDecidedBody {
	b := StepDecidedBody{Step: 1, Tool: drawText(t, "tool"), Args: drawText(t, "args"), CallID: drawText(t, "call_id"), Reason: drawText(t, "reason")}
	if rapid.Bool().Draw(t, "policy") {
		p := drawPolicy(t)
		b.Policy = &p
	}
	return b
}

func drawObserved(t *rapid.T) ObservedBody {
	return ObservedBody{Step: 1, Kind: ObservationKind(drawText(t, "kind")), Content: drawText(t, "content"), Truncated: rapid.Bool().Draw(t, "truncated")}
}

func drawDecision(t *rapid.T, d string) DecisionBody {
	return DecisionBody{Approval: drawText(t, "approval"), Hash: "h", Decision: d, Operator: drawText(t, "operator"), Reason: drawText(t, "reason"), Signature: drawText(t, "sig"), Intake: 2}
}

func drawEnd(t *rapid.T) EndBody {
	b := EndBody{Reason: EndReason(drawText(t, "reason")), Detail: drawText(t, "detail"), Result: drawText(t, "result")}
	if rapid.Bool().Draw(t, "policy") {
		p := drawPolicy(t)
		b.Policy = &p
	}
	if rapid.Bool().Draw(t, "observation") {
		o := drawObserved(t)
		b.Observation = &o
	}
	return b
}

// TestBodyJSON_EveryKindSameAsEncodingJSON: the body of every kind, hand
// encoded or not, is the bytes encoding/json writes for it. It iterates
// [Kinds], so a new kind (or a new hand encoder) is covered or fails here.
func TestBodyJSON_EveryKindSameAsEncodingJSON(t *testing.T) {
	for _, k := range Kinds {
		draw, ok := drawBodies[k]
		if !ok {
			t.Errorf("kind %s has no body in drawBodies: add one, so its encoding is held equal to encoding/json", k)
			continue
		}
		t.Run(string(k), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				body := draw(t)
				want, wantErr := encodeJSON(body)
				got, err := marshalBody(body)
				if (err != nil) != (wantErr != nil) {
					t.Fatalf("%#v: error %v, encoding/json's %v", body, err, wantErr)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%#v:\n got %s\nwant %s", body, got, want)
				}
			})
		})
	}
	if len(drawBodies) != len(Kinds) {
		t.Errorf("drawBodies has %d kinds, Kinds %d: a body for a kind that is not one", len(drawBodies), len(Kinds))
	}
}
