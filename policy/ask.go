package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/projector"
)

// Verdict is a policy's answer as the runtime acts on it. It is what [Ask]
// makes of whatever a policy did, and the one place that is decided: the
// driver's loop, its resumes and recoveries, replay and the test kit all
// take their answer from [Ask].
type Verdict struct {
	// Outcome is one of the four, or "" when Err is set.
	Outcome events.Outcome
	Reason  string
	// Approval is set for [RequireApproval]: its kind and reason, its
	// capability and presentation in PolicyJSON form (a missing one is
	// `{}`), and the approval hash binding them to the request
	// (docs/adr/0004). Its ID and ExpiresAt are the recorder's to set.
	Approval *events.ApprovalRequest
	// ExpiresIn is the policy's own deadline for the approval (zero: the
	// runtime's default).
	ExpiresIn time.Duration
	// Parts is what each member of a composed policy answered (see
	// [Ruling.Parts]), recorded with the result.
	Parts []events.PolicyPart
	// Err is set when the policy gave no answer the runtime can act on: it
	// returned an error, panicked, answered an outcome outside the four,
	// asked for an approval without a kind, or with approval JSON that
	// fails the boundary. The run fails closed on it, with nothing run.
	Err error
}

// ErrNoVerdict marks an evaluation that gave no usable answer (see
// [Verdict.Err]).
var ErrNoVerdict = errors.New("policy gave no usable answer")

// Ask asks p about req and returns what the runtime must record and do.
// p is handed copies of req and view (see [projector.View.Clone]) that it
// may keep or change without changing the caller's; the side-effect
// mapping, which reads neither, is handed view as it is, which saves the
// runtime a copy of the view on every step under the default policy. A panic in p is caught and becomes the verdict's
// error: one bad policy call fails its run, never its worker.
func Ask(ctx context.Context, p Policy, req Request, view projector.View) Verdict {
	if !isViewless(p) {
		view = view.Clone()
	}
	dec, err := evaluate(ctx, p, req.Copy(), view)
	fail := func(format string, a ...any) Verdict {
		return Verdict{Err: fmt.Errorf("%w: policy %q on step %d: %s", ErrNoVerdict, ID(p), req.Step, fmt.Sprintf(format, a...))}
	}
	switch {
	case err != nil:
		return fail("%v", err)
	case !dec.Outcome.Valid():
		return fail("outcome %q (want allow, deny, abort or require_approval)", dec.Outcome)
	case dec.Outcome != events.RequireApproval:
		return Verdict{Outcome: dec.Outcome, Reason: dec.Reason, Parts: dec.Parts}
	}
	a := dec.Approval
	if a == nil || a.Kind == "" {
		return fail("asked for approval without naming its kind")
	}
	capability, err := boundaryJSON(a.Capability)
	if err != nil {
		return fail("approval %q capability: %v", a.Kind, err)
	}
	presentation, err := boundaryJSON(a.Presentation)
	if err != nil {
		return fail("approval %q presentation: %v", a.Kind, err)
	}
	return Verdict{
		Outcome: events.RequireApproval, Reason: dec.Reason, ExpiresIn: a.ExpiresIn, Parts: dec.Parts,
		Approval: &events.ApprovalRequest{
			Kind: a.Kind, Reason: dec.Reason, Capability: capability, Presentation: presentation,
			Hash: approvals.Hash(a.Kind, capability, presentation, req.Tool, req.Args),
		},
	}
}

// evaluate calls p, turning a panic into an error.
func evaluate(ctx context.Context, p Policy, req Request, view projector.View) (dec Ruling, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return p.Evaluate(ctx, req, view)
}

// boundaryJSON holds approval JSON to the boundary, in PolicyJSON form; a
// missing value is `{}`.
func boundaryJSON(b json.RawMessage) (json.RawMessage, error) {
	if b == nil {
		return json.RawMessage(`{}`), nil
	}
	return jsonform.PolicyJSON(b)
}
