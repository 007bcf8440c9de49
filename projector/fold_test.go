package projector_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"pgregory.net/rapid"
)

// base is the time of every history's first event; event i is i seconds
// later. Nothing here reads the clock, so views compare exactly.
var base = time.Date(2025, time.March, 1, 12, 0, 0, 0, time.UTC)

// history builds one run's events as the log stores them: positions from 1,
// each chained on the hash of the one before, deterministic ids and times.
// It takes a rapid.TB so that property tests share it.
type history struct {
	t   rapid.TB
	run string
	evs []events.Event
}

// started returns a history of run holding its run.created event.
func started(t rapid.TB, run string) *history {
	t.Helper()
	h := &history{t: t, run: run}
	h.add(events.RunCreated, events.RunCreatedBody{
		Tools: []events.ToolSpec{
			{Name: "read", Schema: json.RawMessage(`{"type":"object"}`), SideEffect: events.ReadOnly, TimeoutMS: 1000, Hash: "h-read"},
			{Name: "write", Schema: json.RawMessage(`{"type":"object"}`), SideEffect: events.RemoteMutation, TimeoutMS: 1000, Hash: "h-write"},
			{Name: "done", Schema: json.RawMessage(`{"type":"object"}`), SideEffect: events.ReadOnly, TimeoutMS: 1000, Terminal: true, Hash: "h-done"},
		},
		Limits: events.Limits{MaxSteps: 20, MaxFailuresInRow: 3},
		Input:  json.RawMessage(`{"task":"tidy the files"}`),
		Agent:  "scripted",
	})
	return h
}

// next returns the event that would follow the history, without adding it.
func (h *history) next(k events.Kind, body any) events.Event {
	h.t.Helper()
	e, err := events.New(h.run, k, body)
	if err != nil {
		h.t.Fatalf("new %s event: %v", k, err)
	}
	n := len(h.evs)
	e.ID = fmt.Sprintf("%s-ev%03d", h.run, n+1)
	e.Seq = uint64(n + 1)
	e.Time = base.Add(time.Duration(n) * time.Second)
	if n > 0 {
		data, err := h.evs[n-1].Encode()
		if err != nil {
			h.t.Fatalf("encode event %d: %v", n, err)
		}
		e.Prev = events.Hash(data)
	}
	return e
}

func (h *history) add(k events.Kind, body any) events.Event {
	h.t.Helper()
	e := h.next(k, body)
	h.evs = append(h.evs, e)
	return e
}

func (h *history) decide(n int, tool, args string) events.Event {
	h.t.Helper()
	return h.add(events.StepDecided, events.StepDecidedBody{Step: n, Tool: tool, Args: args, CallID: fmt.Sprintf("call-%d", n)})
}

func (h *history) policy(n int, outcome events.Outcome, reason string) events.Event {
	h.t.Helper()
	return h.add(events.StepPolicy, events.PolicyBody{Step: n, Outcome: outcome, Reason: reason, PolicyID: "p1", ToolHash: "h-write"})
}

// consume records an allow that uses up the granted approval id.
func (h *history) consume(n int, id string) events.Event {
	h.t.Helper()
	return h.add(events.StepPolicy, events.PolicyBody{Step: n, Outcome: events.Allow, PolicyID: "p1", Consumes: id, Resume: true})
}

func approvalRequest(id, kind string) *events.ApprovalRequest {
	return &events.ApprovalRequest{
		ID: id, Kind: kind, Reason: "writes outside the workspace",
		Capability:   json.RawMessage(`{"tool":"write"}`),
		Presentation: json.RawMessage(`{"title":"write a file"}`),
		Hash:         "hash-" + id,
	}
}

func (h *history) request(n int, id string) events.Event {
	h.t.Helper()
	return h.add(events.ApprovalRequested, events.PolicyBody{
		Step: n, Outcome: events.RequireApproval, PolicyID: "p1", Approval: approvalRequest(id, "remote_write"),
	})
}

func (h *history) decideApproval(k events.Kind, id string) events.Event {
	h.t.Helper()
	d := events.DecisionGrant
	if k == events.ApprovalDenied {
		d = events.DecisionDeny
	}
	at := base.Add(time.Duration(len(h.evs)) * time.Second)
	return h.add(k, events.DecisionBody{
		Approval: id, Hash: "hash-" + id, Decision: d, Operator: "OPKEY",
		Signed: at, Signature: "sig", Received: at, Intake: uint64(len(h.evs) + 1),
	})
}

func (h *history) grant(id string) events.Event {
	h.t.Helper()
	return h.decideApproval(events.ApprovalGranted, id)
}

func (h *history) observe(n int, kind events.ObservationKind, content string) events.Event {
	h.t.Helper()
	return h.add(events.StepObserved, events.ObservedBody{Step: n, Kind: kind, Content: content})
}

// fold folds the whole history, failing the test if it does not fold.
func (h *history) fold() projector.View {
	h.t.Helper()
	v, err := projector.Fold(h.evs...)
	if err != nil {
		h.t.Fatalf("fold: %v", err)
	}
	return v
}

func TestFold_RunCreatedStartsRunning(t *testing.T) {
	h := started(t, "r1")
	v := h.fold()
	if v.Run.Status != projector.Running {
		t.Errorf("status: got %s, want %s", v.Run.Status, projector.Running)
	}
	if v.Run.ID != "r1" || v.Run.Agent != "scripted" || string(v.Run.Input) != `{"task":"tidy the files"}` {
		t.Errorf("run row: got id %q agent %q input %s", v.Run.ID, v.Run.Agent, v.Run.Input)
	}
	if len(v.Run.Tools) != 3 || v.Run.Tools[1].Name != "write" || !v.Run.Tools[2].Terminal || v.Run.Limits.MaxSteps != 20 {
		t.Errorf("tools and limits: got %+v %+v", v.Run.Tools, v.Run.Limits)
	}
	if !v.Run.Created.Equal(base) || !v.Run.Updated.Equal(base) || v.Run.Events != 1 {
		t.Errorf("created %v updated %v events %d, want %v %v 1", v.Run.Created, v.Run.Updated, v.Run.Events, base, base)
	}
	if v.Steps.Len() != 0 || len(v.Approvals) != 0 || v.PendingApproval() != nil {
		t.Errorf("new run: got %d steps, %d approvals", v.Steps.Len(), len(v.Approvals))
	}
}

