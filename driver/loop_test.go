package driver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

func TestDriver_DecisionRecordedExactlyBeforeChecks(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	d := newDriver(t, log, allowAll, read, done())

	cases := []struct {
		name string
		args []byte
		obs  events.ObservationKind // the step's observation kind
	}{
		{"whitespace and key order", []byte("{ \"path\" :\t\"notes.txt\" ,\n  \"extra\": [1, 2.50 ]\n}\n"), events.ObsResult},
		{"refused by the schema", []byte(`{ "path": 7 }`), events.ObsInvalidArguments},
		{"malformed", []byte(`{"path": "a"`), events.ObsInvalidDecision},
		{"invalid UTF-8", []byte("{\"path\": \"caf\xe9\"}"), events.ObsInvalidDecision},
		{"empty", []byte{}, events.ObsInvalidDecision},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("exact-%d", i)
			r := create(t, d, id)
			dec := driver.Action{Tool: "read_file", Args: bytes.Clone(tc.args), CallID: "call_1", Reason: "  look  "}
			drive(t, d, r, testkit.NewScript(dec, testkit.Call("done", `{}`)))

			recs := records(t, log, id)
			if got := recs[1].Event.Kind; got != events.StepDecided {
				t.Fatalf("event 2: got %s, want %s first (kinds %v)", got, events.StepDecided, kinds(recs))
			}
			b := body[events.StepDecidedBody](t, recs[1])
			if got := b.RawArgs(); !bytes.Equal(got, tc.args) {
				t.Errorf("recorded args: got %q, want exactly %q", got, tc.args)
			}
			if utf8.Valid(tc.args) {
				if b.Args != string(tc.args) || b.ArgsBytes != nil {
					t.Errorf("recorded args of valid UTF-8: got Args %q ArgsBytes %q, want Args %q", b.Args, b.ArgsBytes, tc.args)
				}
			} else if !bytes.Equal(b.ArgsBytes, tc.args) {
				t.Errorf("recorded ArgsBytes: got %q, want %q", b.ArgsBytes, tc.args)
			}
			if b.Step != 1 || b.Tool != "read_file" || b.CallID != "call_1" || b.Reason != "  look  " {
				t.Errorf("recorded decision: got %+v, want step 1, tool read_file, call_1, reason as given", b)
			}
			// Whatever came of the request was recorded after it.
			next := recs[2].Event.Kind
			if next != events.StepPolicy && next != events.StepObserved {
				t.Errorf("event 3: got %s, want the step's policy result or observation", next)
			}
			// The view the driver folded and a fresh load keep the same bytes.
			for _, v := range []projector.View{r.View(), load(t, d, id).View()} {
				s := v.Step(1)
				if got := s.Decision.RawArgs(); !bytes.Equal(got, tc.args) {
					t.Errorf("view of step 1: got args %q, want %q", got, tc.args)
				}
				if s.Observation == nil || s.Observation.Kind != tc.obs {
					t.Errorf("step 1 observation: got %+v, want kind %s", s.Observation, tc.obs)
				}
			}
		})
	}
}

func TestDriver_InvalidArgumentsBecomeObservation(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	p := count(allowAll)
	d := newDriver(t, log, p, read, done())
	r := create(t, d, "invalid")
	agent := testkit.NewScript(
		testkit.Call("read_file", `{"path": 7}`),
		testkit.Call("read_file", `{"file": "a"}`),
		testkit.Call("read_file", `{"path": "a"}`),
		testkit.Call("done", `{}`),
	)
	drive(t, d, r, agent)

	v := r.View()
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	for _, n := range []int{1, 2} {
		s := v.Step(n)
		if s.Observation == nil || s.Observation.Kind != events.ObsInvalidArguments {
			t.Fatalf("step %d: got observation %+v, want %s", n, s.Observation, events.ObsInvalidArguments)
		}
		if !strings.Contains(s.Observation.Content, "read_file") {
			t.Errorf("step %d observation %q does not name the tool", n, s.Observation.Content)
		}
		if s.Policy != nil {
			t.Errorf("step %d: got policy result %+v, want none", n, s.Policy)
		}
		if got := p.askedFor(n); got != 0 {
			t.Errorf("policy asked about step %d: got %d times, want 0", n, got)
		}
	}
	if c := v.Step(1).Observation.Content; !strings.Contains(c, "/path") {
		t.Errorf("step 1 observation %q does not say where the arguments are wrong (/path)", c)
	}
	// The agent decided again, seeing why it was refused.
	if got := len(agent.Inputs()); got != 4 {
		t.Fatalf("agent asked: got %d times, want 4", got)
	}
	if seen := agent.Inputs()[1].Steps.At(0).Observation; seen == nil || seen.Kind != events.ObsInvalidArguments {
		t.Errorf("agent's second input, step 1: got observation %+v, want %s", seen, events.ObsInvalidArguments)
	}
	if got := p.askedFor(3); got != 1 {
		t.Errorf("policy asked about the valid step 3: got %d times, want 1", got)
	}
	wantCount(t, read, 1)
	// Checked arguments that fail count as failures.
	if got := agent.Inputs()[2].Run.FailuresInRow; got != 2 {
		t.Errorf("failures in a row before step 3: got %d, want 2", got)
	}
	recs := records(t, log, "invalid")
	if got := len(policyResults(t, recs)); got != 2 {
		t.Errorf("policy results: got %d, want 2 (steps 3 and 4 only)", got)
	}
}

