package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// recorder is a testing.TB that records what a test helper reports instead
// of failing the test it runs in. Everything else goes to the real test.
type recorder struct {
	testing.TB
	errors []string
	fatals []string
	// args holds every argument of every report, to find errors in.
	args []any
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
	r.args = append(r.args, args...)
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(format, args...))
	r.args = append(r.args, args...)
}

// reported reports whether an error matching target was among the
// arguments of a report.
func (r *recorder) reported(target error) bool {
	for _, a := range r.args {
		if err, ok := a.(error); ok && errors.Is(err, target) {
			return true
		}
	}
	return false
}

// requireClean fails t if the recorder holds any report.
func requireClean(t *testing.T, r *recorder) {
	t.Helper()
	if len(r.errors) != 0 || len(r.fatals) != 0 {
		t.Fatalf("got %d errors and %d fatals, want none:\n%s", len(r.errors), len(r.fatals), strings.Join(append(r.errors, r.fatals...), "\n"))
	}
}

const pathSchema = `{"type":"object","properties":{"path":{"type":"string","minLength":1}},"required":["path"],"additionalProperties":false}`

// ledgerTools is one ledger tool of each side-effect class.
func ledgerTools() []driver.Tool {
	return []driver.Tool{
		testkit.NewLedger("read_file", events.ReadOnly, pathSchema),
		testkit.NewLedger("write_file", events.LocalMutation, pathSchema),
		testkit.NewLedger("delete_file", events.Destructive, pathSchema),
		testkit.NewLedger("send_email", events.RemoteMutation, `{"type":"object","properties":{"to":{"type":"string","format":"email"}},"required":["to"]}`),
	}
}

// counting is a policy that allows everything and counts its calls, keeping
// the requests and views it was handed.
type counting struct {
	mu       sync.Mutex
	requests []policy.Request
	views    []projector.View
}

func (c *counting) Evaluate(_ context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = append(c.requests, req)
	c.views = append(c.views, v)
	return policy.Ruling{Outcome: events.Allow}, nil
}

func (c *counting) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.requests)
}

// policyFunc adapts a function to policy.Policy.
type policyFunc func(policy.Request, projector.View) (policy.Ruling, error)

func (f policyFunc) Evaluate(_ context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	return f(req, v)
}

func TestCheckPolicy_AgreeingTablePasses(t *testing.T) {
	rec := &recorder{TB: t}
	testkit.CheckPolicy(rec, policy.DefaultSideEffects(), ledgerTools(), []testkit.PolicyCase{
		{Name: "read allowed", Tool: "read_file", Args: `{"path":"notes.txt"}`, Want: events.Allow},
		{Name: "write allowed", Tool: "write_file", Args: `{"path":"notes.txt"}`, Want: events.Allow},
		{Name: "delete denied", Tool: "delete_file", Args: `{"path":"/"}`, Want: events.Deny},
		{Name: "send asks", Tool: "send_email", Args: `{"to":"ops@example.com"}`, Want: events.RequireApproval, Kind: string(events.RemoteMutation)},
		{Name: "send asks, any kind", Tool: "send_email", Args: `{"to":"ops@example.com"}`, Want: events.RequireApproval},
		{Name: "no path", Tool: "read_file", Args: `{}`, Want: testkit.Refused},
		{Name: "extra member", Tool: "delete_file", Args: `{"path":"/","force":true}`, Want: testkit.Refused},
		{Name: "malformed", Tool: "read_file", Args: `{"path": "notes.txt"`, Want: testkit.Refused},
		{Name: "repeated key", Tool: "read_file", Args: `{"path":"a","path":"b"}`, Want: testkit.Refused},
		{Name: "unknown tool", Tool: "format_disk", Args: `{}`, Want: testkit.Refused},
	})
	requireClean(t, rec)
}

