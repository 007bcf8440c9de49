package rules_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/rules"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestExamples_ThroughTheDriver runs every case of every example table
// that needs no history (those are covered by the rate tests) through the
// real driver on JetStream: one run per case, created with the case's actor
// and surface, one call, and the outcome read back from the log.
func TestExamples_ThroughTheDriver(t *testing.T) {
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	ran := 0
	for _, ex := range exampleTables(t) {
		p, table := ex.policy, ex.table
		var tools []driver.Tool
		for _, ct := range table.Tools {
			l := testkit.NewLedger(ct.Name, ct.SideEffect, testkit.AnyObject)
			l.S.Data, l.S.Tags, l.S.Resource = ct.Data, ct.Tags, ct.Resource
			tools = append(tools, l)
		}
		d := newDriver(t, log, p, nil, tools...)
		for _, cs := range table.Cases {
			if len(cs.History) > 0 || cs.Window > 0 || cs.Phase == rules.PhaseDiscovery {
				continue // discovery through the driver: TestDriver_DiscoveryHidesTools
			}
			if strings.HasPrefix(filepath.Base(ex.file), "api-rate-limit") {
				continue // per: fleet needs a counter: TestDriver_FleetRateLimitAcrossTwoWorkers
			}
			ran++
			args, err := cs.ArgsJSON()
			if err != nil {
				t.Fatal(err)
			}
			r, err := d.CreateAs(t.Context(), events.NewID(), "script", nil, cs.Actor, cs.Surface)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Drive(t.Context(), r, testkit.NewScript(testkit.Call(cs.Tool, string(args)))); err != nil {
				t.Fatal(err)
			}
			stored, err := d.Load(t.Context(), r.ID())
			if err != nil {
				t.Fatal(err)
			}
			v := stored.View()
			s := v.Step(1)
			where := filepath.Base(ex.file) + " " + cs.Name
			if s.Policy == nil {
				// Hidden at discovery: refused as an unknown tool, which
				// is a refusal only a deny can have meant.
				if s.Observation == nil || s.Observation.Kind != events.ObsUnknownTool || cs.Want != "deny" {
					t.Errorf("%s: no policy result (observation %+v), want %s", where, s.Observation, cs.Want)
				}
				continue
			}
			if string(s.Policy.Outcome) != cs.Want {
				t.Errorf("%s: recorded %s (%s), want %s", where, s.Policy.Outcome, s.Policy.Reason, cs.Want)
			}
			if cs.WantKind != "" {
				if a := v.PendingApproval(); a == nil || a.Kind != cs.WantKind || v.Run.Status != projector.Waiting {
					t.Errorf("%s: approval %+v, want kind %s", where, a, cs.WantKind)
				}
			}
			if cs.WantCode != "" {
				found := false
				for _, part := range s.Policy.Parts {
					found = found || part.Code == cs.WantCode
				}
				if !found {
					t.Errorf("%s: recorded parts %+v carry no %s", where, s.Policy.Parts, cs.WantCode)
				}
			}
		}
	}
	if ran < 25 {
		t.Errorf("%d cases through the driver, want the examples' (at least 25)", ran)
	}
}

// example is one example policy file with its table of cases.
type example struct {
	file   string // the cases file
	policy *rules.Policy
	table  *rules.Cases
}

// exampleTables loads every example policy that has a table of cases,
// failing the test when there are none or one does not load.
func exampleTables(t *testing.T) []example {
	t.Helper()
	files, err := filepath.Glob("../examples/policies/*.cases.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example cases (%v)", err)
	}
	out := make([]example, 0, len(files))
	for _, cf := range files {
		p, err := rules.Load(strings.TrimSuffix(cf, ".cases.yaml") + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		table, err := rules.LoadCases(cf)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, example{file: cf, policy: p, table: table})
	}
	return out
}
