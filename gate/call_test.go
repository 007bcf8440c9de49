package gate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// runner is a Call's function that counts its runs and keeps the
// arguments it was given.
type runner struct {
	runs int
	args []string
	fn   func(ctx context.Context, n int) (string, error)
}

func (f *runner) run(ctx context.Context, args json.RawMessage) (string, error) {
	f.runs++
	f.args = append(f.args, string(args))
	if f.fn != nil {
		return f.fn(ctx, f.runs)
	}
	return "ran " + string(args), nil
}

func call(t *testing.T, r *gate.Run, tool, args string, f *runner, want gate.Verdict) gate.Answer {
	t.Helper()
	a, err := r.Call(t.Context(), tool, json.RawMessage(args), f.run)
	if err != nil {
		t.Fatalf("call %s %s: %v", tool, args, err)
	}
	if a.Verdict != want {
		t.Fatalf("call %s %s: got %s (%+v), want %s", tool, args, a.Verdict, a, want)
	}
	return a
}

// An allowed Call runs its function once, after the decision carrying its
// allow is stored, with the arguments in PolicyJSON form, and records what
// it returned: two events a call.
func TestGate_CallRunsTheAllowedCallAfterItsRecord(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "call")
	before := len(kinds(t, e.log, r.ID()))
	var seen []events.Kind
	f := &runner{fn: func(context.Context, int) (string, error) {
		seen = kinds(t, e.log, r.ID())
		return "hello", nil
	}}
	a := call(t, r, "read", `{ "path" : "/etc/motd" }`, f, gate.Done)
	if f.runs != 1 || f.args[0] != `{"path":"/etc/motd"}` {
		t.Fatalf("runs: %d with %q, want 1 with the PolicyJSON form", f.runs, f.args)
	}
	if len(seen) != before+1 || seen[len(seen)-1] != events.StepDecided {
		t.Fatalf("events when the function ran: %v, want the decision (carrying its allow) last", seen)
	}
	if !a.Ran || a.Step != 1 || a.Observation == nil || a.Observation.Kind != events.ObsResult || a.Observation.Content != "hello" {
		t.Fatalf("answer: got %+v, want done, ran, step 1, result hello", a)
	}
	ks := kinds(t, e.log, r.ID())
	if got := ks[before:]; len(got) != 2 || got[1] != events.StepObserved {
		t.Fatalf("events of the call: %v, want the decision and the observation", got)
	}
	// Asks and calls share the run: the next call is step 2.
	ask(t, r, "read", `{"path":"b"}`, gate.Allow)
	report(t, r, "b")
	if a := call(t, r, "read", `{"path":"c"}`, f, gate.Done); a.Step != 3 {
		t.Fatalf("third call: step %d, want 3", a.Step)
	}
}

// A Call the gate does not allow runs nothing: a denial, refused
// arguments, an unknown tool, a call that needs an operator.
func TestGate_CallNotAllowedRunsNothing(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "call-deny")
	f := &runner{}
	for _, c := range []struct {
		tool, args string
		kind       events.ObservationKind
	}{
		{"rm", `{"path":"/"}`, events.ObsPolicyDenied},
		{"read", `{"path":7}`, events.ObsInvalidArguments},
		{"read", `{"path":`, events.ObsInvalidDecision},
		{"launch", `{}`, events.ObsUnknownTool},
	} {
		a := call(t, r, c.tool, c.args, f, gate.Deny)
		if a.Ran || a.Observation == nil || a.Observation.Kind != c.kind {
			t.Errorf("call %s %s: got %+v, want a %s observation, not run", c.tool, c.args, a, c.kind)
		}
	}
	p := call(t, r, "send", `{"to":"ops@example.com"}`, f, gate.Pending)
	if p.Ran || p.Approval == nil || p.Approval.State != projector.Pending {
		t.Fatalf("send: got %+v, want pending, not run", p)
	}
	// Another call while one waits is refused and records nothing.
	before := kinds(t, e.log, r.ID())
	_, err := r.Call(t.Context(), "read", json.RawMessage(`{"path":"a"}`), f.run)
	var w *gate.WaitingError
	if !errors.As(err, &w) || w.Approval.ID != p.Approval.ID {
		t.Fatalf("call while waiting: got %v, want a *WaitingError on %s", err, p.Approval.ID)
	}
	if after := kinds(t, e.log, r.ID()); len(after) != len(before) {
		t.Fatalf("events: %v after the refused call, want %v", after, before)
	}
	if f.runs != 0 {
		t.Fatalf("runs: %d, want 0", f.runs)
	}
}

