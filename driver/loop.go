package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
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
	r.agent, r.stop = agent, stop
	r.driving = true
	defer func() {
		if r.runner != nil {
			r.runner.stop()
		}
		r.agent, r.stop, r.runner, r.driving = nil, nil, nil, false
		r.spec, r.ahead = foreseen{}, foreseen{}
		r.hasSpec = false
	}()
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
		if errors.Is(err, events.ErrTooLarge) {
			// The server can never store that event: end the run with
			// the reason, rather than try it again for ever.
			err = d.append(ctx, r, r.ID(), events.RunFailed, events.EndBody{Reason: events.ReasonTooLarge, Detail: cutUTF8(err.Error(), 1024)})
			progressed = err == nil
		}
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
	if v.Run.Status.Ended() {
		return false, nil
	}
	// What the last call came to, when this process knows it and could
	// not store it, is recorded first: anything appended before it would
	// move the run past the tail it was kept at, and drop it.
	if n, ok := r.Kept(); ok && r.keepable(n) {
		return true, d.deliver(ctx, r)
	}
	// Record the tool set this driver evaluates with before any evaluation,
	// resumes included, so replay finds every spec by its hash.
	withheld := d.withheld()
	if !toolsEqual(v.Run.Tools, d.specs) || !withheldEqual(v.Run.Withheld, withheld) {
		return true, d.append(ctx, r, r.ID(), events.RunTools, events.RunToolsBody{Tools: d.Tools(), Withheld: withheld})
	}
	if r.cached && !d.asksAgentNext(v) {
		// Anything but asking the agent rests on what the run recorded:
		// take it from the events, not from a snapshot.
		return true, d.verify(ctx, r)
	}
	if v.Run.Status == projector.Waiting && !budgetGrantChecked(r) {
		return d.settle(ctx, r)
	}
	if last, ok := v.Summary(v.Steps.Len()); ok {
		switch {
		case last.Observation == "" && last.Executing:
			return true, d.recover(ctx, r, last.N)
		case last.Observation == "":
			return true, d.evaluate(ctx, r, last.N, nil)
		case last.Observation == events.ObsResult && d.terminal(last.Tool):
			// A terminal tool's result is recorded but the run's end is
			// not (its worker died in between): end it now, never ask the
			// agent for a step after the last one.
			return true, d.finish(ctx, r, v.Step(last.N).Observation.Content)
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
	// A pure agent's decision asked and judged while the observation
	// before it was stored, if it is for this very tail.
	var pre *foreseen
	if r.hasSpec && r.specAt == r.tail && (!r.hasUndelivered || r.undeliveredAt != r.tail) {
		r.ahead = r.spec
		pre = &r.ahead
	}
	r.spec = foreseen{}
	r.hasSpec = false
	var dec Action
	if pre != nil {
		dec = pre.dec
	} else {
		var err error
		dec, err = d.decide(ctx, r, agent)
		if err == errNoDecision {
			return false, nil
		}
		if rec := recordErrorOf(err); rec != nil {
			// The run moved under the agent, or the log is gone: nothing
			// may be recorded for it on this tail.
			return false, rec.err
		}
		if v.Run.Status == projector.Waiting {
			return d.agentWaits(ctx, r, err)
		}
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return true, d.append(ctx, r, r.ID(), events.RunFailed, endOf(err))
		}
		if dec.Final != nil {
			return true, d.finish(ctx, r, dec.Final.Text)
		}
	}
	n := v.Steps.Len() + 1
	var body events.StepDecidedBody
	if pre != nil {
		body = pre.body // made, and never oversize, when it was asked ahead
	} else {
		body = d.decidedBody(n, dec)
	}
	if body.Oversize == nil {
		var sent bool
		var err error
		if pre != nil {
			var both *prepared
			if pre.hasBoth {
				both = &pre.both
			}
			sent, err = d.recordJudged(ctx, r, dec, body, pre.at, pre.j, both)
		} else {
			sent, err = d.record(ctx, r, dec, body)
		}
		if sent || !errors.Is(err, events.ErrTooLarge) {
			return err == nil, err
		}
		// Under MaxDecision but too large as an event (escaping grew it):
		// the limit it met is the server's.
		body = oversizeBody(n, dec, d.log.MaxEventBytes())
	}
	// An oversize decision is refused unseen: nothing to ask the policy.
	p, err := d.begin(ctx, r, r.ID(), events.StepDecided, body)
	if err != nil {
		r.undelivered, r.hasUndelivered, r.undeliveredAt = dec, true, r.tail
		return false, err
	}
	var j judgement
	if p.fold == nil {
		j = d.judge(ctx, r.ID(), &p.view, n, nil)
	}
	if err := d.commit(ctx, r, p); err != nil {
		if !errors.Is(err, events.ErrConflict) {
			r.undelivered, r.hasUndelivered, r.undeliveredAt = dec, true, r.tail
		}
		return false, err
	}
	r.undelivered, r.hasUndelivered = Action{}, false
	return true, d.act(ctx, r, j)
}