func TestDriver_UnusableJSONDecisionsAreRecordedInvalid(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read_file", events.ReadOnly, testkit.AnyObject)
	p := count(allowAll)
	d := newDriver(t, log, p, read, done())

	cases := []struct {
		name string
		args []byte
		want error
	}{
		{"duplicate key", []byte(`{"path":"a","path":"b"}`), jsonform.ErrDuplicateKey},
		{"duplicate key after unescaping", []byte(`{"path":"a","p\u0061th":"b"}`), jsonform.ErrDuplicateKey},
		{"invalid UTF-8", []byte("{\"path\":\"\xff\xfe\"}"), jsonform.ErrUTF8},
		{"depth 300", []byte(`{"a":` + strings.Repeat("[", 299) + strings.Repeat("]", 299) + `}`), jsonform.ErrDepth},
		{"lone surrogate", []byte(`{"path":"\ud800"}`), jsonform.ErrLoneSurrogate},
		{"malformed", []byte(`{"path": "a",}`), jsonform.ErrSyntax},
		{"two values", []byte(`{} {}`), jsonform.ErrSyntax},
		{"empty", nil, jsonform.ErrSyntax},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The refusal is the driver's own acceptance, for the reason given.
			_, err := driver.CheckArgs(read, tc.args)
			var ae *driver.ArgsError
			if !errors.As(err, &ae) || !ae.Malformed() || !errors.Is(err, tc.want) {
				t.Fatalf("CheckArgs(%q): got %v, want a malformed *ArgsError wrapping %v", tc.args, err, tc.want)
			}

			id := fmt.Sprintf("unusable-%d", i)
			r := create(t, d, id)
			before := read.Count()
			drive(t, d, r, testkit.NewScript(driver.Action{Tool: "read_file", Args: bytes.Clone(tc.args)}, testkit.Call("done", `{}`)))

			s := stepOf(t, r, 1)
			if s.Observation == nil || s.Observation.Kind != events.ObsInvalidDecision {
				t.Fatalf("step 1: got observation %+v, want %s", s.Observation, events.ObsInvalidDecision)
			}
			if q := fmt.Sprintf("%q", tc.args); !strings.Contains(s.Observation.Content, q) {
				t.Errorf("observation %q does not keep the original bytes as the string %s", s.Observation.Content, q)
			}
			if !strings.Contains(s.Observation.Content, "read_file") {
				t.Errorf("observation %q does not name the tool", s.Observation.Content)
			}
			if !bytes.Equal(s.Decision.RawArgs(), tc.args) {
				t.Errorf("recorded decision: got %q, want %q", s.Decision.RawArgs(), tc.args)
			}
			if got := p.askedFor(1); got != 0 {
				t.Errorf("policy asked about an unusable request: got %d times, want 0", got)
			}
			if read.Count() != before {
				t.Errorf("read_file executed for an unusable request")
			}
			wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
		})
	}
}

func TestDriver_UnknownToolIsObservation(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	p := count(allowAll)
	d := newDriver(t, log, p, done())
	r := create(t, d, "unknown")
	agent := testkit.NewScript(testkit.Call("rm_rf", `{"path":"/"}`), testkit.Call("done", `{}`))
	drive(t, d, r, agent)

	s := stepOf(t, r, 1)
	if s.Observation == nil || s.Observation.Kind != events.ObsUnknownTool {
		t.Fatalf("step 1: got observation %+v, want %s", s.Observation, events.ObsUnknownTool)
	}
	if !strings.Contains(s.Observation.Content, "rm_rf") {
		t.Errorf("observation %q does not name the tool asked for", s.Observation.Content)
	}
	if got := p.askedFor(1); got != 0 {
		t.Errorf("policy asked about an unknown tool: got %d times, want 0", got)
	}
	if got := agent.Inputs()[1].Run.FailuresInRow; got != 1 {
		t.Errorf("failures in a row after an unknown tool: got %d, want 1", got)
	}
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
}

func TestDriver_PolicyGetsPolicyJSON(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	schema := `{ "type": "object",
		"properties": { "b": { "type": "number" }, "a": { "type": "string" } },
		"required": [ "a" ] }`
	send := testkit.NewLedger("send", events.RemoteMutation, schema)
	p := count(policy.DefaultSideEffects())
	kp, ops := operator(t)
	d := newDriverCfg(t, driver.Config{Log: log, Policy: p, Tools: []driver.Tool{send, done()}, Operators: ops})
	r := create(t, d, "pj")
	raw := "{ \"b\" : 1.50,\n\t\"a\" : \"x&&y <z> \\u00e9\" }"
	want := `{"a":"x&&y <z> é","b":1.50}`
	agent := testkit.NewScript(testkit.Call("send", raw), testkit.Call("done", `{}`))
	drive(t, d, r, agent)
	wantEnd(t, r.View(), projector.Waiting, events.RemoteMutation)

	grant(t, d, r, kp)
	drive(t, d, r, agent)
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)

	reqs := p.requests()
	if len(reqs) != 3 {
		t.Fatalf("policy asked: got %d times, want 3 (loop, resume, done)", len(reqs))
	}
	wantSchema := string(canon(t, schema))
	for i, req := range reqs[:2] {
		if got := string(req.Args); got != want {
			t.Errorf("request %d args: got %s, want %s", i, got, want)
		}
		if got := string(req.Tool.Schema); got != wantSchema {
			t.Errorf("request %d schema: got %s, want %s", i, got, wantSchema)
		}
		if req.Tool.Hash != spec(t, d, "send").Hash || req.Step != 1 || req.Run != "pj" {
			t.Errorf("request %d: got run %s step %d tool hash %s, want pj, 1, %s", i, req.Run, req.Step, req.Tool.Hash, spec(t, d, "send").Hash)
		}
	}
	// The tool is handed the same bytes.
	if calls := send.Calls(); len(calls) != 1 || string(calls[0]) != want {
		t.Errorf("send executed with %q, want once with %s", calls, want)
	}

	t.Run("recorded in the log as the policy saw them", func(t *testing.T) {
		recs := records(t, log, "pj")
		for _, rec := range append(ofKind(recs, events.ApprovalRequested), ofKind(recs, events.StepPolicy)[0]) {
			if got := string(body[events.PolicyBody](t, rec).Args); got != want {
				t.Errorf("%s args: got %s, want %s", rec.Event.Kind, got, want)
			}
		}
	})
}

