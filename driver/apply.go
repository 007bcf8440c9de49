package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// plan turns a policy's verdict (see [policy.Ask]) into the one event
// that records it, and whether the step's call executes once that event is
// stored. It is the one place that does, for the loop, resumes and
// recoveries alike: allow records the write-ahead result and then executes;
// deny and abort are recorded; require_approval records the approval it
// asks for, unless grant (a verified, granted approval being resumed) has
// exactly its hash, in which case the grant is consumed and the call
// executes. A verdict with an error (the policy failed, panicked, or gave
// no usable answer) ends the run as internal_error with nothing executed,
// the evaluation recorded with its request. It records nothing itself.
func (d *Driver) plan(req policy.Request, v policy.Verdict, grant *projector.Approval) (k events.Kind, body any, exec bool) {
	pb := events.PolicyBody{
		Step: req.Step, Outcome: v.Outcome, Reason: v.Reason, PolicyID: d.policyID,
		Args: req.Args, ToolHash: req.Tool.Hash, Resume: grant != nil, Parts: v.Parts,
	}
	if v.Err != nil {
		// The failed evaluation is recorded with its request, so a replay
		// can tell whether another policy would have decided it.
		pb.Outcome, pb.Reason = events.OutcomeError, v.Err.Error()
		return events.RunFailed, events.EndBody{Reason: events.ReasonInternalError, Detail: v.Err.Error(), Policy: &pb}, false
	}
	switch v.Outcome {
	case events.Allow:
		if grant != nil {
			pb.Consumes = grant.ID
		}
		return events.StepPolicy, pb, true
	case events.RequireApproval:
		if grant != nil && grant.Hash == v.Approval.Hash {
			pb.Consumes = grant.ID
			return events.StepPolicy, pb, true
		}
		a := *v.Approval
		a.ID = events.NewID()
		ttl := v.ExpiresIn
		if ttl <= 0 {
			ttl = d.cfg.ApprovalTTL
		}
		if ttl > 0 {
			at := d.cfg.Now().Add(ttl).UTC()
			a.ExpiresAt = &at
		}
		pb.Approval = &a
		return events.ApprovalRequested, pb, false
	}
	return events.StepPolicy, pb, false // deny, abort
}

// run executes step n's tool with args and records the observation.
func (d *Driver) run(ctx context.Context, r *Run, n int, ct *CompiledTool, args json.RawMessage) error {
	kind, content := d.call(withCall(ctx, r.ID(), n), r, ct, args)
	if kind == interruptedCall {
		if r.view.Step(n).Interrupted == nil {
			return d.recover(ctx, r, n)
		}
		// Interrupted again on the run recovery allowed it: the agent is
		// told, and nothing runs a third time unasked.
		kind = events.ObsToolError
	}
	if kind == events.ObsResult && ct.Spec.Terminal {
		// A terminal tool's success completes the run: its result travels
		// in the run's end, one durable append fewer (ADR 0017), unless
		// the pair is too large for one event; then the end follows the
		// observation on the loop's next turn, as after a crash between.
		o := d.observation(n, kind, content)
		err := d.append(ctx, r, r.ID(), events.RunFinished, events.EndBody{Reason: events.ReasonCompleted, Result: o.Content, Observation: &o})
		if !errors.Is(err, events.ErrTooLarge) {
			r.keepIfLost(err, o)
			return err
		}
	}
	o := d.observation(n, kind, content)
	err := d.append(ctx, r, r.ID(), events.StepObserved, o)
	r.keepIfLost(err, o) // the result is this process's: see kept.go
	return err
}

// interruptedCall is call's kind for an Execute error wrapping
// [ErrInterrupted]; it is never recorded as such.
const interruptedCall = "interrupted"

