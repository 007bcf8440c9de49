package gate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/projector"
)

func TestGate_AllowRecordsBeforeAndResultAfter(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "allow")
	a := ask(t, r, "read", `{ "path" : "/etc/motd" }`, gate.Allow)
	if string(a.Args) != `{"path":"/etc/motd"}` || a.Step != 1 {
		t.Fatalf("allow: got step %d args %s, want step 1 with the PolicyJSON form", a.Step, a.Args)
	}
	// The write-ahead record is stored before the program runs the call:
	// the decision, with the allow in the same event (ADR 0017).
	recs, _, err := e.log.Read(t.Context(), r.ID())
	if err != nil {
		t.Fatal(err)
	}
	last := recs[len(recs)-1].Event
	if pb, ok, err := events.PolicyResult(last); err != nil || !ok || pb.Outcome != "allow" || last.Kind != events.StepDecided {
		t.Fatalf("last event when allowed: %s (result %+v, %v, %v), want the decision carrying its allow", last.Kind, pb, ok, err)
	}
	ks := kinds(t, e.log, r.ID())
	report(t, r, "hello")
	ks = kinds(t, e.log, r.ID())
	if ks[len(ks)-1] != events.StepObserved || count(ks, events.StepDecided) != 1 {
		t.Fatalf("events after report: %v, want one decision and the observation last", ks)
	}
	if got := view(t, r).Run.Agent; got != gate.AgentPrefix+"program" {
		t.Errorf("recorded agent: got %q, want %q (the mark workers can skip)", got, gate.AgentPrefix+"program")
	}
	// A second call is the next step.
	ask(t, r, "read", `{"path":"/etc/hosts"}`, gate.Allow)
	if a := report(t, r, "localhost"); a.Step != 2 {
		t.Fatalf("second call: step %d, want 2", a.Step)
	}
}

func TestGate_DenyIsWhatTheModelSees(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "deny")
	for _, c := range []struct {
		tool, args string
		kind       events.ObservationKind
	}{
		{"rm", `{"path":"/"}`, events.ObsPolicyDenied},
		{"read", `{"path":7}`, events.ObsInvalidArguments},
		{"read", `{"path":`, events.ObsInvalidDecision},
		{"launch", `{}`, events.ObsUnknownTool},
	} {
		a := ask(t, r, c.tool, c.args, gate.Deny)
		if a.Observation == nil || a.Observation.Kind != c.kind || a.Observation.Content == "" || a.Ended {
			t.Errorf("ask %s %s: got %+v, want a %s observation and the run going on", c.tool, c.args, a.Observation, c.kind)
		}
	}
	// Nothing was allowed, so nothing is waiting for a report.
	_, err := r.Report(t.Context(), "x", nil)
	wantErr(t, err, gate.ErrNoCall)
}

func TestGate_PendingThenGranted(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "granted")
	p := ask(t, r, "send", `{"to":"ops@example.com"}`, gate.Pending)
	if p.Approval == nil || p.Approval.State != projector.Pending || p.Approval.Step != 1 {
		t.Fatalf("pending: got %+v, want a pending approval of step 1", p.Approval)
	}
	// Asking again before a decision: still the same approval.
	again := ask(t, r, "send", `{"to":"ops@example.com"}`, gate.Pending)
	if again.Approval.ID != p.Approval.ID {
		t.Fatalf("asked again: approval %s, want the same %s", again.Approval.ID, p.Approval.ID)
	}
	e.decide(t, r.ID(), p.Approval, events.DecisionGrant)
	// The same request, spelled differently, is the same call.
	a := ask(t, r, "send", `{ "to":"ops@example.com" }`, gate.Allow)
	if a.Step != 1 || string(a.Args) != `{"to":"ops@example.com"}` {
		t.Fatalf("granted: got step %d args %s", a.Step, a.Args)
	}
	report(t, r, "sent")
	v := view(t, r)
	if got := v.Approval(p.Approval.ID).State; got != projector.Consumed {
		t.Errorf("approval state: got %s, want %s", got, projector.Consumed)
	}
	if v.Run.Status != projector.Running {
		t.Errorf("run status: got %s, want %s", v.Run.Status, projector.Running)
	}
}

