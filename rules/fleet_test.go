package rules_test

import (
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/replay"
	"github.com/arbiter-run/arbiter/rules"
	"github.com/arbiter-run/arbiter/rules/kvwindows"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const fleetLimit = `version: 1
policies:
  - id: api-rate-limit
    type: rate_limit
    rules:
      - id: limit-github
        action: allow
        target: {type: tool, pattern: "github_*", attributes: {max_per_hour: 3, per: fleet}}
        code: RATE_LIMITED
    enforcement: {mode: block, message: API rate limit exceeded. Try again later.}
`

// TestDriver_FleetRateLimitAcrossTwoWorkers: two workers, on two
// connections, drive two runs of two github calls each under a fleet-wide
// limit of 3 an hour: the fourth call, whichever run makes it, is denied.
// Each result records the window's reading, and a replay with no counter at
// all re-checks every one the same against the recorded readings.
func TestDriver_FleetRateLimitAcrossTwoWorkers(t *testing.T) {
	env := testkit.JetStream(t)
	nc, err := nats.Connect(env.Server.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js2, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := rules.Parse("fleet.yaml", []byte(fleetLimit))
	if err != nil {
		t.Fatal(err)
	}
	se := policy.WithID(policy.DefaultSideEffects(), "side-effects")
	var drivers []*driver.Driver
	gh := testkit.NewLedger("github_list", events.ReadOnly, testkit.AnyObject)
	for _, js := range []jetstream.JetStream{env.JS, js2} {
		w, err := kvwindows.Open(t.Context(), js, kvwindows.Config{})
		if err != nil {
			t.Fatal(err)
		}
		log, err := events.Open(t.Context(), js, events.Config{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := policy.Compose(se, rp.WithWindows(w))
		if err != nil {
			t.Fatal(err)
		}
		drivers = append(drivers, newDriver(t, log, p, nil, gh))
	}
	var outcomes []string
	for i, d := range drivers {
		r, err := d.Create(t.Context(), "run-"+string(rune('a'+i)), "script", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Drive(t.Context(), r, testkit.NewScript(testkit.Call("github_list", `{"page":1}`), testkit.Call("github_list", `{"page":2}`))); err != nil {
			t.Fatal(err)
		}
		v := r.View()
		for s := range v.Steps.All() {
			outcomes = append(outcomes, string(s.Policy.Outcome))
			if got := s.Policy.Parts; len(got) < 3 || got[2].Window == "" {
				t.Errorf("run %s step %d: parts %+v, want the window's reading recorded", r.ID(), s.N, got)
			}
		}
		if i == 1 {
			if reason := v.Step(2).Policy.Reason; !strings.Contains(reason, "3 of 3 calls in the fleet's hour") {
				t.Errorf("fourth call's reason %q, want the fleet count", reason)
			}
		}
	}
	if got := strings.Join(outcomes, ","); got != "allow,allow,allow,deny" {
		t.Errorf("outcomes %s, want three allowed and the fourth denied", got)
	}
	if gh.Count() != 3 {
		t.Errorf("github_list ran %d times, want 3", gh.Count())
	}

	// Replay holds no counter: it must use the recorded readings.
	log := env.Log(t, events.Config{})
	unwindowed, err := policy.Compose(se, rp)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := replay.Audit(t.Context(), log, unwindowed, replay.Selection{}, replay.Options{}, func(replay.Result) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Clean() || sum.Same != 4 {
		t.Errorf("replay %+v, want the 4 evaluations the same", sum)
	}
	// Without the recorded result (a policy asked outside a replay) and no
	// counter, a fleet rule fails closed.
	req, v := request(events.ToolSpec{Name: "github_list", SideEffect: events.ReadOnly}, `{}`, nil, time.Now())
	dec, err := unwindowed.Evaluate(t.Context(), req, v)
	if err != nil {
		t.Fatal(err)
	}
	if dec.Outcome != events.Deny || !strings.Contains(dec.Reason, rules.ErrNoWindows.Error()) {
		t.Errorf("no counter: %s %q, want deny naming the missing counter", dec.Outcome, dec.Reason)
	}
}
