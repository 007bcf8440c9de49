package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
)

// openOn starts a server storing in dir and opens the log on it over TCP.
func openOn(t *testing.T, dir string, port int) (*embedded.Server, *events.Log) {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{Dir: dir, Port: port})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(srv.Stop)
	nc, err := nats.Connect(srv.ClientURL(), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	return srv, testkit.OnConn(t, srv, nc).Log(t, events.Config{})
}

// TestDriver_ServerGoneMidRunLosesNothing: the server goes away while a
// remote call executes. The driver cannot record the observation: Drive
// returns an error and executes nothing more. Nothing acknowledged is lost:
// on the same store, a new server and a new driver find the call allowed and
// unobserved, and pause it on an interrupted_side_effect approval instead of
// running it again.
func TestDriver_ServerGoneMidRunLosesNothing(t *testing.T) {
	dir := t.TempDir()
	srv, log := openOn(t, dir, -1)
	send := testkit.NewLedger("send", events.RemoteMutation, testkit.AnyObject)
	send.Result = func(context.Context, json.RawMessage) (string, error) {
		srv.Stop() // the server dies while the call is in flight
		return "sent", nil
	}
	allow := policy.WithID(policy.SideEffectPolicy{events.RemoteMutation: events.Allow}, "allow remote")
	d, err := driver.New(driver.Config{Log: log, Policy: allow, Tools: []driver.Tool{send}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := d.Create(ctx, "lost-server", "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = d.Drive(ctx, r, testkit.NewScript(testkit.Call("send", `{}`), testkit.Call("send", `{"again":true}`)))
	if err == nil {
		t.Fatal("Drive with the server gone: nil error, want the failed append reported")
	}
	if errors.Is(err, events.ErrConflict) {
		t.Errorf("Drive: got a conflict, want the transport error: %v", err)
	}
	if got := send.Count(); got != 1 {
		t.Fatalf("send executed %d times, want 1", got)
	}

	_, log2 := openOn(t, dir, -1)
	d2, err := driver.New(driver.Config{Log: log2, Policy: allow, Tools: []driver.Tool{send}})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := d2.Load(ctx, "lost-server")
	if err != nil {
		t.Fatalf("load after restart: %v", err)
	}
	v2 := r2.View()
	if s := v2.Step(1); s == nil || !s.Executing() {
		t.Fatalf("step 1 after restart: %+v, want the acknowledged allow with no observation", s)
	}
	if err := d2.Drive(ctx, r2, testkit.NewScript()); err != nil {
		t.Fatal(err)
	}
	v := r2.View()
	a := v.PendingApproval()
	if v.Run.Status != projector.Waiting || a == nil || a.Kind != driver.InterruptedSideEffect {
		t.Fatalf("after recovery: status %s approval %+v, want WAITING on %s", v.Run.Status, a, driver.InterruptedSideEffect)
	}
	if got := send.Count(); got != 1 {
		t.Errorf("send executed %d times after recovery, want still 1", got)
	}
}

// TestDriver_ServerGoneBeforeTheDecisionIsStoredAsksTheAgentOnce: the
// server goes away while the agent decides, so its decision cannot be
// recorded. Driving the same run again once a server is back (a new
// connection, a new driver) records that decision instead of asking the
// agent again: a model is not billed twice for one step because the log
// was away (issue 10, item 7).
func TestDriver_ServerGoneBeforeTheDecisionIsStoredAsksTheAgentOnce(t *testing.T) {
	dir := t.TempDir()
	srv, log := openOn(t, dir, -1)
	send := testkit.NewLedger("send", events.RemoteMutation, testkit.AnyObject)
	allow := policy.WithID(policy.SideEffectPolicy{events.RemoteMutation: events.Allow, events.ReadOnly: events.Allow}, "allow")
	d, err := driver.New(driver.Config{Log: log, Policy: allow, Tools: []driver.Tool{send, done()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := d.Create(ctx, "lost-before-decision", "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	agent := driver.AgentFunc(func(_ context.Context, in driver.StepInput) (driver.Action, error) {
		asked++
		if asked == 1 {
			srv.Stop() // the server dies while the model thinks
			return testkit.Call("send", `{"n":1}`), nil
		}
		return testkit.Call("done", `{}`), nil
	})
	if err := d.Drive(ctx, r, agent); err == nil {
		t.Fatal("Drive with the server gone: nil error, want the failed append reported")
	}
	_, log2 := openOn(t, dir, -1)
	d2, err := driver.New(driver.Config{Log: log2, Policy: allow, Tools: []driver.Tool{send, done()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Drive(ctx, r, agent); err != nil {
		t.Fatal(err)
	}
	if asked != 2 {
		t.Errorf("agent asked %d times, want 2 (once for the send, once for the end)", asked)
	}
	if calls := send.Calls(); len(calls) != 1 || string(calls[0]) != `{"n":1}` {
		t.Errorf("send calls %q, want the first decision once", calls)
	}
	if v := r.View(); v.Run.Status != projector.Completed {
		t.Errorf("run %s, want COMPLETED", v.Run.Status)
	}
}

// TestDriver_ResultNotStoredIsRecordedByTheSameProcess: the server goes
// away while a remote call executes, so its observation cannot be stored.
// The process that ran it holds the result: once a server is back, driving
// the same run records that result as the step's observation, rather than
// recovering the call as interrupted and asking an operator whether a call
// whose result it had took effect (which, granted, runs it twice). It is
// recorded first, before the drive records anything else (here, a tool
// withheld meanwhile), which would move the run past where it was kept.
func TestDriver_ResultNotStoredIsRecordedByTheSameProcess(t *testing.T) {
	dir := t.TempDir()
	srv, log := openOn(t, dir, -1)
	send := testkit.NewLedger("send", events.RemoteMutation, testkit.AnyObject)
	send.Result = func(context.Context, json.RawMessage) (string, error) {
		srv.Stop()
		return "sent", nil
	}
	allow := policy.WithID(policy.SideEffectPolicy{events.RemoteMutation: events.Allow, events.ReadOnly: events.Allow}, "allow")
	d, err := driver.New(driver.Config{Log: log, Policy: allow, Tools: []driver.Tool{send, done()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := d.Create(ctx, "result-kept", "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	agent := testkit.NewScript(testkit.Call("send", `{}`), testkit.Call("done", `{}`))
	if err := d.Drive(ctx, r, agent); err == nil {
		t.Fatal("Drive with the server gone: nil error, want the failed append reported")
	}
	if n, ok := r.Kept(); !ok || n != 1 {
		t.Fatalf("kept after the failed observation: step %d, %v; want step 1 kept", n, ok)
	}
	_, log2 := openOn(t, dir, -1)
	withheld := func() []events.WithheldTool {
		return []events.WithheldTool{{Name: "other", Status: "changed", Change: "its description"}}
	}
	d2, err := driver.New(driver.Config{Log: log2, Policy: allow, Tools: []driver.Tool{send, done()}, Withheld: withheld})
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Drive(ctx, r, agent); err != nil {
		t.Fatal(err)
	}
	v := r.View()
	if len(v.Run.Withheld) != 1 {
		t.Fatalf("withheld after the drive: %+v, want the one withheld meanwhile recorded", v.Run.Withheld)
	}
	if o := v.Step(1).Observation; o == nil || o.Kind != events.ObsResult || o.Content != "sent" {
		t.Fatalf("step 1's observation: %+v, want the result the call returned", o)
	}
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	if got := send.Count(); got != 1 {
		t.Errorf("send executed %d times, want once", got)
	}
	recs := records(t, log2, r.ID())
	if n := len(ofKind(recs, events.ApprovalRequested)) + len(ofKind(recs, events.StepInterrupted)); n != 0 {
		t.Errorf("%d recovery events, want none: the result was known", n)
	}
}

// Keep refuses what is not the last step's allowed call without an
// observation, on a run that runs.
func TestRun_KeepOnlyTheLastUnobservedCall(t *testing.T) {
	p := pauseOnSend(t, driver.Config{}, `{"to":"ops"}`)
	if p.r.Keep(1, events.ObsToolError, "not run") {
		t.Fatal("kept an observation for a step that waits on an approval")
	}
	grant(t, p.d, p.r, p.kp)
	drive(t, p.d, p.r, p.agent)
	if p.r.Keep(1, events.ObsToolError, "not run") {
		t.Fatal("kept an observation on an ended run")
	}
	if _, ok := p.r.Kept(); ok {
		t.Fatal("Kept says a refused Keep is kept")
	}
}