func TestCheckPolicy_DisagreementsPrintOneTable(t *testing.T) {
	rec := &recorder{TB: t}
	failing := func(policy.Request, projector.View) (policy.Ruling, error) {
		return policy.Ruling{}, errors.New("rules not loaded")
	}
	disagree := []string{"case-read-wants-deny", "case-delete-wants-allow", "case-send-wrong-kind", "case-malformed-wants-allow", "case-unknown-wants-deny"}
	cases := []testkit.PolicyCase{
		{Name: "case-read-agrees", Tool: "read_file", Args: `{"path":"a"}`, Want: events.Allow},
		{Name: disagree[0], Tool: "read_file", Args: `{"path":"a"}`, Want: events.Deny},
		{Name: disagree[1], Tool: "delete_file", Args: `{"path":"a"}`, Want: events.Allow},
		{Name: disagree[2], Tool: "send_email", Args: `{"to":"a@example.com"}`, Want: events.RequireApproval, Kind: "payment"},
		{Name: disagree[3], Tool: "read_file", Args: `{"path":`, Want: events.Allow},
		{Name: disagree[4], Tool: "no_such_tool", Args: `{}`, Want: events.Deny},
		{Name: "case-refused-agrees", Tool: "read_file", Args: `[]`, Want: testkit.Refused},
	}
	testkit.CheckPolicy(rec, policy.DefaultSideEffects(), ledgerTools(), cases)

	if got := len(rec.errors); got != 1 {
		t.Fatalf("got %d Errorf calls, want 1:\n%s", got, strings.Join(rec.errors, "\n---\n"))
	}
	if got := len(rec.fatals); got != 0 {
		t.Fatalf("got %d Fatalf calls, want 0: %v", got, rec.fatals)
	}
	report := rec.errors[0]
	for _, name := range disagree {
		if !strings.Contains(report, name) {
			t.Errorf("report does not name disagreeing case %q:\n%s", name, report)
		}
	}
	for _, name := range []string{"case-read-agrees", "case-refused-agrees"} {
		if strings.Contains(report, name) {
			t.Errorf("report names agreeing case %q:\n%s", name, report)
		}
	}
	header := strings.Fields(strings.SplitN(report, "\n", 3)[1])
	if want := []string{"case", "tool", "want", "got", "detail"}; strings.Join(header, " ") != strings.Join(want, " ") {
		t.Errorf("got table header %q, want %q", header, want)
	}
	t.Logf("the report:\n%s", report)

	// An error from the policy disagrees with every outcome, and says so.
	rec = &recorder{TB: t}
	testkit.CheckPolicy(rec, policyFunc(failing), ledgerTools(), []testkit.PolicyCase{
		{Name: "errors", Tool: "read_file", Args: `{"path":"a"}`, Want: events.Allow},
	})
	if got := len(rec.errors); got != 1 {
		t.Fatalf("policy error: got %d Errorf calls, want 1", got)
	}
	if !strings.Contains(rec.errors[0], "rules not loaded") {
		t.Errorf("policy error: report does not show the error:\n%s", rec.errors[0])
	}
}