func TestFold_DenyIsPolicyDeniedObservation(t *testing.T) {
	h := started(t, "r1")
	h.decide(1, "write", `{"path":"/etc/passwd"}`)
	h.policy(1, events.Deny, "outside the workspace")
	v := h.fold()
	s := v.Step(1)
	if s == nil || s.Observation == nil {
		t.Fatalf("step 1: got %+v, want an observation", s)
	}
	if s.Observation.Kind != events.ObsPolicyDenied {
		t.Errorf("observation kind: got %q, want %q", s.Observation.Kind, events.ObsPolicyDenied)
	}
	if want := "write: outside the workspace"; s.Observation.Content != want {
		t.Errorf("observation content: got %q, want %q", s.Observation.Content, want)
	}
	if v.Run.Status != projector.Running || v.Run.FailuresInRow != 1 {
		t.Errorf("run: got status %s failures %d, want RUNNING 1", v.Run.Status, v.Run.FailuresInRow)
	}
	if s.Executing() {
		t.Error("denied step: Executing() = true, want false")
	}

	h.decide(2, "write", `{"path":"/etc/shadow"}`)
	h.policy(2, events.Deny, "outside the workspace")
	if got := h.fold().Run.FailuresInRow; got != 2 {
		t.Errorf("after a second deny: got FailuresInRow %d, want 2", got)
	}

	h.decide(3, "read", `{"path":"a.txt"}`)
	h.policy(3, events.Allow, "")
	if v := h.fold(); !v.Step(3).Executing() {
		t.Error("allowed step without observation: Executing() = false, want true")
	}
	h.observe(3, events.ObsResult, "hello")
	if got := h.fold().Run.FailuresInRow; got != 0 {
		t.Errorf("after a result: got FailuresInRow %d, want 0", got)
	}
}

func TestFold_FailedObservationsCountInRow(t *testing.T) {
	for _, kind := range []events.ObservationKind{events.ObsToolError, events.ObsTimeout, events.ObsInvalidArguments, events.ObsUnknownTool, events.ObsInvalidDecision} {
		t.Run(string(kind), func(t *testing.T) {
			h := started(t, "r1")
			h.decide(1, "read", `{}`)
			h.observe(1, kind, "bad")
			if got := h.fold().Run.FailuresInRow; got != 1 {
				t.Errorf("got FailuresInRow %d, want 1", got)
			}
		})
	}
}

func TestFold_AbortFailsRun(t *testing.T) {
	h := started(t, "r1")
	h.decide(1, "exec", `{"cmd":"rm -rf /"}`)
	h.policy(1, events.Abort, "destructive command")
	v := h.fold()
	if v.Run.Status != projector.Failed || v.Run.Reason != string(events.ReasonPolicyAbort) || v.Run.Detail != "destructive command" {
		t.Errorf("run: got %s %q %q, want FAILED %q %q", v.Run.Status, v.Run.Reason, v.Run.Detail, events.ReasonPolicyAbort, "destructive command")
	}
	if s := v.Step(1); s.Observation != nil || s.Policy == nil || s.Policy.Outcome != events.Abort {
		t.Errorf("step 1: got policy %+v observation %+v", s.Policy, s.Observation)
	}
	if err := v.Apply(h.next(events.StepDecided, events.StepDecidedBody{Step: 2, Tool: "read"})); !errors.Is(err, projector.ErrFold) {
		t.Errorf("decision after abort: got %v, want ErrFold", err)
	}
}

func TestFold_ApprovalGrantedThenConsumed(t *testing.T) {
	h := started(t, "r1")
	h.decide(1, "write", `{"path":"out.txt"}`)
	h.request(1, "a1")
	v := h.fold()
	if v.Run.Status != projector.Waiting || v.Run.Reason != "remote_write" {
		t.Errorf("after request: got %s %q, want %s %q", v.Run.Status, v.Run.Reason, projector.Waiting, "remote_write")
	}
	p := v.PendingApproval()
	if p == nil || p.ID != "a1" || p.State != projector.Pending || p.Step != 1 || !p.Requested.Equal(base.Add(2*time.Second)) {
		t.Fatalf("pending approval: got %+v", p)
	}
	if string(p.Capability) != `{"tool":"write"}` || p.Hash != "hash-a1" {
		t.Errorf("pending approval request: got capability %s hash %q", p.Capability, p.Hash)
	}

	g := h.grant("a1")
	v = h.fold()
	a := v.Approval("a1")
	if a.State != projector.Granted || a.DecisionEvent != g.ID || a.Decision == nil || a.Decision.Operator != "OPKEY" {
		t.Errorf("after grant: got state %s event %q decision %+v, want granted %q", a.State, a.DecisionEvent, a.Decision, g.ID)
	}
	if v.Run.Status != projector.Waiting {
		t.Errorf("after grant: got status %s, want %s until the grant is consumed", v.Run.Status, projector.Waiting)
	}
	if v.PendingApproval() == nil {
		t.Error("a granted approval not yet acted on: PendingApproval() = nil")
	}

	h.consume(1, "a1")
	v = h.fold()
	if a := v.Approval("a1"); a.State != projector.Consumed {
		t.Errorf("after consume: got state %s, want %s", a.State, projector.Consumed)
	}
	if v.Run.Status != projector.Running || v.Run.Reason != "" {
		t.Errorf("after consume: got %s %q, want RUNNING", v.Run.Status, v.Run.Reason)
	}
	if v.PendingApproval() != nil || !v.Step(1).Executing() || v.Step(1).Evaluations != 2 {
		t.Errorf("after consume: pending %+v, executing %v, evaluations %d", v.PendingApproval(), v.Step(1).Executing(), v.Step(1).Evaluations)
	}
	h.observe(1, events.ObsResult, "written")
	if v := h.fold(); v.Step(1).Observation == nil || v.Run.FailuresInRow != 0 {
		t.Errorf("after result: got %+v", v.Step(1))
	}
}

// apply is v.Apply(e) turning a panic into a test error, so that one bad
// handler does not take the rest of the package's tests with it.
func apply(t *testing.T, v *projector.View, e events.Event) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("apply %s: panic: %v", e.Kind, r)
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return v.Apply(e)
}

// TestFold_ConsumingRequireApprovalExecutes: on resume, a require_approval
// whose hash equals the grant's consumes the grant and executes (driver
// apply: StepPolicy with outcome require_approval, Consumes, no Approval).
func TestFold_ConsumingRequireApprovalExecutes(t *testing.T) {
	h := started(t, "r1")
	h.decide(1, "write", `{"path":"out.txt"}`)
	h.request(1, "a1")
	h.grant("a1")
	v := h.fold()
	e := h.next(events.StepPolicy, events.PolicyBody{Step: 1, Outcome: events.RequireApproval, PolicyID: "p1", Consumes: "a1", Resume: true})
	if err := apply(t, &v, e); err != nil {
		t.Fatalf("consuming require_approval: got %v, want it folded", err)
	}
	if got := v.Approval("a1").State; got != projector.Consumed {
		t.Errorf("a1: got %s, want %s", got, projector.Consumed)
	}
	if v.Run.Status != projector.Running || !v.Step(1).Executing() || len(v.Approvals) != 1 || v.PendingApproval() != nil {
		t.Errorf("after consume: got status %s executing %v approvals %d pending %+v, want RUNNING, executing, 1, none",
			v.Run.Status, v.Step(1).Executing(), len(v.Approvals), v.PendingApproval())
	}
}

func TestFold_ConsumingUngrantedApprovalIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(h *history) // leaves step 1 open with approval a1 in some state
	}{
		{"pending", func(h *history) {}},
		{"denied", func(h *history) { h.decideApproval(events.ApprovalDenied, "a1") }},
		{"refused back to pending", func(h *history) {
			g := h.grant("a1")
			h.add(events.ApprovalRefused, events.RefusedBody{Approval: "a1", Event: g.ID, Reason: "bad signature"})
		}},
		{"already consumed", func(h *history) { h.grant("a1"); h.consume(1, "a1") }},
		{"superseded", func(h *history) { h.grant("a1"); h.request(1, "a2") }},
		{"unknown", func(h *history) { h.grant("a1") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := started(t, "r1")
			h.decide(1, "write", `{}`)
			h.request(1, "a1")
			tc.prepare(h)
			id := "a1"
			if tc.name == "unknown" {
				id = "nope"
			}
			v := h.fold()
			before := h.fold()
			err := v.Apply(h.next(events.StepPolicy, events.PolicyBody{Step: 1, Outcome: events.Allow, Consumes: id}))
			if !errors.Is(err, projector.ErrFold) {
				t.Fatalf("got %v, want ErrFold", err)
			}
			if !reflect.DeepEqual(v, before) {
				t.Errorf("view changed by a refused event:\n got %+v\nwant %+v", v, before)
			}
		})
	}
}

func TestFold_ApprovalOfAnotherStepCannotBeConsumed(t *testing.T) {
	h := started(t, "r1")
	h.decide(1, "write", `{}`)
	h.request(1, "a1")
	h.grant("a1")
	// Step 1 ends without spending its grant (an observation while it
	// waits): the grant is superseded, and it was for step 1 only anyway.
	h.observe(1, events.ObsTimeout, "gave up")
	h.decide(2, "write", `{}`)
	v := h.fold()
	before := h.fold()
	if got := v.Approval("a1").State; got != projector.Superseded {
		t.Fatalf("a1: got %s, want %s", got, projector.Superseded)
	}
	err := v.Apply(h.next(events.StepPolicy, events.PolicyBody{Step: 2, Outcome: events.Allow, Consumes: "a1"}))
	if !errors.Is(err, projector.ErrFold) {
		t.Fatalf("consume another step's approval: got %v, want ErrFold", err)
	}
	if !reflect.DeepEqual(v, before) {
		t.Errorf("view changed by a refused event:\n got %+v\nwant %+v", v, before)
	}
}

func TestFold_RefusalReturnsApprovalToPending(t *testing.T) {
	h := started(t, "r1")
	h.decide(1, "write", `{}`)
	h.request(1, "a1")
	g := h.grant("a1")
	v := h.fold()
	if err := v.Apply(h.next(events.ApprovalRefused, events.RefusedBody{Approval: "a1", Event: "some-other-event", Reason: "unknown key"})); !errors.Is(err, projector.ErrFold) {
		t.Errorf("refusal naming an event the approval does not hold: got %v, want ErrFold", err)
	}

	h.add(events.ApprovalRefused, events.RefusedBody{Approval: "a1", Event: g.ID, Operator: "OPKEY", Reason: "bad signature"})
	v = h.fold()
	a := v.Approval("a1")
	if a.State != projector.Pending || a.Decision != nil || a.DecisionEvent != "" {
		t.Errorf("refusal naming the grant: got state %s decision %+v event %q, want pending with no decision", a.State, a.Decision, a.DecisionEvent)
	}
	if len(v.Refusals) != 1 || v.Refusals[0].Reason != "bad signature" || v.Refusals[0].Event != g.ID {
		t.Errorf("refusals: got %+v", v.Refusals)
	}
	if v.Run.Status != projector.Waiting {
		t.Errorf("status: got %s, want %s", v.Run.Status, projector.Waiting)
	}
	// Pending again, it can be granted again and then consumed.
	h.grant("a1")
	h.consume(1, "a1")
	if v := h.fold(); v.Approval("a1").State != projector.Consumed {
		got := v.Approval("a1").State
		t.Errorf("regranted and consumed: got %s, want %s", got, projector.Consumed)
	}
}

