package rules_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/replay"
	"github.com/arbiter-run/arbiter/rules"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nkeys"
)

// withSideEffects composes the example file name with the default
// side-effect policy, as the worker does.
func withSideEffects(t *testing.T, name string) *policy.Composed {
	t.Helper()
	rp, err := rules.Load("../examples/policies/" + name + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := policy.Compose(policy.WithID(policy.DefaultSideEffects(), "side-effects default"), rp)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newDriver(t *testing.T, log *events.Log, p policy.Policy, ops approvals.Operators, tools ...driver.Tool) *driver.Driver {
	t.Helper()
	d, err := driver.New(driver.Config{Log: log, Policy: p, Tools: tools, Operators: ops})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func steps(r *driver.Run) []string {
	var out []string
	v := r.View()
	for s := range v.Steps.All() {
		line := s.Decision.Tool
		if s.Policy != nil {
			line += " " + string(s.Policy.Outcome)
		}
		if s.Observation != nil {
			line += " " + string(s.Observation.Kind)
		}
		out = append(out, line)
	}
	return out
}

func wantSteps(t *testing.T, r *driver.Run, want ...string) {
	t.Helper()
	if got := steps(r); strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("steps\n got %q\nwant %q", got, want)
	}
}

// TestDriver_RefundLimitThroughTheRealLoop: the seed's refund limit on a
// real JetStream: 400 runs, 9000 is denied, 700 waits for a manager, whose
// signed grant runs exactly it; the record names each member and rule; a
// replay of the stream under the same policy re-checks every step the same.
func TestDriver_RefundLimitThroughTheRealLoop(t *testing.T) {
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	ops := approvals.Operators{pub: "manager"}
	refund := testkit.NewLedger("orders_refund", events.LocalMutation, `{"type":"object","properties":{"amount":{"type":"number"}},"required":["amount"]}`)
	done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
	p := withSideEffects(t, "refund-limit")
	d := newDriver(t, log, p, ops, refund, done)
	agent := testkit.NewScript(
		testkit.Call("orders_refund", `{"amount": 400}`),
		testkit.Call("orders_refund", `{"amount": 9000}`),
		testkit.Call("orders_refund", `{"amount": 700}`),
		testkit.Call("done", `{}`),
	)
	r, err := d.Create(t.Context(), "refunds", "script", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Drive(t.Context(), r, agent); err != nil {
		t.Fatal(err)
	}
	wantSteps(t, r, "orders_refund allow result", "orders_refund deny policy_denied", "orders_refund require_approval")
	v := r.View()
	a := v.PendingApproval()
	if a == nil || a.Kind != "manager" || v.Run.Status != projector.Waiting {
		t.Fatalf("run %s, approval %+v: want waiting on a manager", v.Run.Status, a)
	}
	// What was stored, read back, not the driver's own fold.
	stored, err := d.Load(t.Context(), r.ID())
	if err != nil {
		t.Fatal(err)
	}
	sv := stored.View()
	denied := sv.Step(2).Policy
	if !strings.Contains(denied.Reason, "REFUND") && !strings.Contains(denied.Reason, "refund-too-large/too-large") {
		t.Errorf("deny reason %q does not name the rule", denied.Reason)
	}
	var ids []string
	for _, part := range denied.Parts {
		ids = append(ids, part.ID+"="+string(part.Outcome))
	}
	want := []string{"side-effects default=allow", p.Members()[1] + "=deny", "2 / refund-too-large/too-large=deny", "2 / refund-needs-manager/above-500=require_approval"}
	if strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Errorf("recorded parts\n got %v\nwant %v", ids, want)
	}
	if denied.PolicyID != p.PolicyID() {
		t.Errorf("recorded policy id %q, want %q", denied.PolicyID, p.PolicyID())
	}

	// The manager grants; the worker runs exactly the held refund.
	if _, err := client.New(log, nil).Grant(t.Context(), kp, r.ID(), a.ID, "ok"); err != nil {
		t.Fatal(err)
	}
	if err := d.Refresh(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if err := d.Drive(t.Context(), r, agent); err != nil {
		t.Fatal(err)
	}
	if got := r.View().Run.Status; got != projector.Completed {
		t.Errorf("run %s, want completed", got)
	}
	calls := refund.Calls()
	if len(calls) != 2 || string(calls[0]) != `{"amount":400}` || string(calls[1]) != `{"amount":700}` {
		t.Errorf("refunds executed %q, want 400 and then 700", calls)
	}

	sum, err := replay.Audit(t.Context(), log, p, replay.Selection{}, replay.Options{Operators: ops}, func(replay.Result) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Clean() || sum.Same != 5 {
		t.Errorf("replay: %+v, want 5 evaluations the same and a clean summary", sum)
	}
}

// TestDriver_ActorDecidesFinancialData: the seed's user.role != 'finance',
// with the actor recorded when the run is created.
func TestDriver_ActorDecidesFinancialData(t *testing.T) {
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	ledger := testkit.NewLedger("ledger_read", events.ReadOnly, testkit.AnyObject)
	ledger.S.Data = []string{"financial.ledger"}
	d := newDriver(t, log, withSideEffects(t, "pii-protection"), nil, ledger)
	for _, tt := range []struct {
		run   string
		actor *events.Actor
		want  string
	}{
		{"as-finance", &events.Actor{ID: "ana", Roles: []string{"finance"}}, "ledger_read allow result"},
		{"as-support", &events.Actor{ID: "bo", Roles: []string{"support"}}, "ledger_read deny policy_denied"},
		{"as-nobody", nil, "ledger_read deny policy_denied"},
	} {
		r, err := d.CreateAs(t.Context(), tt.run, "script", nil, tt.actor, "api")
		if err != nil {
			t.Fatal(err)
		}
		agent := testkit.NewScript(testkit.Call("ledger_read", `{}`))
		if err := d.Drive(t.Context(), r, agent); err != nil {
			t.Fatal(err)
		}
		if got := steps(r); len(got) == 0 || got[0] != tt.want {
			t.Errorf("%s: steps %q, want %q first", tt.run, got, tt.want)
		}
		loaded, err := d.Load(t.Context(), tt.run)
		if err != nil {
			t.Fatal(err)
		}
		if v := loaded.View(); (tt.actor == nil) != (v.Run.Actor == nil) || (tt.actor != nil && v.Run.Actor.ID != tt.actor.ID) || v.Run.Surface != "api" {
			t.Errorf("%s: recorded actor %+v surface %q, want %+v api", tt.run, v.Run.Actor, v.Run.Surface, tt.actor)
		}
	}
	if got := ledger.Count(); got != 1 {
		t.Errorf("ledger read %d times, want once (finance only)", got)
	}
}

// TestDriver_RateLimitHoldsAcrossTwoWorkers: a run's calls are counted from
// its log, so a second worker that takes the run over counts the first
// worker's calls.
func TestDriver_RateLimitHoldsAcrossTwoWorkers(t *testing.T) {
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	doc := `version: 1
policies:
  - id: gh
    type: rate_limit
    rules: [{id: two, action: allow, target: {type: tool, pattern: "github_*", attributes: {max_per_run: 2}}, code: RATE_LIMITED}]
    enforcement: {mode: block}
`
	rp, err := rules.Parse("gh.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	gh := &stopAfter{Ledger: testkit.NewLedger("github_list", events.ReadOnly, testkit.AnyObject), n: 2, stop: stop}
	done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
	w1 := newDriver(t, log, rp, nil, gh, done)
	w2 := newDriver(t, log, rp, nil, gh, done)
	script := testkit.NewScript(testkit.Call("github_list", `{}`), testkit.Call("github_list", `{}`), testkit.Call("github_list", `{}`), testkit.Call("done", `{}`))
	r, err := w1.Create(t.Context(), "limited", "script", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Worker 1 makes two calls and hands the run back.
	if err := w1.DriveUntil(t.Context(), r, script, stop); !errors.Is(err, driver.ErrStopped) {
		t.Fatalf("worker 1: %v, want it stopped", err)
	}
	wantSteps(t, r, "github_list allow result", "github_list allow result")
	// Worker 2 takes it from the log: the third call is over the limit.
	r2, err := w2.Load(t.Context(), "limited")
	if err != nil {
		t.Fatal(err)
	}
	if err := w2.Drive(t.Context(), r2, script); err != nil {
		t.Fatal(err)
	}
	wantSteps(t, r2, "github_list allow result", "github_list allow result", "github_list deny policy_denied", "done allow result")
	if gh.Count() != 2 {
		t.Errorf("github_list ran %d times, want 2", gh.Count())
	}
	v2 := r2.View()
	if reason := v2.Step(3).Policy.Reason; !strings.Contains(reason, "2 of 2 calls in this run") {
		t.Errorf("deny reason %q, want it to give the count", reason)
	}
}

// stopAfter is a ledger tool that closes stop after its n-th call.
type stopAfter struct {
	*testkit.Ledger
	n    int
	stop chan struct{}
}

func (s *stopAfter) Execute(ctx context.Context, args json.RawMessage) (string, error) {
	out, err := s.Ledger.Execute(ctx, args)
	if s.Ledger.Count() == s.n {
		close(s.stop)
	}
	return out, err
}

// TestDriver_DiscoveryHidesTools: mcp-read-only runs in the discovery
// phase too. Over MCP the agent is shown the read only, and a request for a
// hidden tool is refused like an unknown tool (recorded, nothing run); over
// the API it is shown everything.
func TestDriver_DiscoveryHidesTools(t *testing.T) {
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	get := testkit.NewLedger("orders_get", events.ReadOnly, testkit.AnyObject)
	refund := testkit.NewLedger("orders_refund", events.LocalMutation, testkit.AnyObject)
	d := newDriver(t, log, withSideEffects(t, "mcp-read-only"), nil, get, refund)
	shown := func(in driver.StepInput) string {
		var names []string
		for _, tl := range in.Tools {
			names = append(names, tl.Name)
		}
		return strings.Join(names, ",")
	}
	for _, tt := range []struct {
		surface, shown, refund string
	}{
		{"mcp", "orders_get", "orders_refund unknown_tool"},
		{"api", "orders_get,orders_refund", "orders_refund allow result"},
	} {
		r, err := d.CreateAs(t.Context(), "over-"+tt.surface, "script", nil, nil, tt.surface)
		if err != nil {
			t.Fatal(err)
		}
		agent := testkit.NewScript(testkit.Call("orders_get", `{}`), testkit.Call("orders_refund", `{"amount":5}`))
		if err := d.Drive(t.Context(), r, agent); err != nil {
			t.Fatal(err)
		}
		if got := steps(r); len(got) < 2 || got[0] != "orders_get allow result" || got[1] != tt.refund {
			t.Errorf("%s: steps %q, want the read allowed and then %q", tt.surface, got, tt.refund)
		}
		ins := agent.Inputs()
		if len(ins) == 0 || shown(ins[0]) != tt.shown {
			t.Errorf("%s: the agent was shown %q, want %q", tt.surface, shown(ins[0]), tt.shown)
		}
		if tt.surface == "mcp" {
			v := r.View()
			if o := v.Step(2).Observation; o == nil || !strings.Contains(o.Content, `no tool named "orders_refund" (tools: orders_get)`) {
				t.Errorf("mcp: observation %+v, want the unknown-tool refusal listing only what is shown", o)
			}
		}
	}
	if refund.Count() != 1 {
		t.Errorf("orders_refund ran %d times, want once (over the API)", refund.Count())
	}
}
