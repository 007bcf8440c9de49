package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// Drive drives r until it ends or waits for an operator, or, with a nil
// agent, until it needs the agent's next decision. It returns nil then.
// It returns an error wrapping [events.ErrConflict] as soon as an append is
// refused because another writer moved the run on: the caller must drop r
// (never execute anything more for it) and reload it if it wants to go on.
func (d *Driver) Drive(ctx context.Context, r *Run, agent Agent) error {
	return d.DriveUntil(ctx, r, agent, nil)
}

// DriveUntil is [Driver.Drive] that also stops, between two transitions,
// once stop is closed: a worker shutting down finishes the step in flight
// and hands the run back without cutting a tool short. It returns
// [ErrStopped] then.
func (d *Driver) DriveUntil(ctx context.Context, r *Run, agent Agent, stop <-chan struct{}) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case <-stop:
			return ErrStopped
		default:
		}
		progressed, err := d.advance(ctx, r, agent)
		if err != nil {
			return fmt.Errorf("drive run %s: %w", r.ID(), err)
		}
		if !progressed {
			return nil
		}
	}
}

// ErrStopped is returned by [Driver.DriveUntil] when it stopped because it
// was asked to, with the run still able to move.
var ErrStopped = errors.New("driving stopped on request")

// advance makes one transition of r, or reports that r cannot move (it ended
// or waits for an operator).
func (d *Driver) advance(ctx context.Context, r *Run, agent Agent) (bool, error) {
	v := &r.view
	if len(v.Strays) > 0 {
		return true, d.refuseStray(ctx, r, v.Strays[0])
	}
	if v.Run.Status.Ended() {
		return false, nil
	}
	// Record the tool set this driver evaluates with before any evaluation,
	// resumes included, so replay finds every spec by its hash.
	if !toolsEqual(v.Run.Tools, d.specs) {
		return true, d.append(ctx, r, r.ID(), events.RunTools, events.RunToolsBody{Tools: d.Tools()})
	}
	if v.Run.Status == projector.Waiting {
		return d.settle(ctx, r)
	}
	if last := v.Step(v.Steps.Len()); last != nil {
		switch {
		case last.Observation == nil && last.Executing():
			return true, d.recover(ctx, r, last.N)
		case last.Observation == nil:
			return true, d.evaluate(ctx, r, last.N, nil)
		case last.Observation.Kind == events.ObsResult && d.terminal(last.Decision.Tool):
			// A terminal tool's result is recorded but the run's end is
			// not (its worker died in between): end it now, never ask the
			// agent for a step after the last one.
			return true, d.finish(ctx, r, last.Observation.Content)
		}
	}
	if end, detail := d.limitHit(v); end != "" {
		return true, d.append(ctx, r, r.ID(), events.RunFailed, events.EndBody{Reason: end, Detail: detail})
	}
	if agent == nil {
		// Whoever drives without an agent (settling approvals only) stops
		// where a decision is needed.
		return false, nil
	}
	in := r.next
	if in == nil || r.nextAt != r.tail {
		fresh := d.stepInput(v)
		in = &fresh
	}
	r.next = nil
	dec, err := agent.Decide(ctx, *in)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return true, d.append(ctx, r, r.ID(), events.RunFailed, events.EndBody{Reason: events.ReasonAgentError, Detail: err.Error()})
	}
	n := v.Steps.Len() + 1
	p, err := d.begin(ctx, r, r.ID(), events.StepDecided, decidedBody(n, dec))
	if err != nil {
		return false, err
	}
	// While the server stores the decision, check it and ask the policy,
	// on the view that holds it: pure work, acted on only once the
	// decision is stored (a refused append discards it).
	var j judgement
	if p.fold == nil {
		j = d.judge(ctx, r.ID(), &p.view, n, nil)
	}
	if err := d.commit(ctx, r, p); err != nil {
		return false, err
	}
	return true, d.act(ctx, r, j)
}

// decidedBody records a decision exactly: the argument bytes as a string
// when they are UTF-8, as bytes otherwise.
func decidedBody(n int, dec Decision) events.StepDecidedBody {
	b := events.StepDecidedBody{Step: n, Tool: dec.Tool, CallID: dec.CallID, Reason: dec.Reason}
	if utf8.Valid(dec.Args) {
		b.Args = string(dec.Args)
	} else {
		b.ArgsBytes = append([]byte{}, dec.Args...)
	}
	return b
}

func (d *Driver) terminal(tool string) bool {
	ct := d.tools[tool]
	return ct != nil && ct.Spec.Terminal
}

func (d *Driver) finish(ctx context.Context, r *Run, result string) error {
	return d.append(ctx, r, r.ID(), events.RunFinished, events.EndBody{Reason: events.ReasonCompleted, Result: result})
}

func (d *Driver) limitHit(v *projector.View) (reason, detail string) {
	l, run := v.Run.Limits, v.Run
	switch {
	case l.MaxSteps > 0 && run.Steps >= l.MaxSteps:
		return events.ReasonStepLimit, fmt.Sprintf("%d steps (limit %d)", run.Steps, l.MaxSteps)
	case l.MaxFailuresInRow > 0 && run.FailuresInRow >= l.MaxFailuresInRow:
		return events.ReasonRepeatedFailures, fmt.Sprintf("%d failed steps in a row (limit %d)", run.FailuresInRow, l.MaxFailuresInRow)
	case l.MaxRepeats > 0 && run.Repeats >= l.MaxRepeats:
		return events.ReasonLoopDetected, fmt.Sprintf("the same request gave the same result %d times in a row (limit %d)", run.Repeats, l.MaxRepeats)
	case l.MaxElapsedMS > 0 && d.cfg.Now().Sub(run.Created).Milliseconds() > l.MaxElapsedMS:
		return events.ReasonTimeLimit, fmt.Sprintf("running for more than %d ms", l.MaxElapsedMS)
	}
	return "", ""
}