// call runs the tool under its timeout. A panic becomes a tool_error and a
// missed deadline a timeout; a tool that ignores its context is left behind.
//
// Within a drive the call runs on the run's runner (see [runner]), started
// with the drive's first call and ended with the drive; outside one, on a
// goroutine of its own.
func (d *Driver) call(ctx context.Context, r *Run, ct *CompiledTool, args json.RawMessage) (kind events.ObservationKind, content string) {
	ctx, cancel := context.WithTimeout(ctx, ct.Spec.Timeout)
	defer cancel()
	exec := func(ctx context.Context) (string, error) {
		return ct.Tool.Execute(ctx, append(json.RawMessage(nil), args...))
	}
	var (
		res string
		err error
	)
	switch in, ok := ct.Tool.(Inline); {
	case ok && in.Inline() && !hasBusy(ctx):
		res, err = inline(ctx, ct.what, exec)
	case r.driving:
		if r.runner == nil {
			r.runner = newRunner()
		}
		var kept bool
		if res, kept, err = r.runner.call(ctx, ct.what, exec); !kept {
			r.runner.stop()
			r.runner = nil
		}
	default:
		res, err = aside(ctx, ct.what, exec)
	}
	switch {
	case errors.Is(err, errOverran) && ctx.Err() == context.DeadlineExceeded:
		return events.ObsTimeout, fmt.Sprintf("tool %s timed out after %s", ct.Spec.Name, ct.Spec.Timeout)
	case errors.Is(err, errOverran):
		return events.ObsToolError, fmt.Sprintf("tool %s cancelled: %v", ct.Spec.Name, ctx.Err())
	case err == nil:
		return events.ObsResult, res
	case errors.Is(err, ErrInterrupted):
		return interruptedCall, err.Error()
	case ctx.Err() == context.DeadlineExceeded:
		return events.ObsTimeout, fmt.Sprintf("tool %s timed out after %s: %v", ct.Spec.Name, ct.Spec.Timeout, err)
	}
	return events.ObsToolError, err.Error()
}

// inline runs fn on this goroutine, for a tool that returns once its ctx
// ends (see [Inline]): a panic is its error, as in aside, and a result
// that came after ctx ended is aside's errOverran, as aside would have
// answered had it stopped waiting at the deadline. An interrupted call
// stays interrupted: its effect is unknown, whenever it was said.
func inline[T any](ctx context.Context, what string, fn func(context.Context) (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero T
			v, err = zero, fmt.Errorf("%s panicked: %v", what, p)
		}
	}()
	v, err = fn(ctx)
	if ctx.Err() != nil && !errors.Is(err, ErrInterrupted) {
		var zero T
		return zero, fmt.Errorf("%s %w: %w", what, errOverran, ctx.Err())
	}
	return v, err
}

// errOverran is aside's error for a function still running when its
// context ended.
var errOverran = errors.New("did not return before its context ended")

// aside runs fn in a goroutine of its own and waits for it, or for ctx to
// end, calling the busy hook (see [WithBusy]) meanwhile. A panic in fn is
// its error ("<what> panicked: …"); a fn that ignores its context is left
// behind, and aside returns an error wrapping errOverran and ctx's error.
func aside[T any](ctx context.Context, what string, fn func(context.Context) (T, error)) (T, error) {
	done := make(chan outcome[T], 1)
	go func() { done <- caught(ctx, what, fn) }()
	v, _, err := await(ctx, what, done)
	return v, err
}

// outcome is what a function run aside returned.
type outcome[T any] struct {
	v   T
	err error
}

// caught runs fn; a panic is its error.
func caught[T any](ctx context.Context, what string, fn func(context.Context) (T, error)) (o outcome[T]) {
	defer func() {
		if p := recover(); p != nil {
			o = outcome[T]{err: fmt.Errorf("%s panicked: %v", what, p)}
		}
	}()
	v, err := fn(ctx)
	return outcome[T]{v, err}
}

// await waits for the outcome on done, or for ctx to end, calling the busy
// hook meanwhile; returned is false when ctx ended first, with an error
// wrapping errOverran and ctx's error.
func await[T any](ctx context.Context, what string, done <-chan outcome[T]) (v T, returned bool, err error) {
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
			return o.v, true, o.err
		case <-ctx.Done():
			var zero T
			return zero, false, fmt.Errorf("%s %w: %w", what, errOverran, ctx.Err())
		case <-tick:
			b.fn()
		}
	}
}