func TestCheckPolicy_UndecidableAnswersDisagree(t *testing.T) {
	tests := []struct {
		name string
		dec  policy.Ruling
	}{
		{"outcome outside the four", policy.Ruling{Outcome: "maybe"}},
		{"empty outcome", policy.Ruling{}},
		{"approval without kind", policy.Ruling{Outcome: events.RequireApproval}},
		{"capability not usable JSON", policy.Ruling{Outcome: events.RequireApproval, Approval: &policy.Approval{Kind: "k", Capability: []byte(`{"a":1,"a":2}`)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			p := policyFunc(func(policy.Request, projector.View) (policy.Ruling, error) { return tt.dec, nil })
			testkit.CheckPolicy(rec, p, ledgerTools(), []testkit.PolicyCase{
				{Name: "wants allow", Tool: "read_file", Args: `{"path":"a"}`, Want: events.Allow},
				{Name: "wants approval", Tool: "read_file", Args: `{"path":"a"}`, Want: events.RequireApproval},
			})
			if got := len(rec.errors); got != 1 {
				t.Fatalf("got %d Errorf calls, want 1", got)
			}
			if !strings.Contains(rec.errors[0], "2 of 2 cases disagree") || !strings.Contains(rec.errors[0], "internal_error") {
				t.Errorf("got report\n%s\nwant both cases disagreeing with internal_error", rec.errors[0])
			}
		})
	}
}

func TestCheckPolicy_RefusedNeverReachesPolicy(t *testing.T) {
	rec := &recorder{TB: t}
	p := &counting{}
	testkit.CheckPolicy(rec, p, ledgerTools(), []testkit.PolicyCase{
		{Name: "malformed", Tool: "read_file", Args: `{"path":"a"`, Want: testkit.Refused},
		{Name: "not UTF-8", Tool: "read_file", Args: "{\"path\":\"\xff\"}", Want: testkit.Refused},
		{Name: "empty", Tool: "read_file", Args: ``, Want: testkit.Refused},
		{Name: "schema refuses", Tool: "read_file", Args: `{"path":""}`, Want: testkit.Refused},
		{Name: "unknown tool", Tool: "rm", Args: `{"path":"a"}`, Want: testkit.Refused},
		{Name: "accepted", Tool: "read_file", Args: `{ "path" : "a" }`, Want: events.Allow},
	})
	requireClean(t, rec)
	if got := p.calls(); got != 1 {
		t.Fatalf("got %d policy calls, want 1 (only the accepted case)", got)
	}
	req, view := p.requests[0], p.views[0]
	if got, want := string(req.Args), `{"path":"a"}`; got != want {
		t.Errorf("got args %s, want %s (PolicyJSON form)", got, want)
	}
	if req.Run != "checkpolicy" || req.Step != 1 || req.Tool.Name != "read_file" || req.Tool.Hash == "" {
		t.Errorf("got request run %q step %d tool %q hash %q, want run checkpolicy step 1 tool read_file with its hash", req.Run, req.Step, req.Tool.Name, req.Tool.Hash)
	}
	if view.Run.Status != projector.Running || len(view.Run.Tools) != 4 || view.Steps.Len() != 0 {
		t.Errorf("got default view status %s with %d tools and %d steps, want RUNNING with 4 tools and no steps", view.Run.Status, len(view.Run.Tools), view.Steps.Len())
	}
}

func TestCheckPolicy_CaseViewIsHandedToPolicy(t *testing.T) {
	// Deny once the run has taken three steps.
	p := policyFunc(func(_ policy.Request, v projector.View) (policy.Ruling, error) {
		if v.Run.Steps >= 3 {
			return policy.Ruling{Outcome: events.Deny, Reason: "too many steps"}, nil
		}
		return policy.Ruling{Outcome: events.Allow}, nil
	})
	late := projector.View{Run: projector.Run{ID: "late", Status: projector.Running, Steps: 3}}
	rec := &recorder{TB: t}
	testkit.CheckPolicy(rec, p, ledgerTools(), []testkit.PolicyCase{
		{Name: "fresh run", Tool: "read_file", Args: `{"path":"a"}`, Want: events.Allow},
		{Name: "after three steps", Tool: "read_file", Args: `{"path":"a"}`, View: &late, Want: events.Deny},
	})
	requireClean(t, rec)
}

func TestCheckPolicy_BadToolIsFatal(t *testing.T) {
	tools := []driver.Tool{testkit.NewLedger("read_file", "remote", testkit.AnyObject)}
	rec := &recorder{TB: t}
	p := &counting{}
	testkit.CheckPolicy(rec, p, tools, []testkit.PolicyCase{{Name: "x", Tool: "read_file", Args: `{}`, Want: events.Allow}})
	if got := len(rec.fatals); got != 1 {
		t.Fatalf("got %d Fatalf calls, want 1", got)
	}
	if !rec.reported(driver.ErrBadTool) {
		t.Errorf("got report %q, want it to carry driver.ErrBadTool", rec.fatals[0])
	}
	if got := p.calls(); got != 0 {
		t.Errorf("got %d policy calls, want 0", got)
	}

	rec = &recorder{TB: t}
	twice := []driver.Tool{testkit.NewLedger("a", events.ReadOnly, testkit.AnyObject), testkit.NewLedger("a", events.ReadOnly, testkit.AnyObject)}
	testkit.CheckPolicy(rec, p, twice, nil)
	if !rec.reported(driver.ErrBadTool) {
		t.Errorf("two tools named a: got reports %q, want one carrying driver.ErrBadTool", rec.fatals)
	}
}

func TestCheckPolicy_MalformedCaseIsReported(t *testing.T) {
	rec := &recorder{TB: t}
	testkit.CheckPolicy(rec, policy.DefaultSideEffects(), ledgerTools(), []testkit.PolicyCase{
		{Name: "typo", Tool: "read_file", Args: `{"path":"a"}`, Want: "allowed"},
		{Name: "kind on allow", Tool: "read_file", Args: `{"path":"a"}`, Want: events.Allow, Kind: "read_only"},
	})
	if got := len(rec.errors); got != 1 {
		t.Fatalf("got %d Errorf calls, want 1", got)
	}
	if !strings.Contains(rec.errors[0], "2 of 2 cases disagree") {
		t.Errorf("got report\n%s\nwant both malformed cases in it", rec.errors[0])
	}
}

// printer stands in for a test's t so the example can show a report.
type printer struct{ testing.TB }

func (printer) Helper()                           {}
func (printer) Context() context.Context          { return context.Background() }
func (printer) Errorf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
func (printer) Fatalf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// A table of requests and the outcome each should get, decided through the
// runtime's own argument checks first. In a test, pass t; here a printer
// stands in for it to show the report a disagreement gives.
func ExampleCheckPolicy() {
	tools := []driver.Tool{
		testkit.NewLedger("delete_file", events.Destructive, pathSchema),
		testkit.NewLedger("send", events.RemoteMutation, `{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`),
	}
	testkit.CheckPolicy(printer{}, policy.DefaultSideEffects(), tools, []testkit.PolicyCase{
		{Name: "send asks", Tool: "send", Args: `{"to":"ops"}`, Want: events.RequireApproval, Kind: string(events.RemoteMutation)},
		{Name: "no recipient", Tool: "send", Args: `{}`, Want: testkit.Refused},
		{Name: "delete allowed?", Tool: "delete_file", Args: `{"path":"/tmp/x"}`, Want: events.Allow},
		{Name: "delete nothing", Tool: "delete_file", Args: `{"path":""}`, Want: events.Deny},
	})
	// Output:
	// testkit.CheckPolicy: 2 of 4 cases disagree:
	// case             tool         want   got      detail
	// delete allowed?  delete_file  allow  deny     reason: destructive tool delete_file
	// delete nothing   delete_file  deny   refused  arguments of delete_file at /path: minLength: got 0, want 1
}
