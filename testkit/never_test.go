package testkit_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// destructiveTools are the destructive tools of a file and repository
// toolset, with schemas rich enough to make generation work for its keep.
func destructiveTools() []driver.Tool {
	return []driver.Tool{
		testkit.NewLedger("read_file", events.ReadOnly, pathSchema),
		testkit.NewLedger("delete_file", events.Destructive, `{"type":"object","required":["path"],"additionalProperties":false,"properties":{
			"path":{"type":"string","pattern":"^/?([a-z0-9_]+/)*[a-z0-9_.]+$"},
			"recursive":{"type":"boolean"},"older_than_days":{"type":"integer","minimum":0,"maximum":3650}}}`),
		testkit.NewLedger("drop_branch", events.Destructive, `{"type":"object","required":["repo","branch"],"properties":{
			"repo":{"type":"string","pattern":"^[a-z]{3,8}-\\d{2}$"},
			"branch":{"oneOf":[{"type":"string","enum":["main","release"]},{"type":"string","pattern":"^feature/[a-z]+$"}]},
			"force":{"type":"boolean"}}}`),
	}
}

// tally counts the requests a policy is asked about.
type tally struct {
	policy.Policy
	n int
}

func (c *tally) Evaluate(ctx context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	c.n++
	return c.Policy.Evaluate(ctx, req, v)
}

func allowAll() policy.Policy {
	return policyFunc(func(policy.Request, projector.View) (policy.Ruling, error) {
		return policy.Ruling{Outcome: events.Allow, Reason: "anything goes"}, nil
	})
}

