package replay_test

import (
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/replay"
	"github.com/arbiter-run/arbiter/testkit"
)

// hider is the side-effect policy, under id, hiding one tool from the
// agent (the discovery phase).
type hider struct {
	policy.IdentifiedPolicy
	hide string
}

func (h hider) Visible(t events.ToolSpec, _ projector.View) bool { return t.Name != h.hide }

// TestCheck_HiddenToolIsRecheckedAsADeny: a request for a tool the policy
// hid is refused as an unknown tool, with no policy result. Replay
// re-checks it as the policy's deny: the same policy hides it again
// (same); one that shows it and allows it widens; a tool that does not
// exist is no policy's decision and is not reported; a tool hidden before
// the run recorded any evaluation names no policy and is not checkable.
func TestCheck_HiddenToolIsRecheckedAsADeny(t *testing.T) {
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	tools := []driver.Tool{testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject), testkit.NewLedger("secret", events.ReadOnly, testkit.AnyObject)}
	hides := hider{policy.WithID(policy.DefaultSideEffects(), "hides v1"), "secret"}
	d, err := driver.New(driver.Config{Log: log, Policy: hides, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	for id, calls := range map[string][]driver.Action{
		"run-a": {testkit.Call("read", `{}`), testkit.Call("secret", `{"x":1}`), testkit.Call("nosuch", `{}`)},
		"run-b": {testkit.Call("secret", `{}`)},
	} {
		r, err := d.Create(t.Context(), id, "script", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Drive(t.Context(), r, testkit.NewScript(calls...)); err != nil {
			t.Fatal(err)
		}
		v := r.View()
		if s := v.Step(1); id == "run-b" && (s == nil || s.Observation == nil || s.Observation.Kind != events.ObsUnknownTool) {
			t.Fatalf("run-b's secret was not refused as unknown: %+v", s)
		}
	}
	hiddenOf := func(r report) map[string]replay.Result {
		out := map[string]replay.Result{}
		for _, res := range r.results {
			if res.Kind == events.StepObserved {
				out[res.Run+"/"+res.Tool] = res
			}
		}
		return out
	}

	audit := hiddenOf(check(t, log, hides, replay.Selection{}, replay.Options{}))
	if len(audit) != 2 {
		t.Fatalf("hidden refusals reported %v, want run-a's and run-b's secret (not nosuch)", audit)
	}
	if res := audit["run-a/secret"]; res.Verdict != replay.Same || res.Recorded.Outcome != "deny" || res.PolicyID != "hides v1" || res.Step != 2 {
		t.Errorf("audit of the hidden secret: %+v, want step 2 recorded deny by hides v1, same", res)
	}
	if res := audit["run-b/secret"]; res.Verdict != replay.NotCheckable || res.Cause != replay.NoRecordedID {
		t.Errorf("a tool hidden before any evaluation: %+v, want not checkable, no recorded id", res)
	}

	shows := policy.WithID(policy.DefaultSideEffects(), "shows v2")
	whatIf := hiddenOf(check(t, log, shows, replay.Selection{}, replay.Options{Baseline: "hides v1"}))
	if res := whatIf["run-a/secret"]; res.Verdict != replay.Different || res.Change != replay.Widens || res.Replayed == nil || res.Replayed.Outcome != "allow" {
		t.Errorf("shown now: %+v, want it to widen to allow", res)
	}
	other := hiddenOf(check(t, log, shows, replay.Selection{}, replay.Options{}))
	if res := other["run-a/secret"]; res.Verdict != replay.NotCheckable || res.Cause != replay.OtherPolicy {
		t.Errorf("checked against another id: %+v, want not checkable, other policy", res)
	}
}
