package driver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nkeys"
)

// Schemas the tests' tools use.
const (
	pathSchema = `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`
	toSchema   = `{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`
)

// newDriver builds a driver on log, failing the test on error.
func newDriver(t *testing.T, log *events.Log, p policy.Policy, tools ...driver.Tool) *driver.Driver {
	t.Helper()
	return newDriverCfg(t, driver.Config{Log: log, Policy: p, Tools: tools})
}

// newDriverCfg builds a driver from cfg, failing the test on error.
func newDriverCfg(t *testing.T, cfg driver.Config) *driver.Driver {
	t.Helper()
	d, err := driver.New(cfg)
	if err != nil {
		t.Fatalf("driver.New: %v", err)
	}
	return d
}

// create starts run id on d.
func create(t *testing.T, d *driver.Driver, id string) *driver.Run {
	t.Helper()
	r, err := d.Create(t.Context(), id, "test", json.RawMessage(`{"goal":"test"}`))
	if err != nil {
		t.Fatalf("create run %s: %v", id, err)
	}
	return r
}

// drive drives r with agent, failing the test if Drive errs.
func drive(t *testing.T, d *driver.Driver, r *driver.Run, agent driver.Agent) {
	t.Helper()
	if err := d.Drive(t.Context(), r, agent); err != nil {
		t.Fatalf("drive run %s: %v", r.ID(), err)
	}
}

// load reads run id back from the log through d.
func load(t *testing.T, d *driver.Driver, id string) *driver.Run {
	t.Helper()
	r, err := d.Load(t.Context(), id)
	if err != nil {
		t.Fatalf("load run %s: %v", id, err)
	}
	return r
}

// records reads every event of run from the log.
func records(t *testing.T, log *events.Log, run string) []events.Record {
	t.Helper()
	recs, _, err := log.Read(t.Context(), run)
	if err != nil {
		t.Fatalf("read run %s: %v", run, err)
	}
	return recs
}

// kinds lists the kinds of recs in order.
func kinds(recs []events.Record) []events.Kind {
	out := make([]events.Kind, len(recs))
	for i, r := range recs {
		out[i] = r.Event.Kind
	}
	return out
}

// ofKind returns the records of kind k, in order.
func ofKind(recs []events.Record, k events.Kind) []events.Record {
	var out []events.Record
	for _, r := range recs {
		if r.Event.Kind == k {
			out = append(out, r)
		}
	}
	return out
}

// body decodes rec's body into T.
func body[T any](t *testing.T, rec events.Record) T {
	t.Helper()
	b, err := events.DecodeBody[T](rec.Event)
	if err != nil {
		t.Fatalf("decode %s body: %v", rec.Event.Kind, err)
	}
	return b
}

// appendEvent appends an event of kind k to run by hand, fenced on the run's
// current tail, as an operator or a crashed worker would have.
func appendEvent(t *testing.T, log *events.Log, run string, k events.Kind, b any) events.Event {
	t.Helper()
	ctx := t.Context()
	tail, err := log.Tail(ctx, run)
	if err != nil {
		t.Fatalf("tail of %s: %v", run, err)
	}
	ev, err := events.New(run, k, b)
	if err != nil {
		t.Fatalf("new %s event: %v", k, err)
	}
	if _, err := log.Append(ctx, tail, ev); err != nil {
		t.Fatalf("append %s to %s: %v", k, run, err)
	}
	return ev
}

// waitForKind waits (at most 10 s) until run has an event of kind k.
func waitForKind(t *testing.T, log *events.Log, run string, k events.Kind) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if len(ofKind(records(t, log, run), k)) > 0 {
			return
		}
	}
	t.Fatalf("run %s: no %s event after 10 s", run, k)
}

// spec returns the recorded spec of tool name among d's tools.
func spec(t *testing.T, d *driver.Driver, name string) events.ToolSpec {
	t.Helper()
	for _, s := range d.Tools() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("driver has no tool %q", name)
	return events.ToolSpec{}
}

// wantEnd checks that v's run ended (or waits) with status and reason.
// wantEnd takes an end reason, or the approval kind a waiting run names.
func wantEnd[R ~string](t *testing.T, v projector.View, status projector.Status, reason R) {
	t.Helper()
	if v.Run.Status != status || v.Run.Reason != string(reason) {
		t.Fatalf("run %s: got status %s reason %q (detail %q), want %s %q", v.Run.ID, v.Run.Status, v.Run.Reason, v.Run.Detail, status, reason)
	}
}

// wantCount checks how often a ledger tool executed.
func wantCount(t *testing.T, l *testkit.Ledger, want int) {
	t.Helper()
	if got := l.Count(); got != want {
		t.Errorf("%s executed: got %d times, want %d", l.S.Name, got, want)
	}
}

// done is a terminal tool: calling it completes the run.
func done() *testkit.Ledger {
	return testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
}

// policyFunc adapts a function to policy.Policy.
type policyFunc func(ctx context.Context, req policy.Request, v projector.View) (policy.Ruling, error)

func (f policyFunc) Evaluate(ctx context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	return f(ctx, req, v)
}

