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
