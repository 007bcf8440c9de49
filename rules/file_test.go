package rules_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/rules"
)

const minimal = `version: 1
policies:
  - id: p
    type: tool_access
    rules:
      - id: r
        action: deny
        target: {type: tool, pattern: "x_*"}
    enforcement: {mode: block}
`

// TestLoad_Refusals: every refusal names the file, the line and column of
// the value at fault, and what is wrong with it.
func TestLoad_Refusals(t *testing.T) {
	tests := []struct {
		name      string
		doc       string
		want      error
		line, col int
		reasonHas string
	}{
		{"not YAML", "version: 1\npolicies: [\n", rules.ErrSyntax, 2, 1, "did not find expected"},
		{"two documents", minimal + "---\nversion: 1\n", rules.ErrSyntax, 10, 1, "second document"},
		{"alias", "version: 1\nx: &a 1\npolicies: []\n", rules.ErrSyntax, 2, 4, "anchors"},
		{"repeated key", "version: 1\nversion: 1\npolicies: []\n", rules.ErrSyntax, 2, 1, "repeated"},
		{"unknown top-level field", "version: 1\npolicy: []\npolicies: []\n", rules.ErrSchema, 1, 1, "policy"},
		{"wrong version", "version: 2\npolicies: []\n", rules.ErrSchema, 1, 10, "/version"},
		{"unknown type", strings.Replace(minimal, "tool_access", "tool_acess", 1), rules.ErrSchema, 4, 11, "/policies/0/type"},
		{"unknown action", strings.Replace(minimal, "action: deny", "action: block", 1), rules.ErrSchema, 7, 17, "/policies/0/rules/0/action"},
		{"unknown mode", strings.Replace(minimal, "mode: block", "mode: enforce", 1), rules.ErrSchema, 9, 25, "/policies/0/enforcement/mode"},
		{"unknown target type", strings.Replace(minimal, "type: tool,", "type: tools,", 1), rules.ErrSchema, 8, 24, "/policies/0/rules/0/target/type"},
		{"unknown side-effect class", strings.Replace(minimal, "    rules:", "    scope: {side_effects: [remote]}\n    rules:", 1), rules.ErrSchema, 5, 28, "/policies/0/scope/side_effects/0"},
		{"rule without target", strings.Replace(minimal, "        target: {type: tool, pattern: \"x_*\"}\n", "", 1), rules.ErrSchema, 6, 9, "target"},
		{"negative limit", strings.Replace(minimal, `pattern: "x_*"}`, `pattern: "x_*", attributes: {max_per_hour: -1}}`, 1), rules.ErrSchema, 8, 73, "max_per_hour"},
		{"bad code", strings.Replace(minimal, "action: deny", "action: deny\n        code: lower", 1), rules.ErrSchema, 8, 15, "/policies/0/rules/0/code"},
		{"repeated policy id", minimal + strings.TrimPrefix(minimal, "version: 1\npolicies:\n"), rules.ErrInvalid, 10, 9, `policy id "p" repeated (first at 3:9)`},
		{"repeated rule id", strings.Replace(minimal, "    enforcement", "      - id: r\n        action: allow\n        target: {type: tool, pattern: y}\n    enforcement", 1), rules.ErrInvalid, 9, 13, `rule id "r" repeated`},
		{"limit past what a count holds", strings.Replace(minimal, `pattern: "x_*"}`, `pattern: "x_*", attributes: {max_per_run: 1e19}}`, 1), rules.ErrInvalid, 8, 72, "max_per_run: 1e+19 is not a count"},
		{"hourly limit past what a count holds", strings.Replace(minimal, `pattern: "x_*"}`, `pattern: "x_*", attributes: {max_per_hour: 9007199254740993}}`, 1), rules.ErrInvalid, 8, 73, "max_per_hour"},
		{"fleet window without an hour", strings.Replace(minimal, `pattern: "x_*"}`, `pattern: "x_*", attributes: {max_per_run: 5, per: fleet}}`, 1), rules.ErrInvalid, 8, 80, "per: fleet needs max_per_hour"},
		{"condition does not parse", strings.Replace(minimal, "action: deny", "action: deny\n        condition: \"args.amount >\"", 1), rules.ErrCondition, 8, 20, "args.amount >"},
		{"condition names an unknown variable", strings.Replace(minimal, "action: deny", "action: deny\n        condition: \"amount > 5\"", 1), rules.ErrCondition, 8, 20, "undeclared reference to 'amount'"},
		{"condition is not boolean", strings.Replace(minimal, "action: deny", "action: deny\n        condition: \"'a' + 'b'\"", 1), rules.ErrCondition, 8, 20, "want bool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rules.Parse("p.yaml", []byte(tt.doc))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Parse = %v, want %v", err, tt.want)
			}
			var le *rules.LoadError
			if !errors.As(err, &le) {
				t.Fatalf("Parse = %T, want a *rules.LoadError", err)
			}
			if le.File != "p.yaml" || le.Line != tt.line || le.Col != tt.col {
				t.Errorf("at %s:%d:%d, want p.yaml:%d:%d (%v)", le.File, le.Line, le.Col, tt.line, tt.col, err)
			}
			if !strings.Contains(le.Reason, tt.reasonHas) {
				t.Errorf("reason %q does not say %q", le.Reason, tt.reasonHas)
			}
			if want := "p.yaml:"; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q does not start with %q", err, want)
			}
		})
	}
}

