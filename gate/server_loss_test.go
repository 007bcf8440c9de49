package gate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
)

// waitFor polls cond every 10ms for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
	}
}

// onRestartable is an env whose log is on a server the test stops and
// starts again, over a connection that reconnects without end and, with
// no buffer, fails a publish at once while the server is away (as the
// arbiter commands connect).
func onRestartable(t *testing.T) (*env, *testkit.Restartable, *nats.Conn) {
	t.Helper()
	up := testkit.RestartableJetStream(t)
	nc, err := nats.Connect(up.Server().ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	e := newEnv(t)
	e.cfg.Log = testkit.OnConn(t, up.Server(), nc).Log(t, events.Config{})
	e.log = e.cfg.Log
	return e, up, nc
}

// A call whose decision could not be stored (the server away) is that
// call's alone: the program is told it failed, nothing ran, and once the
// server is back the program's next call, another one, is recorded and run
// as itself. The driver keeps a decision it could not store to send it
// again rather than ask its agent twice; a gate's agent is the program's
// call, and a call given up on must not become the decision of the next.
func TestGate_ACallLostWithTheServerIsNotTheNextCallsDecision(t *testing.T) {
	e, up, nc := onRestartable(t)
	start, stop, log := up.Start, up.Stop, e.cfg.Log
	r := open(t, e.gate(t), "lost-call")

	f := &runner{fn: func(context.Context, int) (string, error) { return "done", nil }}
	stop()
	waitFor(t, "the client to see the server gone", func() bool { return !nc.IsConnected() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if a, err := r.Call(ctx, "note", json.RawMessage(`{"path":"first"}`), f.run); err == nil || a.Ran {
		t.Fatalf("call with the server away: %+v, %v; want an error and nothing run", a, err)
	}
	if f.runs != 0 {
		t.Fatalf("the call ran %d times with its decision unstored", f.runs)
	}

	start()
	waitFor(t, "the client to reconnect", nc.IsConnected)
	a, err := r.Call(t.Context(), "read", json.RawMessage(`{"path":"second"}`), f.run)
	if err != nil || a.Verdict != gate.Done {
		recs, _, _ := log.Read(t.Context(), r.ID())
		for _, rec := range recs {
			t.Logf("%s %s", rec.Event.Kind, rec.Event.Body)
		}
		t.Fatalf("the next call: %+v, %v; want it done", a, err)
	}
	if f.runs != 1 || f.args[0] != `{"path":"second"}` {
		t.Fatalf("the next call ran %d times with %q, want once with its own arguments", f.runs, f.args)
	}
	if a.Step != 1 || a.Observation == nil || a.Observation.Content != "done" {
		t.Fatalf("the next call's answer: %+v, want step 1 done", a)
	}
	// The same through Ask and Report.
	stop()
	waitFor(t, "the client to see the server gone", func() bool { return !nc.IsConnected() })
	if a, err := r.Ask(ctx, "note", json.RawMessage(`{"path":"third"}`)); err == nil {
		t.Fatalf("ask with the server away: %+v, want an error", a)
	}
	start()
	waitFor(t, "the client to reconnect", nc.IsConnected)
	if a := ask(t, r, "read", `{"path":"fourth"}`, gate.Allow); a.Step != 2 || string(a.Args) != `{"path":"fourth"}` {
		t.Fatalf("the next ask: %+v, want step 2 allowed with its own arguments", a)
	}
	report(t, r, "read")

	recs, _, err := log.Read(t.Context(), r.ID())
	if err != nil {
		t.Fatal(err)
	}
	var decided []string
	for _, rec := range recs {
		if rec.Event.Kind == events.StepDecided {
			var b events.StepDecidedBody
			if err := json.Unmarshal(rec.Event.Body, &b); err != nil {
				t.Fatal(err)
			}
			decided = append(decided, b.Tool+" "+b.Args)
		}
	}
	if want := []string{`read {"path":"second"}`, `read {"path":"fourth"}`}; !slices.Equal(decided, want) {
		t.Fatalf("decisions recorded: %q, want %q: the calls made once the server was back, and nothing of those before", decided, want)
	}
}

// A call that ran, but whose result could not be stored (the server went
// away while it ran), is recorded with the result this process holds once
// the server is back, with nothing asked: not taken for a call that may
// still be running elsewhere, nor recovered as interrupted (which asks an
// operator whether it took effect, and, granted, runs it again).
func TestGate_AResultNotStoredIsRecordedOnceTheServerIsBack(t *testing.T) {
	e, up, nc := onRestartable(t)
	e.cfg.Now = time.Now
	r := open(t, e.gate(t), "result-kept")
	f := &runner{fn: func(_ context.Context, n int) (string, error) {
		if n == 1 {
			up.Stop() // the server goes away while the call runs
			waitFor(t, "the client to see the server gone", func() bool { return !nc.IsConnected() })
		}
		return fmt.Sprintf("wrote %d", n), nil
	}}
	if a, err := r.Call(t.Context(), "note", json.RawMessage(`{"path":"a"}`), f.run); err == nil || !a.Ran {
		t.Fatalf("call whose result could not be stored: %+v, %v; want it ran and an error", a, err)
	}
	up.Start()
	waitFor(t, "the kept result recorded", func() bool {
		recs, _, err := e.cfg.Log.Read(t.Context(), r.ID())
		return err == nil && slices.ContainsFunc(recs, func(rec events.Record) bool { return rec.Event.Kind == events.StepObserved })
	})
	v := view(t, r)
	if o := v.Step(1).Observation; o == nil || o.Kind != events.ObsResult || o.Content != "wrote 1" {
		t.Fatalf("step 1's observation: %+v, want the result the call returned", o)
	}
	if a := call(t, r, "note", `{"path":"b"}`, f, gate.Done); a.Step != 2 {
		t.Fatalf("the next call: %+v, want it step 2", a)
	}
	ks := kinds(t, e.cfg.Log, r.ID())
	if count(ks, events.ApprovalRequested)+count(ks, events.StepInterrupted) != 0 || f.runs != 2 {
		t.Fatalf("events %v after %d runs: want no recovery and each call run once", ks, f.runs)
	}
}

// A call whose allow was stored although its append was not confirmed
// (the server's answers held back: a stalled server, a paused machine),
// and which therefore never ran, is recorded as not run before the next
// call: not taken for a call that may still be running elsewhere, nor
// recovered later as interrupted, for an operator to settle.
func TestGate_AnAllowNotConfirmedIsRecordedNotRun(t *testing.T) {
	e := newEnv(t)
	g, rl := relayed(t, e)
	r := open(t, g, "unconfirmed")
	f := &runner{}

	// What the server says does not come back: the append waits out its
	// ack (5 s) and the read of the run's last message that would settle
	// it (5 s more), and fails.
	rl.hold(true)
	if a, err := r.Call(t.Context(), "note", json.RawMessage(`{"path":"a"}`), f.run); err == nil || a.Ran || f.runs != 0 {
		t.Fatalf("call with the server's answers held back: %+v, %v after %d runs; want an error and nothing run", a, err, f.runs)
	}
	rl.hold(false)
	// The allow was stored all the same.
	waitFor(t, "the allow stored", func() bool { return count(kinds(t, e.log, r.ID()), events.StepDecided) == 1 })

	a := call(t, r, "read", `{"path":"b"}`, f, gate.Done)
	v := view(t, r)
	if o := v.Step(1).Observation; a.Step != 2 || o == nil || o.Kind != events.ObsToolError || !strings.HasPrefix(o.Content, "not run") {
		t.Fatalf("the next call %+v, step 1's observation %+v; want step 1 recorded not run and the call step 2", a, o)
	}
	if f.runs != 1 || f.args[0] != `{"path":"b"}` {
		t.Fatalf("ran %d times (%q), want the next call alone", f.runs, f.args)
	}
}

// relay is a TCP relay on 127.0.0.1 in front of a NATS server that can
// hold back what the server sends while passing on what clients send, as
// a stalled server or a paused machine does, and can cut the connection
// as a client sends something, which the server then never gets.
type relay struct {
	url  string
	mu   sync.Mutex
	held bool
	cond *sync.Cond
	cut  []byte // cut the connection at the chunk a client sends holding it
	cuts int
}

func newRelay(t *testing.T, target string) *relay {
	t.Helper()
	addr := strings.TrimPrefix(target, "nats://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	rl := &relay{url: "nats://" + ln.Addr().String()}
	rl.cond = sync.NewCond(&rl.mu)
	t.Cleanup(func() { rl.hold(false) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			go func() { rl.forth(c, s); s.Close(); c.Close() }()
			go func() { rl.back(c, s); c.Close() }()
		}
	}()
	return rl
}

// forth copies what the client c sends to the server s, but for the chunk
// that holds the pattern to cut at, which ends the connection instead.
func (rl *relay) forth(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			rl.mu.Lock()
			cut := rl.cut != nil && bytes.Contains(buf[:n], rl.cut)
			if cut {
				rl.cut, rl.cuts = nil, rl.cuts+1
			}
			rl.mu.Unlock()
			if cut {
				return
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cutAt has the relay cut the connection at the next chunk a client sends
// holding pattern; cutCount is how many cuts it made.
func (rl *relay) cutAt(pattern string) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.cut = []byte(pattern)
}

func (rl *relay) cutCount() int {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.cuts
}

// back copies what the server s sends to the client c, waiting while held.
func (rl *relay) back(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		rl.mu.Lock()
		for rl.held {
			rl.cond.Wait()
		}
		rl.mu.Unlock()
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (rl *relay) hold(on bool) {
	rl.mu.Lock()
	rl.held = on
	rl.mu.Unlock()
	rl.cond.Broadcast()
}

// relayed opens a second gate on e's log through a relay that can hold
// back what the server sends: another process, on a connection that can
// stall.
func relayed(t *testing.T, e *env) (*gate.Gate, *relay) {
	t.Helper()
	srv := testkit.JetStream(t).Server
	rl := newRelay(t, srv.ClientURL())
	nc, err := nats.Connect(rl.url, nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ncB, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ncB.Close)
	e.cfg.Log = testkit.OnConn(t, srv, ncB).Log(t, events.Config{})
	e.log = e.cfg.Log
	cfg := e.cfg
	cfg.Log = testkit.OnConn(t, srv, nc).Log(t, events.Config{})
	g, err := gate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, rl
}

// A process whose append went unconfirmed records "not run" only over its
// own allow, by that event's bytes: when what the run ends with is another
// process's allow of a call it is running, nothing is recorded over it.
func TestGate_NotRunIsRecordedOnlyOverThisProcesssOwnAllow(t *testing.T) {
	e := newEnv(t)
	// B's call outlasts A's, which waits out 10 s for the server's answers.
	e.cfg.Tools = slices.Clone(e.cfg.Tools)
	for i := range e.cfg.Tools {
		e.cfg.Tools[i].Timeout = time.Minute
	}
	gA, rl := relayed(t, e)
	rB := open(t, e.gate(t), "two-holders")
	rA, err := gA.Resume(t.Context(), rB.ID())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rA.Close)

	// B's call is allowed and runs until released.
	release, done := callHeld(t, rB, "note", `{"path":"B"}`, "B wrote")
	// A, its view from before B's allow, asks with the server's answers
	// held back: its allow loses the fence at the server, unheard.
	rl.hold(true)
	fA := &runner{}
	if _, err := rA.Call(t.Context(), "read", json.RawMessage(`{"path":"A"}`), fA.run); err == nil || fA.runs != 0 {
		t.Fatalf("A's call with the answers held: %v after %d runs, want an error and nothing run", err, fA.runs)
	}
	rl.hold(false)
	// A's next call finds B's call in flight, and records nothing over it.
	if _, err := rA.Call(t.Context(), "read", json.RawMessage(`{"path":"A"}`), fA.run); !errors.Is(err, gate.ErrElsewhere) {
		t.Fatalf("A's next call: %v, want ErrElsewhere (B's call runs)", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("B's call: %v", err)
	}
	v, err := e.gate(t).Resume(t.Context(), rB.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	bv := view(t, v)
	if o := bv.Step(1).Observation; o == nil || o.Content != "B wrote" {
		t.Fatalf("step 1's observation: %+v, want B's result", o)
	}
}

// A granted call asked again whose resume (the allow that consumes the
// grant) was stored though unconfirmed, and which therefore never ran, is
// recorded not run as a fresh call's allow is: not taken for a call still
// running, nor then for an interrupted one.
func TestGate_AGrantsResumeNotConfirmedIsRecordedNotRun(t *testing.T) {
	e := newEnv(t)
	g, rl := relayed(t, e)
	r := open(t, g, "resume-unconfirmed")
	p := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
	e.decide(t, r.ID(), p.Approval, events.DecisionGrant)
	if err := r.TakeIn(t.Context()); err != nil {
		t.Fatal(err)
	}
	rl.hold(true)
	f := &runner{}
	if _, err := r.Call(t.Context(), "send", json.RawMessage(`{"to":"x@example.com"}`), f.run); err == nil || f.runs != 0 {
		t.Fatalf("the granted call with the answers held: %v after %d runs, want an error and nothing run", err, f.runs)
	}
	rl.hold(false)
	a := call(t, r, "read", `{"path":"b"}`, f, gate.Done)
	v := view(t, r)
	if o := v.Step(1).Observation; a.Step != 2 || o == nil || !strings.HasPrefix(o.Content, "not run") {
		t.Fatalf("the next call %+v, step 1's observation %+v; want step 1 recorded not run", a, o)
	}
	if v.Approval(p.Approval.ID).State != projector.Consumed || f.runs != 1 {
		t.Fatalf("approval %s after %d runs: want the grant consumed by the allow that never ran, and the read alone run", v.Approval(p.Approval.ID).State, f.runs)
	}
}

// A process's unconfirmed append that allowed nothing (here the tool list
// a recovery records first) is no ground for "not run": the call it was
// recovering, another process's, which that process's program ran, is put
// to an operator as any interrupted call, not recorded as never run (a
// fifth outside review had the write run again, unasked).
func TestGate_NotRunIsNeverRecordedOverAnEventThatAllowedNothing(t *testing.T) {
	e := newEnv(t)
	e.cfg.Withheld = func() []events.WithheldTool {
		return []events.WithheldTool{{Name: "rm", Status: "changed", Change: "its description"}}
	}
	gB, rl := relayed(t, e) // B withholds a tool the run has not recorded
	e.cfg.Withheld = nil
	rA := open(t, e.gate(t), "recovered-elsewhere")
	ask(t, rA, "note", `{"path":"x"}`, gate.Allow)
	rA.Close() // the program ran the call, then went away unreported
	e.clk.Advance(10 * time.Second)

	rB, err := gB.Resume(t.Context(), rA.ID())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rB.Close)
	f := &runner{}
	rl.hold(true)
	if _, err := rB.Call(t.Context(), "note", json.RawMessage(`{"path":"x"}`), f.run); err == nil || f.runs != 0 {
		t.Fatalf("B's recovery with the answers held: %v after %d runs, want an error and nothing run", err, f.runs)
	}
	rl.hold(false)
	waitFor(t, "B's tool list stored", func() bool { return count(kinds(t, e.log, rA.ID()), events.RunTools) == 1 })
	e.clk.Advance(10 * time.Second) // past the timeout, counted from the run's last event

	var w *gate.WaitingError
	if _, err := rB.Call(t.Context(), "read", json.RawMessage(`{"path":"y"}`), f.run); !errors.As(err, &w) || w.Approval.Kind != driver.InterruptedSideEffect {
		t.Fatalf("B's next call: %v, want it refused while the interrupted write waits for an operator", err)
	}
	v := view(t, rB)
	if o := v.Step(1).Observation; o != nil || f.runs != 0 {
		t.Fatalf("step 1's observation %+v after %d runs: want none, and nothing run", o, f.runs)
	}
}

// What else a call's first append may be, stored though unconfirmed, with
// nothing run: the decision alone (with arguments too large to carry the
// policy's result in the same event), or the rerun of an interrupted read.
// Either is this process's own event of that call: the call is recorded
// not run, not judged afterwards for a program that gave up on it, nor
// taken for a call running elsewhere (a sixth outside review).
func TestGate_NotRunCoversADecisionAloneAndARerun(t *testing.T) {
	t.Run("a decision stored alone", func(t *testing.T) {
		e := newEnv(t)
		g, rl := relayed(t, e)
		r := open(t, g, "decided-alone")
		f := &runner{}
		big := `{"path":"` + strings.Repeat(`\"`, 240000) + `"}` // a decision of 480 KB: its judgement travels apart
		rl.hold(true)
		if a, err := r.Call(t.Context(), "note", json.RawMessage(big), f.run); err == nil || a.Ran || f.runs != 0 {
			t.Fatalf("the call with the answers held: %+v, %v after %d runs; want an error and nothing run", a, err, f.runs)
		}
		rl.hold(false)
		waitFor(t, "the decision stored", func() bool { return count(kinds(t, e.log, r.ID()), events.StepDecided) == 1 })
		a := call(t, r, "read", `{"path":"b"}`, f, gate.Done)
		v := view(t, r)
		if o := v.Step(1).Observation; a.Step != 2 || o == nil || !strings.HasPrefix(o.Content, "not run") || v.Step(1).Policy != nil {
			t.Fatalf("the next call %+v, step 1 %+v; want step 1 recorded not run, never judged", a, v.Step(1).Observation)
		}
	})
	t.Run("an interrupted read's rerun", func(t *testing.T) {
		e := newEnv(t)
		g, rl := relayed(t, e)
		gone := open(t, g, "rerun")
		ask(t, gone, "read", `{"path":"x"}`, gate.Allow)
		gone.Close() // unreported
		e.clk.Advance(10 * time.Second)
		r, err := g.Resume(t.Context(), gone.ID())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		f := &runner{}
		rl.hold(true)
		if _, err := r.Call(t.Context(), "read", json.RawMessage(`{"path":"x"}`), f.run); err == nil || f.runs != 0 {
			t.Fatalf("the recovery with the answers held: %v after %d runs; want an error and nothing run", err, f.runs)
		}
		rl.hold(false)
		waitFor(t, "the rerun stored", func() bool { return count(kinds(t, e.log, r.ID()), events.StepInterrupted) == 1 })
		a := call(t, r, "read", `{"path":"y"}`, f, gate.Done)
		v := view(t, r)
		if o := v.Step(1).Observation; a.Step != 2 || o == nil || !strings.HasPrefix(o.Content, "not run") {
			t.Fatalf("the next call %+v, step 1's observation %+v; want step 1 recorded not run", a, o)
		}
	})
}

// A call whose first event (its decision) was stored and confirmed, and
// whose next never reached the server (the connection cut as it went
// out), so that nothing ran it, is recorded not run: the run ends with
// this process's own decision of it, by that event's bytes. It is not
// judged afterwards for a program that gave up on it, nor put to an
// operator (a seventh outside review).
func TestGate_ACallCutAfterItsDecisionIsRecordedNotRun(t *testing.T) {
	for _, c := range []struct {
		name, cut, tool, args string
	}{
		// A decision too large to carry its judgement: the allow follows.
		{"its allow", `"kind":"step.policy"`, "note", `{"path":"` + strings.Repeat(`\"`, 240000) + `"}`},
		{"its approval's request", `"kind":"approval.requested"`, "send", `{"to":"x@example.com"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			g, rl := relayed(t, e)
			r := open(t, g, "cut")
			f := &runner{}
			rl.cutAt(c.cut)
			if _, err := r.Call(t.Context(), c.tool, json.RawMessage(c.args), f.run); err == nil || f.runs != 0 || rl.cutCount() != 1 {
				t.Fatalf("the call cut after its decision: %v after %d runs and %d cuts; want an error, nothing run, one cut", err, f.runs, rl.cutCount())
			}
			a := call(t, r, "read", `{"path":"b"}`, f, gate.Done)
			v := view(t, r)
			if o := v.Step(1).Observation; a.Step != 2 || o == nil || !strings.HasPrefix(o.Content, "not run") || v.PendingApproval() != nil {
				t.Fatalf("the next call at step %d; step 1's observation %+v; want step 1 recorded not run and nothing waiting", a.Step, o)
			}
		})
	}
}

// A call the program reported interrupted while the server was away is
// this process's, over: once the server is back the next call is not
// told it may still be running in another process; recovery puts it to an
// operator at once, as any interrupted write.
func TestGate_AnInterruptedReportLostWithTheServerIsRecoveredAtOnce(t *testing.T) {
	e, up, nc := onRestartable(t)
	r := open(t, e.gate(t), "interrupted-away")
	ask(t, r, "note", `{"path":"a"}`, gate.Allow)
	up.Stop()
	waitFor(t, "the client to see the server gone", func() bool { return !nc.IsConnected() })
	if _, err := r.Report(t.Context(), "", fmt.Errorf("the program lost it: %w", driver.ErrInterrupted)); err == nil {
		t.Fatal("report with the server away: no error")
	}
	up.Start()
	waitFor(t, "the client to reconnect", nc.IsConnected)
	_, err := r.Ask(t.Context(), "read", json.RawMessage(`{"path":"b"}`))
	var w *gate.WaitingError
	if !errors.As(err, &w) || w.Approval.Kind != driver.InterruptedSideEffect {
		t.Fatalf("the next call: %v, want it refused while the interrupted write waits for an operator", err)
	}
}
