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
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nkeys"
)

// paused is a run paused on the default side-effect policy's approval for a
// remote call, with an operator who may decide it.
type paused struct {
	log   *events.Log
	d     *driver.Driver
	r     *driver.Run
	send  *testkit.Ledger
	kp    nkeys.KeyPair
	agent *testkit.Script
}

// pauseOnSend drives a run whose first step asks to send with args, under
// cfg (Log, Tools and Operators are filled in), until it waits.
func pauseOnSend(t *testing.T, cfg driver.Config, args string) paused {
	t.Helper()
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	send := testkit.NewLedger("send", events.RemoteMutation, toSchema)
	kp, ops := operator(t)
	cfg.Log, cfg.Operators = log, ops
	cfg.Tools = []driver.Tool{send, done()}
	if cfg.Policy == nil {
		cfg.Policy = policy.DefaultSideEffects()
	}
	d := newDriverCfg(t, cfg)
	r := create(t, d, "paused")
	agent := testkit.NewScript(testkit.Call("send", args), testkit.Call("done", `{}`))
	drive(t, d, r, agent)
	wantEnd(t, r.View(), projector.Waiting, pending(t, r).Kind)
	wantCount(t, send, 0)
	return paused{log: log, d: d, r: r, send: send, kp: kp, agent: agent}
}

func TestResume_GrantExecutesExactlyTheRecordedRequest(t *testing.T) {
	p := pauseOnSend(t, driver.Config{}, "{ \"to\" :  \"ops@example.com\" }")
	a := grant(t, p.d, p.r, p.kp)
	drive(t, p.d, p.r, p.agent)

	want := `{"to":"ops@example.com"}`
	if calls := p.send.Calls(); len(calls) != 1 || string(calls[0]) != want {
		t.Fatalf("send executed with %q, want exactly once with the recorded request %s", calls, want)
	}
	v := p.r.View()
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	if got := approvalOf(t, p.r, a.ID).State; got != projector.Consumed {
		t.Errorf("approval state: got %s, want %s", got, projector.Consumed)
	}
	// The agent was not asked to decide step 1 again.
	if got := len(p.agent.Inputs()); got != 2 {
		t.Errorf("agent asked: got %d times, want 2 (step 1 once, then done)", got)
	}
	pols := ofKind(records(t, p.log, p.r.ID()), events.StepPolicy)
	if len(pols) == 0 {
		t.Fatal("no step.policy recorded on resume")
	}
	b := body[events.PolicyBody](t, pols[0])
	if b.Step != 1 || b.Consumes != a.ID || !b.Resume {
		t.Errorf("resume result: got step %d consumes %q resume %v, want step 1 consuming %s on resume", b.Step, b.Consumes, b.Resume, a.ID)
	}

	// Driving the finished run again, or reloading it, runs nothing more.
	drive(t, p.d, load(t, p.d, p.r.ID()), p.agent)
	wantCount(t, p.send, 1)
}

func TestResume_PolicyAskingForDifferentApprovalPausesAgain(t *testing.T) {
	calls := 0
	changing := policyFunc(func(_ context.Context, req policy.Request, _ projector.View) (policy.Ruling, error) {
		calls++
		if req.Tool.Terminal {
			return policy.Ruling{Outcome: events.Allow}, nil
		}
		// The presentation changes between the loop and the resume: what
		// the reviewer saw is part of what they granted.
		return policy.NeedApproval("send_check", "needs a person", map[string]any{"args": req.Args}, map[string]int{"version": calls})
	})
	p := pauseOnSend(t, driver.Config{Policy: changing}, `{"to":"ops"}`)
	first := grant(t, p.d, p.r, p.kp)
	drive(t, p.d, p.r, p.agent)

	wantCount(t, p.send, 0)
	v := p.r.View()
	wantEnd(t, v, projector.Waiting, "send_check")
	second := pending(t, p.r)
	if second.ID == first.ID || second.Hash == first.Hash {
		t.Fatalf("second approval: got id %s hash %s, want a new approval (first %s %s)", second.ID, second.Hash, first.ID, first.Hash)
	}
	if second.State != projector.Pending || second.Step != 1 {
		t.Errorf("second approval: got state %s step %d, want pending for step 1", second.State, second.Step)
	}
	if got := approvalOf(t, p.r, first.ID).State; got != projector.Superseded {
		t.Errorf("first approval: got %s, want %s (never usable again)", got, projector.Superseded)
	}
	if got := len(ofKind(records(t, p.log, p.r.ID()), events.ApprovalRequested)); got != 2 {
		t.Errorf("approval.requested events: got %d, want 2", got)
	}

	// The old grant, recorded again, cannot run the call.
	publish(t, p.d, p.r, sign(t, p.kp, p.r.ID(), first, events.DecisionGrant, time.Now()))
	drive(t, p.d, p.r, p.agent)
	wantCount(t, p.send, 0)
	wantEnd(t, p.r.View(), projector.Waiting, "send_check")

	// A grant of the approval asked for now runs it.
	grant(t, p.d, p.r, p.kp)
	calls = 1 // the policy asks for exactly the second approval again
	drive(t, p.d, p.r, p.agent)
	wantCount(t, p.send, 1)
	wantEnd(t, p.r.View(), projector.Completed, events.ReasonCompleted)
}