// A grant is consumed once by the identical Call, which runs once; the
// same call again needs an approval of its own.
func TestGate_CallConsumesAGrantOnce(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "call-grant")
	f := &runner{}
	p := call(t, r, "send", `{"to":"ops@example.com"}`, f, gate.Pending)
	if again := call(t, r, "send", `{"to":"ops@example.com"}`, f, gate.Pending); again.Approval.ID != p.Approval.ID {
		t.Fatalf("called again before the decision: approval %s, want %s", again.Approval.ID, p.Approval.ID)
	}
	e.decide(t, r.ID(), p.Approval, events.DecisionGrant)
	// A changed call runs nothing and leaves the grant unused.
	if _, err := r.Call(t.Context(), "send", json.RawMessage(`{"to":"all@example.com"}`), f.run); !errors.Is(err, gate.ErrWaiting) {
		t.Fatalf("changed call after the grant: got %v, want %v", err, gate.ErrWaiting)
	}
	a := call(t, r, "send", `{ "to":"ops@example.com" }`, f, gate.Done)
	if f.runs != 1 || a.Step != 1 || !a.Ran {
		t.Fatalf("granted call: %d runs, answer %+v; want one run of step 1", f.runs, a)
	}
	v := view(t, r)
	if got := v.Approval(p.Approval.ID).State; got != projector.Consumed {
		t.Fatalf("approval: got %s, want %s", got, projector.Consumed)
	}
	if n := call(t, r, "send", `{"to":"ops@example.com"}`, f, gate.Pending); n.Approval.ID == p.Approval.ID || f.runs != 1 {
		t.Fatalf("the same call again: approval %s after %d runs, want a new approval and still one run", n.Approval.ID, f.runs)
	}
}

// What a Call's function returns is recorded as Report records it: an
// error as a tool error, an interrupted write as an approval an operator
// decides, an interrupted read run once more.
func TestGate_CallRecordsWhatItsFunctionReturned(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "call-errors")
	a := call(t, r, "read", `{"path":"a"}`, &runner{fn: func(context.Context, int) (string, error) {
		return "", errors.New("no such file")
	}}, gate.Done)
	if a.Observation.Kind != events.ObsToolError || a.Observation.Content != "no such file" {
		t.Fatalf("tool error: got %+v", a.Observation)
	}
	flaky := &runner{fn: func(_ context.Context, n int) (string, error) {
		if n == 1 {
			return "", fmt.Errorf("server died: %w", driver.ErrInterrupted)
		}
		return "second try", nil
	}}
	a = call(t, r, "read", `{"path":"b"}`, flaky, gate.Done)
	if flaky.runs != 2 || a.Observation.Kind != events.ObsResult || a.Observation.Content != "second try" {
		t.Fatalf("interrupted read: %d runs, %+v; want it run once more and its result", flaky.runs, a.Observation)
	}
	w := &runner{fn: func(context.Context, int) (string, error) {
		return "", fmt.Errorf("server died: %w", driver.ErrInterrupted)
	}}
	a = call(t, r, "note", `{"path":"c"}`, w, gate.Pending)
	if w.runs != 1 || !a.Ran || a.Approval == nil || a.Approval.Kind != driver.InterruptedSideEffect {
		t.Fatalf("interrupted write: %d runs, %+v; want one run and an %s approval", w.runs, a, driver.InterruptedSideEffect)
	}
}

