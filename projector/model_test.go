package projector_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"pgregory.net/rapid"
)

func attempt(call, n int, reserve events.ModelUsage) events.ModelAttemptBody {
	return events.ModelAttemptBody{Call: call, Attempt: n, Provider: "openai", Model: "m", Reserve: reserve, SideEffect: events.SideEffectNone}
}

// TestFold_ModelCallsCharge: a failure is charged its charge, an attempt
// left open by a dead worker its reservation once the next attempt comes,
// a reply its usage; the last reply is kept with the steps it came after.
func TestFold_ModelCallsCharge(t *testing.T) {
	reserve := events.ModelUsage{Calls: 1, InputTokens: 100, OutputTokens: 50, SpendNanoUSD: 1000}
	h := started(t, "r1")
	h.add(events.ModelAttempted, attempt(1, 1, reserve))
	h.add(events.ModelFailed, events.ModelFailBody{Call: 1, Attempt: 1, Status: 429, Error: "slow down", Retryable: true, Charge: events.ModelUsage{Calls: 1}})
	h.add(events.ModelAttempted, attempt(1, 2, reserve)) // its worker dies
	mid := h.fold()
	if got, want := mid.Model.Charged(), (events.ModelUsage{Calls: 2, InputTokens: 100, OutputTokens: 50, SpendNanoUSD: 1000}); got != want {
		t.Fatalf("charged with an open attempt: got %+v, want %+v", got, want)
	}
	h.add(events.ModelAttempted, attempt(1, 3, reserve))
	reply := events.ModelReplyBody{Call: 1, Attempt: 3, Finish: "tool_calls",
		ToolCalls: []events.ModelToolCall{{ID: "a", Name: "read", Args: `{"path":"x"}`}, {ID: "b", Name: "write", Args: `{`}},
		Usage:     events.ModelUsage{Calls: 1, InputTokens: 70, OutputTokens: 20, SpendNanoUSD: 400}}
	h.add(events.ModelReplied, reply)
	h.decide(1, "read", `{"path":"x"}`)
	v := h.fold()
	m := v.Model
	want := events.ModelUsage{Calls: 3, InputTokens: 170, OutputTokens: 70, SpendNanoUSD: 1400}
	if m.Used != want || m.Charged() != want {
		t.Errorf("used %+v, charged %+v, want %+v both", m.Used, m.Charged(), want)
	}
	if m.Open != nil || m.Replies != 1 || m.Attempts != 0 || m.LastAt != 0 {
		t.Errorf("got open %v replies %d attempts %d last at %d, want nil 1 0 0", m.Open, m.Replies, m.Attempts, m.LastAt)
	}
	if m.Last == nil || !reflect.DeepEqual(m.Last.ToolCalls, reply.ToolCalls) {
		t.Errorf("last reply %+v, want %+v", m.Last, reply)
	}
	c := v.Clone()
	c.Model.Last.ToolCalls[0].Args = "changed"
	if v.Model.Last.ToolCalls[0].Args != `{"path":"x"}` {
		t.Errorf("changing a clone's last reply changed the view")
	}
}

// TestFold_ModelEventsOutOfOrderAreRefused: an outcome with no open
// attempt, or of another attempt, and an attempt numbered out of turn do
// not fold, and leave the view as it was.
func TestFold_ModelEventsOutOfOrderAreRefused(t *testing.T) {
	one := events.ModelUsage{Calls: 1}
	cases := []struct {
		name  string
		setup func(h *history)
		bad   func(h *history) events.Event
	}{
		{"reply with no attempt", func(*history) {}, func(h *history) events.Event {
			return h.next(events.ModelReplied, events.ModelReplyBody{Call: 1, Attempt: 1})
		}},
		{"failure with no attempt", func(*history) {}, func(h *history) events.Event {
			return h.next(events.ModelFailed, events.ModelFailBody{Call: 1, Attempt: 1, Error: "x"})
		}},
		{"reply of another attempt", func(h *history) { h.add(events.ModelAttempted, attempt(1, 1, one)) }, func(h *history) events.Event {
			return h.next(events.ModelReplied, events.ModelReplyBody{Call: 1, Attempt: 2})
		}},
		{"attempt skipping a number", func(h *history) { h.add(events.ModelAttempted, attempt(1, 1, one)) }, func(h *history) events.Event {
			return h.next(events.ModelAttempted, attempt(1, 3, one))
		}},
		{"second call before a reply", func(h *history) { h.add(events.ModelAttempted, attempt(1, 1, one)) }, func(h *history) events.Event {
			return h.next(events.ModelAttempted, attempt(2, 1, one))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := started(t, "r1")
			c.setup(h)
			v := h.fold()
			before := v.Clone()
			err := apply(t, &v, c.bad(h))
			if !errors.Is(err, projector.ErrFold) {
				t.Fatalf("got %v, want ErrFold", err)
			}
			if !reflect.DeepEqual(v, before) {
				t.Errorf("a refused event changed the view")
			}
		})
	}
}