func TestDriver_PolicyResultRecordsPolicyID(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	for _, tc := range []struct {
		name string
		p    policy.Policy
		want string
	}{
		{"identified", policy.WithID(allowAll, "rules v3 (sha256:abc)"), "rules v3 (sha256:abc)"},
		{"unidentified", allowAll, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t, log, tc.p, done())
			r := create(t, d, "id-"+tc.name)
			drive(t, d, r, testkit.NewScript(testkit.Call("done", `{}`)))
			pols := policyResults(t, records(t, log, r.ID()))
			if len(pols) != 1 {
				t.Fatalf("policy results: got %d, want 1", len(pols))
			}
			if got := pols[0].PolicyID; got != tc.want {
				t.Errorf("recorded policy id: got %q, want %q", got, tc.want)
			}
		})
	}
}

// denyAll denies every request but a terminal tool, with a fixed reason.
var denyAll = policyFunc(func(_ context.Context, req policy.Request, _ projector.View) (policy.Ruling, error) {
	if req.Tool.Terminal {
		return policy.Ruling{Outcome: events.Allow}, nil
	}
	return policy.Ruling{Outcome: events.Deny, Reason: "deletes are off today"}, nil
})

func TestDriver_PolicyDenyIsObservation(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	del := testkit.NewLedger("delete_file", events.Destructive, pathSchema)
	d := newDriver(t, log, denyAll, del, done())
	r := create(t, d, "deny")
	agent := testkit.NewScript(testkit.Call("delete_file", `{"path":"/"}`), testkit.Call("done", `{}`))
	drive(t, d, r, agent)

	wantCount(t, del, 0)
	if len(agent.Inputs()) != 2 {
		t.Fatalf("agent asked: got %d times, want 2 (a denial does not stop the run)", len(agent.Inputs()))
	}
	seen := agent.Inputs()[1].Steps.At(0)
	if seen.Observation == nil || seen.Observation.Kind != events.ObsPolicyDenied {
		t.Fatalf("agent sees step 1 with observation %+v, want %s", seen.Observation, events.ObsPolicyDenied)
	}
	for _, want := range []string{"delete_file", "deletes are off today"} {
		if !strings.Contains(seen.Observation.Content, want) {
			t.Errorf("denial %q does not mention %q", seen.Observation.Content, want)
		}
	}
	if got := agent.Inputs()[1].Run.FailuresInRow; got != 1 {
		t.Errorf("failures in a row after a denial: got %d, want 1", got)
	}
	recs := records(t, log, "deny")
	pols := policyResults(t, recs)
	if len(pols) == 0 || pols[0].Outcome != events.Deny {
		t.Fatalf("first policy result: got %v, want outcome deny", kinds(recs))
	}
	if pb := pols[0]; pb.Reason != "deletes are off today" {
		t.Errorf("recorded reason: got %q, want the policy's", pb.Reason)
	}
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
}

func TestDriver_PolicyAbortEndsRun(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	del := testkit.NewLedger("delete_file", events.Destructive, pathSchema)
	abort := policyFunc(func(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
		return policy.Ruling{Outcome: events.Abort, Reason: "tried to delete the root"}, nil
	})
	d := newDriver(t, log, abort, del, done())
	r := create(t, d, "abort")
	agent := testkit.NewScript(testkit.Call("delete_file", `{"path":"/"}`), testkit.Call("done", `{}`))
	drive(t, d, r, agent)

	v := r.View()
	wantEnd(t, v, projector.Failed, events.ReasonPolicyAbort)
	if v.Run.Detail != "tried to delete the root" {
		t.Errorf("run detail: got %q, want the policy's reason", v.Run.Detail)
	}
	wantCount(t, del, 0)
	if len(agent.Inputs()) != 1 {
		t.Errorf("agent asked: got %d times, want 1", len(agent.Inputs()))
	}
	// Loaded again, it is still over: nothing more happens.
	again := load(t, d, "abort")
	wantEnd(t, again.View(), projector.Failed, events.ReasonPolicyAbort)
	drive(t, d, again, agent)
	if got, want := len(records(t, log, "abort")), 2; got != want {
		t.Errorf("events: got %d, want %d (created, decided with its abort)", got, want)
	}
	wantCount(t, del, 0)
}