// TestFold_DecisionsOnlyAsAWorkerRecordsThem: a worker records a decision
// only after verifying it against a pending approval, read from the
// decisions stream after the last one the run recorded. Anything else on a
// decision subject cannot be a decision the run took, and the run does not
// fold: a second decision on a decided approval, one on an approval the run
// does not have, a denial stored as a grant (and the reverse), one with no
// time of receipt, one from an intake already read (issue 10, item 2).
func TestFold_DecisionsOnlyAsAWorkerRecordsThem(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  func(h *history) events.Event
	}{
		{"second decision", func(h *history) events.Event {
			h.grant("a1")
			return h.next(events.ApprovalDenied, events.DecisionBody{Approval: "a1", Hash: "hash-a1", Decision: events.DecisionDeny, Received: base, Intake: 99})
		}},
		{"unknown approval", func(h *history) events.Event {
			return h.next(events.ApprovalGranted, events.DecisionBody{Approval: "forged", Decision: events.DecisionGrant, Received: base, Intake: 99})
		}},
		{"denial stored as a grant", func(h *history) events.Event {
			return h.next(events.ApprovalGranted, events.DecisionBody{Approval: "a1", Hash: "hash-a1", Decision: events.DecisionDeny, Received: base, Intake: 99})
		}},
		{"grant stored as a denial", func(h *history) events.Event {
			return h.next(events.ApprovalDenied, events.DecisionBody{Approval: "a1", Hash: "hash-a1", Decision: events.DecisionGrant, Received: base, Intake: 99})
		}},
		{"neither grant nor deny", func(h *history) events.Event {
			return h.next(events.ApprovalGranted, events.DecisionBody{Approval: "a1", Hash: "hash-a1", Decision: "GRANT", Received: base, Intake: 99})
		}},
		{"no time of receipt", func(h *history) events.Event {
			return h.next(events.ApprovalGranted, events.DecisionBody{Approval: "a1", Hash: "hash-a1", Decision: events.DecisionGrant, Intake: 99})
		}},
		{"intake already read", func(h *history) events.Event {
			h.add(events.ApprovalRefused, events.RefusedBody{Approval: "a1", Intake: 50, Reason: "bad signature"})
			return h.next(events.ApprovalGranted, events.DecisionBody{Approval: "a1", Hash: "hash-a1", Decision: events.DecisionGrant, Received: base, Intake: 50})
		}},
		{"refusal of an intake already read", func(h *history) events.Event {
			h.add(events.ApprovalRefused, events.RefusedBody{Approval: "a1", Intake: 50, Reason: "bad signature"})
			return h.next(events.ApprovalRefused, events.RefusedBody{Approval: "a1", Intake: 49, Reason: "bad signature"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := started(t, "r1")
			h.decide(1, "write", `{}`)
			h.request(1, "a1")
			e := tc.add(h)
			v := h.fold()
			before := h.fold()
			if err := v.Apply(e); !errors.Is(err, projector.ErrFold) {
				t.Fatalf("got %v, want ErrFold", err)
			}
			if !reflect.DeepEqual(v, before) {
				t.Errorf("view changed by a refused event")
			}
		})
	}
}

// TestFold_RefusedIntakeIsRemembered: a refusal of a published decision
// moves the run's intake position on, and leaves the approval pending.
func TestFold_RefusedIntakeIsRemembered(t *testing.T) {
	h := started(t, "r1")
	h.decide(1, "write", `{}`)
	h.request(1, "a1")
	h.add(events.ApprovalRefused, events.RefusedBody{Approval: "a1", Intake: 2, Reason: "bad signature"})
	v := h.fold()
	if v.Intake != 2 || v.Approval("a1").State != projector.Pending || len(v.Refusals) != 1 {
		t.Errorf("after a refused intake: intake %d state %s refusals %d, want 2 pending 1", v.Intake, v.Approval("a1").State, len(v.Refusals))
	}
	g := h.grant("a1")
	if v := h.fold(); v.Intake <= 2 || v.Approval("a1").DecisionEvent != g.ID {
		t.Errorf("after the grant: intake %d event %q", v.Intake, v.Approval("a1").DecisionEvent)
	}
}

func TestFold_ApprovalExpiredCancelsRun(t *testing.T) {
	h := started(t, "r1")
	h.decide(1, "write", `{}`)
	h.request(1, "a1")
	h.add(events.ApprovalExpired, events.ExpiredBody{Approval: "a1"})
	v := h.fold()
	if v.Run.Status != projector.Cancelled || v.Run.Reason != string(events.ReasonApprovalExpired) {
		t.Errorf("run: got %s %q, want CANCELLED %q", v.Run.Status, v.Run.Reason, events.ReasonApprovalExpired)
	}
	if a := v.Approval("a1"); a.State != projector.Expired {
		t.Errorf("approval: got %s, want %s (an expiry is never a denial)", a.State, projector.Expired)
	}
	if v.PendingApproval() != nil {
		t.Errorf("pending approval after expiry: got %+v, want nil", v.PendingApproval())
	}
	// Nothing folds after the end: a grant recorded late is no event the
	// run can have.
	if err := v.Apply(h.next(events.ApprovalGranted, events.DecisionBody{Approval: "a1", Hash: "hash-a1", Decision: events.DecisionGrant, Received: base, Intake: 99})); !errors.Is(err, projector.ErrFold) {
		t.Errorf("late grant: got %v, want ErrFold", err)
	}
}

func TestFold_GrantedApprovalCannotExpire(t *testing.T) {
	h := started(t, "r1")
	h.decide(1, "write", `{}`)
	h.request(1, "a1")
	h.grant("a1")
	v := h.fold()
	before := h.fold()
	if err := v.Apply(h.next(events.ApprovalExpired, events.ExpiredBody{Approval: "a1"})); !errors.Is(err, projector.ErrFold) {
		t.Fatalf("expire a granted approval: got %v, want ErrFold", err)
	}
	if !reflect.DeepEqual(v, before) {
		t.Error("view changed by a refused event")
	}
}

func TestFold_EndEvents(t *testing.T) {
	for _, tc := range []struct {
		kind   events.Kind
		body   events.EndBody
		status projector.Status
	}{
		{events.RunFinished, events.EndBody{Reason: events.ReasonCompleted, Result: "all done"}, projector.Completed},
		{events.RunFailed, events.EndBody{Reason: events.ReasonRepeatedFailures, Detail: "3 in a row"}, projector.Failed},
		{events.RunCancelled, events.EndBody{Reason: events.ReasonApprovalDenied}, projector.Cancelled},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			h := started(t, "r1")
			h.decide(1, "read", `{}`)
			h.observe(1, events.ObsResult, "ok")
			h.add(tc.kind, tc.body)
			v := h.fold()
			if v.Run.Status != tc.status || v.Run.Reason != string(tc.body.Reason) || v.Run.Detail != tc.body.Detail || v.Run.Result != tc.body.Result {
				t.Errorf("run: got %s %q %q %q, want %s %+v", v.Run.Status, v.Run.Reason, v.Run.Detail, v.Run.Result, tc.status, tc.body)
			}
			if !v.Run.Status.Ended() {
				t.Errorf("%s.Ended() = false", v.Run.Status)
			}
		})
	}
}

