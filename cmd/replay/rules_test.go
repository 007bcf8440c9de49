package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/replay"
	"github.com/arbiter-run/arbiter/rules"
	"github.com/arbiter-run/arbiter/testkit"
)

const examples = "../../examples/policies/"

// recordUnder drives one run per script under the side-effect policy (by
// the id a worker gives it) composed with the rules file, as a worker whose
// config names it does, and returns the composed id.
func recordUnder(t *testing.T, log *events.Log, file string, tools []driver.Tool, actor *events.Actor, surface string, scripts ...[]driver.Decision) string {
	t.Helper()
	rp, err := rules.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	se := policy.DefaultSideEffects()
	p, err := policy.Compose(policy.WithID(se, defaultID(se)), rp)
	if err != nil {
		t.Fatal(err)
	}
	d, err := driver.New(driver.Config{Log: log, Policy: p, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scripts {
		r, err := d.CreateAs(t.Context(), events.NewID(), "script", nil, actor, surface)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Drive(t.Context(), r, testkit.NewScript(s...)); err != nil {
			t.Fatal(err)
		}
	}
	return p.PolicyID()
}

// widenedTools runs `replay --rules NEW --baseline ID --json` and returns
// the tools of the steps it reports widened.
func widenedTools(t *testing.T, url, newFile, baseline string) []string {
	t.Helper()
	code, out, errOut := replayCmd(t, "--nats", url, "--rules", newFile, "--baseline", baseline, "--json", "--no-progress")
	if code == exitError {
		t.Fatalf("replay: %s", errOut)
	}
	var tools []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r struct {
			Type string `json:"type"`
			replay.Result
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if r.Type == "evaluation" && r.Change == replay.Widens && !slices.Contains(tools, r.Tool) {
			tools = append(tools, r.Tool)
		}
	}
	slices.Sort(tools)
	return tools
}

// TestRules_DiffAndReplayAgreeOnWidening: for an example file and a change
// that removes one of its policies, `policy diff` names the rules that
// widen, and `replay --rules` on traffic recorded under the old file finds
// widened steps exactly on the tools those rules target.
func TestRules_DiffAndReplayAgreeOnWidening(t *testing.T) {
	refund := testkit.NewLedger("orders_refund", events.LocalMutation, testkit.AnyObject)
	// (mcp-read-only is not among them: over MCP its discovery phase hides
	// the writes, and a hidden tool's refusal is an observation, which
	// replay does not re-check.)
	hr := testkit.NewLedger("hr_lookup", events.ReadOnly, testkit.AnyObject)
	hr.S.Data = []string{"ssn"}
	ledger := testkit.NewLedger("ledger_read", events.ReadOnly, testkit.AnyObject)
	ledger.S.Data = []string{"financial.ledger"}
	weather := testkit.NewLedger("weather", events.ReadOnly, testkit.AnyObject)
	tests := []struct {
		name, file, drop string // drop: the policy the new file removes
		tools            []driver.Tool
		surface          string
		scripts          [][]driver.Decision
	}{
		{"refund limit loses its ceiling", "refund-limit", "refund-too-large", []driver.Tool{refund}, "api", [][]driver.Decision{
			{testkit.Call("orders_refund", `{"amount":400}`), testkit.Call("orders_refund", `{"amount":9000}`), testkit.Call("orders_refund", `{"amount":700}`)},
		}},
		{"pii protection removed", "pii-protection", "pii-protection", []driver.Tool{hr, ledger, weather}, "api", [][]driver.Decision{
			{testkit.Call("hr_lookup", `{}`), testkit.Call("ledger_read", `{}`), testkit.Call("weather", `{}`)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js := testkit.JetStream(t)
			log := js.Log(t, events.Config{})
			oldFile := examples + tt.file + ".yaml"
			id := recordUnder(t, log, oldFile, tt.tools, &events.Actor{ID: "ana"}, tt.surface, tt.scripts...)
			newFile := dropPolicy(t, oldFile, tt.drop)

			oldP, err := rules.Load(oldFile)
			if err != nil {
				t.Fatal(err)
			}
			newP, err := rules.Load(newFile)
			if err != nil {
				t.Fatal(err)
			}
			changes := rules.Diff(oldP, newP)
			if !rules.Widening(changes) {
				t.Fatalf("diff %v: want a widening", changes)
			}
			var byDiff []string
			for _, spec := range recordedSpecs(tt.tools) {
				if targetedBy(oldP, changes, spec) {
					byDiff = append(byDiff, spec.Name)
				}
			}
			slices.Sort(byDiff)
			byReplay := widenedTools(t, js.Server.ClientURL(), newFile, id)
			if len(byReplay) == 0 || strings.Join(byReplay, ",") != strings.Join(byDiff, ",") {
				t.Errorf("replay widened %v, diff's widening rules target %v: want the same, and not none", byReplay, byDiff)
			}
		})
	}
}

// dropPolicy writes file without policy id and returns its path.
func dropPolicy(t *testing.T, file, id string) string {
	t.Helper()
	p, err := rules.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	f := *p.File()
	f.Policies = slices.DeleteFunc(slices.Clone(f.Policies), func(ps rules.PolicySpec) bool { return ps.ID == id })
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "new.json")
	if err := os.WriteFile(out, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

func recordedSpecs(tools []driver.Tool) []events.ToolSpec {
	var out []events.ToolSpec
	for _, tl := range tools {
		s := tl.Spec()
		out = append(out, events.ToolSpec{Name: s.Name, SideEffect: s.SideEffect, Data: s.Data, Tags: s.Tags, Resource: s.Resource})
	}
	return out
}

// targetedBy reports whether a widening change's rule (of old) targets the
// tool spec, within its policy's scope.
func targetedBy(old *rules.Policy, changes []rules.Change, spec events.ToolSpec) bool {
	for _, c := range changes {
		if c.Direction == rules.Narrows {
			continue
		}
		if old.Targets(c.Rule, spec) {
			return true
		}
	}
	return false
}

// TestRules_AuditOfAWorkerRunningARulesFile: replay --rules FILE, with the
// side-effect default, is the policy such a worker records: everything
// re-checks the same. A file that does not load is an error naming it.
func TestRules_AuditOfAWorkerRunningARulesFile(t *testing.T) {
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	refund := testkit.NewLedger("orders_refund", events.LocalMutation, testkit.AnyObject)
	file := examples + "refund-limit.yaml"
	recordUnder(t, log, file, []driver.Tool{refund}, nil, "", []driver.Decision{
		testkit.Call("orders_refund", `{"amount":400}`), testkit.Call("orders_refund", `{"amount":9000}`), testkit.Call("orders_refund", `{"amount":700}`),
	})
	code, out, errOut := replayCmd(t, "--nats", js.Server.ClientURL(), "--rules", file, "--no-progress")
	if code != exitSame || !strings.Contains(out, "3 same") {
		t.Errorf("audit: exit %d\n%s\n%s", code, out, errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\npolicies: [{id: p}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = replayCmd(t, "--nats", js.Server.ClientURL(), "--rules", bad, "--no-progress")
	if code != exitError || !strings.Contains(errOut, bad+":2:") {
		t.Errorf("bad rules file: exit %d, stderr %q; want 2 naming %s:2", code, errOut, bad)
	}
}
