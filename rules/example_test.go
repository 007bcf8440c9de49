package rules_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/rules"
)

// A refund limit as a file: refunds of 5000 or more are refused, refunds
// above 500 wait for a manager, and everything else falls through to the
// side-effect policy.
func Example() {
	p, err := rules.Parse("refunds.yaml", []byte(`version: 1
policies:
  - id: refund-too-large
    type: action_limit
    rules: [{id: too-large, action: deny, target: {type: tool, pattern: orders_refund}, condition: "args.amount >= 5000"}]
    enforcement: {mode: block}
  - id: refund-needs-manager
    type: confirmation_required
    rules: [{id: above-500, action: allow, target: {type: tool, pattern: orders_refund}, condition: "args.amount > 500"}]
    enforcement: {mode: confirm, approval_kind: manager}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	tool := events.ToolSpec{Name: "orders_refund", SideEffect: events.LocalMutation, Schema: json.RawMessage(`{}`)}
	for _, amount := range []string{"400", "700", "9000"} {
		req := policy.Request{Run: "r", Step: 1, Tool: tool, Args: json.RawMessage(`{"amount":` + amount + `}`)}
		d, err := p.Evaluate(context.Background(), req, projector.View{})
		if err != nil {
			fmt.Println(err)
			return
		}
		kind := ""
		if d.Approval != nil {
			kind = " (" + d.Approval.Kind + ")"
		}
		fmt.Printf("%s: %s%s: %s\n", amount, d.Outcome, kind, d.Reason)
	}
	// Output:
	// 400: allow: local_mutation tool orders_refund
	// 700: require_approval (manager): refund-needs-manager/above-500
	// 9000: deny: refund-too-large/too-large
}