// TestFold_RefusesEventsThatDoNotFold checks every way an event can fail to
// fold: each is an ErrFold and leaves the view exactly as it was.
func TestFold_RefusesEventsThatDoNotFold(t *testing.T) {
	for _, tc := range []struct {
		name string
		// bad builds a history and returns the event that must not fold.
		bad func(h *history) events.Event
	}{
		{"decision with another step's result", func(h *history) events.Event {
			return h.next(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read", Policy: &events.PolicyBody{Step: 2, Outcome: "allow"}})
		}},
		{"decision with an approval request in it", func(h *history) events.Event {
			return h.next(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read", Policy: &events.PolicyBody{Step: 1, Outcome: "require_approval", Approval: approvalRequest("a1", "check")}})
		}},
		{"decision consuming a grant in its own event", func(h *history) events.Event {
			return h.next(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read", Policy: &events.PolicyBody{Step: 1, Outcome: "allow", Consumes: "a1"}})
		}},
		{"decision with a resume in it", func(h *history) events.Event {
			return h.next(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read", Policy: &events.PolicyBody{Step: 1, Outcome: "allow", Resume: true}})
		}},
		{"decision with a recovery's result in it", func(h *history) events.Event {
			return h.next(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read", Policy: &events.PolicyBody{Step: 1, Outcome: "allow", Origin: events.OriginRecovery}})
		}},
		{"decision with an unknown outcome in it", func(h *history) events.Event {
			return h.next(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read", Policy: &events.PolicyBody{Step: 1, Outcome: "maybe"}})
		}},
		{"oversize decision with a result", func(h *history) events.Event {
			return h.next(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read", Oversize: &events.Oversize{Bytes: 9, Limit: 1}, Policy: &events.PolicyBody{Step: 1, Outcome: "allow"}})
		}},
		{"end carrying the result of a tool that is not terminal", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			h.policy(1, events.Allow, "")
			return h.next(events.RunFinished, endWith(1, "ok"))
		}},
		{"end carrying the result of a step not allowed", func(h *history) events.Event {
			h.decide(1, "done", `{}`)
			return h.next(events.RunFinished, endWith(1, "ok"))
		}},
		{"end carrying the result of a denied step", func(h *history) events.Event {
			h.decide(1, "done", `{}`)
			h.policy(1, events.Deny, "no")
			return h.next(events.RunFinished, endWith(1, "ok"))
		}},
		{"end carrying the result of a step already observed", func(h *history) events.Event {
			h.decide(1, "done", `{}`)
			h.policy(1, events.Allow, "")
			h.observe(1, events.ObsResult, "ok")
			return h.next(events.RunFinished, endWith(1, "ok"))
		}},
		{"end carrying the result of another step", func(h *history) events.Event {
			h.decide(1, "done", `{}`)
			h.policy(1, events.Allow, "")
			return h.next(events.RunFinished, endWith(2, "ok"))
		}},
		{"end carrying a result with no step", func(h *history) events.Event {
			return h.next(events.RunFinished, endWith(1, "ok"))
		}},
		{"end carrying a tool's error", func(h *history) events.Event {
			h.decide(1, "done", `{}`)
			h.policy(1, events.Allow, "")
			b := endWith(1, "boom")
			b.Observation.Kind = events.ObsToolError
			return h.next(events.RunFinished, b)
		}},
		{"end whose result is not the result it carries", func(h *history) events.Event {
			h.decide(1, "done", `{}`)
			h.policy(1, events.Allow, "")
			b := endWith(1, "ok")
			b.Result = "something else"
			return h.next(events.RunFinished, b)
		}},
		{"failure carrying a result", func(h *history) events.Event {
			h.decide(1, "done", `{}`)
			h.policy(1, events.Allow, "")
			b := endWith(1, "ok")
			return h.next(events.RunFailed, events.EndBody{Reason: events.ReasonInternalError, Result: "ok", Observation: b.Observation})
		}},
		{"completion for another reason carrying a result", func(h *history) events.Event {
			h.decide(1, "done", `{}`)
			h.policy(1, events.Allow, "")
			b := endWith(1, "ok")
			b.Reason = events.ReasonStepLimit
			return h.next(events.RunFinished, b)
		}},
		{"seq gap", func(h *history) events.Event {
			e := h.next(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read"})
			e.Seq++
			return e
		}},
		{"seq repeated", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			e := h.next(events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult})
			e.Seq--
			return e
		}},
		{"wrong run", func(h *history) events.Event {
			e := h.next(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read"})
			e.Run = "r2"
			return e
		}},
		{"after the end", func(h *history) events.Event {
			h.add(events.RunFinished, events.EndBody{Reason: events.ReasonCompleted})
			return h.next(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read"})
		}},
		{"end after the end", func(h *history) events.Event {
			h.add(events.RunCancelled, events.EndBody{Reason: events.ReasonCancelled})
			return h.next(events.RunFailed, events.EndBody{Reason: events.ReasonInternalError})
		}},
		{"expiry after the end", func(h *history) events.Event {
			h.decide(1, "write", `{}`)
			h.request(1, "a1")
			h.add(events.RunCancelled, events.EndBody{Reason: events.ReasonCancelled})
			return h.next(events.ApprovalExpired, events.ExpiredBody{Approval: "a1"})
		}},
		{"decided skips a step", func(h *history) events.Event {
			return h.next(events.StepDecided, events.StepDecidedBody{Step: 2, Tool: "read"})
		}},
		{"decided twice", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			h.observe(1, events.ObsResult, "ok")
			return h.next(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read"})
		}},
		{"decided before the last step is observed", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			h.policy(1, events.Allow, "")
			return h.next(events.StepDecided, events.StepDecidedBody{Step: 2, Tool: "read"})
		}},
		{"policy for unknown step", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			return h.next(events.StepPolicy, events.PolicyBody{Step: 2, Outcome: events.Allow})
		}},
		{"policy for step 0", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			return h.next(events.StepPolicy, events.PolicyBody{Step: 0, Outcome: events.Allow})
		}},
		{"policy for observed step", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			h.policy(1, events.Deny, "no")
			return h.next(events.StepPolicy, events.PolicyBody{Step: 1, Outcome: events.Allow})
		}},
		{"policy with require_approval outcome", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			return h.next(events.StepPolicy, events.PolicyBody{Step: 1, Outcome: events.RequireApproval, Approval: approvalRequest("a1", "k")})
		}},
		{"policy with unknown outcome", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			return h.next(events.StepPolicy, events.PolicyBody{Step: 1, Outcome: "maybe"})
		}},
		{"approval request without approval", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			return h.next(events.ApprovalRequested, events.PolicyBody{Step: 1, Outcome: events.RequireApproval})
		}},
		{"approval request with allow outcome", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			return h.next(events.ApprovalRequested, events.PolicyBody{Step: 1, Outcome: events.Allow, Approval: approvalRequest("a1", "k")})
		}},
		{"approval requested twice", func(h *history) events.Event {
			h.decide(1, "write", `{}`)
			h.request(1, "a1")
			return h.next(events.ApprovalRequested, events.PolicyBody{Step: 1, Outcome: events.RequireApproval, Approval: approvalRequest("a1", "k")})
		}},
		{"observed unknown step", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			return h.next(events.StepObserved, events.ObservedBody{Step: 7, Kind: events.ObsResult})
		}},
		{"observed twice", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			h.observe(1, events.ObsResult, "ok")
			return h.next(events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult})
		}},
		{"expiry of unknown approval", func(h *history) events.Event {
			return h.next(events.ApprovalExpired, events.ExpiredBody{Approval: "nope"})
		}},
		{"interrupted unknown step", func(h *history) events.Event {
			return h.next(events.StepInterrupted, events.InterruptedBody{Step: 1, Resolution: events.ResolvedRerun})
		}},
		{"unknown kind", func(h *history) events.Event {
			e := h.next(events.StepObserved, events.ObservedBody{Step: 1})
			e.Kind = "step.exploded"
			return e
		}},
		{"malformed body", func(h *history) events.Event {
			h.decide(1, "read", `{}`)
			e := h.next(events.StepObserved, events.ObservedBody{})
			e.Body = json.RawMessage(`{"step":"one"}`)
			return e
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := started(t, "r1")
			bad := tc.bad(h)
			v := h.fold()
			before := h.fold()
			err := v.Apply(bad)
			if !errors.Is(err, projector.ErrFold) {
				t.Fatalf("got %v, want ErrFold", err)
			}
			if !reflect.DeepEqual(v, before) {
				t.Errorf("view changed by a refused event:\n got %+v\nwant %+v", v, before)
			}
		})
	}
}

func TestFold_MalformedBodyIsAlsoErrMalformed(t *testing.T) {
	h := started(t, "r1")
	e := h.next(events.StepDecided, events.StepDecidedBody{})
	e.Body = json.RawMessage(`[1,2]`)
	_, err := projector.Fold(append(h.evs, e)...)
	if !errors.Is(err, projector.ErrFold) || !errors.Is(err, events.ErrMalformed) {
		t.Errorf("got %v, want both ErrFold and events.ErrMalformed", err)
	}
}

