package driver_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// crashAfterAllow writes by hand what a worker that died mid-call leaves
// behind: run.created with d's tools, step 1 decided with raw args, and its
// write-ahead allow, with no observation.
func crashAfterAllow(t *testing.T, d *driver.Driver, run, tool, raw string) {
	t.Helper()
	log := d.Log()
	appendEvent(t, log, run, events.RunCreated, events.RunCreatedBody{Tools: d.Tools(), Limits: driver.DefaultLimits, Agent: "test"})
	appendEvent(t, log, run, events.StepDecided, events.StepDecidedBody{Step: 1, Tool: tool, Args: raw})
	appendEvent(t, log, run, events.StepPolicy, events.PolicyBody{
		Step: 1, Outcome: events.Allow, Reason: "allowed before the crash", PolicyID: "rules v1",
		Args: canon(t, raw), ToolHash: spec(t, d, tool).Hash,
	})
}

// interrupted loads run and checks that its step 1 is an allowed call with
// no observation.
func interrupted(t *testing.T, d *driver.Driver, run string) *driver.Run {
	t.Helper()
	r := load(t, d, run)
	if s := stepOf(t, r, 1); !s.Executing() {
		t.Fatalf("step 1 after the crash: got policy %+v observation %+v, want an allowed call with no observation", s.Policy, s.Observation)
	}
	return r
}

// resolution returns the body of the run's step.interrupted event.
func resolution(t *testing.T, log *events.Log, run string) events.InterruptedBody {
	t.Helper()
	recs := ofKind(records(t, log, run), events.StepInterrupted)
	if len(recs) != 1 {
		t.Fatalf("step.interrupted events: got %d, want 1", len(recs))
	}
	return body[events.InterruptedBody](t, recs[0])
}

func TestRecover_ReadOnlyRunsAgain(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	read.Result = func(ctx context.Context, _ json.RawMessage) (string, error) { return "contents", nil }
	p := count(allowAll)
	d := newDriver(t, log, p, read, done())
	crashAfterAllow(t, d, "crashed", "read_file", `{ "path": "notes.txt" }`)
	r := interrupted(t, d, "crashed")

	agent := testkit.NewScript(testkit.Call("read_file", `{ "path": "notes.txt" }`), testkit.Call("done", `{}`))
	drive(t, d, r, agent)

	if got := resolution(t, log, "crashed").Resolution; got != events.ResolvedRerun {
		t.Errorf("resolution: got %s, want %s", got, events.ResolvedRerun)
	}
	if calls := read.Calls(); len(calls) != 1 || string(calls[0]) != `{"path":"notes.txt"}` {
		t.Errorf("read_file executed with %q, want once with the recorded args", calls)
	}
	s := stepOf(t, r, 1)
	if s.Observation == nil || s.Observation.Kind != events.ObsResult || s.Observation.Content != "contents" {
		t.Errorf("step 1 observation: got %+v, want the read's result", s.Observation)
	}
	if got := p.askedFor(1); got != 0 {
		t.Errorf("policy asked about step 1 again: got %d times, want 0 (its allow stands)", got)
	}
	// The agent did not decide step 1 again.
	if got := len(agent.Inputs()); got != 1 {
		t.Errorf("agent asked: got %d times, want 1 (step 2 only)", got)
	}
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)

	t.Run("with characters HTML would escape", func(t *testing.T) {
		read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
		d := newDriver(t, log, allowAll, read, done())
		crashAfterAllow(t, d, "crashed-amp", "read_file", `{"path":"a&b <c>"}`)
		r := interrupted(t, d, "crashed-amp")
		drive(t, d, r, testkit.NewScript(testkit.Call("read_file", `{"path":"a&b <c>"}`), testkit.Call("done", `{}`)))
		if calls := read.Calls(); len(calls) != 1 || string(calls[0]) != `{"path":"a&b <c>"}` {
			t.Errorf("read_file executed with %q, want once with %s", calls, `{"path":"a&b <c>"}`)
		}
	})
}

