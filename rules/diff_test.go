package rules_test

import (
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
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

// TestDiffOver_ExactOverTheTools: made exact over tools, composed with the
// side-effect mapping, a change keeps only the tools whose outcome it can
// move, and is dropped when it can move none.
func TestDiffOver_ExactOverTheTools(t *testing.T) {
	read := events.ToolSpec{Name: "files_read", SideEffect: events.ReadOnly}
	del := events.ToolSpec{Name: "files_delete", SideEffect: events.Destructive}
	localDel := events.ToolSpec{Name: "cache_delete", SideEffect: events.LocalMutation}
	send := events.ToolSpec{Name: "mail_send", SideEffect: events.RemoteMutation}
	gh := events.ToolSpec{Name: "github_search", SideEffect: events.ReadOnly}
	tools := []events.ToolSpec{read, del, localDel, send, gh}
	file := func(def, rulesYAML, mode, scope string) string {
		return "version: 1\n" + def + "policies:\n  - id: p\n    type: tool_access\n" + scope + "    rules:\n" + rulesYAML + "    enforcement: {mode: " + mode + "}\n"
	}
	denyDel := "      - {id: r, action: deny, target: {type: tool, pattern: \"*_delete\"}}\n"
	allowRead := "      - {id: r, action: allow, target: {type: tool, pattern: \"files_*\"}}\n"
	confirmAll := "      - {id: r, action: allow, target: {type: tool, pattern: \"*\"}}\n"
	limitGH := "      - {id: r, action: allow, target: {type: tool, pattern: \"github_*\", attributes: {max_per_run: 3}}}\n"
	other := "      - {id: other, action: deny, target: {type: tool, pattern: nothing_matches}}\n"
	tests := []struct {
		name, old, new string
		want           []string // change directions and tools, "widens p/r on a, b"
	}{
		{"deny removed: only where the mapping allows", file("", denyDel, "block", ""), file("", other, "block", ""),
			[]string{"widens p/r on cache_delete"}},
		{"deny added: only where the mapping allows", file("", other, "block", ""), file("", denyDel, "block", ""),
			[]string{"narrows p/r on cache_delete"}},
		{"deny removed over destructive tools only: nothing", file("", denyDel, "block", "    scope: {side_effects: [destructive]}\n"), file("", other, "block", ""), nil},
		{"approval removed: where the mapping allows, exactly widening", file("", confirmAll, "confirm", ""), file("", other, "block", ""),
			[]string{"widens p/r on cache_delete, files_read, github_search"}},
		{"grant removed under side_effects: nothing", file("", allowRead, "block", ""), file("", other, "block", ""), nil},
		{"grant removed under a deny default: narrows where the mapping does not deny", file("default: deny\n", allowRead, "block", ""), file("default: deny\n", other, "block", ""),
			[]string{"narrows p/r on files_read"}},
		{"limit raised", file("", limitGH, "block", ""), file("", strings.Replace(limitGH, "3", "9", 1), "block", ""),
			[]string{"widens p/r on github_search"}},
		{"default to deny: where the mapping does not deny", file("", other, "block", ""), file("default: deny\n", other, "block", ""),
			[]string{"narrows default on cache_delete, files_read, github_search, mail_send"}},
		{"default to allow: never below the mapping", file("", other, "block", ""), file("default: allow\n", other, "block", ""), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, c := range rules.DiffOver(mustParse(t, tt.old), mustParse(t, tt.new), policy.DefaultSideEffects(), tools) {
				got = append(got, c.Direction+" "+c.Rule+" on "+strings.Join(c.Tools, ", "))
			}
			if strings.Join(got, "; ") != strings.Join(tt.want, "; ") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