func TestFold_FirstEventMustBeRunCreated(t *testing.T) {
	h := &history{t: t, run: "r1"}
	for _, e := range []events.Event{
		h.next(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read"}),
		h.next(events.ApprovalGranted, events.DecisionBody{Approval: "a1"}),
		h.next(events.RunFinished, events.EndBody{Reason: events.ReasonCompleted}),
	} {
		var v projector.View
		if err := v.Apply(e); !errors.Is(err, projector.ErrFold) {
			t.Errorf("%s as first event: got %v, want ErrFold", e.Kind, err)
		}
		if !reflect.DeepEqual(v, projector.View{}) {
			t.Errorf("%s as first event changed the empty view: %+v", e.Kind, v)
		}
	}
	created := h.next(events.RunCreated, events.RunCreatedBody{})
	created.Seq = 2
	if _, err := projector.Fold(created); !errors.Is(err, projector.ErrFold) {
		t.Errorf("run.created at position 2: got %v, want ErrFold", err)
	}
}

// TestFold_SecondRunCreatedIsRefused: a run starts once. A run.created in the
// middle of a run would reset the run row (status, counters, step count)
// under steps that stay in place.
func TestFold_SecondRunCreatedIsRefused(t *testing.T) {
	h := started(t, "r1")
	h.decide(1, "write", `{}`)
	h.request(1, "a1")
	v := h.fold()
	before := h.fold()
	err := v.Apply(h.next(events.RunCreated, events.RunCreatedBody{}))
	if !errors.Is(err, projector.ErrFold) {
		t.Errorf("second run.created: got %v, want ErrFold", err)
	}
	if !reflect.DeepEqual(v, before) {
		t.Errorf("view changed: got status %s steps %d (%d step rows), want status %s steps %d",
			v.Run.Status, v.Run.Steps, v.Steps.Len(), before.Run.Status, before.Run.Steps)
	}
}

// TestFold_StoredEventFoldsLikeWritten: a writer folds the event it appended;
// every other worker folds the bytes the log stored. Both views must be the
// same, raw JSON included (PolicyJSON is not HTML-escaped).
func TestFold_StoredEventFoldsLikeWritten(t *testing.T) {
	h := started(t, "r1")
	h.decide(1, "exec", `{"cmd":"make && echo <done>"}`)
	h.add(events.ApprovalRequested, events.PolicyBody{
		Step: 1, Outcome: events.RequireApproval, Args: json.RawMessage(`{"cmd":"make && echo <done>"}`),
		Approval: &events.ApprovalRequest{ID: "a1", Kind: "shell", Capability: json.RawMessage(`{"cmd":"make && echo <done>"}`),
			Presentation: json.RawMessage("{\"text\":\"run make \u2028 then echo\"}"), Hash: "h"},
	})
	written := h.fold()
	stored := make([]events.Event, len(h.evs))
	for i, e := range h.evs {
		data, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if stored[i], err = events.Decode(data); err != nil {
			t.Fatal(err)
		}
	}
	read, err := projector.Fold(stored...)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(read.Step(1).Policy.Args), string(written.Step(1).Policy.Args); got != want {
		t.Errorf("policy args: got %s from the stored event, want %s as written", got, want)
	}
	if got, want := string(read.Approval("a1").Presentation), string(written.Approval("a1").Presentation); got != want {
		t.Errorf("approval presentation: got %q from the stored event, want %q as written", got, want)
	}
	if !reflect.DeepEqual(read, written) {
		t.Error("view folded from the stored events differs from the view of the written events")
	}
}

func TestFold_RepeatedRequestAndResultCountsRepeats(t *testing.T) {
	h := started(t, "r1")
	for n := 1; n <= 3; n++ {
		h.decide(n, "read", `{"path":"a.txt"}`)
		h.policy(n, events.Allow, "")
		h.observe(n, events.ObsResult, "same content")
		if got := h.fold().Run.Repeats; got != n {
			t.Errorf("after %d identical steps: got Repeats %d, want %d", n, got, n)
		}
	}
	fp := h.fold().Run.Fingerprint
	// Same request, another result: a new streak.
	h.decide(4, "read", `{"path":"a.txt"}`)
	h.policy(4, events.Allow, "")
	h.observe(4, events.ObsResult, "new content")
	v := h.fold()
	if v.Run.Repeats != 1 || v.Run.Fingerprint == fp {
		t.Errorf("after a different result: got Repeats %d fingerprint %x (was %x), want 1 and a new fingerprint", v.Run.Repeats, v.Run.Fingerprint, fp)
	}
	// Other arguments, same result: a new streak too.
	h.decide(5, "read", `{"path":"b.txt"}`)
	h.policy(5, events.Allow, "")
	h.observe(5, events.ObsResult, "new content")
	if got := h.fold().Run.Repeats; got != 1 {
		t.Errorf("after other arguments: got Repeats %d, want 1", got)
	}
	// Denials repeat as well: the denied observation is the result.
	for n := 6; n <= 7; n++ {
		h.decide(n, "write", `{"path":"/etc"}`)
		h.policy(n, events.Deny, "outside")
	}
	if got := h.fold().Run.Repeats; got != 2 {
		t.Errorf("after two identical denials: got Repeats %d, want 2", got)
	}
}

func TestFold_InterruptedResolutions(t *testing.T) {
	obs := &events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "it was written"}
	for _, tc := range []struct {
		name      string
		body      events.InterruptedBody
		executing bool
		observed  bool
		policy    bool
	}{
		{"reconciled done", events.InterruptedBody{Step: 1, Resolution: events.ResolvedDone, Observation: obs}, false, true, true},
		{"reconciled not done", events.InterruptedBody{Step: 1, Resolution: events.ResolvedNotDone}, false, false, false},
		{"rerun read only", events.InterruptedBody{Step: 1, Resolution: events.ResolvedRerun}, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := started(t, "r1")
			h.decide(1, "write", `{"path":"out.txt"}`)
			h.policy(1, events.Allow, "")
			h.add(events.StepInterrupted, tc.body)
			v := h.fold()
			s := v.Step(1)
			if s.Interrupted == nil || s.Interrupted.Resolution != tc.body.Resolution {
				t.Fatalf("interrupted: got %+v, want resolution %q", s.Interrupted, tc.body.Resolution)
			}
			if s.Executing() != tc.executing || (s.Observation != nil) != tc.observed || (s.Policy != nil) != tc.policy {
				t.Errorf("step: got executing %v observed %v policy %v, want %v %v %v",
					s.Executing(), s.Observation != nil, s.Policy != nil, tc.executing, tc.observed, tc.policy)
			}
			if tc.observed && (s.Observation.Content != obs.Content || v.Run.FailuresInRow != 0 || v.Run.Repeats != 1) {
				t.Errorf("reconciled observation: got %+v failures %d repeats %d", s.Observation, v.Run.FailuresInRow, v.Run.Repeats)
			}
			if tc.name == "reconciled not done" {
				// The step is evaluated again: here it pauses on an approval.
				h.add(events.ApprovalRequested, events.PolicyBody{
					Step: 1, Outcome: events.RequireApproval, Origin: events.OriginRecovery,
					Approval: approvalRequest("rec-1", "interrupted_side_effect"),
				})
				v := h.fold()
				if v.Step(1).Evaluations != 2 || v.Run.Status != projector.Waiting || v.Run.Reason != "interrupted_side_effect" {
					t.Errorf("re-evaluated: got evaluations %d status %s %q", v.Step(1).Evaluations, v.Run.Status, v.Run.Reason)
				}
			}
			if tc.name == "rerun read only" {
				h.observe(1, events.ObsResult, "read again")
				if v := h.fold(); v.Step(1).Observation == nil {
					t.Error("rerun step: no observation folded")
				}
			}
		})
	}
}