func TestResume_PolicyDenyOnResumeIsObservation(t *testing.T) {
	calls := 0
	p := policyFunc(func(_ context.Context, req policy.Request, _ projector.View) (policy.Ruling, error) {
		calls++
		switch {
		case req.Tool.Terminal:
			return policy.Ruling{Outcome: events.Allow}, nil
		case calls == 1:
			return policy.NeedApproval("send_check", "needs a person", nil, nil)
		}
		return policy.Ruling{Outcome: events.Deny, Reason: "the rules changed"}, nil
	})
	ps := pauseOnSend(t, driver.Config{Policy: p}, `{"to":"ops"}`)
	a := grant(t, ps.d, ps.r, ps.kp)
	drive(t, ps.d, ps.r, ps.agent)
	wantCount(t, ps.send, 0)
	s := stepOf(t, ps.r, 1)
	if s.Observation == nil || s.Observation.Kind != events.ObsPolicyDenied {
		t.Fatalf("step 1: got observation %+v, want %s", s.Observation, events.ObsPolicyDenied)
	}
	if got := approvalOf(t, ps.r, a.ID).State; got != projector.Superseded {
		t.Errorf("granted approval after a denial on resume: got %s, want %s", got, projector.Superseded)
	}
	wantEnd(t, ps.r.View(), projector.Completed, events.ReasonCompleted)
}

