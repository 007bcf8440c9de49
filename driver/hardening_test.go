package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// twiceGranted drives a run that sends twice with the same arguments: the
// first send is granted and runs, the second waits on its own approval,
// which has the same hash (same request). It returns the run waiting.
func twiceGranted(t *testing.T) (paused, projector.Approval, projector.Approval) {
	t.Helper()
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	send := testkit.NewLedger("send", events.RemoteMutation, toSchema)
	kp, ops := operator(t)
	d := newDriverCfg(t, driver.Config{Log: log, Policy: policy.DefaultSideEffects(), Tools: []driver.Tool{send, done()}, Operators: ops})
	r := create(t, d, "twice")
	agent := testkit.NewScript(testkit.Call("send", `{"to":"ops"}`), testkit.Call("send", `{"to":"ops"}`), testkit.Call("done", `{}`))
	drive(t, d, r, agent)
	first := grant(t, d, r, kp)
	drive(t, d, r, agent)
	wantCount(t, send, 1)
	second := pending(t, r)
	if second.Hash != first.Hash || second.ID == first.ID {
		t.Fatalf("second approval %s hash %.12s, first %s hash %.12s: want a new approval with the same hash", second.ID, second.Hash, first.ID, first.Hash)
	}
	return paused{log: log, d: d, r: r, send: send, kp: kp, agent: agent}, approvalOf(t, r, first.ID), second
}

// TestSnapshot_ForgedGrantNeverResumes: a snapshot whose tail is the log's
// own but whose view says the second approval was granted, with the first
// (consumed) grant's signed decision copied onto it, or rewinds the intake
// so the consumed grant is read again, makes a worker that loads it fold
// the run from its events before it settles anything: the second send
// never runs on the first grant (issue 10, item 3).
func TestSnapshot_ForgedGrantNeverResumes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		forge func(v *projector.View, first, second projector.Approval)
	}{
		{"grant copied onto the pending approval", func(v *projector.View, first, second projector.Approval) {
			a := v.Approval(second.ID)
			a.ID, a.State, a.Decision, a.DecisionEvent = first.ID, projector.Granted, first.Decision, first.DecisionEvent
		}},
		{"intake rewound to read the consumed grant again", func(v *projector.View, first, second projector.Approval) {
			a := v.Approval(second.ID)
			a.ID = first.ID
			v.Approval(first.ID).ID = "elsewhere"
			v.Intake = 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, first, second := twiceGranted(t)
			forged := p.r.View()
			tc.forge(&forged, first, second)
			r, err := p.d.LoadFrom(t.Context(), p.r.ID(), forged, p.r.Tail())
			if err != nil {
				t.Fatalf("load from the forged snapshot: %v", err)
			}
			// Events appended after the snapshot and folded on top of it
			// do not make it trusted (a refused decision, here).
			appendEvent(t, p.log, p.r.ID(), events.ApprovalRefused, events.RefusedBody{Approval: second.ID, Intake: 1 << 30, Reason: "test"})
			if err := p.d.Refresh(t.Context(), r); err != nil {
				t.Fatal(err)
			}
			drive(t, p.d, r, p.agent)
			wantCount(t, p.send, 1)
			v := r.View()
			wantEnd(t, v, projector.Waiting, events.RemoteMutation)
			if a := v.PendingApproval(); a == nil || a.ID != second.ID || a.State != projector.Pending {
				t.Errorf("after driving the forged snapshot: pending %+v, want %s pending", a, second.ID)
			}
			if got := len(ofKind(records(t, p.log, r.ID()), events.ApprovalGranted)); got != 1 {
				t.Errorf("approval.granted events: got %d, want the first grant only", got)
			}
		})
	}
}