// stepInput copies v for the agent. The agent is asked only once the run's
// recorded tools are the driver's (advance records them first), so its
// Tools are the copy the clone already made of them.
func (d *Driver) stepInput(v *projector.View) StepInput {
	c := v.Clone()
	return StepInput{Run: c.Run, Steps: c.Steps, Approvals: c.Approvals, Tools: d.shown(v, c.Run.Tools)}
}

// shown is tools without those the policy hides (the discovery phase; see
// [policy.Discoverer]).
func (d *Driver) shown(v *projector.View, tools []events.ToolSpec) []events.ToolSpec {
	if !policy.Discovers(d.policy) {
		return tools
	}
	pv := v.Clone()
	out := make([]events.ToolSpec, 0, len(tools))
	for _, t := range tools {
		if policy.Visible(d.policy, t, pv) {
			out = append(out, t)
		}
	}
	return out
}

func toolsEqual(a, b []events.ToolSpec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Hash != b[i].Hash {
			return false
		}
	}
	return true
}

// evaluate checks step n's recorded arguments against the tool's current
// schema, asks the policy, and acts on its answer. grant is the verified
// approval being resumed, or nil.
func (d *Driver) evaluate(ctx context.Context, r *Run, n int, grant *projector.Approval) error {
	return d.act(ctx, r, d.judge(ctx, r.ID(), &r.view, n, grant))
}

// judgement is what checking a step and asking the policy came to, before
// anything is recorded: the one event that records it, prepared, and
// whether the step's call executes once that event is stored (see
// [Driver.plan]).
type judgement struct {
	rec  prepared
	exec bool
	req  policy.Request
	err  error // the event could not be prepared
}

// judge checks step n of v against its tool's schema, asks the policy and
// prepares the event that records the answer: a refusing observation, or
// what [Driver.plan] makes of the policy's answer. It records nothing and
// changes nothing.
func (d *Driver) judge(ctx context.Context, run string, v *projector.View, n int, grant *projector.Approval) judgement {
	refuse := func(kind, content string) judgement {
		rec, err := d.prepare(run, events.StepObserved, d.observation(n, kind, content))
		return judgement{rec: rec, err: err}
	}
	s := v.Step(n)
	ct := d.tools[s.Decision.Tool]
	if ct == nil {
		return refuse(events.ObsUnknownTool, fmt.Sprintf("no tool named %q (tools: %s)", s.Decision.Tool, d.toolNames()))
	}
	if policy.Discovers(d.policy) && !policy.Visible(d.policy, ct.Record, v.Clone()) {
		// A hidden tool is refused as if it did not exist: the agent is
		// told nothing about it.
		var names []string
		for _, t := range d.shown(v, d.specs) {
			names = append(names, t.Name)
		}
		return refuse(events.ObsUnknownTool, fmt.Sprintf("no tool named %q (tools: %s)", s.Decision.Tool, strings.Join(names, ", ")))
	}
	raw := s.Decision.RawArgs()
	args, err := ct.Check(raw)
	if err != nil {
		var ae *ArgsError
		if errors.As(err, &ae) && ae.Malformed() {
			return refuse(events.ObsInvalidDecision, fmt.Sprintf("%v; the request as sent: %q", err, raw))
		}
		return refuse(events.ObsInvalidArguments, err.Error())
	}
	req := policy.Request{Run: run, Step: n, Tool: ct.Record, Args: args}
	dec, evalErr := d.policy.Evaluate(ctx, req.Copy(), v.Clone())
	k, body, exec := d.plan(req, dec, evalErr, grant)
	if d.cfg.Shadow != nil {
		body = d.shadow(ctx, req, v, body)
	}
	rec, err := d.prepare(run, k, body)
	return judgement{rec: rec, exec: exec, req: req, err: err}
}

// act records a judgement and, when it allows the call, executes it: the
// write-ahead result first, the tool only once that is stored.
func (d *Driver) act(ctx context.Context, r *Run, j judgement) error {
	if j.err != nil {
		return j.err
	}
	p, err := d.send(ctx, r, j.rec)
	if err != nil {
		return err
	}
	if err := d.commit(ctx, r, p); err != nil {
		return err
	}
	if !j.exec {
		return nil
	}
	return d.run(ctx, r, j.req.Step, d.tools[j.req.Tool.Name], j.req.Args)
}

func (d *Driver) toolNames() string {
	out := ""
	for i, s := range d.specs {
		if i > 0 {
			out += ", "
		}
		out += s.Name
	}
	return out
}

func (d *Driver) observe(ctx context.Context, r *Run, n int, kind, content string) error {
	return d.append(ctx, r, r.ID(), events.StepObserved, d.observation(n, kind, content))
}

func (d *Driver) observation(n int, kind, content string) events.ObservedBody {
	o := events.ObservedBody{Step: n, Kind: kind, Content: content}
	if len(o.Content) > d.cfg.MaxObservation {
		o.Content, o.Truncated = cutUTF8(o.Content, d.cfg.MaxObservation), true
	}
	return o
}