func TestGate_PendingThenDenied(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "denied")
	p := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
	e.decide(t, r.ID(), p.Approval, events.DecisionDeny)
	a := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Deny)
	if !a.Ended || a.Observation == nil {
		t.Fatalf("denied: got %+v, want a denial that ended the run", a)
	}
	v := view(t, r)
	if v.Run.Status != projector.Cancelled || v.Run.Reason != string(events.ReasonApprovalDenied) {
		t.Fatalf("run: got %s %s, want %s %s", v.Run.Status, v.Run.Reason, projector.Cancelled, events.ReasonApprovalDenied)
	}
	_, err := r.Ask(t.Context(), "read", json.RawMessage(`{"path":"a"}`))
	var ended *gate.EndedError
	if !errors.As(err, &ended) || ended.Reason != string(events.ReasonApprovalDenied) {
		t.Fatalf("ask after the end: got %v, want an *EndedError for %s", err, events.ReasonApprovalDenied)
	}
}

func TestGate_PendingThenExpired(t *testing.T) {
	e := newEnv(t)
	e.cfg.ApprovalTTL = time.Minute
	r := open(t, e.gate(t), "expired")
	p := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
	// Before the expiry the call still waits: the expiry below is the
	// clock's doing.
	ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
	e.clk.Advance(2 * time.Minute)
	a := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Deny)
	if !a.Ended {
		t.Fatalf("expired: got %+v, want the run ended", a)
	}
	v := view(t, r)
	if v.Run.Reason != string(events.ReasonApprovalExpired) || v.Approval(p.Approval.ID).State != projector.Expired {
		t.Fatalf("run: got %s, approval %s; want %s and expired", v.Run.Reason, v.Approval(p.Approval.ID).State, events.ReasonApprovalExpired)
	}
}

func TestGate_GrantIsUsedOnce(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "once")
	p := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
	e.decide(t, r.ID(), p.Approval, events.DecisionGrant)
	ask(t, r, "send", `{"to":"x@example.com"}`, gate.Allow)
	report(t, r, "sent")
	// The identical call again is a new step with an approval of its own.
	again := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
	if again.Approval.ID == p.Approval.ID || again.Step != 2 {
		t.Fatalf("second call: approval %s step %d, want a new approval on step 2", again.Approval.ID, again.Step)
	}
	if n := count(kinds(t, e.log, r.ID()), events.StepObserved); n != 1 {
		t.Fatalf("observations: %d, want 1 (the call ran once)", n)
	}
}

// Two programs that hold the same run (two processes after a restart, or
// two gateways) and ask the granted call at once: the grant is consumed by
// one fenced append, so exactly one is allowed.
func TestGate_GrantUsedTwiceAtOnceRunsOnce(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "race")
	p := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
	r.Close()
	e.decide(t, "race", p.Approval, events.DecisionGrant)
	var runs [2]*gate.Run
	for i := range runs {
		g := e.gate(t)
		rr, err := g.Resume(t.Context(), "race")
		if err != nil {
			t.Fatalf("resume: %v", err)
		}
		t.Cleanup(rr.Close)
		runs[i] = rr
	}
	var wg sync.WaitGroup
	answers := make([]gate.Answer, 2)
	errs := make([]error, 2)
	for i, rr := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = rr.Ask(t.Context(), "send", json.RawMessage(`{"to":"x@example.com"}`))
			if errs[i] == nil && answers[i].Verdict == gate.Allow {
				_, errs[i] = rr.Report(t.Context(), "sent", nil)
			}
		}()
	}
	wg.Wait()
	allowed := 0
	for i := range runs {
		if errs[i] == nil && answers[i].Verdict == gate.Allow {
			allowed++
		}
	}
	consumed := 0
	recs, _, err := e.log.Read(t.Context(), "race")
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.Event.Kind != events.StepPolicy {
			continue
		}
		var b events.PolicyBody
		if err := json.Unmarshal(rec.Event.Body, &b); err != nil {
			t.Fatal(err)
		}
		if b.Consumes == p.Approval.ID {
			consumed++
		}
	}
	if allowed != 1 || consumed != 1 {
		t.Fatalf("allowed %d times, grant consumed %d times (answers %+v, errors %v); want 1 and 1", allowed, consumed, answers, errs)
	}
}