func TestRecover_SideEffectPausesOnInterruptedApproval(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	send := testkit.NewLedger("send_email", events.RemoteMutation, toSchema)
	kp, ops := operator(t)
	p := count(allowAll)
	clk := newClock()
	d := newDriverCfg(t, driver.Config{Log: log, Policy: p, Tools: []driver.Tool{send, done()}, Operators: ops, ApprovalTTL: time.Hour, Now: clk.Now})
	crashAfterAllow(t, d, "crashed", "send_email", `{"to": "ops@example.com"}`)
	r := interrupted(t, d, "crashed")
	agent := testkit.NewScript(testkit.Call("send_email", `{"to": "ops@example.com"}`), testkit.Call("done", `{}`))
	drive(t, d, r, agent)

	wantCount(t, send, 0)
	v := r.View()
	wantEnd(t, v, projector.Waiting, driver.InterruptedSideEffect)
	a := pending(t, r)
	capability := `{"tool":"send_email"}`
	if a.Kind != driver.InterruptedSideEffect || a.Origin != events.OriginRecovery || a.Step != 1 {
		t.Errorf("approval: got kind %s origin %q step %d, want %s from recovery for step 1", a.Kind, a.Origin, a.Step, driver.InterruptedSideEffect)
	}
	if string(a.Capability) != capability {
		t.Errorf("capability: got %s, want %s", a.Capability, capability)
	}
	if want := approvals.Hash(driver.InterruptedSideEffect, a.Capability, a.Presentation, spec(t, d, "send_email"), []byte(`{"to":"ops@example.com"}`)); a.Hash != want {
		t.Errorf("approval hash: got %s, want %s (bound to the request)", a.Hash, want)
	}
	if a.ExpiresAt == nil || !a.ExpiresAt.Equal(clk.Now().Add(time.Hour)) {
		t.Errorf("approval expires at %v, want the configured TTL from now", a.ExpiresAt)
	}
	if got := p.askedFor(1); got != 0 {
		t.Errorf("policy asked before the operator decided: got %d times, want 0", got)
	}
	if got := len(agent.Inputs()); got != 0 {
		t.Errorf("agent asked while the interrupted call is unresolved: got %d times, want 0", got)
	}

	// Driving again, or on another worker, does not run it either.
	drive(t, d, load(t, d, "crashed"), agent)
	wantCount(t, send, 0)

	// Granted, the call is evaluated again and runs once.
	grant(t, d, r, kp)
	drive(t, d, r, agent)
	wantCount(t, send, 1)
	if got := p.askedFor(1); got != 1 {
		t.Errorf("policy asked about step 1 on resume: got %d times, want 1", got)
	}
	if got := approvalOf(t, r, a.ID).State; got != projector.Consumed {
		t.Errorf("interrupted approval: got %s, want %s", got, projector.Consumed)
	}
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)

	t.Run("a policy asking its own approval pauses again", func(t *testing.T) {
		send := testkit.NewLedger("send_email", events.RemoteMutation, toSchema)
		d := newDriverCfg(t, driver.Config{Log: log, Policy: policy.DefaultSideEffects(), Tools: []driver.Tool{send, done()}, Operators: ops})
		crashAfterAllow(t, d, "crashed-2", "send_email", `{"to":"ops"}`)
		r := interrupted(t, d, "crashed-2")
		drive(t, d, r, agent)
		first := pending(t, r)
		grant(t, d, r, kp)
		drive(t, d, r, agent)
		wantCount(t, send, 0)
		wantEnd(t, r.View(), projector.Waiting, events.RemoteMutation)
		if got := pending(t, r); got.ID == first.ID || got.Kind != string(events.RemoteMutation) {
			t.Errorf("waiting on %s (%s), want the policy's own remote_mutation approval", got.ID, got.Kind)
		}
	})
}