func TestResume_ForgedGrantRefusedAndRecorded(t *testing.T) {
	stranger, err := nkeys.CreateUser()
	if err != nil {
		t.Fatalf("create key: %v", err)
	}
	cases := []struct {
		name  string
		forge func(t *testing.T, p paused, a projector.Approval) events.DecisionBody
		want  error
	}{
		{"unknown key", func(t *testing.T, p paused, a projector.Approval) events.DecisionBody {
			return sign(t, stranger, p.r.ID(), a, events.DecisionGrant, time.Now())
		}, approvals.ErrUnknownOperator},
		{"bad signature", func(t *testing.T, p paused, a projector.Approval) events.DecisionBody {
			b := sign(t, p.kp, p.r.ID(), a, events.DecisionGrant, time.Now())
			b.Reason = "edited after signing"
			return b
		}, approvals.ErrBadSignature},
		{"signature of another run", func(t *testing.T, p paused, a projector.Approval) events.DecisionBody {
			return sign(t, p.kp, "another-run", a, events.DecisionGrant, time.Now())
		}, approvals.ErrBadSignature},
		{"denial turned into a grant", func(t *testing.T, p paused, a projector.Approval) events.DecisionBody {
			b := sign(t, p.kp, p.r.ID(), a, events.DecisionDeny, time.Now())
			b.Decision = events.DecisionGrant
			return b
		}, approvals.ErrBadSignature},
		{"wrong hash", func(t *testing.T, p paused, a projector.Approval) events.DecisionBody {
			a.Hash = approvals.Hash("other", []byte(`{}`), []byte(`{}`), events.ToolSpec{Name: "send"}, []byte(`{}`))
			return sign(t, p.kp, p.r.ID(), a, events.DecisionGrant, time.Now())
		}, approvals.ErrWrongHash},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := pauseOnSend(t, driver.Config{}, `{"to":"ops"}`)
			a := pending(t, p.r)
			forged := tc.forge(t, p, a)
			seq := publish(t, p.d, p.r, forged)

			// What the driver will judge, and why it must refuse it.
			ops := approvals.Operators{}
			pub, _ := p.kp.PublicKey()
			ops[pub] = "alice"
			forged.Received = time.Now()
			why := approvals.Admit(ops, p.r.ID(), &a, forged, approvals.DefaultSkew)
			if !errors.Is(why, tc.want) {
				t.Fatalf("approvals.Admit of the forged grant: got %v, want %v", why, tc.want)
			}

			drive(t, p.d, p.r, p.agent)
			wantCount(t, p.send, 0)
			v := p.r.View()
			wantEnd(t, v, projector.Waiting, events.RemoteMutation)
			after := pending(t, p.r)
			if after.ID != a.ID || after.State != projector.Pending || after.Decision != nil {
				t.Errorf("approval after the refusal: got %s state %s decision %v, want %s pending with no decision", after.ID, after.State, after.Decision, a.ID)
			}
			refused := ofKind(records(t, p.log, p.r.ID()), events.ApprovalRefused)
			if len(refused) != 1 {
				t.Fatalf("approval.refused events: got %d, want 1", len(refused))
			}
			rb := body[events.RefusedBody](t, refused[0])
			if rb.Approval != a.ID || rb.Intake != seq || rb.Reason != why.Error() {
				t.Errorf("refusal: got %+v, want approval %s intake %d reason %q", rb, a.ID, seq, why)
			}
			if len(v.Refusals) != 1 {
				t.Errorf("view refusals: got %d, want 1", len(v.Refusals))
			}

			// The approval is still there to be decided properly.
			grant(t, p.d, p.r, p.kp)
			drive(t, p.d, p.r, p.agent)
			wantCount(t, p.send, 1)
			wantEnd(t, p.r.View(), projector.Completed, events.ReasonCompleted)
		})
	}

	t.Run("forged denial", func(t *testing.T) {
		p := pauseOnSend(t, driver.Config{}, `{"to":"ops"}`)
		a := pending(t, p.r)
		publish(t, p.d, p.r, sign(t, stranger, p.r.ID(), a, events.DecisionDeny, time.Now()))
		drive(t, p.d, p.r, p.agent)
		wantEnd(t, p.r.View(), projector.Waiting, events.RemoteMutation)
		if got := len(ofKind(records(t, p.log, p.r.ID()), events.ApprovalRefused)); got != 1 {
			t.Errorf("approval.refused events: got %d, want 1", got)
		}
	})
}

func TestResume_DenialCancelsRun(t *testing.T) {
	p := pauseOnSend(t, driver.Config{}, `{"to":"ops"}`)
	a := pending(t, p.r)
	publish(t, p.d, p.r, sign(t, p.kp, p.r.ID(), a, events.DecisionDeny, time.Now()))
	drive(t, p.d, p.r, p.agent)

	v := p.r.View()
	wantEnd(t, v, projector.Cancelled, events.ReasonApprovalDenied)
	wantCount(t, p.send, 0)
	if got := approvalOf(t, p.r, a.ID).State; got != projector.Denied {
		t.Errorf("approval state: got %s, want %s", got, projector.Denied)
	}
	if got := len(p.agent.Inputs()); got != 1 {
		t.Errorf("agent asked: got %d times, want 1", got)
	}
}

