package policy_test

import (
	"encoding/json"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

func request(class events.SideEffect) policy.Request {
	return policy.Request{
		Run: "run-1", Step: 1,
		Tool: events.ToolSpec{Name: "send", SideEffect: class, Schema: json.RawMessage(`{"type":"object"}`), Hash: "h"},
		Args: json.RawMessage(`{"body":"a && b","to":"ops"}`),
	}
}

func TestSideEffectPolicy_DefaultMapsEachClass(t *testing.T) {
	tests := []struct {
		class events.SideEffect
		want  events.Outcome
	}{
		{events.ReadOnly, events.Allow},
		{events.LocalMutation, events.Allow},
		{events.RemoteMutation, events.RequireApproval},
		{events.Destructive, events.Deny},
	}
	p := policy.DefaultSideEffects()
	for _, tt := range tests {
		t.Run(string(tt.class), func(t *testing.T) {
			dec, err := p.Evaluate(t.Context(), request(tt.class), projector.View{})
			if err != nil {
				t.Fatalf("Evaluate: %v", err)
			}
			if dec.Outcome != tt.want {
				t.Errorf("outcome for %s = %q, want %q", tt.class, dec.Outcome, tt.want)
			}
			if dec.Reason == "" {
				t.Errorf("outcome for %s has no reason", tt.class)
			}
			if got := dec.Approval != nil; got != (tt.want == events.RequireApproval) {
				t.Errorf("approval present = %v for %s, want %v", got, tt.class, !got)
			}
		})
	}
}

func TestSideEffectPolicy_UnknownClassDenied(t *testing.T) {
	for _, class := range []events.SideEffect{"", "remote", "READ_ONLY", "read_only "} {
		dec, err := policy.DefaultSideEffects().Evaluate(t.Context(), request(class), projector.View{})
		if err != nil {
			t.Fatalf("Evaluate(%q): %v", class, err)
		}
		if dec.Outcome != events.Deny {
			t.Errorf("outcome for class %q = %q, want %q", class, dec.Outcome, events.Deny)
		}
	}
}

// TestSideEffectPolicy_MissingEntryDenied: a custom map that leaves a class
// out denies it; it never falls open.
func TestSideEffectPolicy_MissingEntryDenied(t *testing.T) {
	p := policy.SideEffectPolicy{events.ReadOnly: events.Allow}
	for _, class := range []events.SideEffect{events.LocalMutation, events.RemoteMutation, events.Destructive} {
		dec, err := p.Evaluate(t.Context(), request(class), projector.View{})
		if err != nil {
			t.Fatal(err)
		}
		if dec.Outcome != events.Deny {
			t.Errorf("outcome for unmapped %s = %q, want %q", class, dec.Outcome, events.Deny)
		}
	}
	var empty policy.SideEffectPolicy
	dec, err := empty.Evaluate(t.Context(), request(events.ReadOnly), projector.View{})
	if err != nil || dec.Outcome != events.Deny {
		t.Errorf("nil SideEffectPolicy = %q, %v, want %q", dec.Outcome, err, events.Deny)
	}
}

func TestSideEffectPolicy_CustomMapping(t *testing.T) {
	p := policy.SideEffectPolicy{events.Destructive: events.Abort, events.ReadOnly: events.RequireApproval}
	dec, err := p.Evaluate(t.Context(), request(events.Destructive), projector.View{})
	if err != nil || dec.Outcome != events.Abort {
		t.Errorf("destructive under a custom map = %q, %v, want %q", dec.Outcome, err, events.Abort)
	}
	dec, err = p.Evaluate(t.Context(), request(events.ReadOnly), projector.View{})
	if err != nil || dec.Outcome != events.RequireApproval || dec.Approval == nil || dec.Approval.Kind != string(events.ReadOnly) {
		t.Errorf("read_only under a custom map = %+v, %v, want require_approval of kind read_only", dec, err)
	}
}

// TestSideEffectPolicy_ApprovalBindsTheExactRequest: the approval asks for
// the class as its kind, its capability and presentation name the tool (the
// arguments are not repeated in them, so an approval event carries them
// once), and the approval hash binds the exact arguments: another request
// gets another hash.
func TestSideEffectPolicy_ApprovalBindsTheExactRequest(t *testing.T) {
	dec, err := policy.DefaultSideEffects().Evaluate(t.Context(), request(events.RemoteMutation), projector.View{})
	if err != nil {
		t.Fatal(err)
	}
	a := dec.Approval
	if a.Kind != string(events.RemoteMutation) {
		t.Errorf("kind = %q, want %q", a.Kind, events.RemoteMutation)
	}
	want := `{"tool":"send"}`
	if got := string(a.Capability); got != want {
		t.Errorf("capability = %s, want %s", got, want)
	}
	if got := string(a.Presentation); got != want {
		t.Errorf("presentation = %s, want %s", got, want)
	}
	other := request(events.RemoteMutation)
	other.Args = json.RawMessage(`{"body":"a && b","to":"all"}`)
	v1 := policy.Ask(t.Context(), policy.DefaultSideEffects(), request(events.RemoteMutation), projector.View{})
	v2 := policy.Ask(t.Context(), policy.DefaultSideEffects(), other, projector.View{})
	if v1.Err != nil || v2.Err != nil || v1.Approval.Hash == v2.Approval.Hash {
		t.Errorf("approval hashes %+v and %+v: want two hashes for two requests", v1.Approval, v2.Approval)
	}
}

func TestSideEffectPolicy_HasNoID(t *testing.T) {
	if got := policy.ID(policy.DefaultSideEffects()); got != "" {
		t.Errorf("ID(SideEffectPolicy) = %q, want \"\" (wrap it with WithID)", got)
	}
}
