package replay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/replay"
)

// failing is a policy that errors on remote calls and defers to the
// side-effect mapping otherwise.
type failing struct{ id string }

func (f failing) PolicyID() string { return f.id }

func (f failing) Evaluate(ctx context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	if req.Tool.SideEffect == events.RemoteMutation {
		return policy.Ruling{}, errors.New("rules service unreachable")
	}
	return policy.DefaultSideEffects().Evaluate(ctx, req, v)
}

// TestCheck_FailedEvaluationIsRechecked: an evaluation that failed the run
// (the policy errored) is recorded with its request, so a policy that now
// decides it is reported, not invisible.
func TestCheck_FailedEvaluationIsRechecked(t *testing.T) {
	rec := newRecorder(t)
	d := rec.driver(failing{id: "rules v1"}, nil)
	run := rec.drive(d, "delta", call("read_file", `{"path":"a"}`), call("send_email", `{"to":"ops"}`))
	if v := run.View(); v.Run.Status != projector.Failed || v.Run.Reason != string(events.ReasonInternalError) {
		t.Fatalf("run ended %s %s, want FAILED internal_error", v.Run.Status, v.Run.Reason)
	}
	log := load(t, rec.lines())

	same := check(t, log, failing{id: "rules v1"}, replay.Selection{}, replay.Options{})
	if same.sum.Evaluations != 2 || same.sum.Same != 2 {
		t.Errorf("same policy: %d of %d the same, want 2 of 2:\n%s", same.sum.Same, same.sum.Evaluations, same.text())
	}

	fixed := policy.WithID(policy.DefaultSideEffects(), "rules v2")
	diff := check(t, log, fixed, replay.Selection{}, replay.Options{Baseline: "rules v1"})
	var got *replay.Result
	for i := range diff.results {
		if diff.results[i].Step == 2 {
			got = &diff.results[i]
		}
	}
	if got == nil {
		t.Fatalf("the failed evaluation of step 2 was not reported:\n%s", diff.text())
	}
	if got.Recorded.Outcome != events.OutcomeError || got.Verdict != replay.Different || got.Change != replay.Widens {
		t.Errorf("step 2: recorded %s, verdict %s %s; want recorded error, different, widens (it now asks for approval)", got.Recorded.Outcome, got.Verdict, got.Change)
	}
}