func TestLoad_JSONAccepted(t *testing.T) {
	doc := `{"version":1,"policies":[{"id":"p","type":"tool_access","enforcement":{"mode":"block"},
	"rules":[{"id":"r","action":"deny","target":{"type":"tool","pattern":"x_*"}}]}]}`
	pj, err := rules.Parse("p.json", []byte(doc))
	if err != nil {
		t.Fatalf("Parse JSON: %v", err)
	}
	py, err := rules.Parse("p.yaml", []byte(minimal))
	if err != nil {
		t.Fatalf("Parse YAML: %v", err)
	}
	if pj.PolicyID() != py.PolicyID() {
		t.Errorf("the same policies in JSON and YAML have ids %s and %s, want one", pj.PolicyID(), py.PolicyID())
	}
}

func TestLoad_JSONRepeatedKeyRefused(t *testing.T) {
	_, err := rules.Parse("p.json", []byte(`{"version":1,"version":1,"policies":[]}`))
	var le *rules.LoadError
	if !errors.Is(err, rules.ErrSyntax) || !errors.As(err, &le) || le.Line != 1 {
		t.Errorf("Parse = %v, want ErrSyntax at line 1", err)
	}
}

func TestLoad_MissingFileNamesIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.yaml")
	_, err := rules.Load(path)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("Load = %v, want ErrNotExist naming %s", err, path)
	}
}

func TestLoad_TooLargeRefused(t *testing.T) {
	big := minimal + "#" + strings.Repeat("x", rules.MaxFileSize) + "\n"
	if _, err := rules.Parse("p.yaml", []byte(big)); !errors.Is(err, rules.ErrSyntax) {
		t.Errorf("Parse(%d bytes) = %v, want ErrSyntax", len(big), err)
	}
}

// TestID_ChangesWithEveryChange: any change to the file's meaning changes
// its id; comments and layout do not.
func TestID_ChangesWithEveryChange(t *testing.T) {
	base, err := rules.Parse("p.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base.PolicyID(), "rules sha256:") || len(base.PolicyID()) != len("rules sha256:")+64 {
		t.Fatalf("id %q, want rules sha256:<64 hex>", base.PolicyID())
	}
	same := "# a comment\n" + strings.Replace(minimal, `{type: tool, pattern: "x_*"}`, "\n          type: tool\n          pattern: x_*", 1)
	ps, err := rules.Parse("q.yaml", []byte(same))
	if err != nil {
		t.Fatal(err)
	}
	if ps.PolicyID() != base.PolicyID() {
		t.Errorf("layout changed the id: %s, want %s", ps.PolicyID(), base.PolicyID())
	}
	explicit := strings.Replace(minimal, "    enforcement", "    enabled: true\n    phases: [invocation]\n    enforcement", 1)
	if pe, err := rules.Parse("p.yaml", []byte(explicit)); err != nil || pe.PolicyID() != base.PolicyID() {
		t.Errorf("writing the defaults out changed the id (%v)", err)
	}
	changes := map[string]string{
		"pattern":  strings.Replace(minimal, "x_*", "y_*", 1),
		"action":   strings.Replace(minimal, "action: deny", "action: allow", 1),
		"mode":     strings.Replace(minimal, "mode: block", "mode: warn", 1),
		"disabled": strings.Replace(minimal, "    enforcement", "    enabled: false\n    enforcement", 1),
		"default":  "default: deny\n" + minimal,
		"priority": strings.Replace(minimal, "    enforcement", "    priority: 5\n    enforcement", 1),
	}
	seen := map[string]string{base.PolicyID(): "base"}
	for name, doc := range changes {
		p, err := rules.Parse("p.yaml", []byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if prev, dup := seen[p.PolicyID()]; dup {
			t.Errorf("changing the %s gives the id of %s", name, prev)
		}
		seen[p.PolicyID()] = name
	}
}

// TestSchema_PublishedCopyIsTheEnforcedOne holds docs/rules.schema.json to
// the schema the loader enforces.
func TestSchema_PublishedCopyIsTheEnforcedOne(t *testing.T) {
	b, err := os.ReadFile("../docs/rules.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, rules.Schema) {
		t.Error("docs/rules.schema.json differs from rules/schema.json: copy rules/schema.json over it")
	}
}
