package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// plan turns a policy's answer into the one event that records it, and
// whether the step's call executes once that event is stored. It is the one
// place that does, for the loop and for resume alike: allow records the
// write-ahead result and then executes; deny and abort are recorded;
// require_approval records the approval it asks for, unless grant (a
// verified, granted approval being resumed) has exactly its hash, in which
// case the grant is consumed and the call executes. An error from the
// policy, an outcome outside the four, or approval JSON that fails the
// boundary ends the run as internal_error with nothing executed. It records
// nothing itself.
func (d *Driver) plan(req policy.Request, dec policy.Decision, evalErr error, grant *projector.Approval) (k events.Kind, body any, exec bool) {
	fail := func(detail string) (events.Kind, any, bool) {
		// The failed evaluation is recorded with its request, so a replay
		// can tell whether another policy would have decided it.
		return events.RunFailed, events.EndBody{
			Reason: events.ReasonInternalError, Detail: detail,
			Policy: &events.PolicyBody{
				Step: req.Step, Outcome: events.OutcomeError, Reason: detail, PolicyID: d.policyID,
				Args: req.Args, ToolHash: req.Tool.Hash, Resume: grant != nil,
			},
		}, false
	}
	if evalErr != nil {
		return fail(fmt.Sprintf("policy %q returned an error for step %d: %v", d.policyID, req.Step, evalErr))
	}
	pb := events.PolicyBody{
		Step: req.Step, Outcome: string(dec.Outcome), Reason: dec.Reason, PolicyID: d.policyID,
		Args: req.Args, ToolHash: req.Tool.Hash, Resume: grant != nil, Parts: dec.Parts,
	}
	switch dec.Outcome {
	case policy.Allow:
		if grant != nil {
			pb.Consumes = grant.ID
		}
		return events.StepPolicy, pb, true
	case policy.Deny, policy.Abort:
		return events.StepPolicy, pb, false
	case policy.RequireApproval:
		a, err := d.approvalRequest(req, dec)
		if err != nil {
			return fail(err.Error())
		}
		if grant != nil && grant.Hash == a.Hash {
			pb.Consumes = grant.ID
			return events.StepPolicy, pb, true
		}
		pb.Approval = a
		return events.ApprovalRequested, pb, false
	}
	return fail(fmt.Sprintf("policy %q returned outcome %q for step %d (want allow, deny, abort or require_approval)", d.policyID, dec.Outcome, req.Step))
}

// approvalRequest builds the approval a require_approval decision asks for,
// holding its JSON to the boundary and binding it to the request by hash.
func (d *Driver) approvalRequest(req policy.Request, dec policy.Decision) (*events.ApprovalRequest, error) {
	a := dec.Approval
	if a == nil || a.Kind == "" {
		return nil, fmt.Errorf("policy %q asked for approval on step %d without naming its kind", d.policyID, req.Step)
	}
	capability, err := boundaryJSON(a.Capability)
	if err != nil {
		return nil, fmt.Errorf("policy %q approval %q capability: %w", d.policyID, a.Kind, err)
	}
	presentation, err := boundaryJSON(a.Presentation)
	if err != nil {
		return nil, fmt.Errorf("policy %q approval %q presentation: %w", d.policyID, a.Kind, err)
	}
	out := &events.ApprovalRequest{
		ID: events.NewID(), Kind: a.Kind, Reason: dec.Reason, Capability: capability, Presentation: presentation,
		Hash: approvals.Hash(a.Kind, capability, presentation, req.Tool, req.Args),
	}
	ttl := a.ExpiresIn
	if ttl <= 0 {
		ttl = d.cfg.ApprovalTTL
	}
	if ttl > 0 {
		at := d.cfg.Now().Add(ttl).UTC()
		out.ExpiresAt = &at
	}
	return out, nil
}

func boundaryJSON(b json.RawMessage) (json.RawMessage, error) {
	if b == nil {
		return json.RawMessage(`{}`), nil
	}
	return jsonform.PolicyJSON(b)
}

// run executes step n's tool with args and records the observation.
func (d *Driver) run(ctx context.Context, r *Run, n int, ct *CompiledTool, args json.RawMessage) error {
	kind, content := d.call(withCall(ctx, r.ID(), n), ct, args)
	// A terminal tool's success ends the run on the loop's next turn.
	return d.observe(ctx, r, n, kind, content)
}

// call runs the tool under its timeout. A panic becomes a tool_error and a
// missed deadline a timeout; a tool that ignores its context is left behind.
func (d *Driver) call(ctx context.Context, ct *CompiledTool, args json.RawMessage) (kind, content string) {
	ctx, cancel := context.WithTimeout(ctx, ct.Spec.Timeout)
	defer cancel()
	res, err := aside(ctx, "tool "+ct.Spec.Name, func(ctx context.Context) (string, error) {
		return ct.Tool.Execute(ctx, append(json.RawMessage(nil), args...))
	})
	switch {
	case errors.Is(err, errOverran) && ctx.Err() == context.DeadlineExceeded:
		return events.ObsTimeout, fmt.Sprintf("tool %s timed out after %s", ct.Spec.Name, ct.Spec.Timeout)
	case errors.Is(err, errOverran):
		return events.ObsToolError, fmt.Sprintf("tool %s cancelled: %v", ct.Spec.Name, ctx.Err())
	case err == nil:
		return events.ObsResult, res
	case ctx.Err() == context.DeadlineExceeded:
		return events.ObsTimeout, fmt.Sprintf("tool %s timed out after %s: %v", ct.Spec.Name, ct.Spec.Timeout, err)
	}
	return events.ObsToolError, err.Error()
}

// errOverran is aside's error for a function still running when its
// context ended.
var errOverran = errors.New("did not return before its context ended")

// aside runs fn in a goroutine of its own and waits for it, or for ctx to
// end, calling the busy hook (see [WithBusy]) meanwhile. A panic in fn is
// its error ("<what> panicked: …"); a fn that ignores its context is left
// behind, and aside returns an error wrapping errOverran and ctx's error.
func aside[T any](ctx context.Context, what string, fn func(context.Context) (T, error)) (T, error) {
	type out struct {
		v   T
		err error
	}
	done := make(chan out, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- out{err: fmt.Errorf("%s panicked: %v", what, p)}
			}
		}()
		v, err := fn(ctx)
		done <- out{v, err}
	}()
	var tick <-chan time.Time // nil, never ready, without a busy hook
	b, hasBusy := busyOf(ctx)
	if hasBusy {
		t := time.NewTicker(b.every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case o := <-done:
			return o.v, o.err
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("%s %w: %w", what, errOverran, ctx.Err())
		case <-tick:
			b.fn()
		}
	}
}