func TestDriver_RequireApprovalPausesRun(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	deploy := testkit.NewLedger("deploy", events.RemoteMutation, `{"type":"object"}`)
	ask := policyFunc(func(_ context.Context, req policy.Request, _ projector.View) (policy.Ruling, error) {
		return policy.NeedApproval("deploy_prod", "production needs a person", map[string]any{"env": "prod", "args": req.Args}, map[string]string{"say": "deploy <prod> & tell"})
	})
	d := newDriver(t, log, ask, deploy)
	r := create(t, d, "ask")
	agent := testkit.NewScript(testkit.Call("deploy", `{"ref": "v1.2"}`))
	drive(t, d, r, agent)

	v := r.View()
	wantEnd(t, v, projector.Waiting, "deploy_prod")
	wantCount(t, deploy, 0)
	a := v.PendingApproval()
	if a == nil {
		t.Fatal("no pending approval")
	}
	capability := `{"args":{"ref":"v1.2"},"env":"prod"}`
	presentation := `{"say":"deploy <prod> & tell"}`
	if a.Kind != "deploy_prod" || a.State != projector.Pending || a.Step != 1 || a.Reason != "production needs a person" {
		t.Errorf("approval: got %+v, want pending deploy_prod for step 1 with the policy's reason", *a)
	}
	if string(a.Capability) != capability || string(a.Presentation) != presentation {
		t.Errorf("approval JSON: got capability %s presentation %s, want %s and %s", a.Capability, a.Presentation, capability, presentation)
	}
	if want := approvals.Hash("deploy_prod", []byte(capability), []byte(presentation), spec(t, d, "deploy"), []byte(`{"ref":"v1.2"}`)); a.Hash != want {
		t.Errorf("approval hash: got %s, want %s", a.Hash, want)
	}
	if a.ExpiresAt != nil {
		t.Errorf("approval expires at %v, want no expiry when none is configured", a.ExpiresAt)
	}
	recs := records(t, log, "ask")
	if got, want := recs[len(recs)-1].Event.Kind, events.ApprovalRequested; got != want {
		t.Errorf("last event: got %s, want %s", got, want)
	}

	// With nothing decided, driving again changes nothing.
	drive(t, d, load(t, d, "ask"), agent)
	if got := len(records(t, log, "ask")); got != len(recs) {
		t.Errorf("events after driving a waiting run: got %d, want %d", got, len(recs))
	}
	wantCount(t, deploy, 0)
}

func TestPolicy_UnknownOutcomeFailsLoopAndResume(t *testing.T) {
	for _, outcome := range []events.Outcome{"", "maybe", "ALLOW", "allow "} {
		t.Run(fmt.Sprintf("%q in the loop", outcome), func(t *testing.T) {
			env := testkit.JetStream(t)
			log := env.Log(t, events.Config{})
			write := testkit.NewLedger("write", events.LocalMutation, testkit.AnyObject)
			p := policyFunc(func(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
				return policy.Ruling{Outcome: outcome, Reason: "unsure"}, nil
			})
			d := newDriver(t, log, p, write)
			r := create(t, d, "loop")
			drive(t, d, r, testkit.NewScript(testkit.Call("write", `{}`)))
			wantEnd(t, r.View(), projector.Failed, events.ReasonInternalError)
			wantCount(t, write, 0)
			recs := records(t, log, "loop")
			if got := len(ofKind(recs, events.StepPolicy)); got != 0 {
				t.Errorf("step.policy events: got %d, want 0 (kinds %v)", got, kinds(recs))
			}
			if got := recs[len(recs)-1].Event.Kind; got != events.RunFailed {
				t.Errorf("last event: got %s, want %s", got, events.RunFailed)
			}
		})
		t.Run(fmt.Sprintf("%q on resume", outcome), func(t *testing.T) {
			env := testkit.JetStream(t)
			log := env.Log(t, events.Config{})
			write := testkit.NewLedger("write", events.LocalMutation, testkit.AnyObject)
			calls := 0
			p := policyFunc(func(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
				calls++
				if calls == 1 {
					return policy.NeedApproval("check", "first ask", nil, nil)
				}
				return policy.Ruling{Outcome: outcome, Reason: "unsure"}, nil
			})
			kp, ops := operator(t)
			d := newDriverCfg(t, driver.Config{Log: log, Policy: p, Tools: []driver.Tool{write}, Operators: ops})
			r := create(t, d, "resume")
			agent := testkit.NewScript(testkit.Call("write", `{}`))
			drive(t, d, r, agent)
			wantEnd(t, r.View(), projector.Waiting, "check")

			a := grant(t, d, r, kp)
			drive(t, d, r, agent)
			if calls != 2 {
				t.Fatalf("policy asked: got %d times, want 2", calls)
			}
			wantEnd(t, r.View(), projector.Failed, events.ReasonInternalError)
			wantCount(t, write, 0)
			for _, rec := range ofKind(records(t, log, "resume"), events.StepPolicy) {
				t.Errorf("step.policy recorded on resume: %s", rec.Event.Body)
			}
			if got := approvalOf(t, r, a.ID).State; got == projector.Consumed {
				t.Errorf("approval state: got %s, want it not consumed", got)
			}
		})
	}
}

func TestPolicy_ErrorFailsRun(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	write := testkit.NewLedger("write", events.LocalMutation, testkit.AnyObject)
	errRules := errors.New("rules file unreadable")
	p := policyFunc(func(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
		// An error wins even over an allow returned beside it.
		return policy.Ruling{Outcome: events.Allow}, errRules
	})
	d := newDriver(t, log, policy.WithID(p, "rules v1"), write)
	r := create(t, d, "err")
	drive(t, d, r, testkit.NewScript(testkit.Call("write", `{}`)))

	v := r.View()
	wantEnd(t, v, projector.Failed, events.ReasonInternalError)
	wantCount(t, write, 0)
	if !strings.Contains(v.Run.Detail, errRules.Error()) {
		t.Errorf("run detail %q does not carry the policy's error", v.Run.Detail)
	}
	if got := len(ofKind(records(t, log, "err"), events.StepPolicy)); got != 0 {
		t.Errorf("step.policy events: got %d, want 0", got)
	}
}

