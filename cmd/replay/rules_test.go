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
	"github.com/arbiter-run/arbiter/rules/kvwindows"
	"github.com/arbiter-run/arbiter/testkit"
)

const examples = "../../examples/policies/"

// recordUnder drives one run per script under the side-effect policy (by
// the id a worker gives it) composed with the rules file, as a worker whose
// config names it does (its fleet windows in a KV bucket of js), and
// returns the composed id.
func recordUnder(t *testing.T, js *testkit.JS, log *events.Log, file string, tools []driver.Tool, actor *events.Actor, surface string, scripts ...[]driver.Action) string {
	t.Helper()
	rp, err := rules.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kvwindows.Open(t.Context(), js.JS, kvwindows.Config{})
	if err != nil {
		t.Fatal(err)
	}
	se := policy.DefaultSideEffects()
	p, err := policy.Compose(policy.WithID(se, defaultID(se)), rp.WithWindows(w))
	if err != nil {
		t.Fatal(err)
	}
	d, err := driver.New(driver.Config{Log: log, Policy: p, Tools: tools, Limits: events.Limits{MaxSteps: 200, MaxRepeats: 200}})
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
	tools := []string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
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

func tool(name string, class events.SideEffect, data ...string) *testkit.Ledger {
	l := testkit.NewLedger(name, class, testkit.AnyObject)
	l.S.Data = data
	return l
}

// TestRules_DiffAndReplayAgreeOnWidening: for every example file and a
// change that removes (or, for a file of one, disables) one of its
// policies, `policy diff` made exact over the recorded tools
// (rules.DiffOver, composed with the side-effect mapping as the worker
// runs it) names the tools whose outcome the change can widen, and
// `replay --rules` on traffic recorded under the old file finds widened
// steps on exactly those tools. The traffic calls every tool the diff
// could name, with arguments that reach the rule it removes. Where the
// mapping already refuses what the policy refused (a destructive tool),
// both say nothing widens.
func TestRules_DiffAndReplayAgreeOnWidening(t *testing.T) {
	call := testkit.Call
	limit := make([]driver.Action, 101) // the 101st call in the hour is over api-rate-limit's 100
	for i := range limit {
		limit[i] = call("github_search", `{}`)
	}
	tests := []struct {
		file, drop string // drop: the policy the new file removes
		tools      []driver.Tool
		surface    string
		scripts    [][]driver.Action // each a run; a call that waits for approval ends its run
		want       []string          // the tools that widen, which both must name
	}{
		{"refund-limit", "refund-too-large", []driver.Tool{tool("orders_refund", events.LocalMutation)}, "api", [][]driver.Action{
			{call("orders_refund", `{"amount":400}`), call("orders_refund", `{"amount":9000}`), call("orders_refund", `{"amount":700}`)},
		}, []string{"orders_refund"}},
		{"pii-protection", "pii-protection", []driver.Tool{tool("hr_lookup", events.ReadOnly, "ssn"), tool("ledger_read", events.ReadOnly, "financial.ledger"), tool("weather", events.ReadOnly)}, "api", [][]driver.Action{
			{call("hr_lookup", `{}`), call("ledger_read", `{}`), call("weather", `{}`)},
		}, []string{"hr_lookup", "ledger_read"}},
		{"no-destructive-tools", "no-destructive-tools", []driver.Tool{tool("files_delete_all", events.Destructive), tool("db_drop_table", events.Destructive),
			tool("cache_delete_old", events.LocalMutation), tool("db_query", events.ReadOnly)}, "api", [][]driver.Action{
			{call("files_delete_all", `{}`), call("db_drop_table", `{}`), call("cache_delete_old", `{}`), call("db_query", `{}`)},
		}, []string{"cache_delete_old"}},
		{"confirm-external", "confirm-external", []driver.Tool{tool("email_send", events.RemoteMutation), tool("slack_send_message", events.LocalMutation)}, "api", [][]driver.Action{
			{call("email_send", `{"to":"x@ext.org"}`)},
			{call("email_send", `{"to":"me@company.com"}`)},
			{call("slack_send_message", `{"channel_type":"external"}`)},
		}, []string{"slack_send_message"}},
		{"api-rate-limit", "api-rate-limit", []driver.Tool{tool("github_search", events.ReadOnly)}, "api", [][]driver.Action{limit}, []string{"github_search"}},
		{"mcp-read-only", "mcp-read-only", []driver.Tool{tool("weather", events.ReadOnly), tool("notes_write", events.LocalMutation),
			tool("email_send", events.RemoteMutation), tool("files_purge", events.Destructive)}, "mcp", [][]driver.Action{
			{call("weather", `{}`), call("notes_write", `{}`), call("files_purge", `{}`), call("email_send", `{}`)},
		}, []string{"email_send", "notes_write"}},
		{"destructive-needs-approval", "destructive-needs-approval", []driver.Tool{tool("files_purge", events.Destructive), tool("weather", events.ReadOnly)}, "api", [][]driver.Action{
			{call("weather", `{}`), call("files_purge", `{}`)},
		}, []string{}},
	}
	files, err := filepath.Glob(examples + "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.file] = true
	}
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".yaml"); !strings.HasSuffix(name, ".cases") && !covered[name] {
			t.Errorf("example file %s has no case here: every example file must be held to the agreement", f)
		}
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			js := testkit.JetStream(t)
			log := js.Log(t, events.Config{})
			oldFile := examples + tt.file + ".yaml"
			id := recordUnder(t, js, log, oldFile, tt.tools, &events.Actor{ID: "ana"}, tt.surface, tt.scripts...)
			newFile := dropPolicy(t, oldFile, tt.drop)

			oldP, err := rules.Load(oldFile)
			if err != nil {
				t.Fatal(err)
			}
			newP, err := rules.Load(newFile)
			if err != nil {
				t.Fatal(err)
			}
			if !rules.Widening(rules.Diff(oldP, newP)) {
				t.Errorf("static diff: want a widening (it cannot tell the tools), got none")
			}
			changes := rules.DiffOver(oldP, newP, policy.DefaultSideEffects(), recordedSpecs(tt.tools))
			byDiff := []string{}
			for _, c := range changes {
				if c.Direction == rules.Narrows {
					continue
				}
				for _, tl := range c.Tools {
					if !slices.Contains(byDiff, tl) {
						byDiff = append(byDiff, tl)
					}
				}
			}
			slices.Sort(byDiff)
			byReplay := widenedTools(t, js.Server.ClientURL(), newFile, id)
			if !slices.Equal(byReplay, byDiff) {
				t.Errorf("replay widened %v, the diff over the recorded tools %v (%v): want the same", byReplay, byDiff, changes)
			}
			if !slices.Equal(byReplay, tt.want) {
				t.Errorf("replay widened %v, want %v", byReplay, tt.want)
			}
		})
	}
}

// dropPolicy writes file without policy id (disabled instead, when it is
// the file's only one: a file needs a policy) and returns its path.
func dropPolicy(t *testing.T, file, id string) string {
	t.Helper()
	p, err := rules.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	f := *p.File()
	f.Policies = slices.Clone(f.Policies)
	if len(f.Policies) == 1 && f.Policies[0].ID == id {
		off := false
		f.Policies[0].Enabled = &off
	} else {
		f.Policies = slices.DeleteFunc(f.Policies, func(ps rules.PolicySpec) bool { return ps.ID == id })
	}
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

// TestRules_AuditOfAWorkerRunningARulesFile: replay --rules FILE, with the
// side-effect default, is the policy such a worker records: everything
// re-checks the same. A file that does not load is an error naming it.
func TestRules_AuditOfAWorkerRunningARulesFile(t *testing.T) {
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	refund := testkit.NewLedger("orders_refund", events.LocalMutation, testkit.AnyObject)
	file := examples + "refund-limit.yaml"
	recordUnder(t, js, log, file, []driver.Tool{refund}, nil, "", []driver.Action{
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
