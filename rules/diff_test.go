package rules_test

import (
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/rules"
)

const diffBase = `version: 1
policies:
  - id: guard
    type: tool_access
    scope: {side_effects: [destructive]}
    rules:
      - {id: no-delete, action: deny, target: {type: tool, pattern: "*_delete"}}
      - {id: ok-read, action: allow, target: {type: tool, pattern: files_read}}
    enforcement: {mode: block}
  - id: limits
    type: rate_limit
    rules:
      - {id: gh, action: allow, target: {type: tool, pattern: "github_*", attributes: {max_per_hour: 10}}}
    enforcement: {mode: block}
`

func TestDiff_Directions(t *testing.T) {
	tests := []struct {
		name string
		new  string
		want []string // change lines, by prefix
	}{
		{"same", diffBase, nil},
		{"policy removed", strings.Split(diffBase, "  - id: limits")[0], []string{"widens: limits/gh (tool github_*; all tools): its policy limits is removed"}},
		{"deny removed", strings.Replace(diffBase, "      - {id: no-delete, action: deny, target: {type: tool, pattern: \"*_delete\"}}\n", "", 1),
			[]string{"widens: guard/no-delete (tool *_delete; classes destructive): removed"}},
		{"grant removed", strings.Replace(diffBase, "      - {id: ok-read, action: allow, target: {type: tool, pattern: files_read}}\n", "", 1),
			[]string{"narrows: guard/ok-read"}},
		{"policy disabled", strings.Replace(diffBase, "    type: rate_limit\n", "    type: rate_limit\n    enabled: false\n", 1), []string{"widens: limits/gh"}},
		{"block to warn", strings.Replace(diffBase, "mode: block}\n  - id: limits", "mode: warn}\n  - id: limits", 1),
			[]string{"widens: guard/no-delete", "narrows: guard/ok-read"}},
		{"to confirm", strings.Replace(diffBase, "mode: block}\n  - id: limits", "mode: confirm}\n  - id: limits", 1),
			[]string{"widens: guard/no-delete", "narrows: guard/ok-read"}},
		{"limit raised", strings.Replace(diffBase, "max_per_hour: 10", "max_per_hour: 20", 1), []string{"widens: limits/gh (tool github_*; all tools): max_per_hour 10 → 20"}},
		{"limit moved to the fleet", strings.Replace(diffBase, "max_per_hour: 10}", "max_per_hour: 10, per: fleet}", 1), []string{"narrows: limits/gh (tool github_*; all tools): per: run → per: fleet"}},
		{"limit lowered", strings.Replace(diffBase, "max_per_hour: 10", "max_per_hour: 5", 1), []string{"narrows: limits/gh"}},
		{"pattern changed", strings.Replace(diffBase, `"*_delete"`, `"*_remove"`, 1), []string{"changes: guard/no-delete"}},
		{"deny added", strings.Replace(diffBase, "    enforcement: {mode: block}\n  - id: limits", "      - {id: no-drop, action: deny, target: {type: tool, pattern: \"db_drop*\"}}\n    enforcement: {mode: block}\n  - id: limits", 1),
			[]string{"narrows: guard/no-drop"}},
		{"default allow", "default: allow\n" + diffBase, []string{"widens: default: side_effects → allow"}},
		{"default deny", "default: deny\n" + diffBase, []string{"narrows: default: side_effects → deny"}},
	}
	old := mustParse(t, diffBase)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := rules.Diff(old, mustParse(t, tt.new))
			if len(cs) != len(tt.want) {
				t.Fatalf("changes %v, want %d: %v", cs, len(tt.want), tt.want)
			}
			widening := false
			for i, c := range cs {
				if !strings.HasPrefix(c.String(), tt.want[i]) {
					t.Errorf("change %d = %q, want it to start %q", i, c, tt.want[i])
				}
				widening = widening || !strings.HasPrefix(tt.want[i], "narrows")
			}
			if rules.Widening(cs) != widening {
				t.Errorf("Widening = %v, want %v", rules.Widening(cs), widening)
			}
		})
	}
}

// TestDiff_ApprovalsAgainstTheDefault: an approval narrows where the
// default would allow and may widen where it would deny.
func TestDiff_ApprovalsAgainstTheDefault(t *testing.T) {
	confirm := func(def, scope string) string {
		return "version: 1\n" + def + `policies:
  - id: c
    type: confirmation_required
    scope: {side_effects: [` + scope + `]}
    rules: [{id: r, action: allow, target: {type: tool, pattern: "*"}}]
    enforcement: {mode: confirm}
`
	}
	empty := "version: 1\npolicies: []\n"
	tests := []struct {
		name, old, new, want string
	}{
		{"approval added over reads", empty, confirm("", "read_only"), "narrows"},
		{"approval added over destructive tools", empty, confirm("", "destructive"), "changes"},
		{"approval removed over destructive tools", confirm("", "destructive"), empty, "changes"},
		{"approval added under an allow default", "version: 1\ndefault: allow\npolicies: []\n", confirm("default: allow\n", "destructive"), "narrows"},
		{"approval added under a deny default", "version: 1\ndefault: deny\npolicies: []\n", confirm("default: deny\n", "read_only"), "changes"},
	}
	for _, tt := range tests {
		cs := rules.Diff(mustParse(t, tt.old), mustParse(t, tt.new))
		if len(cs) != 1 || cs[0].Direction != tt.want {
			t.Errorf("%s: %v, want one change that %s", tt.name, cs, tt.want)
		}
	}
	// The example: removing destructive-needs-approval may narrow (the
	// default denies destructive tools) and is held by the gate.
	old, err := rules.Load("../examples/policies/destructive-needs-approval.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cs := rules.Diff(old, mustParse(t, empty)); !rules.Widening(cs) || cs[0].Direction != rules.Changes {
		t.Errorf("removing destructive-needs-approval: %v, want a change the gate holds", cs)
	}
}