// drawModelHistory draws model calls between steps: each call some failed
// attempts, maybe an attempt left open by a dead worker, then a reply (or,
// last, nothing). It returns the events and the totals summed by hand.
func drawModelHistory(t *rapid.T) ([]events.Event, events.ModelUsage) {
	h := started(t, "prop")
	var want events.ModelUsage
	usage := func(label string) events.ModelUsage {
		return events.ModelUsage{Calls: 1, InputTokens: rapid.Int64Range(0, 500).Draw(t, label+" in"), OutputTokens: rapid.Int64Range(0, 100).Draw(t, label+" out"), SpendNanoUSD: rapid.Int64Range(0, 9999).Draw(t, label+" spend")}
	}
	calls := rapid.IntRange(0, 5).Draw(t, "calls")
	for c := 1; c <= calls; c++ {
		attempts := rapid.IntRange(1, 4).Draw(t, "attempts")
		for a := 1; a <= attempts; a++ {
			reserve := usage("reserve")
			h.add(events.ModelAttempted, attempt(c, a, reserve))
			last := a == attempts
			switch {
			case last && c == calls && rapid.Bool().Draw(t, "left open"):
				want = want.Add(reserve) // charged while open
			case last:
				u := usage("reply")
				h.add(events.ModelReplied, events.ModelReplyBody{Call: c, Attempt: a, Usage: u, ToolCalls: []events.ModelToolCall{{ID: "x", Name: "read", Args: "{}"}}})
				want = want.Add(u)
			case rapid.Bool().Draw(t, "dies"):
				want = want.Add(reserve) // charged once the next attempt comes
			default:
				charge := rapid.SampledFrom([]events.ModelUsage{{Calls: 1}, reserve}).Draw(t, "charge")
				h.add(events.ModelFailed, events.ModelFailBody{Call: c, Attempt: a, Error: "x", Charge: charge})
				want = want.Add(charge)
			}
		}
		if h.evs[len(h.evs)-1].Kind == events.ModelReplied {
			h.decide(c, "read", "{}")
			h.add(events.StepPolicy, events.PolicyBody{Step: c, Outcome: events.Allow})
			h.observe(c, events.ObsResult, "ok")
		}
	}
	return h.evs, want
}

// TestFold_ModelTotalsAreTheEventsSum: whatever the model calls, their
// failures and dead workers, the charged totals are the sum the events
// give, and folding any prefix then the rest gives the same model view.
func TestFold_ModelTotalsAreTheEventsSum(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs, want := drawModelHistory(t)
		all := foldAll(t, evs)
		if got := all.Model.Charged(); got != want {
			t.Fatalf("charged %+v, want %+v", got, want)
		}
		k := rapid.IntRange(0, len(evs)).Draw(t, "split")
		v := foldAll(t, evs[:k])
		for _, e := range evs[k:] {
			if err := v.Apply(e); err != nil {
				t.Fatalf("apply event %d: %v", e.Seq, err)
			}
		}
		if !reflect.DeepEqual(v.Model, all.Model) {
			t.Fatalf("split at %d: %+v, want %+v", k, v.Model, all.Model)
		}
	})
}
