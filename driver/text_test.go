package driver

import (
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/arbiter-run/arbiter/events"
)

// TestClean_EveryFreeTextField puts invalid UTF-8 in each free-text field
// of each body clean knows, one field at a time, and checks that clean
// makes that field valid, leaves every other field and the body it was
// given as they were, and hands a body with nothing to clean back as it
// came.
func TestClean_EveryFreeTextField(t *testing.T) {
	const bad, fixed = "a\xffb", "a\uFFFDb"
	approval := func(kind, reason string) *events.ApprovalRequest {
		return &events.ApprovalRequest{Kind: kind, Reason: reason}
	}
	policy := func(reason string, a *events.ApprovalRequest) *events.PolicyBody {
		return &events.PolicyBody{Step: 1, Outcome: events.Allow, Reason: reason, Approval: a}
	}
	obs := func(content string) *events.ObservedBody {
		return &events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: content}
	}
	cases := []struct {
		name string
		mk   func(string) any // the body with s in the field under test
	}{
		{"decided tool", func(s string) any { return events.StepDecidedBody{Step: 1, Tool: s} }},
		{"decided call id", func(s string) any { return events.StepDecidedBody{Step: 1, Tool: "t", CallID: s} }},
		{"decided reason", func(s string) any { return events.StepDecidedBody{Step: 1, Tool: "t", Reason: s} }},
		{"decided policy reason", func(s string) any { return events.StepDecidedBody{Step: 1, Tool: "t", Policy: policy(s, nil)} }},
		{"policy reason", func(s string) any { return *policy(s, approval("k", "r")) }},
		{"policy approval kind", func(s string) any { return *policy("r", approval(s, "r")) }},
		{"policy approval reason", func(s string) any { return *policy("r", approval("k", s)) }},
		{"observed content", func(s string) any { return *obs(s) }},
		{"interrupted observation", func(s string) any { return events.InterruptedBody{Step: 1, Observation: obs(s)} }},
		{"end detail", func(s string) any { return events.EndBody{Reason: events.ReasonCompleted, Detail: s} }},
		{"end result", func(s string) any { return events.EndBody{Reason: events.ReasonCompleted, Result: s} }},
		{"end policy reason", func(s string) any { return events.EndBody{Reason: events.ReasonInternalError, Policy: policy(s, nil)} }},
		{"end observation", func(s string) any { return events.EndBody{Reason: events.ReasonCompleted, Observation: obs(s)} }},
		{"refused reason", func(s string) any { return events.RefusedBody{Reason: s} }},
		{"refused operator", func(s string) any { return events.RefusedBody{Reason: "r", Operator: s} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.mk(bad)
			before := tc.mk(bad)
			got, held := clean(in)
			if !held {
				t.Fatalf("clean says %T cannot be folded as held", in)
			}
			if want := tc.mk(fixed); !reflect.DeepEqual(got, want) {
				t.Errorf("clean gave %+v, want %+v", got, want)
			}
			if !reflect.DeepEqual(in, before) {
				t.Errorf("clean changed the body it was given: %+v", in)
			}
			valid := tc.mk(fixed)
			same, _ := clean(valid)
			if !reflect.DeepEqual(same, valid) {
				t.Errorf("clean changed a valid body: %+v", same)
			}
		})
	}
	if !utf8.ValidString(fixed) || utf8.ValidString(bad) {
		t.Fatal("the test's strings are not what they say")
	}
}