// A Call's function that outlives the tool's timeout has its context ended
// then, and its result is not taken: the call is interrupted, and Call
// says it was late.
func TestGate_CallPastTheTimeoutIsLate(t *testing.T) {
	e := newEnv(t)
	e.cfg.Tools[1].Timeout = 100 * time.Millisecond // note
	r := open(t, e.gate(t), "call-late")
	f := &runner{fn: func(ctx context.Context, _ int) (string, error) {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			return "", errors.New("the context did not end at the timeout")
		}
		return "written", nil
	}}
	a, err := r.Call(t.Context(), "note", json.RawMessage(`{"path":"a"}`), f.run)
	wantErr(t, err, gate.ErrLate)
	if !a.Ran || a.Verdict != gate.Pending || a.Approval == nil || a.Approval.Kind != driver.InterruptedSideEffect {
		t.Fatalf("late call: got %+v, want ran and pending on %s", a, driver.InterruptedSideEffect)
	}
	if n := count(kinds(t, e.log, "call-late"), events.StepObserved); n != 0 {
		t.Fatalf("observations: %d, want none (the late result is not recorded)", n)
	}
}

// A Call's function has its context ended when the caller's ends while it
// runs, and what it returns then is recorded (the caller gave up, the
// call ran); a caller whose context can never end (context.Background)
// has its call run all the same.
func TestGate_CallsFunctionEndsWithTheCallersContext(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "call-caller-ends")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	f := &runner{fn: func(fctx context.Context, _ int) (string, error) {
		cancel()
		select {
		case <-fctx.Done():
			return "", fmt.Errorf("stopped: %w", fctx.Err())
		case <-time.After(5 * time.Second):
			return "", errors.New("the function's context did not end with the caller's")
		}
	}}
	a, err := r.Call(ctx, "read", json.RawMessage(`{"path":"a"}`), f.run)
	if err != nil || !a.Ran || a.Verdict != gate.Done || a.Observation == nil ||
		a.Observation.Kind != events.ObsToolError || a.Observation.Content != "stopped: "+context.Canceled.Error() {
		t.Fatalf("call whose caller gave up while it ran: got %+v, %v; want it done with a tool error saying it stopped", a, err)
	}
	call(t, r, "read", `{"path":"b"}`, &runner{}, gate.Done)
	b, err := r.Call(context.Background(), "read", json.RawMessage(`{"path":"c"}`), (&runner{}).run)
	if err != nil || b.Verdict != gate.Done || b.Observation.Content != `ran {"path":"c"}` {
		t.Fatalf("call with a context that never ends: got %+v, %v", b, err)
	}
}

// A Call whose context has ended records nothing and runs nothing; one
// whose context ends before the allow is stored does not run either.
func TestGate_CallWithAnEndedContextRunsNothing(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "call-gaveup")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	f := &runner{}
	before := kinds(t, e.log, r.ID())
	_, err := r.Call(ctx, "read", json.RawMessage(`{"path":"a"}`), f.run)
	wantErr(t, err, context.Canceled)
	if after := kinds(t, e.log, r.ID()); len(after) != len(before) || f.runs != 0 {
		t.Fatalf("after a cancelled call: events %v (want %v), %d runs (want 0)", after, before, f.runs)
	}
	// Cancelled while the gate decides (the policy is the last thing asked
	// before the allow is stored): the step is recorded as not run.
	e2 := newEnv(t)
	ctx2, cancel2 := context.WithCancel(t.Context())
	e2.cfg.Policy = cancelling{e2.cfg.Policy, cancel2}
	r2 := open(t, e2.gate(t), "call-gaveup2")
	_, err = r2.Call(ctx2, "read", json.RawMessage(`{"path":"a"}`), f.run)
	wantErr(t, err, context.Canceled)
	if f.runs != 0 {
		t.Fatalf("runs after the caller gave up before the allow: %d, want 0", f.runs)
	}
	v := view(t, r2)
	if s := v.Step(1); s == nil || s.Observation == nil || s.Observation.Kind != events.ObsToolError {
		t.Fatalf("step 1: got %+v, want a tool error saying it did not run", s)
	}
	// The run is still usable.
	call(t, r2, "read", `{"path":"b"}`, f, gate.Done)
}

// cancelling is a policy that ends a caller's context as it is asked.
type cancelling struct {
	policy.Policy
	cancel context.CancelFunc
}

func (c cancelling) Evaluate(ctx context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	c.cancel()
	return c.Policy.Evaluate(ctx, req, v)
}