func TestFold_InterruptedRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(h *history)
		body    events.InterruptedBody
	}{
		{"not allowed", func(h *history) {}, events.InterruptedBody{Step: 1, Resolution: events.ResolvedRerun}},
		{"denied", func(h *history) { h.policy(1, events.Deny, "no") }, events.InterruptedBody{Step: 1, Resolution: events.ResolvedRerun}},
		{"waiting", func(h *history) { h.request(1, "a1") }, events.InterruptedBody{Step: 1, Resolution: events.ResolvedRerun}},
		{"done with no observation", func(h *history) { h.policy(1, events.Allow, "") }, events.InterruptedBody{Step: 1, Resolution: events.ResolvedDone}},
		{"unknown resolution", func(h *history) { h.policy(1, events.Allow, "") }, events.InterruptedBody{Step: 1, Resolution: "shrug"}},
		{"already resolved not done", func(h *history) {
			h.policy(1, events.Allow, "")
			h.add(events.StepInterrupted, events.InterruptedBody{Step: 1, Resolution: events.ResolvedNotDone})
		}, events.InterruptedBody{Step: 1, Resolution: events.ResolvedNotDone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := started(t, "r1")
			h.decide(1, "write", `{}`)
			tc.prepare(h)
			v := h.fold()
			before := h.fold()
			if err := v.Apply(h.next(events.StepInterrupted, tc.body)); !errors.Is(err, projector.ErrFold) {
				t.Fatalf("got %v, want ErrFold", err)
			}
			if !reflect.DeepEqual(v, before) {
				t.Errorf("view changed by a refused event:\n got %+v\nwant %+v", v, before)
			}
		})
	}
}

func TestFold_RunToolsReplacesToolSet(t *testing.T) {
	h := started(t, "r1")
	h.add(events.RunTools, events.RunToolsBody{Tools: []events.ToolSpec{{Name: "search", Schema: json.RawMessage(`{}`), SideEffect: events.ReadOnly}}})
	v := h.fold()
	if len(v.Run.Tools) != 1 || v.Run.Tools[0].Name != "search" {
		t.Errorf("tools: got %+v, want just search", v.Run.Tools)
	}
}

// richHistory reaches every pointer, slice and raw JSON value a view holds.
func richHistory(t rapid.TB) *history {
	t.Helper()
	h := started(t, "rich")
	h.add(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "write", ArgsBytes: []byte{0xff, 'a', 0xfe}, Reason: "binary"})
	exp := base.Add(time.Hour)
	req := approvalRequest("a1", "remote_write")
	req.ExpiresAt = &exp
	h.add(events.ApprovalRequested, events.PolicyBody{
		Step: 1, Outcome: events.RequireApproval, PolicyID: "p1",
		Args: json.RawMessage(`{"path":"out.txt"}`), ToolHash: "h-write", Approval: req,
	})
	h.add(events.ApprovalRefused, events.RefusedBody{Approval: "a1", Intake: 1, Reason: "unknown key"})
	h.grant("a1")
	h.add(events.StepPolicy, events.PolicyBody{Step: 1, Outcome: events.Allow, Args: json.RawMessage(`{"path":"out.txt"}`), Consumes: "a1"})
	h.add(events.StepInterrupted, events.InterruptedBody{Step: 1, Resolution: events.ResolvedDone,
		Observation: &events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "written"}})
	h.decide(2, "write", `{"path":"b.txt"}`)
	req2 := approvalRequest("a2", "remote_write")
	exp2 := base.Add(2 * time.Hour)
	req2.ExpiresAt = &exp2
	h.add(events.ApprovalRequested, events.PolicyBody{
		Step: 2, Outcome: events.RequireApproval, Args: json.RawMessage(`{"path":"b.txt"}`), Approval: req2,
	})
	return h
}

func TestView_CloneIsDeep(t *testing.T) {
	h := richHistory(t)
	v := h.fold()
	want := h.fold()
	if len(v.Refusals) == 0 || v.Step(1).Interrupted == nil || v.Approval("a2").ExpiresAt == nil {
		t.Fatalf("rich history does not reach every part of a view: %+v", v)
	}
	c := v.Clone()
	if !reflect.DeepEqual(c, v) {
		t.Fatalf("clone differs from the original:\n got %+v\nwant %+v", c, v)
	}

	c.Run.Input[0] = 'X'
	c.Run.Tools[0].Schema[0] = 'X'
	c.Run.Tools[0].Name = "changed"
	c.Run.Tools = append(c.Run.Tools[:1], events.ToolSpec{Name: "new"})
	c.Run.Status, c.Run.Steps, c.Run.Events = projector.Failed, 99, 99
	steps := c.Steps.Slice()
	for i := range steps {
		s := &steps[i]
		s.Decision.Tool = "changed"
		if len(s.Decision.ArgsBytes) > 0 {
			s.Decision.ArgsBytes[0] = 'X'
		}
		s.Policy.Reason = "changed"
		s.Policy.Args[0] = 'X'
		if s.Policy.Approval != nil {
			s.Policy.Approval.Capability[0] = 'X'
			s.Policy.Approval.Presentation[0] = 'X'
			s.Policy.Approval.ID = "changed"
			*s.Policy.Approval.ExpiresAt = time.Time{}
		}
		if s.Observation != nil {
			s.Observation.Content = "changed"
		}
		if s.Interrupted != nil {
			s.Interrupted.Resolution = "changed"
			s.Interrupted.Observation.Content = "changed"
		}
	}
	c.Steps = projector.StepsOf(append(steps, projector.Step{N: 3})...)
	for i := range c.Approvals {
		a := &c.Approvals[i]
		a.State = projector.Expired
		a.Capability[0] = 'X'
		a.Presentation[0] = 'X'
		if a.ExpiresAt != nil {
			*a.ExpiresAt = time.Time{}
		}
		if a.Decision != nil {
			a.Decision.Operator = "changed"
		}
	}
	c.Approvals = append(c.Approvals, projector.Approval{State: projector.Pending})
	for i := range c.Refusals {
		c.Refusals[i].Reason = "changed"
	}
	c.Refusals = append(c.Refusals, events.RefusedBody{Reason: "new"})

	if !reflect.DeepEqual(v, want) {
		t.Errorf("changing the clone changed the original:\n got %+v\nwant %+v", v, want)
	}
}

func TestView_CloneOfZeroView(t *testing.T) {
	var v projector.View
	if c := v.Clone(); !reflect.DeepEqual(c, v) {
		t.Errorf("clone of zero view: got %+v, want zero", c)
	}
}