// record records decision dec (body, step n) and acts on it. The decision
// is checked and the policy asked first, on a view that holds it as if it
// were recorded; nothing acts on the answer before it is stored. When the
// answer is an allow, a deny or an abort it travels in the decision's own
// event, so a step costs one durable append fewer (ADR 0017); any other
// answer (a refusal, an approval request, a failed evaluation), or a pair
// too large for one event, is recorded after the decision, as its own
// event. sent is false when nothing was sent: with an error wrapping
// [events.ErrTooLarge] when the decision alone is too large to store.
func (d *Driver) record(ctx context.Context, r *Run, dec Action, body events.StepDecidedBody) (sent bool, err error) {
	if r.cached {
		// The agent may decide on a view from a snapshot; the policy may
		// not: it is asked on the view folded from the run's events. A
		// decision made for a view the events do not bear out is dropped
		// unrecorded, and the agent asked again.
		at := r.tail
		if err := d.verify(ctx, r); err != nil {
			return false, err
		}
		if r.tail != at {
			return false, nil
		}
	}
	at, j, err := d.judgeNext(ctx, &r.view, body)
	if err != nil {
		return false, err
	}
	return d.recordJudged(ctx, r, dec, body, at, j, nil)
}

// judgeNext checks decision body and asks the policy on a fork of v that
// holds it, as the next event of the run, recorded at the time it returns:
// what the policy is shown. The decision is as it will be stored (its text
// made valid); its body is not encoded: the fold takes it as it is.
func (d *Driver) judgeNext(ctx context.Context, v *projector.View, body events.StepDecidedBody) (time.Time, judgement, error) {
	cleaned, _ := clean(body)
	at := d.cfg.Now().UTC()
	ev := events.Event{V: events.FormatVersion, Run: v.Run.ID, Kind: events.StepDecided, Time: at, Seq: v.Run.Events + 1}
	fork := v.Lookahead()
	if err := fork.ApplyWith(ev, cleaned); err != nil {
		return at, judgement{}, fmt.Errorf("fold own event: %w", err)
	}
	return at, d.judge(ctx, v.Run.ID, &fork, body.Step, nil), nil
}

// foreseen is a pure agent's next decision, asked and judged ahead.
type foreseen struct {
	dec  Action
	body events.StepDecidedBody
	at   time.Time
	j    judgement
	// both is the decision's event with the policy result it carries,
	// made ahead too, when the result may travel in it (hasBoth; see
	// [Driver.decidedWith]).
	both    prepared
	hasBoth bool
}

// foresee asks pure agent a for its decision on input in (of view v, the
// view once the observation in flight is stored), judges it and writes it
// to f: false when the agent fails, answers finally, or its decision is
// oversize, which the loop then handles as it does any decision.
func (d *Driver) foresee(ctx context.Context, v *projector.View, in StepInput, a Agent, f *foreseen) bool {
	in.Record = func(context.Context, events.Kind, any) error { return errPureRecords }
	dec, err := ask(ctx, a, in)
	if err != nil || dec.Final != nil {
		return false
	}
	body := d.decidedBody(v.Steps.Len()+1, dec)
	if body.Oversize != nil {
		return false
	}
	at, j, err := d.judgeNext(ctx, v, body)
	if err != nil {
		return false
	}
	f.dec, f.body, f.at, f.j = dec, body, at, j // not a literal: see send
	f.both, f.hasBoth = d.decidedWith(v.Run.ID, body, at, j)
	return true
}

// decidedWith is the event that records decision body with its policy
// result j (judged at time at) in one, when the result may travel in the
// decision's own event.
func (d *Driver) decidedWith(run string, body events.StepDecidedBody, at time.Time, j judgement) (prepared, bool) {
	if j.policy == nil {
		return prepared{}, false
	}
	body.Policy = j.policy // shared: neither the event nor the fold writes through it
	both, err := d.prepare(run, events.StepDecided, body)
	if err != nil {
		return prepared{}, false
	}
	// The step's time is the one the policy saw it at.
	both.ev.Time = at
	return both, true
}