func TestDriver_UnusablePolicyJSONFailsWithoutExecuting(t *testing.T) {
	cases := []struct {
		name         string
		capability   json.RawMessage
		presentation json.RawMessage
	}{
		{"capability with a duplicate key", json.RawMessage(`{"path":"a","path":"b"}`), nil},
		{"capability with invalid UTF-8", json.RawMessage("{\"path\":\"\xff\"}"), nil},
		{"capability nested 300 deep", json.RawMessage(strings.Repeat("[", 300) + strings.Repeat("]", 300)), nil},
		{"capability with a lone surrogate", json.RawMessage(`{"s":"\udc00"}`), nil},
		{"capability not JSON", json.RawMessage(`{"path":`), nil},
		{"presentation with a duplicate key", nil, json.RawMessage(`{"say":"a","say":"b"}`)},
		{"presentation with invalid UTF-8", nil, json.RawMessage("\"\xc3\x28\"")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := testkit.JetStream(t)
			log := env.Log(t, events.Config{})
			send := testkit.NewLedger("send", events.RemoteMutation, toSchema)
			p := policyFunc(func(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
				return policy.Ruling{Outcome: events.RequireApproval, Reason: "hand-built", Approval: &policy.Approval{
					Kind: "send_check", Capability: tc.capability, Presentation: tc.presentation,
				}}, nil
			})
			d := newDriver(t, log, p, send)
			r := create(t, d, "unusable")
			drive(t, d, r, testkit.NewScript(testkit.Call("send", `{"to":"ops"}`)))

			v := r.View()
			wantEnd(t, v, projector.Failed, events.ReasonInternalError)
			wantCount(t, send, 0)
			if len(v.Approvals) != 0 {
				t.Errorf("approvals: got %d, want none recorded", len(v.Approvals))
			}
			recs := records(t, log, "unusable")
			if got := len(ofKind(recs, events.ApprovalRequested)) + len(ofKind(recs, events.StepPolicy)); got != 0 {
				t.Errorf("policy results recorded: got %d, want 0 (kinds %v)", got, kinds(recs))
			}
		})
	}

	t.Run("require_approval with no approval", func(t *testing.T) {
		env := testkit.JetStream(t)
		log := env.Log(t, events.Config{})
		send := testkit.NewLedger("send", events.RemoteMutation, toSchema)
		p := policyFunc(func(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
			return policy.Ruling{Outcome: events.RequireApproval}, nil
		})
		d := newDriver(t, log, p, send)
		r := create(t, d, "kindless")
		drive(t, d, r, testkit.NewScript(testkit.Call("send", `{"to":"ops"}`)))
		wantEnd(t, r.View(), projector.Failed, events.ReasonInternalError)
		wantCount(t, send, 0)
	})
}

func TestDriver_ToolPanicAndTimeoutBecomeObservations(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})

	panicky := testkit.NewLedger("panicky", events.ReadOnly, testkit.AnyObject)
	panicky.Result = func(context.Context, json.RawMessage) (string, error) { panic("boom") }

	failing := testkit.NewLedger("failing", events.ReadOnly, testkit.AnyObject)
	failing.Result = func(context.Context, json.RawMessage) (string, error) { return "", errors.New("disk full") }

	slow := testkit.NewLedger("slow", events.ReadOnly, testkit.AnyObject)
	slow.S.Timeout = 50 * time.Millisecond
	slow.Result = func(ctx context.Context, _ json.RawMessage) (string, error) {
		select {
		case <-time.After(10 * time.Second):
			return "late", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}

	// stubborn ignores its context: the driver must not wait for it.
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	stubborn := testkit.NewLedger("stubborn", events.ReadOnly, testkit.AnyObject)
	stubborn.S.Timeout = 50 * time.Millisecond
	stubborn.Result = func(context.Context, json.RawMessage) (string, error) {
		<-release
		return "too late", nil
	}

	d := newDriver(t, log, allowAll, panicky, failing, slow, stubborn, done())
	r := create(t, d, "faults")
	agent := testkit.NewScript(
		testkit.Call("panicky", `{}`),
		testkit.Call("failing", `{}`),
		testkit.Call("slow", `{}`),
		testkit.Call("stubborn", `{}`),
		testkit.Call("done", `{}`),
	)
	drive(t, d, r, agent)

	v := r.View()
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	for n, want := range map[int]struct {
		tool    string
		kind    events.ObservationKind
		mention string
	}{
		1: {"panicky", events.ObsToolError, "boom"},
		2: {"failing", events.ObsToolError, ""},
		3: {"slow", events.ObsTimeout, "50ms"},
		4: {"stubborn", events.ObsTimeout, "50ms"},
	} {
		o := v.Step(n).Observation
		if o == nil || o.Kind != want.kind {
			t.Errorf("step %d (%s): got observation %+v, want %s", n, want.tool, o, want.kind)
			continue
		}
		if want.tool == "failing" {
			if o.Content != "disk full" {
				t.Errorf("step %d observation: got %q, want the tool's error %q", n, o.Content, "disk full")
			}
			continue
		}
		for _, m := range []string{want.tool, want.mention} {
			if !strings.Contains(o.Content, m) {
				t.Errorf("step %d observation %q does not mention %q", n, o.Content, m)
			}
		}
	}
	if got := agent.Inputs()[4].Run.FailuresInRow; got != 4 {
		t.Errorf("failures in a row after a panic, an error and two timeouts: got %d, want 4", got)
	}
}