func TestGate_ChangedArgumentsAfterApprovalAreRefused(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "changed")
	p := ask(t, r, "send", `{"to":"a@example.com"}`, gate.Pending)
	e.decide(t, r.ID(), p.Approval, events.DecisionGrant)
	for _, c := range []struct{ tool, args string }{
		{"send", `{"to":"b@example.com"}`},
		{"read", `{"path":"a"}`},
	} {
		_, err := r.Ask(t.Context(), c.tool, json.RawMessage(c.args))
		var w *gate.WaitingError
		if !errors.As(err, &w) || w.Approval.ID != p.Approval.ID {
			t.Fatalf("ask %s %s while a grant waits: got %v, want a *WaitingError naming %s", c.tool, c.args, err, p.Approval.ID)
		}
	}
	// The grant was not consumed by them: the approved call still runs.
	ask(t, r, "send", `{"to":"a@example.com"}`, gate.Allow)
	report(t, r, "sent")
	if v := view(t, r); v.Approval(p.Approval.ID).State != projector.Consumed {
		t.Fatalf("approval: got %s, want consumed", v.Approval(p.Approval.ID).State)
	}
}

func TestGate_UnreportedWriteAfterRestartWaitsForAnOperator(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "restart")
	ask(t, r, "note", `{"path":"a"}`, gate.Allow)
	_, err := r.Ask(t.Context(), "read", json.RawMessage(`{"path":"a"}`))
	wantErr(t, err, gate.ErrUnreported)
	r.Close() // the program dies with the call's result unknown

	r2, err := e.gate(t).Resume(t.Context(), "restart")
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	t.Cleanup(r2.Close)
	settleTimeout(t, e, r2, "note", json.RawMessage(`{"path":"a"}`))
	p := ask(t, r2, "note", `{"path":"a"}`, gate.Pending)
	if p.Approval.Kind != driver.InterruptedSideEffect || p.Step != 1 {
		t.Fatalf("after restart: approval %s on step %d, want %s on step 1", p.Approval.Kind, p.Step, driver.InterruptedSideEffect)
	}
	e.decide(t, "restart", p.Approval, events.DecisionGrant)
	ask(t, r2, "note", `{"path":"a"}`, gate.Allow)
	report(t, r2, "written")
}

func TestGate_UnreportedReadAfterRestartRunsAgain(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "reread")
	ask(t, r, "read", `{"path":"a"}`, gate.Allow)
	r.Close()
	r2, err := e.gate(t).Resume(t.Context(), "reread")
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	t.Cleanup(r2.Close)
	settleTimeout(t, e, r2, "read", json.RawMessage(`{"path":"a"}`))
	a := ask(t, r2, "read", `{"path":"a"}`, gate.Allow)
	if a.Step != 1 {
		t.Fatalf("rerun: step %d, want 1", a.Step)
	}
	report(t, r2, "contents")
	if n := count(kinds(t, e.log, "reread"), events.StepInterrupted); n != 1 {
		t.Fatalf("interruptions recorded: %d, want 1", n)
	}
}

// After a restart, asking another call first resolves the interrupted
// one: a write waits for an operator, and the other call is refused.
func TestGate_OtherCallAfterRestartWaitsOnTheInterruptedOne(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "other")
	ask(t, r, "note", `{"path":"a"}`, gate.Allow)
	r.Close()
	r2, err := e.gate(t).Resume(t.Context(), "other")
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	t.Cleanup(r2.Close)
	settleTimeout(t, e, r2, "read", json.RawMessage(`{"path":"b"}`))
	_, err = r2.Ask(t.Context(), "read", json.RawMessage(`{"path":"b"}`))
	var w *gate.WaitingError
	if !errors.As(err, &w) || w.Approval.Kind != driver.InterruptedSideEffect {
		t.Fatalf("got %v, want a *WaitingError on the %s approval", err, driver.InterruptedSideEffect)
	}
}

