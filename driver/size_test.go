package driver_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// bigArgs returns a JSON object of about n bytes.
func bigArgs(n int) string {
	return `{"to":"ops","body":"` + strings.Repeat("x", n) + `"}`
}

// TestDriver_OversizeDecisionIsRecordedRefused: decisions of 1.5 MB and
// 10 MB of arguments, and a 10 MB tool name (all beyond the server's 1 MB
// payload), are recorded by their size, hash and a prefix, refused as an
// invalid decision the agent sees, and the run moves on to the agent's next
// decision: nothing runs, nothing waits (issue 10, item 7).
func TestDriver_OversizeDecisionIsRecordedRefused(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	send := testkit.NewLedger("send", events.LocalMutation, toSchema)
	d := newDriver(t, log, policy.DefaultSideEffects(), send, done())
	r := create(t, d, "big")
	script := testkit.NewScript(
		testkit.Call("send", bigArgs(1_500_000)),
		testkit.Call("send", bigArgs(10_000_000)),
		testkit.Call(strings.Repeat("t", 10_000_000), `{}`),
		testkit.Call("done", `{}`),
	)
	drive(t, d, r, script)
	wantCount(t, send, 0)
	v := r.View()
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	for n := 1; n <= 3; n++ {
		s := v.Step(n)
		if s.Decision.Oversize == nil || s.Observation == nil || s.Observation.Kind != events.ObsInvalidDecision || !strings.Contains(s.Observation.Content, "larger than") {
			t.Errorf("step %d: oversize %+v observation %+v, want an oversize record refused", n, s.Decision.Oversize, s.Observation)
		}
		if len(s.Decision.Args)+len(s.Decision.Tool) > 4096 {
			t.Errorf("step %d recorded %d bytes of the decision, want a prefix", n, len(s.Decision.Args)+len(s.Decision.Tool))
		}
	}
	if o := v.Step(2).Decision.Oversize; o.Bytes < 10_000_000 || len(o.SHA256) != 64 {
		t.Errorf("step 2 oversize: %+v, want its size and hash", o)
	}
	if got := len(script.Inputs()); got != 4 {
		t.Errorf("agent asked %d times, want 4 (once a step: no loop)", got)
	}
}

// TestDriver_LargeApprovalCarriesArgumentsOnce: 400 KiB of arguments to an
// approval-gated tool (the side-effect policy) make an approval event that
// holds them once, which the server stores; the run waits on it, and a
// grant runs it (issue 10, item 7).
func TestDriver_LargeApprovalCarriesArgumentsOnce(t *testing.T) {
	p := pauseOnSend(t, driver.Config{}, bigArgs(400<<10))
	req := ofKind(records(t, p.log, p.r.ID()), events.ApprovalRequested)
	if len(req) != 1 {
		t.Fatalf("approval.requested events: %d, want 1", len(req))
	}
	if n := len(req[0].Data); n > 400<<10+4096 {
		t.Errorf("approval event of %d bytes for %d bytes of arguments, want them once", n, 400<<10)
	}
	grant(t, p.d, p.r, p.kp)
	drive(t, p.d, p.r, p.agent)
	wantCount(t, p.send, 1)
	wantEnd(t, p.r.View(), projector.Completed, events.ReasonCompleted)
}

// copyingPolicy asks for approval with the arguments copied into both the
// capability and the presentation: a policy's right, which makes 400 KiB of
// arguments an event of 1.2 MB the server cannot store.
var copyingPolicy = policyFunc(func(_ context.Context, req policy.Request, _ projector.View) (policy.Ruling, error) {
	c := map[string]json.RawMessage{"args": req.Args}
	return policy.NeedApproval("copy", "copies the request", c, c)
})

// TestDriver_EventTooLargeFailsTheRunClosed: an event the server would
// refuse for its size (here a policy's approval holding the arguments
// three times) is never sent; the run fails closed as event_too_large with
// the size recorded, instead of wedging RUNNING (issue 10, item 7).
func TestDriver_EventTooLargeFailsTheRunClosed(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	send := testkit.NewLedger("send", events.RemoteMutation, toSchema)
	d := newDriver(t, log, copyingPolicy, send)
	r := create(t, d, "copies")
	script := testkit.NewScript(testkit.Call("send", bigArgs(400<<10)))
	drive(t, d, r, script)
	wantCount(t, send, 0)
	v := r.View()
	wantEnd(t, v, projector.Failed, events.ReasonTooLarge)
	if !strings.Contains(v.Run.Detail, "approval.requested") || !strings.Contains(v.Run.Detail, "bytes") {
		t.Errorf("detail %q, want the event kind and its size", v.Run.Detail)
	}
	if got := len(script.Inputs()); got != 1 {
		t.Errorf("agent asked %d times, want 1", got)
	}
}

