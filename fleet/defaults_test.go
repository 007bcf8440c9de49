package fleet_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/rules"
	"github.com/arbiter-run/arbiter/scripted"
	"github.com/arbiter-run/arbiter/testkit"
)

// actorFleet is a fleet whose policy is the side-effect mapping composed
// with examples/policies/pii-protection.yaml (financial data only for the
// finance role), with one tool reading financial data.
func actorFleet(t *testing.T) *approvalFleet {
	t.Helper()
	f := newApprovalFleet(t, 0)
	rp, err := rules.Load("../examples/policies/pii-protection.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compose(policy.WithID(policy.DefaultSideEffects(), "side-effects v1"), rp)
	if err != nil {
		t.Fatal(err)
	}
	ledger := testkit.NewLedger("ledger_read", events.ReadOnly, testkit.AnyObject)
	ledger.S.Data = []string{"financial.ledger"}
	f.cfg.Policy = p
	f.cfg.Tools = []driver.Tool{ledger, f.done}
	return f
}

var ledgerScript = scripted.Agent{Decisions: []driver.Action{scripted.Call("ledger_read", `{}`), scripted.Call("done", `{}`)}}

// startWorker runs a worker with agents and their run defaults until the
// test ends, and waits until the registry shows every agent offered.
func startWorker(t *testing.T, f *approvalFleet, agents map[string]driver.Agent, defaults map[string]fleet.RunDefaults) {
	t.Helper()
	d, q, s := f.member(t)
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: q, Snapshots: s, Agents: agents, Defaults: defaults})
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	for name := range agents {
		deadline := time.Now().Add(10 * time.Second)
		for {
			ds, err := q.Defaults(t.Context(), name)
			if err != nil {
				t.Fatal(err)
			}
			if containsDefaults(ds, defaults[name]) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent %q not advertised with %+v after 10s (registry: %+v)", name, defaults[name], ds)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func containsDefaults(ds []fleet.RunDefaults, d fleet.RunDefaults) bool {
	for _, x := range ds {
		if reflect.DeepEqual(x, d) {
			return true
		}
	}
	return false
}

// ledgerStep is the recorded outcome and code of the run's ledger_read.
func ledgerStep(t *testing.T, d *driver.Driver, run string) (projector.View, string) {
	t.Helper()
	v := waitFor(t, d, run, 30*time.Second, "ended", func(v projector.View) bool { return v.Run.Status.Ended() })
	s := v.Step(1)
	if s == nil || s.Policy == nil {
		t.Fatalf("run %s: step 1 has no policy result (%+v)", run, s)
	}
	for _, p := range s.Policy.Parts {
		if p.Code != "" {
			return v, string(s.Policy.Outcome) + " " + p.Code
		}
	}
	return v, string(s.Policy.Outcome)
}

// TestFleet_AgentDefaultActorDecidesTheRule: a worker's config gives two
// agents a default actor each, and the worker advertises them with the
// agents. A run started through the fleet (Queue.StartAs) naming no actor
// records the agent's default in run.created, and the actor-dependent
// rule (user.role != 'finance' denies financial data) decides differently
// for the two. An actor the starter names wins over the default.
func TestFleet_AgentDefaultActorDecidesTheRule(t *testing.T) {
	f := actorFleet(t)
	fin := &events.Actor{ID: "fin-desk", Roles: []string{"finance"}}
	sup := &events.Actor{ID: "support-desk", Roles: []string{"support"}, Attributes: map[string]string{"tier": "1"}}
	startWorker(t, f, map[string]driver.Agent{"finance-bot": ledgerScript, "support-bot": ledgerScript},
		map[string]fleet.RunDefaults{"finance-bot": {Actor: fin, Surface: "api"}, "support-bot": {Actor: sup}})
	d, q, _ := f.member(t)
	ctx := t.Context()
	for _, c := range []struct {
		run, agent  string
		actor       *events.Actor
		surface     string
		wantActor   *events.Actor
		wantSurface string
		want        string
	}{
		{"run-fin", "finance-bot", nil, "", fin, "api", "allow"},
		{"run-sup", "support-bot", nil, "", sup, "", "deny FINANCIAL_RESTRICTED"},
		// Named by the starter: the actor wins, the surface still defaults.
		{"run-named", "finance-bot", &events.Actor{ID: "visitor", Roles: []string{"guest"}}, "", &events.Actor{ID: "visitor", Roles: []string{"guest"}}, "api", "deny FINANCIAL_RESTRICTED"},
		{"run-boss", "support-bot", &events.Actor{ID: "cfo", Roles: []string{"finance"}}, "cli", &events.Actor{ID: "cfo", Roles: []string{"finance"}}, "cli", "allow"},
	} {
		gotActor, gotSurface, err := q.StartAs(ctx, d, c.run, c.agent, nil, c.actor, c.surface)
		if err != nil {
			t.Fatalf("start %s: %v", c.run, err)
		}
		if !reflect.DeepEqual(gotActor, c.wantActor) || gotSurface != c.wantSurface {
			t.Errorf("%s: StartAs recorded %+v %q, want %+v %q", c.run, gotActor, gotSurface, c.wantActor, c.wantSurface)
		}
		v, got := ledgerStep(t, d, c.run)
		if !reflect.DeepEqual(v.Run.Actor, c.wantActor) || v.Run.Surface != c.wantSurface {
			t.Errorf("%s: run.created recorded actor %+v surface %q, want %+v %q", c.run, v.Run.Actor, v.Run.Surface, c.wantActor, c.wantSurface)
		}
		if got != c.want {
			t.Errorf("%s: ledger_read decided %q, want %q", c.run, got, c.want)
		}
	}
}

// TestFleet_DisagreeingDefaultsAreRefused: when two live workers offer an
// agent with different default actors, a run naming no actor is refused
// and nothing is recorded; naming the actor starts it. Surfaces on which
// they agree still default.
func TestFleet_DisagreeingDefaultsAreRefused(t *testing.T) {
	f := actorFleet(t)
	startWorker(t, f, map[string]driver.Agent{"bot": ledgerScript}, map[string]fleet.RunDefaults{"bot": {Actor: &events.Actor{ID: "a", Roles: []string{"finance"}}, Surface: "api"}})
	startWorker(t, f, map[string]driver.Agent{"bot": ledgerScript}, map[string]fleet.RunDefaults{"bot": {Actor: &events.Actor{ID: "b"}, Surface: "api"}})
	d, q, _ := f.member(t)
	_, _, err := q.StartAs(t.Context(), d, "run-which", "bot", nil, nil, "")
	var de *fleet.DefaultsError
	if !errors.Is(err, fleet.ErrDefaultsDisagree) || !errors.As(err, &de) || de.Field != "actor" || len(de.Values) != 2 {
		t.Fatalf("start with disagreeing defaults = %v, want a DefaultsError on actor with both values", err)
	}
	if _, err := d.Load(t.Context(), "run-which"); !errors.Is(err, events.ErrNoRun) {
		t.Errorf("the refused run was recorded anyway (load: %v)", err)
	}
	actor, surface, err := q.StartAs(t.Context(), d, "run-named", "bot", nil, &events.Actor{ID: "c"}, "")
	if err != nil || actor.ID != "c" || surface != "api" {
		t.Errorf("start naming the actor = %+v %q %v, want actor c, the agreed surface api", actor, surface, err)
	}
}

// TestFleet_DefaultAgentDefaults: a run of an agent no worker offers by
// name takes the defaults of the workers whose default agent drives it;
// an agent offered by name takes its own (here: none) over them.
func TestFleet_DefaultAgentDefaults(t *testing.T) {
	f := actorFleet(t)
	startWorker(t, f, map[string]driver.Agent{"": ledgerScript, "plain": ledgerScript},
		map[string]fleet.RunDefaults{"": {Actor: &events.Actor{ID: "any", Roles: []string{"finance"}}}})
	d, q, _ := f.member(t)
	actor, _, err := q.StartAs(t.Context(), d, "run-any", "whatever", nil, nil, "")
	if err != nil || actor == nil || actor.ID != "any" {
		t.Fatalf("start of an agent only the default drives = %+v %v, want the default agent's actor", actor, err)
	}
	if _, got := ledgerStep(t, d, "run-any"); got != "allow" {
		t.Errorf("run-any: ledger_read decided %q, want allow (finance)", got)
	}
	actor, _, err = q.StartAs(t.Context(), d, "run-plain", "plain", nil, nil, "")
	if err != nil || actor != nil {
		t.Fatalf("start of an agent offered by name with no defaults = %+v %v, want no actor", actor, err)
	}
	if _, got := ledgerStep(t, d, "run-plain"); got != "deny FINANCIAL_RESTRICTED" {
		t.Errorf("run-plain: ledger_read decided %q, want the no-actor deny", got)
	}
}

// TestWorker_RunDefaultsRefusals: defaults for an agent the worker does
// not have, or an actor with roles and no id, are refused at NewWorker,
// naming the agent.
func TestWorker_RunDefaultsRefusals(t *testing.T) {
	f := actorFleet(t)
	d, q, _ := f.member(t)
	for _, c := range []struct {
		name     string
		defaults map[string]fleet.RunDefaults
		want     string
	}{
		{"unknown agent", map[string]fleet.RunDefaults{"ghost": {Surface: "api"}}, `new worker: run defaults for agent "ghost", which the worker does not have`},
		{"actor without id", map[string]fleet.RunDefaults{"bot": {Actor: &events.Actor{Roles: []string{"finance"}}}}, `new worker: run defaults for agent "bot": actor: an id is required (roles and attributes belong to someone)`},
		{"empty role", map[string]fleet.RunDefaults{"bot": {Actor: &events.Actor{ID: "x", Roles: []string{""}}}}, `new worker: run defaults for agent "bot": actor x: roles[0] is empty`},
	} {
		_, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: q, Agents: map[string]driver.Agent{"bot": ledgerScript}, Defaults: c.defaults})
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: NewWorker = %v, want %q", c.name, err, c.want)
		}
	}
}