func TestGate_ResultAfterTimeoutIsLate(t *testing.T) {
	e := newEnv(t)
	e.cfg.Tools[1].Timeout = 100 * time.Millisecond // note
	r := open(t, e.gate(t), "late")
	ask(t, r, "note", `{"path":"a"}`, gate.Allow)
	// The proxy's own deadline ends the wait; Report blocks until it has.
	deadline := time.Now().Add(5 * time.Second)
	for count(kinds(t, e.log, "late"), events.ApprovalRequested) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	a, err := r.Report(t.Context(), "written", nil)
	wantErr(t, err, gate.ErrLate)
	if a.Verdict != gate.Pending || a.Approval == nil || a.Approval.Kind != driver.InterruptedSideEffect {
		t.Fatalf("late report: got %+v, want pending on %s", a, driver.InterruptedSideEffect)
	}
	if n := count(kinds(t, e.log, "late"), events.StepObserved); n != 0 {
		t.Fatalf("observations: %d, want none (the late result is not recorded)", n)
	}
}

func TestGate_ReportedErrors(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "errs")
	ask(t, r, "read", `{"path":"a"}`, gate.Allow)
	a, err := r.Report(t.Context(), "", errors.New("no such file"))
	if err != nil || a.Verdict != gate.Done || a.Observation.Kind != events.ObsToolError {
		t.Fatalf("tool error: got %+v, %v; want a recorded tool_error", a, err)
	}
	// An interrupted write waits for an operator at once.
	ask(t, r, "note", `{"path":"a"}`, gate.Allow)
	a, err = r.Report(t.Context(), "", fmt.Errorf("server died: %w", driver.ErrInterrupted))
	if err != nil || a.Verdict != gate.Pending || a.Approval.Kind != driver.InterruptedSideEffect {
		t.Fatalf("interrupted: got %+v, %v; want pending on %s", a, err, driver.InterruptedSideEffect)
	}
}

// A read-only call reported interrupted is tried once more by recovery,
// which no program waits for (the program is in Report): it is recorded
// as a tool error at once, not after the tool's timeout.
func TestGate_InterruptedReadReportedIsAToolErrorAtOnce(t *testing.T) {
	e := newEnv(t)
	e.cfg.Tools[0].Timeout = 2 * time.Second // read
	r := open(t, e.gate(t), "interrupted-read")
	ask(t, r, "read", `{"path":"a"}`, gate.Allow)
	a, err := r.Report(t.Context(), "", fmt.Errorf("server died: %w", driver.ErrInterrupted))
	if err != nil || a.Verdict != gate.Done {
		t.Fatalf("report: got %+v, %v; want done", a, err)
	}
	// Waiting out the timeout would end the rerun with the deadline's
	// error instead.
	if a.Observation == nil || a.Observation.Kind != events.ObsToolError || !strings.Contains(a.Observation.Content, "no program waits") {
		t.Fatalf("interrupted read: got %+v, want a tool_error saying no program waits", a.Observation)
	}
	if n := count(kinds(t, e.log, "interrupted-read"), events.StepInterrupted); n != 1 {
		t.Fatalf("interruptions: %d, want 1 (the rerun)", n)
	}
}

func TestGate_AskWithAnEndedContextRecordsNothing(t *testing.T) {
	e := newEnv(t)
	r := open(t, e.gate(t), "gaveup")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	before := kinds(t, e.log, r.ID())
	_, err := r.Ask(ctx, "read", json.RawMessage(`{"path":"a"}`))
	wantErr(t, err, context.Canceled)
	if after := kinds(t, e.log, r.ID()); len(after) != len(before) {
		t.Fatalf("events after a cancelled ask: %v, want %v", after, before)
	}
	// The run is still usable.
	ask(t, r, "read", `{"path":"b"}`, gate.Allow)
	report(t, r, "b")
}

func TestNew_RefusesBadConfig(t *testing.T) {
	e := newEnv(t)
	bad := e.cfg
	bad.Tools = append([]driver.Spec(nil), e.cfg.Tools...)
	bad.Tools[0].SideEffect = "remote"
	if _, err := gate.New(bad); !errors.Is(err, driver.ErrBadTool) {
		t.Fatalf("bad class: got %v, want %v", err, driver.ErrBadTool)
	}
	bad.Tools = nil
	if _, err := gate.New(bad); err == nil {
		t.Fatal("no tools: got no error")
	}
}

