package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/rules"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/arbiter-run/arbiter/toolbox"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfig_DefaultIsTheDemoSetup(t *testing.T) {
	c, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	tools, err := c.tools(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != len(toolbox.Names()) {
		t.Errorf("got %d tools, want every built-in (%d)", len(tools), len(toolbox.Names()))
	}
	p, err := c.policy()
	if err != nil {
		t.Fatal(err)
	}
	if policy.ID(p) == "" {
		t.Error("default policy has no id: its decisions could not be re-checked")
	}
	if c.agents()["demo"] == nil {
		t.Error("no demo agent")
	}
}

func TestConfig_ReadsAFile(t *testing.T) {
	path := writeConfig(t, `
tools:
  - {name: read_file}
  - {name: send_email, class: destructive, timeout: 2s}
policy:
  id: rules v7
  side_effects: {read_only: allow, destructive: deny}
approval_ttl: 1h
limits: {max_steps: 7, max_elapsed: 90s}
agents:
  mine:
    - {tool: read_file, args: '{"path":"a"}'}
`)
	c, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := c.tools(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if s := tools[1].Spec(); s.SideEffect != "destructive" || s.Timeout.String() != "2s" {
		t.Errorf("send_email: got class %s timeout %s, want destructive 2s", s.SideEffect, s.Timeout)
	}
	p, _ := c.policy()
	if policy.ID(p) != "rules v7" {
		t.Errorf("policy id: got %q", policy.ID(p))
	}
	l, err := c.Limits.Limits()
	if err != nil || l.MaxSteps != 7 || l.MaxElapsedMS != 90000 {
		t.Errorf("limits: got %+v, %v", l, err)
	}
	if c.agents()["mine"] == nil {
		t.Error("agent mine not configured")
	}
}

// Every mistake in a config file is an error that names what was wrong.
func TestConfig_RefusalsNameTheMistake(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
		check            func(Config) error
	}{
		{"unknown field", "tolls: []", "tolls", nil},
		{"not yaml", "tools: [", "worker.yaml", nil},
		{"unknown tool", "tools: [{name: rm_rf}]", "rm_rf", func(c Config) error { _, err := c.tools(t.TempDir()); return err }},
		{"bad timeout", "tools: [{name: sleep, timeout: soon}]", "soon", func(c Config) error { _, err := c.tools(t.TempDir()); return err }},
		{"bad outcome", "policy: {side_effects: {read_only: maybe}}", "maybe", func(c Config) error { _, err := c.policy(); return err }},
		{"bad operator key", "operators: {SUAKEY: alice}", "SUAKEY", func(c Config) error { _, err := c.operators(nil); return err }},
		{"bad ttl", "approval_ttl: forever", "forever", func(c Config) error { _, err := c.approvalTTL(); return err }},
		{"bad elapsed", "limits: {max_elapsed: long}", "long", func(c Config) error { _, err := c.Limits.Limits(); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadConfig(writeConfig(t, tc.text))
			if err == nil && tc.check != nil {
				err = tc.check(c)
			}
			if err == nil {
				t.Fatalf("got nil error, want one naming %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
		})
	}
	if _, err := loadConfig(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want os.ErrNotExist", err)
	}
}

func TestConfig_RulesFileComposedWithSideEffects(t *testing.T) {
	path := writeConfig(t, "policy:\n  rules: ../../examples/policies/refund-limit.yaml\n")
	c, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.policy()
	if err != nil {
		t.Fatal(err)
	}
	comp, ok := p.(*policy.Composed)
	if !ok {
		t.Fatalf("policy is %T, want a *policy.Composed", p)
	}
	ids := comp.Members()
	if len(ids) != 2 || !strings.HasPrefix(ids[0], "side-effects ") || !strings.HasPrefix(ids[1], "rules sha256:") {
		t.Errorf("members %v, want the side-effect policy and the rules file", ids)
	}
}

func TestConfig_BadRulesFileNamesIt(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\npolicies: [{id: p}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig(writeConfig(t, "policy:\n  rules: "+bad+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.policy()
	var le *rules.LoadError
	if !errors.As(err, &le) || le.File != bad || le.Line != 2 {
		t.Errorf("policy() = %v, want a LoadError at %s:2", err, bad)
	}
}

func TestConfig_ShadowRulesFile(t *testing.T) {
	c, err := loadConfig(writeConfig(t, "policy:\n  shadow: ../../examples/policies/refund-limit.yaml\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.shadow()
	if err != nil || !strings.HasPrefix(policy.ID(p), "rules sha256:") {
		t.Fatalf("shadow() = %v, %v; want the rules file", p, err)
	}
	none, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := none.shadow(); p != nil || err != nil {
		t.Errorf("no shadow configured: %v, %v", p, err)
	}
	bad, err := loadConfig(writeConfig(t, "policy:\n  shadow: /nonexistent/rules.yaml\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.shadow(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing shadow file: %v, want ErrNotExist", err)
	}
}

func TestConfig_ToolsDeclareDataTagsAndResource(t *testing.T) {
	c, err := loadConfig(writeConfig(t, "tools:\n  - {name: read_file, data: [financial.ledger], tags: [files], resource: path}\n  - {name: delete_file}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := c.tools(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := tools[0].Spec()
	if strings.Join(s.Data, ",") != "financial.ledger" || strings.Join(s.Tags, ",") != "files" || s.Resource != "path" || s.Name != "read_file" {
		t.Errorf("spec %+v, want the declared data, tags and resource", s)
	}
	if s := tools[1].Spec(); s.Data != nil || s.Resource != "" {
		t.Errorf("undeclared tool spec %+v, want nothing declared", s)
	}
	// The spec the driver records carries them, so rules can target them.
	ct, err := driver.Compile(tools[0])
	if err != nil {
		t.Fatal(err)
	}
	if ct.Record.Resource != "path" || len(ct.Record.Data) != 1 {
		t.Errorf("recorded spec %+v, want data and resource", ct.Record)
	}
}

func TestConfig_DeclaringKeepsTheReconcileHook(t *testing.T) {
	inner := &testkit.Reconciling{Ledger: testkit.NewLedger("push", events.RemoteMutation, testkit.AnyObject), Answer: driver.Done, Content: "pushed"}
	tl := declare(inner, ToolConfig{Tags: []string{"git"}})
	r, ok := tl.(driver.Reconciler)
	if !ok {
		t.Fatal("the declared tool lost its reconcile hook")
	}
	if got, content, err := r.Reconcile(t.Context(), nil); got != driver.Done || content != "pushed" || err != nil {
		t.Errorf("Reconcile = %v %q %v, want the inner tool's answer", got, content, err)
	}
	if tl.Spec().Tags[0] != "git" {
		t.Errorf("spec %+v, want the tag", tl.Spec())
	}
}

// TestConfig_ModelAgents: a model agent in the file is built with its
// key from the environment; a spend budget with no price for its model,
// a tool the worker lacks or an unset key variable is refused at start,
// naming the agent.
func TestConfig_ModelAgents(t *testing.T) {
	c, err := loadConfig(writeConfig(t, `
models:
  local:
    provider: openai
    base_url: http://127.0.0.1:11434/v1
    model: llama3.2
    system: You read files carefully.
    max_tokens: 512
    temperature: 0.2
    tools: [read_file, finish]
    timeout: 30s
    budget: {calls: 20, output_tokens: 8000}
    over_budget: {approve: true, raise: {calls: 10}, expires: 2h}
  hosted:
    provider: anthropic
    model: claude-x
    api_key_env: TEST_ANTHROPIC_KEY
    budget: {spend_usd: 0.5}
    prices: {claude-x: {input: 3, output: 15}}
`))
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string { return map[string]string{"TEST_ANTHROPIC_KEY": "k"}[k] }
	tools := []string{"read_file", "finish", "send_email"}
	agents, err := c.modelAgents(getenv, tools)
	if err != nil {
		t.Fatal(err)
	}
	if agents["local"] == nil || agents["hosted"] == nil {
		t.Errorf("agents %v, want local and hosted", agents)
	}
	for _, tc := range []struct{ name, text, want string }{
		{"no price", "models: {m: {provider: openai, model: x, budget: {spend_usd: 1}}}", `models.m: bad model agent config: a spend budget of $1 with no price for model "x"`},
		{"unknown tool", "models: {m: {provider: openai, model: x, tools: [rm]}}", `models.m: bad model agent config: tools: no tool named "rm"`},
		{"unset key", "models: {m: {provider: anthropic, model: x, api_key_env: NOT_SET_HERE}}", "models.m: bad model agent config: api_key_env: $NOT_SET_HERE"},
		{"bad provider", "models: {m: {provider: gemini, model: x}}", `provider "gemini"`},
		{"name taken", "agents: {m: []}\nmodels: {m: {provider: openai, model: x}}", "models.m: an agent of that name"},
		{"approval with no budget", "models: {m: {provider: openai, model: x, over_budget: {approve: true}}}", "models.m: bad model agent config: over_budget asks for an approval, but there is no budget to pass"},
		{"bad approval expiry", "models: {m: {provider: openai, model: x, budget: {calls: 1}, over_budget: {approve: true, expires: soon}}}", `models.m: bad model agent config: over_budget.expires "soon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadConfig(writeConfig(t, tc.text))
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.modelAgents(getenv, tools)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestConfig_ShadowSpendsNoFleetQuota: the shadow policy is given no fleet
// counter, so its per: fleet rules deny (recorded, never enforced) rather
// than count calls against the fleet's limit.
func TestConfig_ShadowSpendsNoFleetQuota(t *testing.T) {
	c, err := loadConfig(writeConfig(t, "policy:\n  shadow: ../../examples/policies/api-rate-limit.yaml\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.shadow()
	if err != nil {
		t.Fatal(err)
	}
	tool := events.ToolSpec{Name: "github_list", SideEffect: events.ReadOnly}
	v := projector.View{Run: projector.Run{ID: "r", Tools: []events.ToolSpec{tool}}}
	d, err := p.Evaluate(t.Context(), policy.Request{Run: "r", Step: 1, Tool: tool, Args: []byte(`{}`)}, v)
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != events.Deny || !strings.Contains(d.Reason, rules.ErrNoWindows.Error()) {
		t.Errorf("shadow fleet rule: %s %q, want deny for want of a counter", d.Outcome, d.Reason)
	}
}

// TestConfig_RunDefaultsRefusals: run defaults for an agent the worker
// does not have, or an actor with roles and no id, name the mistake.
func TestConfig_RunDefaultsRefusals(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown agent", "run_defaults: {ghost: {surface: api}}", "run_defaults.ghost: no agent of that name (agents: demo, mine)"},
		{"actor without id", "run_defaults: {mine: {actor: {roles: [finance]}}}", "run_defaults.mine: actor: an id is required (roles and attributes belong to someone)"},
		{"unknown field", "run_defaults: {mine: {user: x}}", "field user not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadConfig(writeConfig(t, "agents: {mine: []}\n"+tc.text))
			if err == nil {
				_, err = c.runDefaults(c.agents())
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
	c, err := loadConfig(writeConfig(t, "agents: {mine: []}\nrun_defaults: {mine: {actor: {id: ana, roles: [finance], attributes: {team: emea}}, surface: cli}}"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.runDefaults(c.agents())
	if err != nil || d["mine"].Actor.ID != "ana" || d["mine"].Actor.Roles[0] != "finance" || d["mine"].Actor.Attributes["team"] != "emea" || d["mine"].Surface != "cli" {
		t.Errorf("run defaults %+v %v, want ana/finance/emea over cli", d, err)
	}
}

// TestConfig_LimitsNoneAndBelow: -1 and max_elapsed "none" ask for no
// limit (recorded as none by the driver); -2 is refused by name when the
// driver is built.
func TestConfig_LimitsNoneAndBelow(t *testing.T) {
	c, err := loadConfig(writeConfig(t, "limits: {max_steps: -1, max_elapsed: none}"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Limits.Limits()
	if err != nil {
		t.Fatal(err)
	}
	got, err := driver.ApplyLimits(l, driver.DefaultLimits)
	if err != nil || got.MaxSteps != 0 || got.MaxElapsedMS != 0 || got.MaxRepeats != driver.DefaultLimits.MaxRepeats {
		t.Errorf("limits -1 and none: %+v, %v; want no step or time limit, the default repeats", got, err)
	}
	c, err = loadConfig(writeConfig(t, "limits: {max_repeats: -2}"))
	if err != nil {
		t.Fatal(err)
	}
	l, _ = c.Limits.Limits()
	if _, err := driver.ApplyLimits(l, driver.DefaultLimits); err == nil || !strings.Contains(err.Error(), "max_repeats -2") {
		t.Errorf("max_repeats -2: %v, want it refused by name", err)
	}
}
