package rulescmd_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/rules"
	"github.com/arbiter-run/arbiter/rules/rulescmd"
)

const ex = "../../examples/policies/"

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := rulescmd.Run(context.Background(), args, &out)
	return out.String(), err
}

func write(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicy_CheckReportsAndStrictFails(t *testing.T) {
	out, err := run(t, "check", ex+"refund-limit.yaml")
	if err != nil || !strings.Contains(out, "2 policies, 2 rules, default side_effects, 0 findings; id rules sha256:") {
		t.Errorf("check = %v:\n%s", err, out)
	}
	allow := write(t, "a.yaml", "version: 1\ndefault: allow\npolicies: []\n")
	if out, err := run(t, "check", allow); err != nil || !strings.Contains(out, "warning: default: allow") {
		t.Errorf("check (lenient) = %v:\n%s", err, out)
	}
	if _, err := run(t, "check", "--strict", allow); !errors.Is(err, rulescmd.ErrFindings) {
		t.Errorf("check --strict = %v, want ErrFindings", err)
	}
	bad := write(t, "b.yaml", "version: 1\npolicies: [{id: p}]\n")
	_, err = run(t, "check", bad)
	var le *rules.LoadError
	if !errors.As(err, &le) || !strings.HasPrefix(err.Error(), bad+":2:") {
		t.Errorf("check of a bad file = %v, want a LoadError at %s:2", err, bad)
	}
}

func TestPolicy_TestFailsOnAWrongCase(t *testing.T) {
	if out, err := run(t, "test", ex+"pii-protection.yaml", ex+"pii-protection.cases.yaml"); err != nil || !strings.Contains(out, "5 cases, 0 failed") {
		t.Errorf("test = %v:\n%s", err, out)
	}
	cases := write(t, "c.yaml", "tools: [{name: hr_lookup, side_effect: read_only, data: [ssn]}]\ncases:\n  - {name: ssn, tool: hr_lookup, want: allow}\n")
	out, err := run(t, "test", ex+"pii-protection.yaml", cases)
	if !errors.Is(err, rulescmd.ErrFailed) || !strings.Contains(out, "FAIL "+cases+":3 ssn: got deny") {
		t.Errorf("test of a wrong case = %v:\n%s", err, out)
	}
	badCases := write(t, "d.yaml", "cases:\n  - {name: x, tool: t, want: maybe}\n")
	if _, err := run(t, "test", ex+"pii-protection.yaml", badCases); !errors.Is(err, rules.ErrCases) || !strings.Contains(err.Error(), ":2:") {
		t.Errorf("test with an unusable table = %v, want ErrCases naming line 2", err)
	}
}

func TestPolicy_DiffExitsOnWidening(t *testing.T) {
	same, err := run(t, "diff", ex+"refund-limit.yaml", ex+"refund-limit.yaml")
	if err != nil || !strings.HasPrefix(same, "0 changes") {
		t.Errorf("diff of a file with itself = %v:\n%s", err, same)
	}
	if out, err := run(t, "diff", ex+"refund-limit.yaml", ex+"no-destructive-tools.yaml"); !errors.Is(err, rulescmd.ErrWidening) || !strings.Contains(out, "widens: refund-too-large/too-large") {
		t.Errorf("diff removing the refund limit = %v:\n%s", err, out)
	}
	empty := write(t, "e.yaml", "version: 1\npolicies: []\n")
	if out, err := run(t, "diff", empty, ex+"no-destructive-tools.yaml"); err != nil || !strings.Contains(out, "narrows: no-destructive-tools/block-delete") {
		t.Errorf("diff adding a deny = %v:\n%s", err, out)
	}
}

func TestPolicy_UsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"lint"}, {"check"}, {"test", "a"}, {"diff", "a", "b", "c"}, {"check", "--nope", "a"}} {
		_, err := run(t, args...)
		var ue *rulescmd.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("policy %v = %v, want a usage error", args, err)
		}
	}
}

func TestPolicy_TestDiscoveryCases(t *testing.T) {
	out, err := run(t, "test", ex+"mcp-read-only.yaml", ex+"mcp-read-only.cases.yaml")
	if err != nil || !strings.Contains(out, "over mcp writes are hidden: hidden") || !strings.Contains(out, "8 cases, 0 failed") {
		t.Errorf("test = %v:\n%s", err, out)
	}
	wrong := write(t, "w.yaml", "tools: [{name: orders_refund, side_effect: local_mutation}]\ncases:\n  - {name: w, tool: orders_refund, surface: mcp, phase: discovery, want: shown}\n")
	if out, err := run(t, "test", ex+"mcp-read-only.yaml", wrong); !errors.Is(err, rulescmd.ErrFailed) || !strings.Contains(out, "hidden at discovery, want shown") {
		t.Errorf("a wrong discovery case = %v:\n%s", err, out)
	}
	bad := write(t, "b.yaml", "cases:\n  - {name: b, tool: t, phase: discovery, want: allow}\n")
	if _, err := run(t, "test", ex+"mcp-read-only.yaml", bad); !errors.Is(err, rules.ErrCases) {
		t.Errorf("want allow at discovery = %v, want ErrCases", err)
	}
}

// TestPolicy_DiffOverTheTools: removing no-destructive-tools widens for
// the static gate, but over the example's own tools (destructive ones,
// which the side-effect mapping denies anyway) nothing widens and the diff
// passes; over a table with a local-mutation delete tool it widens on that
// tool alone. A table with no tools, or none at all, is refused.
func TestPolicy_DiffOverTheTools(t *testing.T) {
	empty := write(t, "e.yaml", "version: 1\npolicies: []\n")
	old := ex + "no-destructive-tools.yaml"
	if _, err := run(t, "diff", old, empty); !errors.Is(err, rulescmd.ErrWidening) {
		t.Errorf("static diff removing no-destructive-tools = %v, want a widening", err)
	}
	out, err := run(t, "diff", "--tools", ex+"no-destructive-tools.cases.yaml", old, empty)
	if err != nil || !strings.HasPrefix(out, "0 changes") {
		t.Errorf("diff over the example's tools = %v:\n%s\nwant 0 changes", err, out)
	}
	table := write(t, "tools.yaml", "tools:\n  - {name: files_delete_all, side_effect: destructive}\n  - {name: cache_delete_old, side_effect: local_mutation}\ncases: []\n")
	out, err = run(t, "diff", "--tools", table, old, empty)
	if !errors.Is(err, rulescmd.ErrWidening) || !strings.Contains(out, "widens: no-destructive-tools/block-delete (tool *_delete_*; all tools): its policy no-destructive-tools is removed on cache_delete_old\n") {
		t.Errorf("diff over a local delete tool = %v:\n%s", err, out)
	}
	none := write(t, "none.yaml", "tools: []\ncases: []\n")
	var ue *rulescmd.UsageError
	if _, err := run(t, "diff", "--tools", none, old, empty); !errors.As(err, &ue) || !strings.Contains(err.Error(), "lists no tools") {
		t.Errorf("diff over a table of no tools = %v, want a usage error saying so", err)
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := run(t, "diff", "--tools", missing, old, empty); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("diff over a missing table = %v, want it not found", err)
	}
}
