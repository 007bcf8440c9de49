package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/policy"
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
	l, err := c.Limits.limits()
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
		{"bad elapsed", "limits: {max_elapsed: long}", "long", func(c Config) error { _, err := c.Limits.limits(); return err }},
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