func TestNever_HoldsAndFails(t *testing.T) {
	t.Run("default policy never allows destructive", func(t *testing.T) {
		rec := &recorder{TB: t}
		p := &tally{Policy: policy.DefaultSideEffects()}
		testkit.Never(rec, p, destructiveTools(), events.Destructive, events.Allow, 200)
		requireClean(t, rec)
		// Two destructive tools, 200 documents each: most are distinct.
		if p.n < 200 {
			t.Errorf("got %d requests evaluated, want at least 200", p.n)
		}
		t.Logf("%d distinct requests evaluated", p.n)
	})
	t.Run("allow everything fails", func(t *testing.T) {
		rec := &recorder{TB: t}
		testkit.Never(rec, allowAll(), destructiveTools(), events.Destructive, events.Allow, 200)
		if got := len(rec.errors); got != 1 {
			t.Fatalf("got %d Errorf calls, want 1 table:\n%s", got, strings.Join(rec.errors, "\n---\n"))
		}
		report := rec.errors[0]
		for _, tool := range []string{"delete_file", "drop_branch"} {
			if !strings.Contains(report, tool) {
				t.Errorf("report does not name tool %s", tool)
			}
		}
		if strings.Contains(report, "read_file") {
			t.Errorf("report names read_file, which is not destructive")
		}
		if !strings.Contains(report, "seed") {
			t.Errorf("report does not give the seed")
		}
		t.Logf("the report begins:\n%s", firstLines(report, 5))
	})
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

func TestNever_EvaluatesUnderEveryView(t *testing.T) {
	p := &counting{}
	views := []projector.View{
		{Run: projector.Run{ID: "first", Status: projector.Running}},
		{Run: projector.Run{ID: "second", Status: projector.Waiting}},
	}
	rec := &recorder{TB: t}
	testkit.Never(rec, p, destructiveTools(), events.Destructive, events.Deny, 50, views...)
	requireClean(t, rec)
	byView := map[string]int{}
	argsByView := map[string][]string{}
	for i, req := range p.requests {
		id := p.views[i].Run.ID
		byView[id]++
		argsByView[id] = append(argsByView[id], req.Tool.Name+" "+string(req.Args))
		if req.Tool.SideEffect != events.Destructive {
			t.Errorf("got a request to %s tool %s, want only destructive tools", req.Tool.SideEffect, req.Tool.Name)
		}
	}
	if byView["first"] == 0 || byView["first"] != byView["second"] || len(byView) != 2 {
		t.Errorf("got evaluations per view %v, want the same number, more than zero, under each of the two", byView)
	}
	if !slices.Equal(argsByView["first"], argsByView["second"]) {
		t.Errorf("got different requests under the two views, want the same")
	}
}

func TestNever_FailureNamesView(t *testing.T) {
	// Allow once three steps have been taken: only the second view breaks
	// the property.
	p := policyFunc(func(_ policy.Request, v projector.View) (policy.Ruling, error) {
		if v.Run.Steps >= 3 {
			return policy.Ruling{Outcome: events.Allow}, nil
		}
		return policy.Ruling{Outcome: events.Deny}, nil
	})
	views := []projector.View{{Run: projector.Run{ID: "fresh"}}, {Run: projector.Run{ID: "late", Steps: 3}}}
	rec := &recorder{TB: t}
	testkit.Never(rec, p, destructiveTools(), events.Destructive, events.Allow, 20, views...)
	if got := len(rec.errors); got != 1 {
		t.Fatalf("got %d Errorf calls, want 1", got)
	}
	rows := strings.Split(rec.errors[0], "\n")[2:]
	for _, row := range rows {
		if f := strings.Fields(row); len(f) < 2 || f[1] != "1" {
			t.Errorf("got row %q, want every row under view 1", row)
		}
	}
}

func TestNever_IsDeterministic(t *testing.T) {
	draw := func() []string {
		p := &counting{}
		rec := &recorder{TB: t}
		testkit.Never(rec, p, destructiveTools(), events.Destructive, events.Deny, 30)
		requireClean(t, rec)
		var out []string
		for _, req := range p.requests {
			out = append(out, req.Tool.Name+" "+string(req.Args))
		}
		return out
	}
	first, second := draw(), draw()
	if !slices.Equal(first, second) {
		t.Errorf("got different requests from two runs, want the same:\n%q\n%q", first, second)
	}
}

func TestNever_SeedFromEnvironment(t *testing.T) {
	draw := func(seed string) []string {
		t.Setenv(testkit.SeedEnv, seed)
		p := &counting{}
		rec := &recorder{TB: t}
		testkit.Never(rec, p, destructiveTools(), events.Destructive, events.Deny, 10)
		requireClean(t, rec)
		var out []string
		for _, req := range p.requests {
			out = append(out, string(req.Args))
		}
		return out
	}
	def, same, other := draw(""), draw(strconv.FormatUint(testkit.DefaultSeed, 10)), draw("0x2a")
	if !slices.Equal(def, same) {
		t.Errorf("the default seed given in %s: got other requests than with it unset", testkit.SeedEnv)
	}
	if slices.Equal(def, other) {
		t.Errorf("seed 0x2a: got the same requests as the default seed, want others")
	}

	t.Setenv(testkit.SeedEnv, "forty-two")
	rec := &recorder{TB: t}
	testkit.Never(rec, policy.DefaultSideEffects(), destructiveTools(), events.Destructive, events.Allow, 10)
	if got := len(rec.fatals); got != 1 {
		t.Fatalf("seed forty-two: got %d Fatalf calls, want 1", got)
	}
}

func TestNever_ClassWithoutToolsFails(t *testing.T) {
	for _, class := range []events.SideEffect{events.RemoteMutation, "destructiv"} {
		rec := &recorder{TB: t}
		testkit.Never(rec, policy.DefaultSideEffects(), destructiveTools(), class, events.Allow, 10)
		if got := len(rec.errors); got != 1 {
			t.Fatalf("class %q: got %d Errorf calls, want 1", class, got)
		}
		if !strings.Contains(rec.errors[0], string(class)) {
			t.Errorf("class %q: report does not name it: %s", class, rec.errors[0])
		}
	}
}

func TestNever_UnsatisfiableSchemaIsReported(t *testing.T) {
	// The generator ignores "not", so nothing it draws passes.
	tools := []driver.Tool{
		testkit.NewLedger("shred", events.Destructive, `{"type":"object","required":["path"],"properties":{"path":{"type":"string","not":{"type":"string"}}}}`),
	}
	rec := &recorder{TB: t}
	testkit.Never(rec, policy.DefaultSideEffects(), tools, events.Destructive, events.Allow, 20)
	if got := len(rec.errors); got != 1 {
		t.Fatalf("got %d Errorf calls, want 1", got)
	}
	if msg := rec.errors[0]; !strings.Contains(msg, `"shred"`) || !strings.Contains(msg, "0 of 20") {
		t.Errorf("got report %q, want it to name tool \"shred\" and its pass count", msg)
	}
}

func TestNever_UndecidedIsReported(t *testing.T) {
	p := policyFunc(func(policy.Request, projector.View) (policy.Ruling, error) {
		return policy.Ruling{Outcome: "maybe"}, nil
	})
	rec := &recorder{TB: t}
	testkit.Never(rec, p, destructiveTools(), events.Destructive, events.Allow, 10)
	if got := len(rec.errors); got != 1 {
		t.Fatalf("got %d Errorf calls, want 1", got)
	}
	if !strings.Contains(rec.errors[0], "internal_error") {
		t.Errorf("got report\n%s\nwant rows of internal_error", rec.errors[0])
	}
}

func TestNever_BadSetupIsFatal(t *testing.T) {
	good := destructiveTools()
	tests := []struct {
		name    string
		p       policy.Policy
		tools   []driver.Tool
		outcome events.Outcome
		n       int
		wantErr error
	}{
		{"schema not JSON", policy.DefaultSideEffects(), []driver.Tool{testkit.NewLedger("x", events.Destructive, `{"type":"object"`)}, events.Allow, 10, driver.ErrBadTool},
		{"two tools one name", policy.DefaultSideEffects(), append(good, good[1]), events.Allow, 10, driver.ErrBadTool},
		{"outcome not one of the four", policy.DefaultSideEffects(), good, "allowed", 10, nil},
		{"no requests", policy.DefaultSideEffects(), good, events.Allow, 0, nil},
		{"nil policy", nil, good, events.Allow, 10, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			testkit.Never(rec, tt.p, tt.tools, events.Destructive, tt.outcome, tt.n)
			if got := len(rec.fatals); got != 1 {
				t.Fatalf("got %d Fatalf calls, want 1", got)
			}
			if tt.wantErr != nil && !rec.reported(tt.wantErr) {
				t.Errorf("got report %q, want it to carry %v", rec.fatals[0], tt.wantErr)
			}
		})
	}
}