func TestResume_ExpiredApprovalCancelsRun(t *testing.T) {
	t.Run("no decision before the deadline", func(t *testing.T) {
		clk := newClock()
		p := pauseOnSend(t, driver.Config{ApprovalTTL: time.Minute, Now: clk.Now}, `{"to":"ops"}`)
		a := pending(t, p.r)
		if a.ExpiresAt == nil || !a.ExpiresAt.Equal(clk.Now().Add(time.Minute)) {
			t.Fatalf("approval expires at %v, want %v", a.ExpiresAt, clk.Now().Add(time.Minute))
		}
		// Before the deadline nothing happens.
		clk.Advance(59 * time.Second)
		drive(t, p.d, p.r, p.agent)
		wantEnd(t, p.r.View(), projector.Waiting, events.RemoteMutation)

		clk.Advance(2 * time.Second)
		drive(t, p.d, p.r, p.agent)
		v := p.r.View()
		wantEnd(t, v, projector.Cancelled, events.ReasonApprovalExpired)
		if got := approvalOf(t, p.r, a.ID).State; got != projector.Expired {
			t.Errorf("approval state: got %s, want %s", got, projector.Expired)
		}
		recs := records(t, p.log, p.r.ID())
		if got := len(ofKind(recs, events.ApprovalExpired)); got != 1 {
			t.Errorf("approval.expired events: got %d, want 1", got)
		}
		if got := len(ofKind(recs, events.ApprovalDenied)); got != 0 {
			t.Errorf("approval.denied events: got %d, want 0 (an expiry is never a denial)", got)
		}
		wantCount(t, p.send, 0)
	})

	t.Run("a grant signed too late", func(t *testing.T) {
		clk := newClock()
		p := pauseOnSend(t, driver.Config{ApprovalTTL: time.Minute, Now: clk.Now}, `{"to":"ops"}`)
		a := pending(t, p.r)
		clk.Advance(2 * time.Minute)
		publish(t, p.d, p.r, sign(t, p.kp, p.r.ID(), a, events.DecisionGrant, clk.Now()))
		drive(t, p.d, p.r, p.agent)
		wantEnd(t, p.r.View(), projector.Cancelled, events.ReasonApprovalExpired)
		wantCount(t, p.send, 0)
		refused := ofKind(records(t, p.log, p.r.ID()), events.ApprovalRefused)
		if len(refused) != 1 {
			t.Fatalf("approval.refused events: got %d, want 1", len(refused))
		}
	})

	// The deadline is for a worker to receive the decision: one that is
	// read only after it (backdated, or sent late) is refused, whatever
	// time it says it was signed.
	t.Run("a grant backdated under the deadline, received after it", func(t *testing.T) {
		clk := newClock()
		p := pauseOnSend(t, driver.Config{ApprovalTTL: time.Minute, Now: clk.Now}, `{"to":"ops"}`)
		a := pending(t, p.r)
		publish(t, p.d, p.r, sign(t, p.kp, p.r.ID(), a, events.DecisionGrant, clk.Now().Add(30*time.Second)))
		clk.Advance(2 * time.Minute)
		drive(t, p.d, p.r, p.agent)
		wantCount(t, p.send, 0)
		wantEnd(t, p.r.View(), projector.Cancelled, events.ReasonApprovalExpired)
		refused := ofKind(records(t, p.log, p.r.ID()), events.ApprovalRefused)
		if len(refused) != 1 || !strings.Contains(body[events.RefusedBody](t, refused[0]).Reason, approvals.ErrExpired.Error()) {
			t.Fatalf("approval.refused events: got %d, want 1 naming the expiry", len(refused))
		}
	})

	t.Run("a grant signed in time, received in time", func(t *testing.T) {
		clk := newClock()
		p := pauseOnSend(t, driver.Config{ApprovalTTL: time.Minute, Now: clk.Now}, `{"to":"ops"}`)
		a := pending(t, p.r)
		clk.Advance(30 * time.Second)
		publish(t, p.d, p.r, sign(t, p.kp, p.r.ID(), a, events.DecisionGrant, clk.Now()))
		drive(t, p.d, p.r, p.agent)
		wantCount(t, p.send, 1)
		wantEnd(t, p.r.View(), projector.Completed, events.ReasonCompleted)
	})

	t.Run("the policy's own expiry", func(t *testing.T) {
		clk := newClock()
		short := policyFunc(func(_ context.Context, req policy.Request, _ projector.View) (policy.Ruling, error) {
			d, err := policy.NeedApproval("quick", "answer fast", nil, nil)
			d.Approval.ExpiresIn = 5 * time.Second
			return d, err
		})
		p := pauseOnSend(t, driver.Config{Policy: short, ApprovalTTL: time.Hour, Now: clk.Now}, `{"to":"ops"}`)
		a := pending(t, p.r)
		if a.ExpiresAt == nil || !a.ExpiresAt.Equal(clk.Now().Add(5*time.Second)) {
			t.Fatalf("approval expires at %v, want %v", a.ExpiresAt, clk.Now().Add(5*time.Second))
		}
		clk.Advance(6 * time.Second)
		drive(t, p.d, p.r, p.agent)
		wantEnd(t, p.r.View(), projector.Cancelled, events.ReasonApprovalExpired)
	})
}

