package gate_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nkeys"
)

const (
	pathSchema = `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`
	toSchema   = `{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`
)

// env is a log, an operator, and the gate config the tests share: read
// (read_only, allowed), note (local_mutation, allowed), send
// (remote_mutation, needs an approval), rm (destructive, denied), under the
// default side-effect policy.
type env struct {
	log *events.Log
	kp  nkeys.KeyPair
	cfg gate.Config
	clk *clock
}

func newEnv(t *testing.T) *env { return newEnvB(t) }

func newEnvB(t testing.TB) *env {
	t.Helper()
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatalf("create operator key: %v", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatalf("operator public key: %v", err)
	}
	spec := func(name string, class events.SideEffect, schema string) driver.Spec {
		return driver.Spec{Name: name, Description: name, Schema: json.RawMessage(schema), SideEffect: class, Timeout: 5 * time.Second}
	}
	clk := &clock{now: time.Now()}
	return &env{log: log, kp: kp, clk: clk, cfg: gate.Config{
		Log: log, Policy: policy.DefaultSideEffects(), Operators: approvals.Operators{pub: "alice"}, Now: clk.Now,
		Tools: []driver.Spec{
			spec("read", events.ReadOnly, pathSchema),
			spec("note", events.LocalMutation, pathSchema),
			spec("send", events.RemoteMutation, toSchema),
			spec("rm", events.Destructive, pathSchema),
		},
	}}
}

func (e *env) gate(t *testing.T) *gate.Gate {
	t.Helper()
	g, err := gate.New(e.cfg)
	if err != nil {
		t.Fatalf("gate.New: %v", err)
	}
	return g
}

func open(t *testing.T, g *gate.Gate, id string) *gate.Run {
	t.Helper()
	r, err := g.Open(t.Context(), id, "program", json.RawMessage(`{}`))
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	t.Cleanup(r.Close)
	return r
}

func ask(t *testing.T, r *gate.Run, tool, args string, want gate.Verdict) gate.Answer {
	t.Helper()
	a, err := r.Ask(t.Context(), tool, json.RawMessage(args))
	if err != nil {
		t.Fatalf("ask %s %s: %v", tool, args, err)
	}
	if a.Verdict != want {
		t.Fatalf("ask %s %s: got %s (%+v), want %s", tool, args, a.Verdict, a, want)
	}
	return a
}

func report(t *testing.T, r *gate.Run, out string) gate.Answer {
	t.Helper()
	a, err := r.Report(t.Context(), out, nil)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	if a.Verdict != gate.Done || a.Observation == nil || a.Observation.Kind != events.ObsResult || a.Observation.Content != out {
		t.Fatalf("report: got %+v, want done with result %q", a, out)
	}
	return a
}

// decide signs and publishes decision on approval a of run, as `arbiter
// grant` and `arbiter deny` do.
func (e *env) decide(t *testing.T, run string, a *projector.Approval, decision string) {
	t.Helper()
	if _, err := client.New(e.log, nil).Decide(t.Context(), e.kp, run, a.ID, client.Decision{Decision: decision, Reason: "checked", Hash: a.Hash, At: a.Requested.Add(time.Millisecond)}); err != nil {
		t.Fatalf("%s: %v", decision, err)
	}
}

func kinds(t *testing.T, log *events.Log, run string) []events.Kind {
	t.Helper()
	recs, _, err := log.Read(t.Context(), run)
	if err != nil {
		t.Fatalf("read %s: %v", run, err)
	}
	out := make([]events.Kind, len(recs))
	for i, r := range recs {
		out[i] = r.Event.Kind
	}
	return out
}

func count(ks []events.Kind, k events.Kind) int {
	n := 0
	for _, x := range ks {
		if x == k {
			n++
		}
	}
	return n
}

func view(t *testing.T, r *gate.Run) projector.View {
	t.Helper()
	v, err := r.View()
	if err != nil {
		t.Fatalf("view: %v", err)
	}
	return v
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want %v", err, target)
	}
}

// clock is a clock a test moves by hand, safe for the drive's goroutine.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// callHeld starts r's call of tool with args in the background, its
// function blocked until release is called, and returns once the function
// runs: done has the call's error once released.
func callHeld(t *testing.T, r *gate.Run, tool, args, result string) (release func(), done <-chan error) {
	t.Helper()
	running, free := make(chan struct{}), make(chan struct{})
	out := make(chan error, 1)
	go func() {
		_, err := r.Call(t.Context(), tool, json.RawMessage(args), func(context.Context, json.RawMessage) (string, error) {
			close(running)
			<-free
			return result, nil
		})
		out <- err
	}()
	<-running
	return func() { close(free) }, out
}