// TestDriver_PairTooLargeForOneEventGoesApart: a decision that fits in an
// event alone but not with its allow (whose PolicyJSON arguments repeat
// its own) is recorded alone, then its allow as a step.policy event, and
// the call runs once, after both (ADR 0017).
func TestDriver_PairTooLargeForOneEventGoesApart(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	send := testkit.NewLedger("send", events.LocalMutation, toSchema)
	d := newDriver(t, log, policy.DefaultSideEffects(), send, done())
	r := create(t, d, "pair")
	// Just under the size a decision is recorded whole at (MaxDecision,
	// half the server's limit by default): twice it is over the limit.
	args := bigArgs(log.MaxEventBytes()/2 - 64)
	drive(t, d, r, testkit.NewScript(testkit.Call("send", args), testkit.Call("done", `{}`)))
	wantCount(t, send, 1)
	recs := records(t, log, "pair")
	if got, want := kinds(recs)[1:4], []events.Kind{events.StepDecided, events.StepPolicy, events.StepObserved}; !slices.Equal(got, want) {
		t.Fatalf("step 1: got %v, want %v", got, want)
	}
	if b := body[events.StepDecidedBody](t, recs[1]); b.Policy != nil || b.Oversize != nil || b.Args != args {
		t.Errorf("the decision alone: policy %v oversize %v, %d bytes of arguments, want the whole decision and no result", b.Policy, b.Oversize, len(b.Args))
	}
	if pb := body[events.PolicyBody](t, recs[2]); pb.Outcome != events.Allow || pb.Step != 1 {
		t.Errorf("its result: %+v, want step 1's allow", pb)
	}
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
}

// TestDriver_TerminalResultTooLargeForTheEndGoesApart: a terminal tool's
// result travels in the run's end with the result beside it (ADR 0017);
// when the two are too large for one event, the observation is recorded
// alone and the end after it, and the run completes with the whole result.
func TestDriver_TerminalResultTooLargeForTheEndGoesApart(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	result := strings.Repeat("r", log.MaxEventBytes()/2+1024)
	fin := done()
	fin.Result = func(context.Context, json.RawMessage) (string, error) { return result, nil }
	d := newDriverCfg(t, driver.Config{Log: log, Policy: policy.DefaultSideEffects(), Tools: []driver.Tool{fin}, MaxObservation: len(result)})
	r := create(t, d, "big-end")
	drive(t, d, r, testkit.NewScript(testkit.Call("done", `{}`)))
	recs := records(t, log, "big-end")
	if got, want := kinds(recs), []events.Kind{events.RunCreated, events.StepDecided, events.StepObserved, events.RunFinished}; !slices.Equal(got, want) {
		t.Fatalf("events: got %v, want %v", got, want)
	}
	if o := body[events.ObservedBody](t, recs[2]); o.Content != result || o.Truncated {
		t.Errorf("the observation alone: %d bytes, truncated %v, want the whole %d", len(o.Content), o.Truncated, len(result))
	}
	if e := body[events.EndBody](t, recs[3]); e.Observation != nil || e.Result != result {
		t.Errorf("the end after it: observation %v, %d bytes of result, want none and the whole result", e.Observation != nil, len(e.Result))
	}
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
	wantCount(t, fin, 1)
}

// TestDriver_TerminalResultTravelsInTheEnd: a terminal tool's success is
// recorded by the run's end alone, which carries the observation; the view
// and the run's result are what the two events used to give.
func TestDriver_TerminalResultTravelsInTheEnd(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	fin := done()
	fin.Result = func(context.Context, json.RawMessage) (string, error) { return "the answer", nil }
	d := newDriver(t, log, policy.DefaultSideEffects(), fin)
	r := create(t, d, "end")
	drive(t, d, r, testkit.NewScript(testkit.Call("done", `{}`)))
	recs := records(t, log, "end")
	if got, want := kinds(recs), []events.Kind{events.RunCreated, events.StepDecided, events.RunFinished}; !slices.Equal(got, want) {
		t.Fatalf("events: got %v, want %v", got, want)
	}
	e := body[events.EndBody](t, recs[2])
	if o := e.Observation; o == nil || o.Step != 1 || o.Kind != events.ObsResult || o.Content != "the answer" || e.Result != "the answer" {
		t.Fatalf("end: %+v", e)
	}
	o, ok, err := events.Observed(recs[2].Event)
	if err != nil || !ok || o.Content != "the answer" {
		t.Errorf("events.Observed: %+v %v %v", o, ok, err)
	}
	v := r.View()
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	if s := v.Step(1); s.Observation == nil || s.Observation.Content != "the answer" || v.Run.Result != "the answer" {
		t.Errorf("view: step %+v, result %q", s.Observation, v.Run.Result)
	}
	// Read again from the log, the run folds to the same.
	again, err := d.Load(t.Context(), "end")
	if err != nil {
		t.Fatal(err)
	}
	av := again.View()
	if s := av.Step(1); s.Observation == nil || s.Observation.Content != "the answer" || av.Run.Status != projector.Completed {
		t.Errorf("loaded: %+v %s", s.Observation, av.Run.Status)
	}
}