// TestSnapshot_ForgedInterruptedCallNeverRuns: a snapshot that claims the
// last step of a finished read was allowed and never observed, with
// arguments the tool's schema forbids, does not make a worker run the tool
// again: the run is folded from its events first, which say the step was
// observed (issue 10, item 3).
func TestSnapshot_ForgedInterruptedCallNeverRuns(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read", events.ReadOnly, `{"type":"object","properties":{"path":{"type":"string","maxLength":8}},"required":["path"],"additionalProperties":false}`)
	d := newDriver(t, log, policy.DefaultSideEffects(), read, done())
	r := create(t, d, "read-once")
	// Read once, then stop the drive where the agent is asked again.
	ctx, cancel := context.WithCancel(t.Context())
	asked := 0
	once := driver.AgentFunc(func(ctx context.Context, _ driver.StepInput) (driver.Action, error) {
		if asked++; asked == 1 {
			return testkit.Call("read", `{"path":"a.txt"}`), nil
		}
		cancel()
		return driver.Action{}, ctx.Err()
	})
	if err := d.Drive(ctx, r, once); !errors.Is(err, context.Canceled) {
		t.Fatalf("drive: %v", err)
	}
	wantCount(t, read, 1)

	forged := r.View()
	steps := forged.Steps.Slice()
	last := &steps[len(steps)-1]
	last.Observation = nil
	last.Policy.Args = json.RawMessage(`{"path":"/etc/shadow-and-more","x":1}`)
	forged.Steps = projector.StepsOf(steps...)
	lr, err := d.LoadFrom(t.Context(), r.ID(), forged, r.Tail())
	if err != nil {
		t.Fatalf("load from the forged snapshot: %v", err)
	}
	drive(t, d, lr, testkit.NewScript(testkit.Call("read", `{"path":"a.txt"}`), testkit.Call("done", `{}`)))
	wantCount(t, read, 1)
	for _, c := range read.Calls() {
		if string(c) != `{"path":"a.txt"}` {
			t.Errorf("read ran with %s", c)
		}
	}
	if got := len(ofKind(records(t, log, r.ID()), events.StepInterrupted)); got != 0 {
		t.Errorf("step.interrupted events: got %d, want 0 (nothing was interrupted)", got)
	}
	wantEnd(t, lr.View(), projector.Completed, events.ReasonCompleted)
}

// TestRecover_ArgumentsOnlyTheDecisionsRechecked: a write-ahead allow
// whose arguments are not the recorded decision's (not a record a driver
// writes) or a decision the tool's schema now refuses is never recovered
// by running the tool: the run fails closed, the reason recorded (issue
// 10, item 3).
func TestRecover_ArgumentsOnlyTheDecisionsRechecked(t *testing.T) {
	for _, tc := range []struct {
		name, decided, allowed, want string
	}{
		{"allow of other arguments", `{"path":"a.txt"}`, `{"path":"/etc/passwd"}`, "not the recorded decision's"},
		{"decision the schema refuses", `{"path":"a-name-far-too-long.txt"}`, `{"path":"a-name-far-too-long.txt"}`, "no longer passes the tool's schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testkit.JetStream(t)
			log := env.Log(t, events.Config{})
			read := testkit.NewLedger("read", events.ReadOnly, `{"type":"object","properties":{"path":{"type":"string","maxLength":8}},"required":["path"]}`)
			d := newDriver(t, log, policy.DefaultSideEffects(), read, done())
			appendEvent(t, log, "crashed", events.RunCreated, events.RunCreatedBody{Tools: d.Tools(), Limits: driver.DefaultLimits, Agent: "test"})
			appendEvent(t, log, "crashed", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read", Args: tc.decided})
			appendEvent(t, log, "crashed", events.StepPolicy, events.PolicyBody{
				Step: 1, Outcome: events.Allow, PolicyID: "side-effects", Args: json.RawMessage(tc.allowed), ToolHash: spec(t, d, "read").Hash,
			})
			r := interrupted(t, d, "crashed")
			drive(t, d, r, testkit.NewScript(testkit.Call("done", `{}`)))
			wantCount(t, read, 0)
			v := r.View()
			wantEnd(t, v, projector.Failed, events.ReasonInternalError)
			if !strings.Contains(v.Run.Detail, tc.want) {
				t.Errorf("detail %q, want it to say %q", v.Run.Detail, tc.want)
			}
		})
	}
}

