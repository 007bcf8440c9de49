package rules

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// TestFold_SameAnswerAsTheWholeCondition: a condition folded for a tool
// spec answers every call what the whole condition answers, the same bool
// or the same error, for conditions that fold to a constant, to a
// residue, and that do not fold; and folding happens (the test is not
// vacuous).
func TestFold_SameAnswerAsTheWholeCondition(t *testing.T) {
	conds := []string{
		"args.n < 1007 && tool.side_effect == 'read_only'",
		"tool.side_effect == 'read_only' && args.n < 1007",
		"tool.side_effect != 'read_only' && args.n < 1007",
		"tool.side_effect == 'read_only' || args.n < 1007",
		"tool.side_effect != 'read_only' || args.n < 1007",
		"!(tool.name == 'read') || args.x",
		"args.x && tool.name == 'read'",
		"args.x || tool.name != 'read'",
		"args.missing > 1 && tool.name == 'read'",
		"args.missing > 1 && tool.name == 'nope'",
		"args.missing > 1 || tool.name == 'read'",
		"has(tool.resource) && tool.resource == '' || args.n == 7",
		"!has(tool.resource) || args.n == 7",
		"tool.missing == 'x' && args.n < 5",
		"'financial.x' in tool.data && args.n > 0",
		"tool.tags.exists(t, t == 'a') && args.n > 0",
		"tool.name.startsWith('re') && (args.n > 3 || tool.side_effect == 'destructive')",
		"tool.name == 'read' && tool.side_effect == 'read_only'",
		"size(tool.data) > 0 ? args.n > 1 : args.n < 1",
		"tool.name == args.name && args.n > 0",
		"args.s.startsWith('a') || tool.name == 'x'",
		"tool.name == 'read' && run.steps >= 0 && user.role == ''",
		"tool.name == 'read' && args.items.all(i, i > 0)",
		"!(tool.name == 'read')",
		"tool.name",
		"tool.data[0] == 'financial.x' && args.n > 1",
		"(tool.name == 'read' || args.n > 1) && (tool.name == 'write' || args.n < 10)",
	}
	tools := []events.ToolSpec{
		{Name: "read", SideEffect: events.ReadOnly, Data: []string{"financial.x"}, Tags: []string{"a"}, Hash: "h-read"},
		{Name: "write", SideEffect: events.Destructive, Resource: "path", Hash: "h-write"},
	}
	args := []string{`{"n":7,"x":"str","s":"abc","name":"read","items":[1,2]}`, `{"n":2000,"x":true,"items":[0]}`, `{}`, `{"n":"7","s":1}`}
	folds, constants := 0, 0
	for _, src := range conds {
		whole, checked, err := compileChecked(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		r := &compiledRule{cond: whole}
		if checked != nil {
			r.fold = newFolder(checked)
		}
		tc := &sync.Map{}
		for _, tool := range tools {
			var fd *folded                       // worked out on the first call, as specRules does
			for round := 0; round < 2; round++ { // the second reusing it
				for i, a := range args {
					req := policy.Request{Run: "r", Step: 1, Tool: tool, Args: json.RawMessage(a)}
					view := projector.View{}
					ev := &evaluation{ctx: context.Background(), req: &req, view: &view, tools: tc}
					if round == 0 && i == 0 && r.fold != nil {
						fd = r.fold.fold(ev)
					}
					got, gerr := r.holds(ev, fd)
					ev2 := &evaluation{ctx: context.Background(), req: &req, view: &view, tools: tc}
					want, werr := r.holds(ev2, nil)
					if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
						t.Errorf("%s for %s, args %s: folded %v %v, whole %v %v", src, tool.Name, a, got, gerr, want, werr)
					}
				}
			}
			if fd != nil {
				folds++
				if fd.constant {
					constants++
				}
			}
		}
	}
	if folds < 20 || constants < 5 {
		t.Errorf("%d conditions folded for a tool, %d to a constant: folding is not being exercised", folds, constants)
	}
}
