package rules_test

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/rules"
)

// hidden is a rules policy that does not offer to write its parts into a
// composition's (policy.PartsAppender): composed, its parts are copied and
// prefixed by the composition, as any Go policy's are.
type hidden struct{ p *rules.Policy }

func (h hidden) Evaluate(ctx context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	return h.p.Evaluate(ctx, req, v)
}

func (h hidden) PolicyID() string { return h.p.PolicyID() }

// TestAppendingParts_SameRulingAsComposedEvaluate: a rules file composed
// with the side-effect policy answers every case of every example file
// exactly as the same file composed through its plain Evaluate (parts,
// their prefixed ids, reasons and approvals), first, last, and twice in
// one composition.
func TestAppendingParts_SameRulingAsComposedEvaluate(t *testing.T) {
	se := policy.WithID(policy.DefaultSideEffects(), "side-effects")
	for _, ex := range exampleTables(t) {
		t.Run(filepath.Base(ex.file), func(t *testing.T) {
			p, cases := ex.policy, ex.table
			for _, order := range [][2][]policy.Policy{
				{{se, p}, {se, hidden{p}}},
				{{p, se}, {hidden{p}, se}},
				{{p, se, p}, {hidden{p}, se, hidden{p}}},
			} {
				var got [2][]rules.CaseResult
				for i, ms := range order {
					c, err := policy.Compose(ms...)
					if err != nil {
						t.Fatal(err)
					}
					// Twice: the second ruling is made at the first's size.
					for range 2 {
						if got[i], err = rules.RunCases(context.Background(), c, cases); err != nil {
							t.Fatal(err)
						}
					}
				}
				if len(got[0]) != len(cases.Cases) {
					t.Fatalf("%d results for %d cases", len(got[0]), len(cases.Cases))
				}
				for k := range got[0] {
					if a, b := got[0][k].Got, got[1][k].Got; !reflect.DeepEqual(a, b) {
						t.Errorf("%d members, case %q:\nappending %+v\n   copied %+v", len(order[0]), got[0][k].Name, a, b)
					}
				}
			}
		})
	}
}