// allowAll allows every request.
var allowAll = policyFunc(func(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
	return policy.Ruling{Outcome: events.Allow, Reason: "allowed"}, nil
})

// counting wraps a policy and keeps a copy of every request it was asked.
type counting struct {
	inner policy.Policy
	mu    sync.Mutex
	reqs  []policy.Request
}

func count(p policy.Policy) *counting { return &counting{inner: p} }

func (c *counting) Evaluate(ctx context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	cp := req
	cp.Args = bytes.Clone(req.Args)
	cp.Tool.Schema = bytes.Clone(req.Tool.Schema)
	c.mu.Lock()
	c.reqs = append(c.reqs, cp)
	c.mu.Unlock()
	return c.inner.Evaluate(ctx, req, v)
}

// requests returns copies of the requests asked so far.
func (c *counting) requests() []policy.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]policy.Request(nil), c.reqs...)
}

// askedFor reports how many requests for step n the policy was asked.
func (c *counting) askedFor(n int) int {
	k := 0
	for _, r := range c.requests() {
		if r.Step == n {
			k++
		}
	}
	return k
}

// operator makes an operator key and the operator set that trusts it.
func operator(t *testing.T) (nkeys.KeyPair, approvals.Operators) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatalf("create operator key: %v", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatalf("operator public key: %v", err)
	}
	return kp, approvals.Operators{pub: "alice"}
}

// pending returns the approval r waits on, failing the test if none.
func pending(t *testing.T, r *driver.Run) projector.Approval {
	t.Helper()
	v := r.View()
	a := v.PendingApproval()
	if a == nil {
		t.Fatalf("run %s (status %s %q): no pending approval", r.ID(), v.Run.Status, v.Run.Reason)
	}
	return *a
}

// sign signs decision on approval a of run with kp at time at.
func sign(t *testing.T, kp nkeys.KeyPair, run string, a projector.Approval, decision string, at time.Time) events.DecisionBody {
	t.Helper()
	b, err := approvals.Sign(kp, run, a.ID, a.Hash, decision, "checked by hand", at)
	if err != nil {
		t.Fatalf("sign %s: %v", decision, err)
	}
	return b
}

// publish publishes an operator decision on r's run as an operator does,
// for the driver to read, verify and record when it next drives r. It
// returns the decision's sequence in the decisions stream.
func publish(t *testing.T, d *driver.Driver, r *driver.Run, b events.DecisionBody) uint64 {
	t.Helper()
	seq, err := approvals.Publish(t.Context(), d.Log(), r.ID(), b)
	if err != nil {
		t.Fatalf("publish decision on %s: %v", r.ID(), err)
	}
	return seq
}

// grant signs a grant of the approval r waits on and publishes it.
func grant(t *testing.T, d *driver.Driver, r *driver.Run, kp nkeys.KeyPair) projector.Approval {
	t.Helper()
	a := pending(t, r)
	// Signed just after the request, by the clock that dated it (a test's
	// clock may be a fake one).
	publish(t, d, r, sign(t, kp, r.ID(), a, events.DecisionGrant, a.Requested.Add(time.Millisecond)))
	return a
}

// clock is a fake clock safe for use from tools' goroutines.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock {
	return &clock{now: time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)}
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

// stepOf returns step n of r's view, failing the test if there is none.
func stepOf(t *testing.T, r *driver.Run, n int) projector.Step {
	t.Helper()
	v := r.View()
	s := v.Step(n)
	if s == nil {
		t.Fatalf("run %s has no step %d (it has %d)", r.ID(), n, v.Steps.Len())
	}
	return *s
}

// approvalOf returns approval id of r's view, failing the test if there is
// none.
func approvalOf(t *testing.T, r *driver.Run, id string) projector.Approval {
	t.Helper()
	v := r.View()
	a := v.Approval(id)
	if a == nil {
		t.Fatalf("run %s has no approval %s", r.ID(), id)
	}
	return *a
}

// canon returns s in PolicyJSON form.
func canon(t *testing.T, s string) json.RawMessage { return testkit.PolicyJSON(t, s) }

// policyResults returns the policy results recs hold, in order: step.policy
// and approval.requested events, and the results decisions carry.
func policyResults(t *testing.T, recs []events.Record) []events.PolicyBody {
	t.Helper()
	var out []events.PolicyBody
	for _, r := range recs {
		b, ok, err := events.PolicyResult(r.Event)
		if err != nil {
			t.Fatalf("event %d (%s): %v", r.Event.Seq, r.Event.Kind, err)
		}
		if ok {
			out = append(out, b)
		}
	}
	return out
}

// stubbornTool is a read-only tool that ignores its context: a call times
// out after timeout but returns only once release is closed, and closes
// returned as it does.
func stubbornTool(timeout time.Duration) (tool *testkit.Ledger, release, returned chan struct{}) {
	release, returned = make(chan struct{}), make(chan struct{})
	tool = testkit.NewLedger("stubborn", events.ReadOnly, testkit.AnyObject)
	tool.S.Timeout = timeout
	tool.Result = func(context.Context, json.RawMessage) (string, error) {
		defer close(returned)
		<-release
		return "too late", nil
	}
	return tool, release, returned
}
