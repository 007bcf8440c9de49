package gate_test

import (
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/replay"
)

// A gate run replays as any run does: every recorded evaluation checks out
// against the policy that made it, and the grant verifies.
func TestGate_RunReplays(t *testing.T) {
	e := newEnv(t)
	e.cfg.Policy = policy.WithID(policy.DefaultSideEffects(), "side-effects v1")
	r := open(t, e.gate(t), "replayed")
	ask(t, r, "read", `{"path":"a"}`, gate.Allow)
	report(t, r, "a")
	ask(t, r, "rm", `{"path":"/"}`, gate.Deny)
	p := ask(t, r, "send", `{"to":"x@example.com"}`, gate.Pending)
	e.decide(t, r.ID(), p.Approval, events.DecisionGrant)
	ask(t, r, "send", `{"to":"x@example.com"}`, gate.Allow)
	report(t, r, "sent")

	sum, err := replay.Audit(t.Context(), e.log, e.cfg.Policy, replay.Selection{Runs: []string{"replayed"}}, replay.Options{Operators: e.cfg.Operators}, nil)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if !sum.Clean() || sum.Evaluations != 4 || sum.Same != 4 || sum.GrantsValid != 1 {
		t.Fatalf("replay summary: %+v, want 4 evaluations all the same and one valid grant", sum)
	}
}