// TestFold_DecisionCarryingItsResultFoldsLikeThePair: a decision recorded
// with its policy result (ADR 0017) folds to the view the decision and a
// step.policy event with the same result fold to, for every outcome it may
// carry, and the step keeps the result as its Policy, not in its Decision.
func TestFold_DecisionCarryingItsResultFoldsLikeThePair(t *testing.T) {
	for _, outcome := range []events.Outcome{events.Allow, events.Deny, events.Abort} {
		t.Run(string(outcome), func(t *testing.T) {
			pb := events.PolicyBody{Step: 1, Outcome: outcome, Reason: "because", PolicyID: "p1", ToolHash: "h-write", Args: json.RawMessage(`{"n":1}`)}
			pair := started(t, "r1")
			pair.add(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "write", Args: `{"n":1}`, CallID: "c1"})
			pair.add(events.StepPolicy, pb)
			one := started(t, "r1")
			one.add(events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "write", Args: `{"n":1}`, CallID: "c1", Policy: &pb})
			pv, ov := pair.fold(), one.fold()
			ps, os := pv.Step(1), ov.Step(1)
			if os.Decision.Policy != nil {
				t.Errorf("the step's decision keeps the result: %+v", os.Decision.Policy)
			}
			if !reflect.DeepEqual(os.Policy, ps.Policy) || !reflect.DeepEqual(os.Observation, ps.Observation) || os.Evaluations != ps.Evaluations {
				t.Errorf("step: got policy %+v observation %+v evaluations %d, want %+v %+v %d", os.Policy, os.Observation, os.Evaluations, ps.Policy, ps.Observation, ps.Evaluations)
			}
			if ov.Run.Status != pv.Run.Status || ov.Run.Reason != pv.Run.Reason || ov.Run.FailuresInRow != pv.Run.FailuresInRow || ov.Run.Steps != pv.Run.Steps {
				t.Errorf("run: got %+v, want %+v", ov.Run, pv.Run)
			}
			if ov.Run.Events != 2 || pv.Run.Events != 3 {
				t.Errorf("events folded: got %d and %d, want 2 and 3", ov.Run.Events, pv.Run.Events)
			}
		})
	}
}

// endWith is a completion carrying step n's terminal result content.
func endWith(n int, content string) events.EndBody {
	return events.EndBody{Reason: events.ReasonCompleted, Result: content, Observation: &events.ObservedBody{Step: n, Kind: events.ObsResult, Content: content}}
}

// TestFold_EndCarryingTheResultFoldsLikeThePair: a completion that carries
// its terminal tool's result (ADR 0017) folds to the view the observation
// and a plain completion fold to, with one event fewer.
func TestFold_EndCarryingTheResultFoldsLikeThePair(t *testing.T) {
	for _, grant := range []bool{false, true} {
		t.Run(fmt.Sprintf("granted=%v", grant), func(t *testing.T) {
			build := func(end ...func(h *history)) projector.View {
				h := started(t, "r1")
				h.decide(1, "read", `{}`)
				h.policy(1, events.Allow, "")
				h.observe(1, events.ObsResult, "a")
				h.decide(2, "done", `{"n":2}`)
				if grant {
					h.request(2, "a1")
					h.grant("a1")
					h.consume(2, "a1")
				} else {
					h.policy(2, events.Allow, "")
				}
				for _, f := range end {
					f(h)
				}
				return h.fold()
			}
			pair := build(func(h *history) {
				h.observe(2, events.ObsResult, "the answer")
				h.add(events.RunFinished, events.EndBody{Reason: events.ReasonCompleted, Result: "the answer"})
			})
			one := build(func(h *history) { h.add(events.RunFinished, endWith(2, "the answer")) })
			if one.Run.Events != pair.Run.Events-1 {
				t.Errorf("events folded: got %d, want %d", one.Run.Events, pair.Run.Events-1)
			}
			one.Run.Events, one.Run.Updated = pair.Run.Events, pair.Run.Updated
			if !reflect.DeepEqual(one.Run, pair.Run) {
				t.Errorf("run: got %+v, want %+v", one.Run, pair.Run)
			}
			if o, p := one.Step(2), pair.Step(2); !reflect.DeepEqual(o, p) {
				t.Errorf("step 2: got %+v, want %+v", o, p)
			}
			if !reflect.DeepEqual(one.Approvals, pair.Approvals) {
				t.Errorf("approvals: got %+v, want %+v", one.Approvals, pair.Approvals)
			}
		})
	}
}

// TestView_SummaryAndDecisionAgreeWithStep holds the three cheap readers
// to what View.Step says of every step of a rich history, and the
// decision's and observation's copies to sharing nothing with the view.
func TestView_SummaryAndDecisionAgreeWithStep(t *testing.T) {
	h := richHistory(t)
	v := h.fold()
	want := h.fold()
	for n := 0; n <= v.Steps.Len()+1; n++ {
		s := v.Step(n)
		sum, ok := v.Summary(n)
		dec, dok := v.Decision(n)
		if (s != nil) != ok || ok != dok {
			t.Fatalf("step %d: Step %v, Summary %v, Decision %v", n, s != nil, ok, dok)
		}
		obs := v.Observation(n)
		if s == nil {
			if obs != nil {
				t.Errorf("step %d: no step, observation %+v", n, obs)
			}
			continue
		}
		if !reflect.DeepEqual(obs, s.Observation) {
			t.Errorf("step %d: observation %+v, want %+v", n, obs, s.Observation)
		}
		if obs != nil {
			obs.Content, obs.Kind = "changed", "changed"
		}
		wantSum := projector.StepSummary{N: s.N, Tool: s.Decision.Tool, Executing: s.Executing()}
		if s.Observation != nil {
			wantSum.Observation = s.Observation.Kind
		}
		if sum != wantSum {
			t.Errorf("step %d: summary %+v, want %+v", n, sum, wantSum)
		}
		if !reflect.DeepEqual(dec, s.Decision) {
			t.Errorf("step %d: decision %+v, want %+v", n, dec, s.Decision)
		}
		if len(dec.ArgsBytes) > 0 {
			dec.ArgsBytes[0] ^= 0xff
		}
		if dec.Oversize != nil {
			dec.Oversize.Bytes = -1
		}
	}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("changing a decision's copy changed the view")
	}
}

// TestView_CloneToolsDoNotShareRoom: a clone's tool specs share one
// allocation for their schemas and one for their name lists; appending to
// one of them must not write into the next.
func TestView_CloneToolsDoNotShareRoom(t *testing.T) {
	v := projector.View{Run: projector.Run{Tools: []events.ToolSpec{
		{Name: "a", Schema: json.RawMessage(`{"a":1}`), Data: []string{"d1"}, Tags: []string{"t1"}},
		{Name: "b", Schema: json.RawMessage(`{"b":2}`), Data: []string{"d2"}, Tags: []string{}},
	}}}
	want := v.Clone()
	c := v.Clone()
	_ = append(c.Run.Tools[0].Schema, 'X')
	_ = append(c.Run.Tools[0].Data, "X")
	_ = append(c.Run.Tools[0].Tags, "X")
	_ = append(c.Run.Tools[1].Data, "X")
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("appending to one spec's slices changed another's:\n got %+v\nwant %+v", c.Run.Tools, want.Run.Tools)
	}
	if c.Run.Tools[1].Tags == nil {
		t.Fatal("an empty tag list came back nil")
	}
}