func TestDriver_TerminalToolCompletesRun(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	finish := testkit.NewLedger("finish", events.ReadOnly, testkit.AnyObject).Terminal()
	tries := 0
	finish.Result = func(context.Context, json.RawMessage) (string, error) {
		tries++
		if tries == 1 {
			return "", errors.New("not yet")
		}
		return "report: all done", nil
	}
	d := newDriver(t, log, allowAll, finish)
	r := create(t, d, "terminal")
	agent := testkit.NewScript(testkit.Call("finish", `{}`), testkit.Call("finish", `{"again":true}`), testkit.Call("finish", `{}`))
	drive(t, d, r, agent)

	v := r.View()
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	if v.Run.Result != "report: all done" {
		t.Errorf("run result: got %q, want the terminal tool's result", v.Run.Result)
	}
	// A terminal tool that failed did not end the run; the one that worked did.
	if got := len(agent.Inputs()); got != 2 {
		t.Errorf("agent asked: got %d times, want 2", got)
	}
	recs := records(t, log, "terminal")
	last := recs[len(recs)-1]
	if last.Event.Kind != events.RunFinished || body[events.EndBody](t, last).Result != "report: all done" {
		t.Errorf("last event: got %s %s, want run.finished with the result", last.Event.Kind, last.Event.Body)
	}
}

func TestDriver_LongResultIsTruncated(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	chatty := testkit.NewLedger("chatty", events.ReadOnly, testkit.AnyObject)
	chatty.Result = func(context.Context, json.RawMessage) (string, error) { return strings.Repeat("é", 20), nil }
	d := newDriverCfg(t, driver.Config{Log: log, Policy: allowAll, Tools: []driver.Tool{chatty, done()}, MaxObservation: 15})
	r := create(t, d, "long")
	drive(t, d, r, testkit.NewScript(testkit.Call("chatty", `{}`), testkit.Call("done", `{}`)))
	o := stepOf(t, r, 1).Observation
	if o == nil || !o.Truncated || len(o.Content) > 15 || !utf8.ValidString(o.Content) {
		t.Fatalf("observation: got %+v, want a truncated result of at most 15 bytes of whole characters", o)
	}
	if got, want := o.Content, strings.Repeat("é", 7); got != want {
		t.Errorf("truncated content: got %q, want %q", got, want)
	}
}

func TestDriver_AgentErrorFailsRun(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	d := newDriver(t, log, allowAll, done())
	r := create(t, d, "agent-err")
	agent := driver.AgentFunc(func(context.Context, driver.StepInput) (driver.Action, error) {
		return driver.Action{}, errors.New("model unavailable")
	})
	drive(t, d, r, agent)
	v := r.View()
	wantEnd(t, v, projector.Failed, events.ReasonAgentError)
	if v.Run.Detail != "model unavailable" {
		t.Errorf("run detail: got %q, want the agent's error", v.Run.Detail)
	}
}

// readN is an agent that reads a different path each step.
func readN() driver.Agent {
	return driver.AgentFunc(func(_ context.Context, in driver.StepInput) (driver.Action, error) {
		return testkit.Call("read_file", fmt.Sprintf(`{"path":"f%d"}`, in.Steps.Len()+1)), nil
	})
}

func TestDriver_StepLimit(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	d := newDriverCfg(t, driver.Config{Log: log, Policy: allowAll, Tools: []driver.Tool{read}, Limits: events.Limits{MaxSteps: 3}})
	r := create(t, d, "steps")
	drive(t, d, r, readN())
	v := r.View()
	wantEnd(t, v, projector.Failed, events.ReasonStepLimit)
	if v.Run.Steps != 3 {
		t.Errorf("steps: got %d, want 3", v.Run.Steps)
	}
	wantCount(t, read, 3)
	if got := v.Run.Limits; got != (events.Limits{MaxSteps: 3, MaxFailuresInRow: driver.DefaultLimits.MaxFailuresInRow, MaxRepeats: driver.DefaultLimits.MaxRepeats}) {
		t.Errorf("recorded limits: got %+v, want MaxSteps 3 and the defaults", got)
	}
}

func TestDriver_RepeatedFailuresEndRun(t *testing.T) {
	t.Run("denials in a row", func(t *testing.T) {
		env := testkit.JetStream(t)
		log := env.Log(t, events.Config{})
		del := testkit.NewLedger("delete_file", events.Destructive, pathSchema)
		d := newDriver(t, log, policy.DefaultSideEffects(), del)
		r := create(t, d, "denied")
		agent := driver.AgentFunc(func(_ context.Context, in driver.StepInput) (driver.Action, error) {
			return testkit.Call("delete_file", fmt.Sprintf(`{"path":"/%d"}`, in.Steps.Len())), nil
		})
		drive(t, d, r, agent)
		v := r.View()
		wantEnd(t, v, projector.Failed, events.ReasonRepeatedFailures)
		if v.Run.Steps != driver.DefaultLimits.MaxFailuresInRow {
			t.Errorf("steps: got %d, want %d", v.Run.Steps, driver.DefaultLimits.MaxFailuresInRow)
		}
		wantCount(t, del, 0)
	})
	t.Run("a success resets the count", func(t *testing.T) {
		env := testkit.JetStream(t)
		log := env.Log(t, events.Config{})
		read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
		d := newDriverCfg(t, driver.Config{Log: log, Policy: allowAll, Tools: []driver.Tool{read, done()}, Limits: events.Limits{MaxFailuresInRow: 3}})
		r := create(t, d, "reset")
		var decs []driver.Action
		for i := range 2 {
			decs = append(decs, testkit.Call("read_file", fmt.Sprintf(`{"bad":%d}`, i)), testkit.Call("read_file", fmt.Sprintf(`{"bad":%d,"x":1}`, i)))
			decs = append(decs, testkit.Call("read_file", fmt.Sprintf(`{"path":"%d"}`, i)))
		}
		decs = append(decs, testkit.Call("done", `{}`))
		drive(t, d, r, testkit.NewScript(decs...))
		wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
	})
}