func TestResume_SecondUseOfGrantRefused(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	send := testkit.NewLedger("send", events.RemoteMutation, toSchema)
	kp, ops := operator(t)
	d := newDriverCfg(t, driver.Config{Log: log, Policy: policy.DefaultSideEffects(), Tools: []driver.Tool{send}, Operators: ops})
	r := create(t, d, "twice")
	agent := testkit.NewScript(testkit.Call("send", `{"to":"ops"}`), testkit.Call("send", `{"to":"ops"}`))
	drive(t, d, r, agent)

	a := pending(t, r)
	g := sign(t, kp, r.ID(), a, events.DecisionGrant, time.Now())
	publish(t, d, r, g)
	drive(t, d, r, agent)
	wantCount(t, send, 1)
	// Step 2 asks for the same call: a new approval, not the old grant.
	second := pending(t, r)
	if second.ID == a.ID || second.Step != 2 {
		t.Fatalf("waiting on %s for step %d, want a new approval for step 2", second.ID, second.Step)
	}

	// The same signed grant, published again under another message id (so
	// the server's deduplication does not drop it), is refused, never used.
	data, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := decisions.Publish(t.Context(), d.Log(), r.ID(), "replayed", data)
	if err != nil {
		t.Fatal(err)
	}
	drive(t, d, r, agent)
	wantCount(t, send, 1)
	v := r.View()
	wantEnd(t, v, projector.Waiting, events.RemoteMutation)
	if v.Intake != replayed {
		t.Errorf("intake after the replayed grant: got %d, want %d", v.Intake, replayed)
	}
	if got := approvalOf(t, r, a.ID).State; got != projector.Consumed {
		t.Errorf("first approval: got %s, want %s", got, projector.Consumed)
	}
	if got := pending(t, r); got.ID != second.ID || got.State != projector.Pending {
		t.Errorf("pending approval: got %s %s, want %s still pending", got.ID, got.State, second.ID)
	}
	refused := ofKind(records(t, log, r.ID()), events.ApprovalRefused)
	if len(refused) != 1 {
		t.Fatalf("approval.refused events: got %d, want 1", len(refused))
	}
	if rb := body[events.RefusedBody](t, refused[0]); rb.Intake != replayed || !strings.Contains(rb.Reason, a.ID) {
		t.Errorf("refusal: got %+v, want intake %d with a reason naming %s", rb, replayed, a.ID)
	}

	// Two workers racing to consume one grant: only one append can win.
	t.Run("two workers, one grant", func(t *testing.T) {
		env := testkit.JetStream(t)
		log := env.Log(t, events.Config{})
		s1 := testkit.NewLedger("send", events.RemoteMutation, toSchema)
		s2 := testkit.NewLedger("send", events.RemoteMutation, toSchema)
		kp, ops := operator(t)
		d1 := newDriverCfg(t, driver.Config{Log: log, Policy: policy.DefaultSideEffects(), Tools: []driver.Tool{s1, done()}, Operators: ops})
		d2 := newDriverCfg(t, driver.Config{Log: log, Policy: policy.DefaultSideEffects(), Tools: []driver.Tool{s2, done()}, Operators: ops})
		r := create(t, d1, "race")
		agent := testkit.NewScript(testkit.Call("send", `{"to":"ops"}`), testkit.Call("done", `{}`))
		drive(t, d1, r, agent)
		grant(t, d1, r, kp)
		r1, r2 := load(t, d1, "race"), load(t, d2, "race")
		drive(t, d1, r1, agent)
		err := d2.Drive(t.Context(), r2, agent)
		if !errors.Is(err, events.ErrConflict) {
			t.Fatalf("second worker: got %v, want an error wrapping events.ErrConflict", err)
		}
		if got := s1.Count() + s2.Count(); got != 1 {
			t.Errorf("executions across both workers: got %d, want 1", got)
		}
	})
}