// TestDriver_CaseFoldedKeysNeverReachTheTool: arguments whose keys differ
// but fold together under encoding/json's matching ("dest" and "deſt")
// are refused at the boundary as an invalid decision: the schema and the
// policy would judge one key, a tool decoding into a struct would use the
// other (issue 10, item 4).
func TestDriver_CaseFoldedKeysNeverReachTheTool(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	pay := testkit.NewLedger("pay", events.LocalMutation, `{"type":"object","properties":{"dest":{"type":"string"}},"required":["dest"]}`)
	d := newDriver(t, log, policy.DefaultSideEffects(), pay, done())
	r := create(t, d, "folded")
	drive(t, d, r, testkit.NewScript(
		testkit.Call("pay", `{"dest":"acct-ops","deſt":"acct-mallory"}`),
		testkit.Call("pay", `{"dest":"acct-ops","DEST":"acct-mallory"}`),
		testkit.Call("done", `{}`)))
	wantCount(t, pay, 0)
	v := r.View()
	for n := 1; n <= 2; n++ {
		s := v.Step(n)
		if s == nil || s.Observation == nil || s.Observation.Kind != events.ObsInvalidDecision || !strings.Contains(s.Observation.Content, "case folding") {
			t.Errorf("step %d: %+v, want an invalid_decision naming the case folding", n, s)
		}
	}
}

// TestDriver_PanickingPolicyFailsTheRun: a policy that panics fails its
// run as internal_error with the panic recorded; Drive returns normally
// and nothing runs (issue 10, item 9).
func TestDriver_PanickingPolicyFailsTheRun(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	send := testkit.NewLedger("send", events.RemoteMutation, toSchema)
	boom := policyFunc(func(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
		var m map[string]int
		m["x"]++ // a nil map write: a runtime panic, not a call to panic
		return policy.Ruling{Outcome: events.Allow}, nil
	})
	d := newDriver(t, log, boom, send)
	r := create(t, d, "boom")
	drive(t, d, r, testkit.NewScript(testkit.Call("send", `{"to":"ops"}`)))
	wantCount(t, send, 0)
	v := r.View()
	wantEnd(t, v, projector.Failed, events.ReasonInternalError)
	if !strings.Contains(v.Run.Detail, "panicked") || !errors.Is(policy.Ask(t.Context(), boom, policy.Request{}, projector.View{}).Err, policy.ErrNoVerdict) {
		t.Errorf("detail %q, want the panic", v.Run.Detail)
	}
}

// TestResume_DecisionTimesJudgedOnReceipt: a grant signed before its
// request existed, or dated a century ahead on an approval without a TTL,
// is refused and recorded, and never acted on (issue 10, item 5; the
// backdated grant received after the expiry is in
// TestResume_ExpiredApprovalCancelsRun).
func TestResume_DecisionTimesJudgedOnReceipt(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func(a projector.Approval) time.Time
		want error
	}{
		{"signed before the request", func(a projector.Approval) time.Time { return a.Requested.Add(-time.Hour) }, approvals.ErrSignedBeforeRequest},
		{"dated 100 years ahead", func(a projector.Approval) time.Time { return a.Requested.AddDate(100, 0, 0) }, approvals.ErrSignedAfterReceipt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pauseOnSend(t, driver.Config{}, `{"to":"ops"}`)
			a := pending(t, p.r)
			publish(t, p.d, p.r, sign(t, p.kp, p.r.ID(), a, events.DecisionGrant, tc.at(a)))
			drive(t, p.d, p.r, p.agent)
			wantCount(t, p.send, 0)
			wantEnd(t, p.r.View(), projector.Waiting, events.RemoteMutation)
			refused := ofKind(records(t, p.log, p.r.ID()), events.ApprovalRefused)
			if len(refused) != 1 || !strings.Contains(body[events.RefusedBody](t, refused[0]).Reason, tc.want.Error()) {
				t.Fatalf("refusals %d, want one naming %q", len(refused), tc.want)
			}
		})
	}
}