func TestDriver_LoopDetected(t *testing.T) {
	t.Run("same request same result", func(t *testing.T) {
		env := testkit.JetStream(t)
		log := env.Log(t, events.Config{})
		read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
		d := newDriverCfg(t, driver.Config{Log: log, Policy: allowAll, Tools: []driver.Tool{read}, Limits: events.Limits{MaxRepeats: 3}})
		r := create(t, d, "loop")
		agent := driver.AgentFunc(func(context.Context, driver.StepInput) (driver.Action, error) {
			return testkit.Call("read_file", `{"path":"same"}`), nil
		})
		drive(t, d, r, agent)
		v := r.View()
		wantEnd(t, v, projector.Failed, events.ReasonLoopDetected)
		wantCount(t, read, 3)
		if v.Run.Repeats != 3 {
			t.Errorf("repeats: got %d, want 3", v.Run.Repeats)
		}
	})
	t.Run("same request different result", func(t *testing.T) {
		env := testkit.JetStream(t)
		log := env.Log(t, events.Config{})
		read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
		n := 0
		read.Result = func(context.Context, json.RawMessage) (string, error) { n++; return fmt.Sprint("line ", n), nil }
		d := newDriverCfg(t, driver.Config{Log: log, Policy: allowAll, Tools: []driver.Tool{read}, Limits: events.Limits{MaxRepeats: 3, MaxSteps: 6}})
		r := create(t, d, "tail")
		agent := driver.AgentFunc(func(context.Context, driver.StepInput) (driver.Action, error) {
			return testkit.Call("read_file", `{"path":"same"}`), nil
		})
		drive(t, d, r, agent)
		wantEnd(t, r.View(), projector.Failed, events.ReasonStepLimit)
		wantCount(t, read, 6)
	})
}

func TestDriver_TimeLimit(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	clk := newClock()
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	read.Result = func(context.Context, json.RawMessage) (string, error) {
		clk.Advance(600 * time.Millisecond)
		return "ok", nil
	}
	d := newDriverCfg(t, driver.Config{Log: log, Policy: allowAll, Tools: []driver.Tool{read}, Limits: events.Limits{MaxElapsedMS: 1000}, Now: clk.Now})
	r := create(t, d, "slowrun")
	drive(t, d, r, readN())
	v := r.View()
	wantEnd(t, v, projector.Failed, events.ReasonTimeLimit)
	wantCount(t, read, 2)
	if !v.Run.Created.Equal(newClock().Now()) {
		t.Errorf("run created at %v, want the configured clock's %v", v.Run.Created, newClock().Now())
	}
}

// TestDriver_OverrunToolIsLeftBehind: a tool that ignores its context is
// left behind; the run is driven on without it, and when the tool finally
// returns, nothing more is recorded for it.
func TestDriver_OverrunToolIsLeftBehind(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	stubborn, release, returned := stubbornTool(20 * time.Millisecond)
	d := newDriver(t, log, allowAll, stubborn, done())
	r := create(t, d, "overrun")
	errc := make(chan error, 1)
	go func() {
		errc <- d.Drive(t.Context(), r, testkit.NewScript(testkit.Call("stubborn", `{}`), testkit.Call("done", `{}`)))
	}()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Drive still waiting for a tool that overran its 20 ms timeout 10 s later")
	}
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
	if v := r.View(); v.Step(1).Observation == nil || v.Step(1).Observation.Kind != events.ObsTimeout {
		t.Fatalf("step 1: observation %+v, want a timeout", v.Step(1).Observation)
	}
	before := len(records(t, log, "overrun"))

	close(release)
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the stubborn tool did not return 10 s after its release")
	}
	// The goroutine it ran on unwinds without touching the run: nothing
	// is appended (and the race detector sees no access to the run).
	for range 20 {
		time.Sleep(10 * time.Millisecond)
		if got := len(records(t, log, "overrun")); got != before {
			t.Fatalf("events after the left-behind tool returned: %d, want still %d", got, before)
		}
	}
	if got := stubborn.Count(); got != 1 {
		t.Errorf("stubborn executed %d times, want 1", got)
	}
}

// TestDriver_CancelDuringStubbornTool: cancelling the drive while a tool
// that ignores its context runs returns at once, with the cancellation,
// without waiting for the tool.
func TestDriver_CancelDuringStubbornTool(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	release, started := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	stubborn := testkit.NewLedger("stubborn", events.ReadOnly, testkit.AnyObject)
	stubborn.S.Timeout = time.Hour
	stubborn.Result = func(context.Context, json.RawMessage) (string, error) {
		close(started)
		<-release
		return "too late", nil
	}
	d := newDriver(t, log, allowAll, stubborn, done())
	r := create(t, d, "cancelled")
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- d.Drive(ctx, r, testkit.NewScript(testkit.Call("stubborn", `{}`))) }()
	<-started
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Drive cancelled during a stubborn tool: got %v, want an error wrapping context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Drive still waiting for a stubborn tool 10 s after its context was cancelled")
	}
}