// errPureRecords is what a pure agent asked ahead gets if it records.
var errPureRecords = errors.New("an agent marked driver.Pure records no model calls")

// recordJudged records decision dec (body, judged as j on the view holding
// it, at time at) and acts on the judgement: see [Driver.record].
func (d *Driver) recordJudged(ctx context.Context, r *Run, dec Action, body events.StepDecidedBody, at time.Time, j judgement, made *prepared) (sent bool, err error) {
	undelivered := func(err error) error {
		if !errors.Is(err, events.ErrConflict) && !errors.Is(err, events.ErrTooLarge) {
			r.undelivered, r.hasUndelivered, r.undeliveredAt = dec, true, r.tail
		}
		return err
	}
	var both prepared
	ok := made != nil
	if ok {
		both = *made
	} else {
		both, ok = d.decidedWith(r.ID(), body, at, j)
	}
	if ok {
		p, err := d.send(ctx, r, both)
		if !errors.Is(err, events.ErrTooLarge) {
			if err != nil {
				return false, undelivered(err)
			}
			if err := d.commit(ctx, r, p); err != nil {
				return true, undelivered(err)
			}
			r.undelivered, r.hasUndelivered = Action{}, false
			if !j.exec {
				return true, nil
			}
			return true, d.run(ctx, r, j.req.Step, d.tools[j.req.Tool.Name], j.req.Args)
		}
	}
	body.Policy = nil
	alone, err := d.prepare(r.ID(), events.StepDecided, body)
	if err != nil {
		return false, err
	}
	alone.ev.Time = at
	p, err := d.send(ctx, r, alone)
	if err != nil {
		return false, undelivered(err)
	}
	if err := d.commit(ctx, r, p); err != nil {
		return true, undelivered(err)
	}
	r.undelivered, r.hasUndelivered = Action{}, false
	return true, d.act(ctx, r, j)
}

// decide returns the agent's next decision for r: the one whose append
// failed at r's tail if there is one (a model is never asked twice for a
// step because the log was away), a fresh one otherwise.
func (d *Driver) decide(ctx context.Context, r *Run, agent Agent) (Action, error) {
	if r.hasUndelivered && r.undeliveredAt == r.tail {
		return r.undelivered, nil
	}
	r.undelivered, r.hasUndelivered = Action{}, false
	if s, ok := agent.(Stepper); ok {
		r.next, r.hasNext = StepInput{}, false
		return askStep(ctx, s, r.view.Steps.Len()+1)
	}
	var in StepInput
	if r.hasNext && r.nextAt == r.tail {
		in = r.next
	} else {
		in = d.stepInput(&r.view)
	}
	r.next, r.hasNext = StepInput{}, false
	var recErr error
	in.Record = func(ctx context.Context, k events.Kind, body any) error {
		if !k.Agent() {
			return fmt.Errorf("record %s: %w", k, ErrNotModelEvent)
		}
		if err := d.append(ctx, r, r.ID(), k, body); err != nil {
			if !errors.Is(err, events.ErrTooLarge) {
				recErr = err
			}
			// An event too large is never sent: the run is as it was,
			// and the agent may record something smaller.
			return err
		}
		return nil
	}
	dec, err := ask(ctx, agent, in)
	if recErr != nil {
		return Action{}, &recordError{fmt.Errorf("record the agent's model call: %w", recErr)}
	}
	return dec, err
}

// recordError is a failure to record what the agent asked recorded (its
// model calls): the drive's error, not the agent's.
type recordError struct{ err error }

func (e *recordError) Error() string { return e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }

// recordErrorOf is the recordError in err's chain, or nil; only an error
// costs the allocation errors.As's target needs.
func recordErrorOf(err error) *recordError {
	if err == nil {
		return nil
	}
	var rec *recordError
	if errors.As(err, &rec) {
		return rec
	}
	return nil
}

// ask calls the agent, turning a panic into its error: an agent that
// chokes on what a model returned fails its run (agent_error), never its
// worker.
func ask(ctx context.Context, agent Agent, in StepInput) (dec Action, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("agent panicked: %v", p)
		}
	}()
	return agent.Decide(ctx, in)
}

