package gate_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
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

// A call whose decision could not be stored (the server away) is that
// call's alone: the program is told it failed, nothing ran, and once the
// server is back the program's next call, another one, is recorded and run
// as itself. The driver keeps a decision it could not store to send it
// again rather than ask its agent twice; a gate's agent is the program's
// call, and a call given up on must not become the decision of the next.
func TestGate_ACallLostWithTheServerIsNotTheNextCallsDecision(t *testing.T) {
	up := testkit.RestartableJetStream(t)
	start, stop, srv := up.Start, up.Stop, up.Server()
	// Reconnecting, and with no buffer: a publish while the server is
	// away fails at once instead of going out after the reconnect.
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	log := testkit.OnConn(t, srv, nc).Log(t, events.Config{})
	e := newEnv(t)
	e.cfg.Log = log
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
