package render_test

import (
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/render"
)

func step(n int, tool, args, callID string, kind events.ObservationKind, content string) projector.Step {
	s := projector.Step{N: n, Decision: events.StepDecidedBody{Step: n, Tool: tool, Args: args, CallID: callID}}
	if kind != "" {
		s.Observation = &events.ObservedBody{Step: n, Kind: kind, Content: content}
	}
	return s
}

func TestHistory_ResultsAttachToTheModelsOwnCalls(t *testing.T) {
	steps := projector.StepsOf(
		step(1, "read", `{"path": "a"}`, "call_A", events.ObsResult, "hello"),
		step(2, "delete", `{"path":"/"}`, "call_B", events.ObsPolicyDenied, "delete: destructive tool delete"),
		step(3, "read", `{"path":`, "", events.ObsInvalidDecision, "json at byte 8: unexpected end"),
		step(4, "send", `{}`, "call_D", "", ""),
	)
	got := render.History(steps)
	if len(got) != 4 {
		t.Fatalf("got %d turns, want 4", len(got))
	}
	if got[0].Call.ID != "call_A" || got[0].Result.CallID != "call_A" || got[0].Result.IsError || got[0].Result.Content != "hello" {
		t.Errorf("turn 1: got %+v %+v", got[0].Call, got[0].Result)
	}
	if got[0].Call.Arguments != `{"path": "a"}` {
		t.Errorf("turn 1 arguments: got %q, want the exact bytes", got[0].Call.Arguments)
	}
	if !got[1].Result.IsError || got[1].Result.CallID != "call_B" || !strings.Contains(got[1].Result.Content, "destructive tool delete") {
		t.Errorf("denial: got %+v, want an error result with the reason on call_B", got[1].Result)
	}
	if got[2].Call.ID != "step-3" || got[2].Result.CallID != "step-3" || !got[2].Result.IsError || !strings.Contains(got[2].Result.Content, "unexpected end") {
		t.Errorf("invalid request: got %+v %+v", got[2].Call, got[2].Result)
	}
	if got[3].Result != nil {
		t.Errorf("step without outcome: got result %+v, want none", got[3].Result)
	}
}

func TestHistory_TruncatedResultSaysSo(t *testing.T) {
	s := step(1, "read", `{}`, "c", events.ObsResult, "abc")
	s.Observation.Truncated = true
	got := render.History(projector.StepsOf(s))
	if !strings.HasSuffix(got[0].Result.Content, "[output truncated]") {
		t.Errorf("got %q, want a truncation note", got[0].Result.Content)
	}
}

func TestFrom_RendersOnlyTheStepsAfterN(t *testing.T) {
	steps := projector.StepsOf(
		step(1, "read", `{"path": "a"}`, "call_A", events.ObsResult, "hello"),
		step(2, "read", `{"path": "b"}`, "call_B", events.ObsResult, "world"),
		step(3, "send", `{}`, "call_C", "", ""),
	)
	all := render.History(steps)
	for n := 0; n <= 4; n++ {
		got := render.From(steps, n)
		want := all[min(n, len(all)):]
		if len(got) != len(want) {
			t.Fatalf("From(%d): got %d turns, want %d", n, len(got), len(want))
		}
		for i := range got {
			if got[i].Call != want[i].Call {
				t.Errorf("From(%d) turn %d: got %+v, want %+v", n, i, got[i].Call, want[i].Call)
			}
		}
	}
}

func TestFrom_KeepsTheModelsText(t *testing.T) {
	s := step(1, "read", `{}`, "c", events.ObsResult, "ok")
	s.Decision.Reason = "reading it first"
	if got := render.From(projector.StepsOf(s), 0)[0].Text; got != "reading it first" {
		t.Errorf("got text %q, want %q", got, "reading it first")
	}
}