// errNoDecision is decide's error when a [Stepper] has no decision for
// the step: the drive stops, nothing recorded.
var errNoDecision = errors.New("the agent has no decision for this step")

// askStep asks s for step n's decision, turning a panic into its error as
// ask does.
func askStep(ctx context.Context, s Stepper, n int) (dec Action, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("agent panicked: %v", p)
		}
	}()
	dec, ok := s.DecideStep(ctx, n)
	if !ok {
		return Action{}, errNoDecision
	}
	return dec, nil
}

// asksAgentNext reports whether the next transition of v is asking the
// agent for a new decision: the run is running, its last step (if any) is
// settled and was not a terminal tool's result, and no limit ends it.
func (d *Driver) asksAgentNext(v *projector.View) bool {
	if v.Run.Status != projector.Running {
		return false
	}
	if last, ok := v.Summary(v.Steps.Len()); ok {
		if last.Observation == "" || (last.Observation == events.ObsResult && d.terminal(last.Tool)) {
			return false
		}
	}
	end, _ := d.limitHit(v)
	return end == ""
}

// decidedBody records a decision exactly: the argument bytes as a string
// when they are UTF-8, as bytes otherwise; or, when it is larger than
// MaxDecision, by its size, hash and prefix (see oversizeBody).
func (d *Driver) decidedBody(n int, dec Action) events.StepDecidedBody {
	limit := d.cfg.MaxDecision
	if limit <= 0 {
		limit = d.log.MaxEventBytes() / 2
	}
	if decisionBytes(dec) > limit {
		return oversizeBody(n, dec, limit)
	}
	b := events.StepDecidedBody{Step: n, Tool: dec.Tool, CallID: dec.CallID, Reason: dec.Reason}
	if utf8.Valid(dec.Args) {
		b.Args = string(dec.Args)
	} else {
		b.ArgsBytes = append([]byte{}, dec.Args...)
	}
	return b
}

func decisionBytes(dec Action) int {
	return len(dec.Tool) + len(dec.Args) + len(dec.CallID) + len(dec.Reason)
}

// oversizePrefix is how much of each part of an oversize decision is kept.
const oversizePrefix = 256

// oversizeBody records a decision too large to record whole: its size, the
// hash of its arguments, and a prefix of each part (valid UTF-8, arguments
// that are not UTF-8 quoted), so the agent and an operator see what it was.
func oversizeBody(n int, dec Action, limit int) events.StepDecidedBody {
	sum := sha256.Sum256(dec.Args)
	var args string
	if utf8.Valid(dec.Args) {
		// Only the prefix is copied (cutUTF8 keeps it whole runes).
		args = cutUTF8(cutBytes(dec.Args, 4*oversizePrefix+utf8.UTFMax), 4*oversizePrefix)
	} else {
		args = cutUTF8(strconv.QuoteToASCII(cutBytes(dec.Args, oversizePrefix)), 4*oversizePrefix)
	}
	return events.StepDecidedBody{
		Step: n, Tool: cutUTF8(dec.Tool, oversizePrefix), Args: args,
		CallID: cutUTF8(dec.CallID, oversizePrefix), Reason: cutUTF8(dec.Reason, oversizePrefix),
		Oversize: &events.Oversize{Bytes: decisionBytes(dec), SHA256: hex.EncodeToString(sum[:]), Limit: limit},
	}
}

func cutBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}

func (d *Driver) terminal(tool string) bool {
	ct := d.tools[tool]
	return ct != nil && ct.Spec.Terminal
}

func (d *Driver) finish(ctx context.Context, r *Run, result string) error {
	return d.append(ctx, r, r.ID(), events.RunFinished, events.EndBody{Reason: events.ReasonCompleted, Result: result})
}

func (d *Driver) limitHit(v *projector.View) (reason events.EndReason, detail string) {
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
	return StepInput{Run: c.Run, Steps: c.Steps, Approvals: c.Approvals, Tools: d.shown(v, c.Run.Tools), Model: c.Model}
}

// shown is tools without those the run records as withheld (see
// Config.Withheld) and those the policy hides (the discovery phase; see
// [policy.Discoverer]).
func (d *Driver) shown(v *projector.View, tools []events.ToolSpec) []events.ToolSpec {
	discovers := policy.Discovers(d.policy)
	if !discovers && len(v.Run.Withheld) == 0 {
		return tools
	}
	var pv projector.View
	if discovers {
		pv = v.Clone()
	}
	out := make([]events.ToolSpec, 0, len(tools))
	for _, t := range tools {
		if isWithheld(v.Run.Withheld, t.Name) {
			continue
		}
		if !discovers || policy.Visible(d.policy, t, pv) {
			out = append(out, t)
		}
	}
	return out
}