// TestResume_DenialStoredAsGrantNeverRuns: a signed denial stored on the
// run under approval.granted (which only a worker's NATS user can write
// now) does not fold: the run is never driven again, and the call never
// runs (issue 10, item 2).
func TestResume_DenialStoredAsGrantNeverRuns(t *testing.T) {
	p := pauseOnSend(t, driver.Config{}, `{"to":"ops"}`)
	a := pending(t, p.r)
	denial := sign(t, p.kp, p.r.ID(), a, events.DecisionDeny, time.Now())
	denial.Received, denial.Intake = time.Now(), 1
	appendEvent(t, p.log, p.r.ID(), events.ApprovalGranted, denial)
	if _, err := p.d.Load(t.Context(), p.r.ID()); !errors.Is(err, projector.ErrFold) {
		t.Fatalf("load after a denial stored as a grant: got %v, want ErrFold", err)
	}
	if err := p.d.Refresh(t.Context(), p.r); !errors.Is(err, projector.ErrFold) {
		t.Fatalf("refresh after a denial stored as a grant: got %v, want ErrFold", err)
	}
	wantCount(t, p.send, 0)
}

// TestDriver_PanickingAgentFailsTheRun: an agent that panics (a parser
// choking on what a model returned, say) fails its run as agent_error;
// Drive returns normally.
func TestDriver_PanickingAgentFailsTheRun(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	d := newDriver(t, log, policy.DefaultSideEffects(), done())
	r := create(t, d, "agent-boom")
	drive(t, d, r, driver.AgentFunc(func(context.Context, driver.StepInput) (driver.Action, error) {
		var in []int
		_ = in[3] // an index out of range: a runtime panic
		return driver.Action{}, nil
	}))
	v := r.View()
	wantEnd(t, v, projector.Failed, events.ReasonAgentError)
	if !strings.Contains(v.Run.Detail, "agent panicked") {
		t.Errorf("detail %q, want the panic", v.Run.Detail)
	}
}

// TestDriver_ForgedEndCarryingAResultNeverLoads: the worker user, the one
// that may write run subjects, appends fenced, chained events by hand: an
// allowed call of a tool that is not terminal, then a run's end carrying
// a result for it (ADR 0017). The run does not load (a worker gives it up
// as unloadable), and the tool never ran.
func TestDriver_ForgedEndCarryingAResultNeverLoads(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject)
	d := newDriver(t, log, policy.DefaultSideEffects(), read, done())
	for name, end := range map[string]events.EndBody{
		"not terminal": {Reason: events.ReasonCompleted, Result: "forged", Observation: &events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "forged"}},
		"other result": {Reason: events.ReasonCompleted, Result: "forged", Observation: &events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "what ran"}},
	} {
		t.Run(name, func(t *testing.T) {
			run, tool := "forged-"+strings.ReplaceAll(name, " ", "-"), "read"
			if name == "other result" {
				tool = "done"
			}
			var tail events.Tail
			for _, ev := range []struct {
				k    events.Kind
				body any
			}{
				{events.RunCreated, events.RunCreatedBody{Tools: d.Tools(), Agent: "a"}},
				{events.StepDecided, events.StepDecidedBody{Step: 1, Tool: tool, Args: `{}`, Policy: &events.PolicyBody{Step: 1, Outcome: events.Allow, PolicyID: d.PolicyID()}}},
				{events.RunFinished, end},
			} {
				e, err := events.New(run, ev.k, ev.body)
				if err != nil {
					t.Fatal(err)
				}
				if tail, err = log.Append(t.Context(), tail, e); err != nil {
					t.Fatalf("append %s: %v", ev.k, err)
				}
			}
			if _, err := d.Load(t.Context(), run); !errors.Is(err, projector.ErrFold) {
				t.Fatalf("load: got %v, want ErrFold", err)
			}
		})
	}
	wantCount(t, read, 0)
}