func TestResume_ArgumentsRecheckedAgainstCurrentSchema(t *testing.T) {
	// A run pauses under one tool set; a worker with another resumes it.
	setup := func(t *testing.T, later ...driver.Tool) (paused, *driver.Driver) {
		t.Helper()
		p := pauseOnSend(t, driver.Config{}, `{"to":"ops"}`)
		grant(t, p.d, p.r, p.kp)
		pub, _ := p.kp.PublicKey()
		d2 := newDriverCfg(t, driver.Config{Log: p.log, Policy: policy.DefaultSideEffects(), Tools: later, Operators: approvals.Operators{pub: "alice"}})
		return p, d2
	}

	t.Run("a changed spec asks again", func(t *testing.T) {
		send2 := testkit.NewLedger("send", events.RemoteMutation, toSchema)
		send2.S.Description = "send, now with a different description"
		p, d2 := setup(t, send2, done())
		r := load(t, d2, p.r.ID())
		drive(t, d2, r, p.agent)
		wantCount(t, send2, 0)
		wantCount(t, p.send, 0)
		wantEnd(t, r.View(), projector.Waiting, events.RemoteMutation)
		if got := len(ofKind(records(t, p.log, r.ID()), events.ApprovalRequested)); got != 2 {
			t.Errorf("approval.requested events: got %d, want 2 (the old grant names the old spec)", got)
		}
		t.Run("the spec it was evaluated with is recorded", func(t *testing.T) {
			wantToolHashesRecorded(t, records(t, p.log, r.ID()))
		})
	})

	t.Run("arguments the new schema refuses", func(t *testing.T) {
		strict := testkit.NewLedger("send", events.RemoteMutation, `{"type":"object","properties":{"to":{"type":"integer"}},"required":["to"]}`)
		p, d2 := setup(t, strict, done())
		r := load(t, d2, p.r.ID())
		if err := d2.Drive(t.Context(), r, p.agent); err != nil {
			t.Fatalf("drive: %v", err)
		}
		wantCount(t, strict, 0)
		wantCount(t, p.send, 0)
		if s := stepOf(t, r, 1); s.Observation == nil || s.Observation.Kind != events.ObsInvalidArguments {
			t.Fatalf("step 1: got observation %+v, want %s", s.Observation, events.ObsInvalidArguments)
		}
		// The agent decides again and the run goes on, and it still folds.
		wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
		load(t, d2, r.ID())
	})

	t.Run("a tool that is gone", func(t *testing.T) {
		p, d2 := setup(t, done())
		r := load(t, d2, p.r.ID())
		if err := d2.Drive(t.Context(), r, p.agent); err != nil {
			t.Fatalf("drive: %v", err)
		}
		if s := stepOf(t, r, 1); s.Observation == nil || s.Observation.Kind != events.ObsUnknownTool {
			t.Fatalf("step 1: got observation %+v, want %s", s.Observation, events.ObsUnknownTool)
		}
		wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
		load(t, d2, r.ID())
	})
}

// wantToolHashesRecorded checks that every policy result names a tool spec
// the run had recorded (in run.created or run.tools) before it.
func wantToolHashesRecorded(t *testing.T, recs []events.Record) {
	t.Helper()
	known := map[string]bool{}
	for _, rec := range recs {
		switch rec.Event.Kind {
		case events.RunCreated:
			for _, s := range body[events.RunCreatedBody](t, rec).Tools {
				known[s.Hash] = true
			}
		case events.RunTools:
			for _, s := range body[events.RunToolsBody](t, rec).Tools {
				known[s.Hash] = true
			}
		case events.StepPolicy, events.ApprovalRequested:
			b := body[events.PolicyBody](t, rec)
			if b.ToolHash != "" && !known[b.ToolHash] {
				t.Errorf("event %d (%s, step %d): tool hash %s was never recorded for the run", rec.Event.Seq, rec.Event.Kind, b.Step, b.ToolHash)
			}
		}
	}
}