// withheld is what Config.Withheld says now, nil without it.
func (d *Driver) withheld() []events.WithheldTool {
	if d.cfg.Withheld == nil {
		return nil
	}
	return d.cfg.Withheld()
}

func isWithheld(ws []events.WithheldTool, name string) bool {
	for _, w := range ws {
		if w.Name == name {
			return true
		}
	}
	return false
}

func withheldEqual(a, b []events.WithheldTool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
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
	kind events.Kind // of the event that records it
	body any
	exec bool
	req  policy.Request
	// policy is the result body holds when it is a plain policy result
	// (a step.policy event with no grant consumed), which may travel in
	// its decision's event instead.
	policy *events.PolicyBody
}

// judge checks step n of v against its tool's schema, asks the policy and
// says which event records the answer: a refusing observation, or what
// [Driver.plan] makes of the policy's answer. It records nothing and
// changes nothing.
func (d *Driver) judge(ctx context.Context, run string, v *projector.View, n int, grant *projector.Approval) judgement {
	refuse := func(kind events.ObservationKind, content string) judgement {
		return judgement{kind: events.StepObserved, body: d.observation(n, kind, content)}
	}
	dec, _ := v.Decision(n)
	if o := dec.Oversize; o != nil {
		return refuse(events.ObsInvalidDecision, fmt.Sprintf("a decision of %d bytes (arguments sha256 %s) is larger than the %d bytes recorded whole; nothing was checked or run. Its start: tool %q, arguments %q", o.Bytes, o.SHA256, o.Limit, dec.Tool, dec.Args))
	}
	ct := d.tools[dec.Tool]
	if ct == nil {
		return refuse(events.ObsUnknownTool, fmt.Sprintf("no tool named %q (tools: %s)", dec.Tool, d.toolNames()))
	}
	if isWithheld(v.Run.Withheld, ct.Spec.Name) || (policy.Discovers(d.policy) && !policy.Visible(d.policy, ct.Record, v.Clone())) {
		// A hidden tool is refused as if it did not exist: the agent is
		// told nothing about it.
		var names []string
		for _, t := range d.shown(v, d.specs) {
			names = append(names, t.Name)
		}
		return refuse(events.ObsUnknownTool, fmt.Sprintf("no tool named %q (tools: %s)", dec.Tool, strings.Join(names, ", ")))
	}
	raw := dec.RawArgs()
	args, err := ct.CheckArgs(raw)
	if err != nil {
		var ae *ArgsError
		if errors.As(err, &ae) && ae.Malformed() {
			return refuse(events.ObsInvalidDecision, fmt.Sprintf("%v; the request as sent: %q", err, raw))
		}
		return refuse(events.ObsInvalidArguments, err.Error())
	}
	req := policy.Request{Run: run, Step: n, Tool: ct.Record, Args: args}
	k, body, exec := d.plan(req, policy.Ask(ctx, d.policy, req, *v), grant)
	if d.cfg.Shadow != nil {
		body = d.shadow(ctx, req, v, body)
	}
	j := judgement{kind: k, body: body, exec: exec, req: req}
	if pb, ok := body.(events.PolicyBody); ok && k == events.StepPolicy && pb.Consumes == "" && grant == nil {
		j.policy = &pb
	}
	return j
}

// act records a judgement and, when it allows the call, executes it: the
// write-ahead result first, the tool only once that is stored.
func (d *Driver) act(ctx context.Context, r *Run, j judgement) error {
	rec, err := d.prepare(r.ID(), j.kind, j.body)
	if err != nil {
		return err
	}
	p, err := d.send(ctx, r, rec)
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

func (d *Driver) observe(ctx context.Context, r *Run, n int, kind events.ObservationKind, content string) error {
	return d.append(ctx, r, r.ID(), events.StepObserved, d.observation(n, kind, content))
}

func (d *Driver) observation(n int, kind events.ObservationKind, content string) events.ObservedBody {
	o := events.ObservedBody{Step: n, Kind: kind, Content: content}
	if len(o.Content) > d.cfg.MaxObservation {
		o.Content, o.Truncated = cutUTF8(o.Content, d.cfg.MaxObservation), true
	}
	return o
}