func TestRecover_ReconcileDoneAndNotDone(t *testing.T) {
	cases := []struct {
		name       string
		answer     driver.Reconciliation
		terminal   bool
		resolution string
		executions int
		asked      int // policy evaluations of step 1 after the crash
		status     projector.Status
		reason     events.EndReason
	}{
		{"done", driver.Done, false, events.ResolvedDone, 0, 0, projector.Completed, events.ReasonCompleted},
		{"done terminal", driver.Done, true, events.ResolvedDone, 0, 0, projector.Completed, events.ReasonCompleted},
		{"not done", driver.NotDone, false, events.ResolvedNotDone, 1, 1, projector.Completed, events.ReasonCompleted},
		{"unknown", driver.Unknown, false, "", 0, 0, projector.Waiting, driver.InterruptedSideEffect},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := testkit.JetStream(t)
			log := env.Log(t, events.Config{})
			l := testkit.NewLedger("charge", events.RemoteMutation, testkit.AnyObject)
			if tc.terminal {
				l.Terminal()
			}
			charge := &testkit.Reconciling{Ledger: l, Answer: tc.answer, Content: "charged earlier: receipt 42"}
			p := count(allowAll)
			d := newDriver(t, log, p, charge, done())
			crashAfterAllow(t, d, "crashed", "charge", `{"amount":"10.00"}`)
			r := interrupted(t, d, "crashed")
			agent := testkit.NewScript(testkit.Call("charge", `{"amount":"10.00"}`), testkit.Call("done", `{}`))
			drive(t, d, r, agent)

			wantCount(t, l, tc.executions)
			if got := p.askedFor(1); got != tc.asked {
				t.Errorf("policy asked about step 1: got %d times, want %d", got, tc.asked)
			}
			v := r.View()
			wantEnd(t, v, tc.status, tc.reason)
			if tc.resolution == "" {
				if got := len(ofKind(records(t, log, "crashed"), events.StepInterrupted)); got != 0 {
					t.Errorf("step.interrupted events: got %d, want 0", got)
				}
				return
			}
			res := resolution(t, log, "crashed")
			if res.Resolution != tc.resolution {
				t.Errorf("resolution: got %s, want %s", res.Resolution, tc.resolution)
			}
			s := stepOf(t, r, 1)
			if tc.answer == driver.Done {
				if s.Observation == nil || s.Observation.Kind != events.ObsResult || s.Observation.Content != "charged earlier: receipt 42" {
					t.Errorf("step 1 observation: got %+v, want the reconciled result", s.Observation)
				}
			}
			if tc.terminal {
				if v.Run.Result != "charged earlier: receipt 42" {
					t.Errorf("run result: got %q, want the reconciled result", v.Run.Result)
				}
				if got := len(agent.Inputs()); got != 0 {
					t.Errorf("agent asked after a terminal call was reconciled done: got %d times, want 0", got)
				}
			}
			if tc.answer == driver.NotDone {
				if calls := l.Calls(); len(calls) != 1 || string(calls[0]) != `{"amount":"10.00"}` {
					t.Errorf("charge executed with %q, want once with the recorded args", calls)
				}
			}
		})
	}
}

// TestRecover_TerminalResultWithoutEndFinishesRun: a worker died after
// recording a terminal tool's result and before recording the run's end.
// The next driver ends the run with that result; it never asks the agent for
// a step after the last one, and runs nothing again.
func TestRecover_TerminalResultWithoutEndFinishesRun(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	fin := done()
	d := newDriver(t, log, allowAll, fin)
	crashAfterAllow(t, d, "ended-early", "done", `{}`)
	appendEvent(t, log, "ended-early", events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "all done"})

	r := load(t, d, "ended-early")
	agent := testkit.NewScript() // asked for anything, it fails the run
	drive(t, d, r, agent)

	v := r.View()
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	if v.Run.Result != "all done" {
		t.Errorf("result: got %q, want %q", v.Run.Result, "all done")
	}
	if got := len(agent.Inputs()); got != 0 {
		t.Errorf("agent asked %d times, want 0", got)
	}
	wantCount(t, fin, 0)
}

// stuckReconciler's hook blocks, ignoring its context, until release is
// closed, or panics when panics is set.
type stuckReconciler struct {
	*testkit.Ledger
	release chan struct{}
	panics  bool
}

func (s *stuckReconciler) Reconcile(context.Context, json.RawMessage) (driver.Reconciliation, string, error) {
	if s.panics {
		panic("hook broke")
	}
	<-s.release
	return driver.Done, "too late", nil
}

// TestRecover_HookThatHangsOrPanicsIsUnknown: a reconcile hook is held to
// its tool's timeout; one that does not answer in time, or panics, tells
// nothing, and the interrupted side effect pauses on its approval, run by
// nobody.
func TestRecover_HookThatHangsOrPanicsIsUnknown(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(map[bool]string{false: "hangs", true: "panics"}[panics], func(t *testing.T) {
			env := testkit.JetStream(t)
			log := env.Log(t, events.Config{})
			l := testkit.NewLedger("charge", events.RemoteMutation, testkit.AnyObject)
			l.S.Timeout = 20 * time.Millisecond
			hook := &stuckReconciler{Ledger: l, release: make(chan struct{}), panics: panics}
			t.Cleanup(func() { close(hook.release) })
			d := newDriver(t, log, allowAll, hook, done())
			crashAfterAllow(t, d, "crashed", "charge", `{"amount":"10.00"}`)
			r := interrupted(t, d, "crashed")
			errc := make(chan error, 1)
			go func() { errc <- d.Drive(t.Context(), r, testkit.NewScript()) }()
			select {
			case err := <-errc:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Drive still waiting on a reconcile hook 10 s after its 20 ms timeout")
			}
			wantCount(t, l, 0)
			wantEnd(t, r.View(), projector.Waiting, driver.InterruptedSideEffect)
		})
	}
}
