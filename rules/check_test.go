package rules_test

import (
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/rules"
)

func TestCheck_Findings(t *testing.T) {
	doc := `version: 1
default: allow
policies:
  - id: off
    type: tool_access
    enabled: false
    rules: [{id: r, action: deny, target: {type: tool, pattern: a}}]
    enforcement: {mode: block}
  - id: p
    type: tool_access
    scope: {tools: [orders_get, orders_list]}
    rules:
      - {id: never, action: deny, target: {type: tool, pattern: "email_*"}}
      - {id: falsy, action: deny, target: {type: tool, pattern: orders_get}, condition: "false"}
      - {id: broad, action: deny, target: {type: tool, pattern: "orders_*"}}
      - {id: under, action: deny, target: {type: tool, pattern: orders_get}}
    enforcement: {mode: block}
  - id: everything
    type: tool_access
    rules: [{id: all, action: deny, target: {type: tool, pattern: "*"}}]
    enforcement: {mode: warn}
  - id: hider
    type: tool_access
    phases: [discovery, invocation]
    rules: [{id: by-url, action: deny, target: {type: resource, pattern: "*.internal"}}]
    enforcement: {mode: block}
`
	p := mustParse(t, doc)
	got := map[string]string{}
	for _, f := range rules.Lint(p) {
		if f.Severity != rules.SevWarning || f.File != "t.yaml" || f.Line == 0 {
			t.Errorf("finding %+v: want a warning with its place", f)
		}
		got[f.Rule] = f.String()
	}
	want := map[string]string{
		"":               "t.yaml:1:1: warning: default: allow",
		"off/r":          "t.yaml:7:13: warning: off/r: never applies: policy \"off\" is disabled",
		"p/never":        "t.yaml:13:9: warning: p/never: never applies: pattern \"email_*\" matches none",
		"p/falsy":        "t.yaml:14:9: warning: p/falsy: never applies: its condition is false",
		"p/under":        "t.yaml:16:9: warning: p/under: never changes an outcome: rule p/broad",
		"everything/all": "t.yaml:20:13: warning: everything/all: pattern \"*\" matches every tool",
		"hider/by-url":   "t.yaml:25:13: warning: hider/by-url: does nothing at discovery",
	}
	for rule, prefix := range want {
		if !strings.HasPrefix(got[rule], prefix) {
			t.Errorf("finding for %q = %q, want it to start %q", rule, got[rule], prefix)
		}
	}
	if len(got) != len(want) {
		t.Errorf("findings %v, want exactly %d", got, len(want))
	}
}

func TestCheck_ExamplesAreClean(t *testing.T) {
	for _, name := range []string{"no-destructive-tools", "pii-protection", "confirm-external", "api-rate-limit", "refund-limit", "mcp-read-only", "destructive-needs-approval"} {
		p, err := rules.Load("../examples/policies/" + name + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		if fs := rules.Lint(p); len(fs) != 0 {
			t.Errorf("%s: findings %v, want none", name, fs)
		}
	}
}