// TestDriver_BusyHookWhileToolRuns: the busy hook (a worker's InProgress)
// is called while a tool runs, and not after it returned.
func TestDriver_BusyHookWhileToolRuns(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	var calls atomic.Int32
	twice := make(chan struct{})
	var once sync.Once
	busy := func() {
		if calls.Add(1) == 2 {
			once.Do(func() { close(twice) })
		}
	}
	long := testkit.NewLedger("long", events.ReadOnly, testkit.AnyObject)
	long.Result = func(ctx context.Context, _ json.RawMessage) (string, error) {
		select {
		case <-twice:
			return "held", nil
		case <-time.After(10 * time.Second):
			return "", errors.New("the busy hook was not called twice in 10 s")
		}
	}
	d := newDriver(t, log, allowAll, long, done())
	r := create(t, d, "busy")
	ctx := driver.WithBusy(t.Context(), time.Millisecond, busy)
	if err := d.Drive(ctx, r, testkit.NewScript(testkit.Call("long", `{}`), testkit.Call("done", `{}`))); err != nil {
		t.Fatal(err)
	}
	if v := r.View(); v.Step(1).Observation == nil || v.Step(1).Observation.Content != "held" {
		t.Fatalf("step 1: observation %+v, want the tool's result after the busy hook ran", v.Step(1).Observation)
	}
	after := calls.Load()
	time.Sleep(20 * time.Millisecond)
	if got := calls.Load(); got != after {
		t.Errorf("busy hook called %d more times after the tools returned", got-after)
	}
}

// TestDriver_AllowedStepIsTwoEventsAndRunsAfterTheFirst: an allowed call is
// recorded as its decision carrying the allow, then its observation (ADR
// 0017), and the tool runs only once the first is stored: when it runs, the
// log's last event is that decision, with the allow, and nothing else of
// the step.
func TestDriver_AllowedStepIsTwoEventsAndRunsAfterTheFirst(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	send := testkit.NewLedger("send_email", events.RemoteMutation, toSchema)
	var atRun []events.Record
	send.Result = func(ctx context.Context, _ json.RawMessage) (string, error) {
		recs, _, err := log.Read(ctx, "two")
		if err != nil {
			return "", err
		}
		atRun = recs
		return "sent", nil
	}
	d := newDriver(t, log, allowAll, send, done())
	r := create(t, d, "two")
	drive(t, d, r, testkit.NewScript(testkit.Call("send_email", `{"to":"ops"}`), testkit.Call("done", `{}`)))
	if len(atRun) == 0 {
		t.Fatal("the tool never ran")
	}
	last := atRun[len(atRun)-1].Event
	pb, ok, err := events.PolicyResult(last)
	if err != nil || !ok || last.Kind != events.StepDecided || pb.Outcome != events.Allow || pb.Step != 1 {
		t.Fatalf("when the tool ran, the last event was %s (result %+v %v %v), want step 1's decision carrying its allow", last.Kind, pb, ok, err)
	}
	recs := records(t, log, "two")
	// The terminal tool's result travels in the run's end.
	want := []events.Kind{events.RunCreated, events.StepDecided, events.StepObserved, events.StepDecided, events.RunFinished}
	if got := kinds(recs); !slices.Equal(got, want) {
		t.Errorf("events: got %v, want %v", got, want)
	}
	// The step's recorded time is the one the policy saw it at: the
	// view's step holds the decision's event time.
	v := r.View()
	if s := v.Step(1); s == nil || !s.Decided.Equal(recs[1].Event.Time) || s.Policy == nil || s.Policy.Outcome != events.Allow {
		t.Errorf("step 1 in the view: %+v, want decided at %v with its allow", s, recs[1].Event.Time)
	}
}

// stepper is a [driver.Stepper] that hands out decisions by step number and
// fails the test if it is asked with the run's view.
type stepper struct {
	t     *testing.T
	calls []int                             // the step numbers it was asked for
	next  func(n int) (driver.Action, bool) // its answer for step n
}

func (s *stepper) DecideStep(_ context.Context, n int) (driver.Action, bool) {
	s.calls = append(s.calls, n)
	return s.next(n)
}

func (s *stepper) Decide(context.Context, driver.StepInput) (driver.Action, error) {
	s.t.Error("a Stepper was asked with Decide")
	return driver.Action{}, errors.New("asked with Decide")
}

// A Stepper is asked by step number only; when it has no decision the drive
// stops with nothing recorded for the step, and the run can be driven on; a
// panic in it fails the run as an agent's would.
func TestDriver_StepperIsAskedTheStepNumberAndMayStop(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	d := newDriver(t, log, allowAll, read, done())

	r := create(t, d, "stepper")
	s := &stepper{t: t, next: func(n int) (driver.Action, bool) {
		if n == 1 {
			return testkit.Call("read_file", `{"path":"a"}`), true
		}
		return driver.Action{}, false
	}}
	drive(t, d, r, s)
	if got, want := fmt.Sprint(s.calls), "[1 2]"; got != want {
		t.Fatalf("steps asked: got %s, want %s", got, want)
	}
	wantCount(t, read, 1)
	before := kinds(records(t, log, "stepper"))
	v := r.View()
	if v.Run.Status != projector.Running || v.Steps.Len() != 1 {
		t.Fatalf("after a stepper with no decision: status %s, %d steps; want running with 1 step (events %v)", v.Run.Status, v.Steps.Len(), before)
	}
	if last := before[len(before)-1]; last != events.StepObserved {
		t.Fatalf("last event: got %s, want the step's observation and nothing after it (events %v)", last, before)
	}

	// Driven on, with a decision for step 2 now.
	s.next = func(n int) (driver.Action, bool) { return testkit.Call("done", `{}`), n == 2 }
	drive(t, d, r, s)
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)

	// A panic is the agent's error.
	r = create(t, d, "stepper-panic")
	drive(t, d, r, &stepper{t: t, next: func(int) (driver.Action, bool) { panic("boom") }})
	v = r.View()
	wantEnd(t, v, projector.Failed, events.ReasonAgentError)
	if !strings.Contains(v.Run.Detail, "agent panicked: boom") {
		t.Errorf("run detail: got %q, want the panic", v.Run.Detail)
	}
}
