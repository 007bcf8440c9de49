package rules_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/rules"
)

// FuzzParse: whatever the bytes, the loader either refuses them with a
// *LoadError wrapping one of its sentinels, or compiles a policy whose id is
// a function of the bytes and which decides a request without failing.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("../examples/policies/*.yaml")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(minimal))
	f.Add([]byte(`{"version":1,"policies":[]}`))
	f.Add([]byte("version: 1\npolicies: [{id: p, type: rate_limit, rules: [{id: r, action: allow, target: {type: resource, pattern: '*', attributes: {max_per_run: 0}}}], enforcement: {mode: confirm}}]\n"))
	tool := events.ToolSpec{Name: "orders_refund", SideEffect: events.LocalMutation, Data: []string{"financial.x"}, Resource: "url"}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := rules.Parse("f.yaml", data)
		if err != nil {
			var le *rules.LoadError
			if !errors.As(err, &le) {
				t.Fatalf("error %T %v, want a *LoadError", err, err)
			}
			if !errors.Is(err, rules.ErrSyntax) && !errors.Is(err, rules.ErrSchema) && !errors.Is(err, rules.ErrCondition) && !errors.Is(err, rules.ErrInvalid) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			if le.Line < 1 || le.Col < 1 {
				t.Fatalf("error %v at %d:%d", err, le.Line, le.Col)
			}
			return
		}
		again, err := rules.Parse("g.yaml", data)
		if err != nil || again.PolicyID() != p.PolicyID() {
			t.Fatalf("the same bytes loaded twice: %v, ids %s and %s", err, p.PolicyID(), again.PolicyID())
		}
		rules.Lint(p)
		rules.Diff(p, again)
		req, v := request(tool, `{"amount":700,"url":"https://a.example.com/x"}`, &events.Actor{ID: "a", Roles: []string{"finance"}}, time.Unix(0, 0))
		d, err := p.Evaluate(context.Background(), req, v)
		if err != nil {
			return // an approval that cannot be built is an error, not a crash
		}
		if !d.Outcome.Valid() {
			t.Fatalf("outcome %q", d.Outcome)
		}
	})
}

// FuzzCondition: whatever the condition and the arguments, a condition
// either fails to compile (refused on load) or decides: it never panics,
// and a failing evaluation denies.
func FuzzCondition(f *testing.F) {
	f.Add("args.amount > 500", `{"amount":700}`)
	f.Add("user.role != 'finance'", `{}`)
	f.Add("args.to.split('@')[1] != 'company.com'", `{"to":"a@b"}`)
	f.Add("args.items.all(x, x > 0)", `{"items":[1,2,3]}`)
	f.Add("run.time.getHours() < 8 || run.calls['x'] > 3", `null`)
	f.Add("size(args) > 2 && args.a.b.c == 1.5", `{"a":{"b":{"c":1.5}}}`)
	f.Add("tool.data.exists(d, d.startsWith('fin'))", `[1]`)
	f.Add("args.n < 1007 && tool.side_effect == 'read_only'", `{"n":7}`)
	f.Add("!(tool.name == 't') || args.x", `{"x":"s"}`)
	f.Add("has(tool.resource) && tool.resource == '' || args.n == 7", `{}`)
	tool := events.ToolSpec{Name: "t", SideEffect: events.ReadOnly, Data: []string{"financial.x"}}
	f.Fuzz(func(t *testing.T, cond, args string) {
		canon, err := jsonform.PolicyJSON([]byte(args))
		if err != nil {
			return // the driver never hands a policy such arguments
		}
		doc, _ := json.Marshal(map[string]any{"version": 1, "policies": []any{map[string]any{
			"id": "p", "type": "tool_access", "enforcement": map[string]any{"mode": "block"},
			"rules": []any{map[string]any{"id": "r", "action": "deny", "target": map[string]any{"type": "tool", "pattern": "t"}, "condition": cond}},
		}}})
		p, err := rules.Parse("c.json", doc)
		if err != nil {
			if !errors.Is(err, rules.ErrCondition) && !errors.Is(err, rules.ErrSchema) && !errors.Is(err, rules.ErrSyntax) {
				t.Fatalf("condition %q refused with %v", cond, err)
			}
			return
		}
		req, v := request(tool, string(canon), &events.Actor{ID: "u"}, time.Unix(1e9, 0))
		d, err := p.Evaluate(context.Background(), req, v)
		if err != nil {
			t.Fatalf("Evaluate: %v", err)
		}
		if !d.Outcome.Valid() || len(d.Parts) == 0 {
			t.Fatalf("decision %+v", d)
		}
		// With a spec hash the condition is folded for the tool: the
		// same decision, reasons and errors included.
		hashed := tool
		hashed.Hash = "h"
		req.Tool = hashed
		for i := 0; i < 2; i++ {
			f, err := p.Evaluate(context.Background(), req, v)
			if err != nil || !reflect.DeepEqual(f, d) {
				t.Fatalf("folded %+v %v, whole %+v", f, err, d)
			}
		}
		// Composed, the file writes its parts into the composition's
		// (policy.PartsAppender): the ruling the composition makes of its
		// plain Evaluate.
		se := policy.WithID(policy.DefaultSideEffects(), "se")
		in, err := policy.Compose(se, p)
		if err != nil {
			t.Fatal(err)
		}
		out, err := policy.Compose(se, hidden{p})
		if err != nil {
			t.Fatal(err)
		}
		a, aerr := in.Evaluate(context.Background(), req, v)
		b, berr := out.Evaluate(context.Background(), req, v)
		if (aerr != nil) != (berr != nil) || !reflect.DeepEqual(a, b) {
			t.Fatalf("composed, appending %+v (%v), copied %+v (%v)", a, aerr, b, berr)
		}
	})
}
