package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
)

// recover resolves step n, found allowed with no observation: its call was
// interrupted (the worker that made it died, or lost the run). A tool with a
// reconcile hook is asked what happened; a read-only call runs again; any
// other call pauses on an interrupted_side_effect approval. Every resolution
// is an event, so any worker can carry it on. A side effect never runs twice
// without a person or the tool's own check saying so.
func (d *Driver) recover(ctx context.Context, r *Run, n int) error {
	s := r.view.Step(n)
	args := s.Policy.Args
	ct := d.tools[s.Decision.Tool]
	if ct != nil {
		// Only the recorded decision's own arguments may run again, and
		// only as the tool's current schema accepts them: a policy result
		// whose arguments are not the decision's is not a record this
		// driver wrote, and nothing of it runs.
		checked, err := ct.CheckArgs(s.Decision.RawArgs())
		if err != nil || !bytes.Equal(checked, args) {
			why := "they are not the recorded decision's"
			if err != nil {
				why = fmt.Sprintf("the decision no longer passes the tool's schema: %v", err)
			}
			return d.append(ctx, r, r.ID(), events.RunFailed, events.EndBody{
				Reason: events.ReasonInternalError,
				Detail: fmt.Sprintf("interrupted call of step %d to %s not recovered: %s", n, ct.Spec.Name, why),
			})
		}
		if rec, ok := ct.Tool.(Reconciler); ok {
			res, content, err := reconcile(withCall(ctx, r.ID(), n), ct, rec, args)
			switch {
			case err == nil && res == Done:
				o := d.observation(n, events.ObsResult, content)
				return d.append(ctx, r, r.ID(), events.StepInterrupted, events.InterruptedBody{Step: n, Resolution: events.ResolvedDone, Observation: &o})
			case err == nil && res == NotDone:
				return d.append(ctx, r, r.ID(), events.StepInterrupted, events.InterruptedBody{Step: n, Resolution: events.ResolvedNotDone})
			}
		}
		if ct.Spec.SideEffect == events.ReadOnly {
			if err := d.append(ctx, r, r.ID(), events.StepInterrupted, events.InterruptedBody{Step: n, Resolution: events.ResolvedRerun}); err != nil {
				return err
			}
			return d.run(ctx, r, n, ct, args)
		}
	}
	return d.pauseInterrupted(ctx, r, n, args)
}

// reconcile asks a tool's hook about an interrupted call as a call runs
// (see aside), under the tool's timeout: a hook that panics, fails or does
// not answer in time is an error, which recover takes as Unknown, and a
// hook that ignores its context is left behind.
func reconcile(ctx context.Context, ct *CompiledTool, rec Reconciler, args json.RawMessage) (Reconciliation, string, error) {
	ctx, cancel := context.WithTimeout(ctx, ct.Spec.Timeout)
	defer cancel()
	type answer struct {
		res     Reconciliation
		content string
	}
	a, err := aside(ctx, "reconcile hook of "+ct.Spec.Name, func(ctx context.Context) (answer, error) {
		res, content, err := rec.Reconcile(ctx, append(json.RawMessage(nil), args...))
		return answer{res, content}, err
	})
	return a.res, a.content, err
}

// pauseInterrupted raises the runtime's own approval for an interrupted call.
func (d *Driver) pauseInterrupted(ctx context.Context, r *Run, n int, args json.RawMessage) error {
	s := r.view.Step(n)
	spec := d.recordedSpec(r, s.Decision.Tool)
	// The arguments are bound by the hash and recorded once, in the
	// event's request; capability and presentation name the tool.
	capability, err := jsonform.Marshal(map[string]any{"tool": s.Decision.Tool})
	if err != nil {
		return fmt.Errorf("interrupted step %d: %w", n, err)
	}
	presentation, err := jsonform.Marshal(map[string]any{
		"tool": s.Decision.Tool,
		"note": "the first attempt was interrupted and may have taken effect; granting runs it again",
	})
	if err != nil {
		return fmt.Errorf("interrupted step %d: %w", n, err)
	}
	a := &events.ApprovalRequest{
		ID: events.NewID(), Kind: InterruptedSideEffect,
		Reason:     fmt.Sprintf("call to %s was interrupted; nothing can tell whether it took effect", s.Decision.Tool),
		Capability: capability, Presentation: presentation,
		Hash: approvals.Hash(InterruptedSideEffect, capability, presentation, spec, args),
	}
	if d.cfg.ApprovalTTL > 0 {
		at := d.cfg.Now().Add(d.cfg.ApprovalTTL).UTC()
		a.ExpiresAt = &at
	}
	return d.append(ctx, r, r.ID(), events.ApprovalRequested, events.PolicyBody{
		Step: n, Outcome: events.RequireApproval, Reason: a.Reason, Args: args, ToolHash: spec.Hash,
		Approval: a, Origin: events.OriginRecovery,
	})
}

// recordedSpec is the spec of tool as the run recorded it (the driver's own
// when the run has none by that name).
func (d *Driver) recordedSpec(r *Run, tool string) events.ToolSpec {
	for _, t := range r.view.Run.Tools {
		if t.Name == tool {
			return t
		}
	}
	return events.ToolSpec{Name: tool}
}