// settleTimeout holds that a call allowed less than its timeout ago is
// taken to be running elsewhere (and nothing is recorded), then moves the
// clock past the timeout, after which the call is the program's to recover.
func settleTimeout(t *testing.T, e *env, r *gate.Run, tool string, args json.RawMessage) {
	t.Helper()
	before := kinds(t, e.log, r.ID())
	_, err := r.Ask(t.Context(), tool, args)
	wantErr(t, err, gate.ErrElsewhere)
	if after := kinds(t, e.log, r.ID()); len(after) != len(before) {
		t.Fatalf("events: %v after the refused ask, want %v", after, before)
	}
	e.clk.Advance(time.Minute)
}

// A read-only call not reported in time is tried once more by recovery,
// which no program waits for: it is recorded as a tool error at once, not
// after a second timeout.
func TestGate_UnreportedReadAfterTimeoutIsAToolError(t *testing.T) {
	e := newEnv(t)
	e.cfg.Tools[0].Timeout = 100 * time.Millisecond // read
	r := open(t, e.gate(t), "lateread")
	ask(t, r, "read", `{"path":"a"}`, gate.Allow)
	deadline := time.Now().Add(5 * time.Second)
	for count(kinds(t, e.log, "lateread"), events.StepObserved) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	a, err := r.Report(t.Context(), "a", nil)
	wantErr(t, err, gate.ErrLate)
	// The rerun was refused at once ("no program waits"), not left to
	// wait out a second timeout ("no result reported").
	if a.Observation == nil || a.Observation.Kind != events.ObsToolError || !strings.Contains(a.Observation.Content, "no program waits") {
		t.Fatalf("late read: got %+v, want a tool_error saying no program waits", a.Observation)
	}
	if n := count(kinds(t, e.log, "lateread"), events.StepInterrupted); n != 1 {
		t.Fatalf("interruptions: %d, want 1", n)
	}
}

// A run ended by another writer (an operator's cancel) while this process
// held it: the next ask loses the fence, reads the run again and says it
// has ended; nothing of the call is recorded after the end.
func TestGate_RunEndedElsewhereIsEnded(t *testing.T) {
	e := newEnv(t)
	g := e.gate(t)
	r := open(t, g, "cancelled")
	ask(t, r, "read", `{"path":"a"}`, gate.Allow)
	report(t, r, "a")
	other, err := g.Driver().Load(t.Context(), "cancelled")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Driver().Fail(t.Context(), other, "cancelled_by_operator", "stop"); err != nil {
		t.Fatal(err)
	}
	_, err = r.Ask(t.Context(), "read", json.RawMessage(`{"path":"b"}`))
	var ended *gate.EndedError
	if !errors.As(err, &ended) || ended.Reason != "cancelled_by_operator" {
		t.Fatalf("ask after the run was ended elsewhere: got %v, want an *EndedError", err)
	}
	ks := kinds(t, e.log, "cancelled")
	if ks[len(ks)-1] != events.RunFailed {
		t.Fatalf("events: %v, want the end last", ks)
	}
}

// TestGate_ResumeRefusesARunItDidNotOpen: a run a fleet drives (its agent
// is not gate:<actor>) is not resumed as a gate run: asking calls on it
// would make the program its agent beside the workers, under whatever
// actor the run was created with. Nothing is recorded on it.
func TestGate_ResumeRefusesARunItDidNotOpen(t *testing.T) {
	e := newEnv(t)
	g := e.gate(t)
	if _, err := g.Driver().Create(t.Context(), "fleet-run", "scripted", nil); err != nil {
		t.Fatal(err)
	}
	before := len(kinds(t, e.log, "fleet-run"))
	_, err := g.Resume(t.Context(), "fleet-run")
	wantErr(t, err, gate.ErrNotGateRun)
	if !strings.Contains(err.Error(), `"scripted"`) {
		t.Errorf("error %q does not name the run's agent", err)
	}
	if after := len(kinds(t, e.log, "fleet-run")); after != before {
		t.Errorf("resume recorded %d events on a run it refused", after-before)
	}
	// A gate run is resumed as before.
	open(t, g, "mine").Close()
	r, err := g.Resume(t.Context(), "mine")
	if err != nil {
		t.Fatalf("resume a gate run: %v", err)
	}
	r.Close()
}
